import type { ModelQueueGuard } from '../../libs/backpressure';
import type { BatchPolicyOptions } from '../../libs/batching';
import type { ModelEntry } from '../../libs/registry';
import type { Doorbell, RingBuffer } from '../../libs/ring';
import type { NodeStartOptions } from './ipc';

/**
 * A slot: one loaded model version on this node — its number (in ring records, metrics and worker messages),
 * its request rings, its queue guard, where it runs. Each worker thread consumes it through a lane.
 */
export interface Slot {
  index: number;
  model: ModelEntry;
  version: string;
  /** Request rings by priority code (0 low, 1 normal, 2 high); workers fill batches from the highest first. */
  rings: RingBuffer[];
  /** Rung once per event-loop turn after writes to any of the rings. */
  doorbell: Doorbell;
  /** Queue bound by priority, Retry-After from the measured drain rate. */
  guard: ModelQueueGuard;
  /** Admitted and not yet answered (queued or being computed): what the guard bounds. */
  admitted: number;
  executionProvider: string;
  fallbackReason?: string;
  loadedWorkers: number;
  /** No longer routed: draining before its lanes are unloaded. */
  retiring: boolean;
  /** `encodeResultHead` of this version for `resultHeadEpoch` (JSON answers), rebuilt when the epoch changes. */
  resultHead: string;
  resultHeadEpoch: number;
}

export interface ServedModel {
  entry: ModelEntry;
  versions: Map<string, Slot>;
  /** The version requests that pin none (or say "stable") go to. */
  stable: string;
  candidate: string | undefined;
  previousStable: string | undefined;
  /** 0..1 of unpinned requests routed to the candidate. */
  canaryFraction: number;
  shadow: boolean;
}

/**
 * Operator settings win when given explicitly; otherwise the model's config.json; otherwise server defaults.
 * The policy: the operator's explicit one, else the model's, else adaptive when an objective applies (the
 * operator's or the model's), else the server default. The objective: the operator's, else the model's.
 */
export function batchOptionsFor(entry: ModelEntry, batch: NodeStartOptions['batch']): BatchPolicyOptions {
  const fromModel = entry.batching;
  const maxBatchSize = batch.explicitSize
    ? batch.maxBatchSize
    : (fromModel.maxBatchSize ?? batch.maxBatchSize);
  const objective = batch.sloP99Ms ?? fromModel.sloP99Ms;
  const policy = batch.explicitPolicy
    ? batch.policy
    : (fromModel.policy ?? (objective !== undefined ? 'adaptive' : batch.policy));
  const options: BatchPolicyOptions = {
    policy,
    maxBatchSize,
    maxQueueDelayMs: batch.explicitTimeout
      ? batch.maxQueueDelayMs
      : (fromModel.maxQueueDelayMs ?? batch.maxQueueDelayMs),
  };
  if (fromModel.preferredBatchSizes) {
    const sizes = fromModel.preferredBatchSizes.filter((size) => size <= maxBatchSize);
    if (sizes.length > 0) options.preferredBatchSizes = sizes;
  }
  // Only adaptive plans with an objective; the others bound waits by the queue delay alone.
  if (policy === 'adaptive' && objective !== undefined) options.sloP99Ms = objective;
  return options;
}

/** Requests of this model version waiting for a worker, all priorities. */
export function queueDepth(slot: Slot): number {
  let total = 0;
  for (const ring of slot.rings) total += ring.pendingRecords();
  return total;
}
