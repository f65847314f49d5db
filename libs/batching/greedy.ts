import { claimable, dispatch, IDLE, pickSize, waitUntil } from './decisions';
import type {
  BatchDecision,
  BatchPolicy,
  BatchPolicyOptions,
  BatchPolicyState,
  QueueSnapshot,
} from './types';

/**
 * `greedy`: take everything already queued (up to maxBatchSize) at once. Order of rules:
 *
 * 1. empty queue → idle;
 * 2. a full batch is queued → dispatch maxBatchSize (even with a batch in flight: that is the second,
 *    prepared batch of the two a worker may hold);
 * 3. the oldest item's budget (oldestEnqueuedAt + maxQueueDelayMs) is spent, exactly at the deadline included
 *    → dispatch what is queued (largest preferred size that fits, else everything);
 * 4. fewer than minBatchSize items → wait until the budget ends;
 * 5. a batch of this model is already in flight → wait until the budget ends. A batch sent now would only
 *    queue behind the running one on the device, so holding it costs its items no latency while letting it
 *    grow. The worker asks again when the running batch completes (and on every arrival), so the wait
 *    normally ends at the completion, and at the latest at the deadline;
 * 6. otherwise → dispatch now (largest preferred size that fits, else everything). Preferred sizes never make
 *    greedy wait: with minBatchSize 1 an idle worker never waits while something is queued.
 */
export class GreedyPolicy implements BatchPolicy {
  readonly name = 'greedy' as const;
  private readonly maxBatchSize: number;
  private readonly maxQueueDelayMs: number;
  private readonly minBatchSize: number;
  private readonly preferred: readonly number[] | undefined;
  private lastWaitMs = 0;

  constructor(options: BatchPolicyOptions) {
    this.maxBatchSize = options.maxBatchSize;
    this.maxQueueDelayMs = options.maxQueueDelayMs;
    this.minBatchSize = options.minBatchSize ?? 1;
    this.preferred = options.preferredBatchSizes;
  }

  decide(queue: QueueSnapshot, now: number): BatchDecision {
    this.lastWaitMs = 0;
    const available = claimable(queue.length, this.maxBatchSize);
    if (available === 0) return IDLE;
    if (available === this.maxBatchSize) return dispatch(available);
    const deadline = queue.oldestEnqueuedAt + this.maxQueueDelayMs;
    if (now >= deadline) return dispatch(pickSize(available, this.preferred));
    if (available < this.minBatchSize || queue.inFlightBatches >= 1) {
      this.lastWaitMs = deadline - now;
      return waitUntil(deadline);
    }
    return dispatch(pickSize(available, this.preferred));
  }

  observe(_batchSize: number, _computeMs: number, _now: number): void {}

  state(): BatchPolicyState {
    return { targetBatchSize: this.maxBatchSize, waitMs: this.lastWaitMs };
  }
}
