/**
 * A lane: one worker thread's consumer of a slot (a loaded model version) — its session, its request rings
 * and the state of its batch loop — and what the lane reports of its batch policy (metrics, a log line when
 * the learned cost model moved).
 */
import type { BatchPolicy } from '../../libs/batching';
import type { LoadedSession } from '../../libs/inference';
import type { MetricsShard } from '../../libs/metrics';
import type { ModelSignature } from '../../libs/protocol';
import type { Doorbell, RingBuffer } from '../../libs/ring';
import type { BatchBuffers } from './batch';

/** How long a lane waits on its doorbell (or on the response ring for room) before it looks again. */
export const IDLE_WAIT_MS = 250;
/** A cost model fit is logged when a or b moved by more than this share since the last logged fit. */
const FIT_LOG_CHANGE = 0.25;
/** …and by more than a quarter of this many ms (a fit near 0 ms would otherwise log on every wobble). */
const FIT_LOG_FLOOR_MS = 0.2;

/** A log line of this thread, posted to the node. */
export type WorkerLog = (
  level: 'info' | 'warn' | 'error',
  msg: string,
  data?: Record<string, unknown>,
) => void;

export interface Lane {
  slot: number;
  model: string;
  version: string;
  signature: ModelSignature;
  /** Request rings by priority code (0 low, 1 normal, 2 high). */
  rings: RingBuffer[];
  doorbell: Doorbell;
  policy: BatchPolicy;
  /** The options `policy` was made from (JSON), to tell a rebatch that changes nothing. */
  batching: string;
  /**
   * Items ever written to the rings since the lane began, exact: each ring's write sequence (mod 2^32) is
   * accumulated here so the adaptive policy counts arrivals once, at enqueue, even across held dispatches.
   */
  enqueuedTotal: number;
  /** Each ring's write sequence when last accumulated into enqueuedTotal. */
  seenWrites: number[];
  /** The cost model fit last logged (a, b in ms); NaN before the first. */
  loggedFit: [number, number];
  loaded: LoadedSession;
  maxBatch: number;
  spare: BatchBuffers[];
  inFlight: number;
  stopped: boolean;
  /** Resolves the lane loop's current wait early (a batch finished, or the lane is stopping). */
  wake: (() => void) | undefined;
  done: Promise<void>;
}

/** The lane's policy state into this worker's metrics shard (gauges; see libs/metrics). */
export function recordPolicy(metrics: MetricsShard, lane: Lane): void {
  const state = lane.policy.state();
  const rate = state.arrivalRatePerMs;
  metrics.recordPolicy(
    lane.slot,
    state.costIntercept ?? Number.NaN,
    state.costPerItem ?? Number.NaN,
    rate === undefined ? Number.NaN : rate * 1000,
    state.targetBatchSize,
    state.waitMs,
  );
}

/** One log line when the learned cost model moved materially (rare: not per batch). */
export function logFitChange(lane: Lane, log: WorkerLog): void {
  const state = lane.policy.state();
  const a = state.costIntercept;
  const b = state.costPerItem;
  if (a === undefined || b === undefined) return;
  const [loggedA, loggedB] = lane.loggedFit;
  // b is compared through a full batch's cost: a tiny b (a cheap model) jitters by large shares of itself.
  const moved = (now: number, then: number, scale: number): boolean =>
    !(Math.abs(now - then) * scale <= FIT_LOG_CHANGE * Math.max(Math.abs(then) * scale, FIT_LOG_FLOOR_MS));
  if (!moved(a, loggedA, 1) && !moved(b, loggedB, lane.maxBatch)) return;
  lane.loggedFit = [a, b];
  log('info', 'batch cost model fit changed', {
    model: lane.model,
    version: lane.version,
    cost_intercept_ms: round(a),
    cost_per_item_ms: round(b),
    arrival_rate: round((state.arrivalRatePerMs ?? 0) * 1000),
    target_batch_size: state.targetBatchSize,
    slo_p99_ms: state.sloP99Ms,
  });
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}
