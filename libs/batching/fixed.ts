import { claimable, dispatch, IDLE, pickSize, waitUntil } from './decisions';
import type {
  BatchDecision,
  BatchPolicy,
  BatchPolicyOptions,
  BatchPolicyState,
  QueueSnapshot,
} from './types';

/**
 * `fixed`: flush when the batch is full, or when maxQueueDelayMs has passed since the oldest item was queued
 * (exactly at the deadline counts as passed). On timeout it sends the largest preferred size that fits, or
 * everything queued when none fits. Batches in flight do not change its decisions.
 */
export class FixedPolicy implements BatchPolicy {
  readonly name = 'fixed' as const;
  private readonly maxBatchSize: number;
  private readonly maxQueueDelayMs: number;
  private readonly preferred: readonly number[] | undefined;
  private lastWaitMs = 0;

  constructor(options: BatchPolicyOptions) {
    this.maxBatchSize = options.maxBatchSize;
    this.maxQueueDelayMs = options.maxQueueDelayMs;
    this.preferred = options.preferredBatchSizes;
  }

  decide(queue: QueueSnapshot, now: number): BatchDecision {
    this.lastWaitMs = 0;
    const available = claimable(queue.length, this.maxBatchSize);
    if (available === 0) return IDLE;
    if (available === this.maxBatchSize) return dispatch(available);
    const deadline = queue.oldestEnqueuedAt + this.maxQueueDelayMs;
    if (now >= deadline) return dispatch(pickSize(available, this.preferred));
    this.lastWaitMs = deadline - now;
    return waitUntil(deadline);
  }

  observe(_batchSize: number, _computeMs: number, _now: number): void {}

  state(): BatchPolicyState {
    return { targetBatchSize: this.maxBatchSize, waitMs: this.lastWaitMs };
  }
}
