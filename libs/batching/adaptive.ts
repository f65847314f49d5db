import { ArrivalRateEstimator } from './arrival-rate';
import { CostModel } from './cost-model';
import { claimable, dispatch, IDLE, pickSize, waitUntil } from './decisions';
import { DEFAULT_COST_PRIOR, DEFAULT_SLO_FACTOR } from './options';
import type {
  BatchDecision,
  BatchPolicy,
  BatchPolicyOptions,
  BatchPolicyState,
  QueueSnapshot,
} from './types';

/** Share of the latency objective the policy plans to use; the rest absorbs timer and wake-up jitter. */
const SLO_HEADROOM = 0.95;
/** Prediction error allowance in the latency check, in units of the cost model's residual scale. */
const ERROR_ALLOWANCE = 2;
/** Device share needed at full batches past which an idle device no longer waits (see plan()). */
const NEAR_CAPACITY = 0.75;

/**
 * `adaptive`: waits only while waiting is both safe for the oldest item and useful for throughput.
 *
 * Inputs: the learned cost model cost(n) = a + b·n (see CostModel), the arrival rate λ (items/ms, see
 * ArrivalRateEstimator, fed from successive snapshots), n = min(length, maxBatchSize), the oldest item's age,
 * the latency objective L (sloP99Ms) and the hard cap maxQueueDelayMs.
 *
 * 1. Empty queue → idle. A full batch (n = maxBatchSize) → dispatch it: waiting cannot grow it.
 * 2. Safe wait. If we wait Δ, the batch grows to about n + λΔ and the oldest item finishes after
 *       age + Δ + a + b·(n + λΔ) + 2·err     (err = the model's typical prediction error)
 *    which must stay within 0.95·L, so  Δ_slo = (0.95·L − age − a − b·n − 2·err) / (1 + b·λ).
 *    The queue-delay cap gives Δ_cap = oldestEnqueuedAt + maxQueueDelayMs − now, and a known earliest request
 *    deadline D the same bound as the objective with D in place of oldestEnqueuedAt + 0.95·L (no headroom).
 *    Δ_max = min(Δ_slo, Δ_cap, Δ_deadline) <= 0 → dispatch now: waiting longer would break the objective (or the cap,
 *    exactly at the deadline included). When even an immediate dispatch cannot meet L, it dispatches at once too.
 * 3. Busy worker (inFlightBatches >= 1): the device is running a batch, so a batch sent now would only queue
 *    behind it; waiting until Δ_max costs no latency and lets the batch grow. The worker asks again when the
 *    running batch completes and on arrivals, so in practice the wait ends at completion.
 * 4. Throughput. The keep-up size n* = λ'·a / (1 − λ'·b) is the smallest batch whose compute time covers the
 *    items that arrive meanwhile (n* / cost(n*) = λ'); it is infinite when λ'·b >= 1. λ' is the rate this
 *    policy's own batches can expect: the arrival rate, but no more than the rate its batches have been taking
 *    (observe()) — workers that share a queue each see every arrival and get only a share. The target batch is
 *    n* rounded up, snapped up to a preferred size when configured, and clamped to [1, maxBatchSize].
 *    n >= target, or nothing served yet (λ' = 0) → dispatch now: the device already keeps up at this batch size,
 *    so waiting would only add latency without raising throughput. Near capacity — full batches would need
 *    more than 75% of the device, λ'·(a + b·max + 2·err)/max > 0.75 (beyond it when λ'b >= 1) — dispatch now
 *    too: at the keep-up size the device is busy all the time, so an idle wait is capacity lost for good and
 *    the queue it builds drains at the small spare rate only, while n* swings with every error in b as λ'b
 *    nears 1; greedy's rule (send what is queued, the next batch grows while this one runs) is the right one
 *    there. Otherwise the
 *    device could not sustain the arrival rate with batches of n, so waiting for more items amortizes the fixed
 *    cost a: wait Δ = min(Δ_max, (target − n) / λ).
 *
 * Under light load (λ·a < 1) the target is 1 and every item goes out immediately; as load rises the target
 * (and thus batch size and wait) grows smoothly, bounded by the objective. Dispatches that are not full batches
 * use the largest preferred size that fits, like the other policies.
 */
export class AdaptivePolicy implements BatchPolicy {
  readonly name = 'adaptive' as const;
  private readonly maxBatchSize: number;
  private readonly maxQueueDelayMs: number;
  private readonly sloP99Ms: number;
  private readonly preferred: readonly number[] | undefined;
  private readonly cost: CostModel;
  private readonly arrivals = new ArrivalRateEstimator();
  /** Items this policy's own batches computed (observe()), per ms: its share when several workers share a queue. */
  private readonly served = new ArrivalRateEstimator();
  private prevLength: number | undefined;
  private prevEnqueuedTotal: number | undefined;
  private pendingClaim = 0;
  private lastWaitMs = 0;
  private lastTarget = 1;

  constructor(options: BatchPolicyOptions) {
    this.maxBatchSize = options.maxBatchSize;
    this.maxQueueDelayMs = options.maxQueueDelayMs;
    this.sloP99Ms = options.sloP99Ms ?? DEFAULT_SLO_FACTOR * options.maxQueueDelayMs;
    this.preferred = options.preferredBatchSizes;
    const prior = options.costPrior ?? DEFAULT_COST_PRIOR;
    this.cost = new CostModel({
      priorInterceptMs: prior.interceptMs,
      priorPerItemMs: prior.perItemMs,
      maxBatchSize: options.maxBatchSize,
    });
  }

  decide(queue: QueueSnapshot, now: number): BatchDecision {
    this.trackArrivals(queue, now);
    const decision = this.plan(queue, now);
    this.pendingClaim = decision.kind === 'dispatch' ? decision.size : 0;
    this.lastWaitMs = decision.kind === 'wait' ? decision.untilMs - now : 0;
    return decision;
  }

  observe(batchSize: number, computeMs: number, now: number): void {
    this.cost.observe(batchSize, computeMs);
    if (Number.isFinite(batchSize) && batchSize > 0) this.served.record(batchSize, now);
  }

  state(): BatchPolicyState {
    return {
      targetBatchSize: this.lastTarget,
      waitMs: this.lastWaitMs,
      costIntercept: this.cost.intercept,
      costPerItem: this.cost.perItem,
      arrivalRatePerMs: this.arrivals.ratePerMs(),
      sloP99Ms: this.sloP99Ms,
    };
  }

  private plan(queue: QueueSnapshot, now: number): BatchDecision {
    const available = claimable(queue.length, this.maxBatchSize);
    // The queue grows at the whole arrival rate (the latency bound and the time to a size use it); this
    // policy's batches get only its share of it (the keep-up size uses that).
    const rate = this.arrivals.ratePerMs();
    const a = this.cost.intercept;
    const b = this.cost.perItem;
    const share = this.planningRate();
    const keepUp = this.keepUpSize(share, a, b);
    this.lastTarget = this.targetFor(keepUp);
    if (available === 0) return IDLE;
    if (available === this.maxBatchSize) return dispatch(available);

    const age = Math.max(0, now - queue.oldestEnqueuedAt);
    const expectedCost = a + b * available + ERROR_ALLOWANCE * this.cost.errorScale;
    const sloWait = (SLO_HEADROOM * this.sloP99Ms - age - expectedCost) / (1 + b * rate);
    const capWait = queue.oldestEnqueuedAt + this.maxQueueDelayMs - now;
    let maxWait = Math.min(sloWait, capWait);
    if (queue.earliestDeadlineAt !== undefined) {
      maxWait = Math.min(maxWait, (queue.earliestDeadlineAt - now - expectedCost) / (1 + b * rate));
    }
    const dispatchNow = dispatch(pickSize(available, this.preferred));
    if (!(now + maxWait > now)) return dispatchNow;
    if (queue.inFlightBatches >= 1) return waitUntil(now + maxWait);
    if (!(keepUp > 0) || available >= this.lastTarget) return dispatchNow;
    // Near capacity an idle device must not wait: at the keep-up size it is busy all the time already, so
    // every idle millisecond is capacity lost for good, and a queue built there drains at the small spare
    // rate only — while n* itself, λa / (1 − λb), swings with every error in b as λb nears 1. When even full
    // batches would need more than NEAR_CAPACITY of the device (error allowance included; all of it and more
    // when λb >= 1), it sends what is queued, as greedy.
    const fullBatchLoad =
      (share * (a + b * this.maxBatchSize + ERROR_ALLOWANCE * this.cost.errorScale)) / this.maxBatchSize;
    if (!(fullBatchLoad <= NEAR_CAPACITY)) return dispatchNow;
    const untilMs = now + Math.min(maxWait, (this.lastTarget - available) / rate);
    // A wait too small to move the clock (floating point) is no wait: never return untilMs <= now.
    return untilMs > now ? waitUntil(untilMs) : dispatchNow;
  }

  /**
   * Items per ms this policy can expect to batch: the arrival rate, but no more than the rate its own batches
   * have been taking. Workers that share a queue (--workers > 1: every lane sees every arrival) each get a share
   * only; planned on the whole rate, each would wait for a target sized for all of them. Until a batch has
   * completed the served rate is unknown and so 0: no waiting on a guess.
   */
  private planningRate(): number {
    return Math.min(this.arrivals.ratePerMs(), this.served.ratePerMs());
  }

  /** Keep-up batch size n* = λa / (1 − λb); infinite when λb >= 1. */
  private keepUpSize(rate: number, a: number, b: number): number {
    const load = rate * b;
    return load >= 1 ? Number.POSITIVE_INFINITY : (rate * a) / (1 - load);
  }

  /** n* rounded up, snapped to a preferred size, within [1, max]. */
  private targetFor(keepUp: number): number {
    let target = Math.min(this.maxBatchSize, Math.max(1, Math.ceil(keepUp - 1e-9)));
    if (this.preferred !== undefined) {
      target = this.preferred.find((size) => size >= target) ?? this.maxBatchSize;
    }
    return target;
  }

  /**
   * Arrivals since the previous snapshot: exact from `enqueuedTotal` when the caller provides it, otherwise
   * inferred as the growth of the queue after the items we told the worker to claim (never negative; items
   * removed by others, e.g. expired deadlines, make it err low). The inference assumes every dispatch was
   * claimed: a caller that may hold one back (the worker does, behind a running batch) must pass
   * `enqueuedTotal`, or the held items count again as arrivals.
   */
  private trackArrivals(queue: QueueSnapshot, now: number): void {
    let count = 0;
    if (queue.enqueuedTotal !== undefined && this.prevEnqueuedTotal !== undefined) {
      count = queue.enqueuedTotal - this.prevEnqueuedTotal;
    } else if (this.prevLength !== undefined) {
      count = queue.length - (this.prevLength - this.pendingClaim);
    }
    this.arrivals.record(Math.max(0, count), now);
    this.prevLength = Math.max(0, queue.length);
    this.prevEnqueuedTotal = queue.enqueuedTotal;
  }
}
