export type BatchPolicyName = 'fixed' | 'greedy' | 'adaptive';

export interface CostPrior {
  /** Prior fixed cost of one batch (ms), used before observations arrive. */
  interceptMs: number;
  /** Prior marginal cost per item (ms). */
  perItemMs: number;
}

export interface BatchPolicyOptions {
  policy: BatchPolicyName;
  /** >= 1; 1 means "no batching": every item is dispatched alone, immediately. */
  maxBatchSize: number;
  /** >= 0; flush timeout measured from the oldest queued item's enqueue time. */
  maxQueueDelayMs: number;
  /** Optional, each in [1, maxBatchSize]; validation sorts and dedupes them. */
  preferredBatchSizes?: number[];
  /** Greedy only; default 1. */
  minBatchSize?: number;
  /** Adaptive only: objective for the oldest item's total latency (queue + compute). Default 2 × maxQueueDelayMs. */
  sloP99Ms?: number;
  /** Adaptive only: cost model prior before any batch was observed. Default 1 ms + 0.1 ms/item. */
  costPrior?: CostPrior;
}

export interface QueueSnapshot {
  /** Items queued for this model right now. */
  length: number;
  /** Timestamp (ms, same clock as `now`) of the oldest queued item; ignored when length = 0. */
  oldestEnqueuedAt: number;
  /** Batches this worker is already running for this model (0 = worker idle). */
  inFlightBatches: number;
  /**
   * Optional monotonic count of items ever enqueued for this model (e.g. the ring's write sequence).
   * When given, the adaptive policy measures arrivals exactly instead of inferring them from length changes.
   */
  enqueuedTotal?: number;
  /**
   * Optional earliest deadline (same clock) among the queued items the caller looked at (the worker: each
   * ring's oldest). The adaptive policy never plans a wait after which that item would finish past it.
   */
  earliestDeadlineAt?: number;
}

export type BatchDecision =
  /** Claim up to `size` items now (1 <= size <= min(length, maxBatchSize)). */
  | { kind: 'dispatch'; size: number }
  /** Nothing now; ask again at untilMs (always > now), when new items arrive, or when a batch completes. */
  | { kind: 'wait'; untilMs: number }
  /** Queue empty: wait for items. */
  | { kind: 'idle' };

export interface BatchPolicyState {
  /** Batch size the policy is currently aiming for. */
  targetBatchSize: number;
  /** Wait planned by the most recent decide() (0 after a dispatch or idle). */
  waitMs: number;
  /** Adaptive: learned fixed cost per batch (ms). */
  costIntercept?: number;
  /** Adaptive: learned marginal cost per item (ms). */
  costPerItem?: number;
  /** Adaptive: estimated arrival rate (items per ms). */
  arrivalRatePerMs?: number;
  /** Adaptive: latency objective in force (ms). */
  sloP99Ms?: number;
}

export interface BatchPolicy {
  readonly name: BatchPolicyName;
  decide(queue: QueueSnapshot, now: number): BatchDecision;
  /** Feedback after each batch ran: learned cost model for adaptive; others ignore. */
  observe(batchSize: number, computeMs: number, now: number): void;
  /** Current decisions for metrics: target batch size and planned wait (adaptive exposes its model). */
  state(): BatchPolicyState;
}
