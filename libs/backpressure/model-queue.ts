import { AdmissionCode, type QueuePriority } from './codes';
import { DrainRateEstimator } from './drain-rate';
import { type BackpressureOptions, ceilShare, validateBackpressureOptions } from './options';

/** Float noise allowance when rounding a Retry-After up (so 1000.0000000001 ms stays 1000). */
const RETRY_EPSILON_MS = 1e-6;

/**
 * Admission to one model version's queue, by priority, and the Retry-After of a shed request.
 *
 * `queueLength` is the model's pending count: requests admitted to it and not yet answered (queued AND being
 * computed), before the request being decided. Limits (C = maxModelQueue), admit while queueLength < limit:
 *   shadow: ceil(shadowPriorityQueueFraction × C)   (default C/4)
 *   low:    ceil(lowPriorityQueueFraction × C)      (default C/2)
 *   normal: C
 *   high:   C + ceil(highPriorityHeadroomFraction × C)   (default +10%)
 * so the lowest priorities are shed first and `high` has headroom nobody else can take.
 *
 * Retry-After of a shed request: the time the measured drain rate needs to work off the current queue,
 *   clamp(ceil(queueLength / drainRatePerMs), minRetryAfterMs, maxRetryAfterMs)
 * defaultRetryAfterMs while nothing has been measured, maxRetryAfterMs when the measured rate is 0.
 */
export class ModelQueueGuard {
  readonly capacity: number;
  private readonly shadowLimit: number;
  private readonly lowLimit: number;
  private readonly highLimit: number;
  private readonly minRetryMs: number;
  private readonly maxRetryMs: number;
  private readonly defaultRetryMs: number;
  private readonly drain: DrainRateEstimator;
  private retryMs = 0;

  /** `drain`: the estimator of the guard this one replaces (a reconfigured bound keeps the measured rate). */
  constructor(options: BackpressureOptions, now: number, drain?: DrainRateEstimator) {
    const o = validateBackpressureOptions(options);
    const c = o.maxModelQueue;
    this.capacity = c;
    this.shadowLimit = Math.max(1, ceilShare(o.shadowPriorityQueueFraction, c));
    this.lowLimit = Math.max(1, ceilShare(o.lowPriorityQueueFraction, c));
    this.highLimit = c + ceilShare(o.highPriorityHeadroomFraction, c);
    this.minRetryMs = o.minRetryAfterMs;
    this.maxRetryMs = o.maxRetryAfterMs;
    this.defaultRetryMs = o.defaultRetryAfterMs;
    this.drain = drain ?? new DrainRateEstimator(o.drainRateWindowMs, now);
  }

  /** The same queue under new bounds (a configuration reload), keeping the measured drain rate. */
  reconfigured(options: BackpressureOptions, now: number): ModelQueueGuard {
    return new ModelQueueGuard(options, now, this.drain);
  }

  /** Queue length below which a request of this priority is admitted (an unknown priority gets shadow's). */
  limitFor(priority: QueuePriority): number {
    switch (priority) {
      case 'normal':
        return this.capacity;
      case 'high':
        return this.highLimit;
      case 'low':
        return this.lowLimit;
      default:
        return this.shadowLimit;
    }
  }

  /**
   * `admit` when queueLength < limitFor(priority); otherwise `model_queue_full` (answer `overloaded`, HTTP 429)
   * with `retryAfterMs` set. A queueLength of 0 also tells the drain-rate estimator the model is idle.
   */
  tryAdmit(queueLength: number, priority: QueuePriority, now: number): AdmissionCode {
    if (queueLength <= 0) this.drain.markIdle(now);
    if (queueLength < this.limitFor(priority)) {
      this.retryMs = 0;
      return AdmissionCode.Admit;
    }
    this.retryMs = this.estimateRetryAfterMs(queueLength, now);
    return AdmissionCode.ModelQueueFull;
  }

  /** Wait (ms) for the last `model_queue_full` answer of tryAdmit(); 0 after `admit`. */
  get retryAfterMs(): number {
    return this.retryMs;
  }

  /**
   * The Retry-After for a request shed while `queueLength` requests are pending (also usable when the ring
   * itself refuses a record).
   */
  estimateRetryAfterMs(queueLength: number, now: number): number {
    if (!this.drain.hasMeasurement) return this.defaultRetryMs;
    const rate = this.drain.ratePerMs(now);
    if (!(rate > 0)) return this.maxRetryMs;
    const ms = Math.ceil(queueLength / rate - RETRY_EPSILON_MS);
    return ms < this.minRetryMs ? this.minRetryMs : Math.min(ms, this.maxRetryMs);
  }

  /** `count` requests of this model were answered at `now` (feed it as responses arrive; batches are fine). */
  onCompleted(count: number, now: number): void {
    this.drain.record(count, now);
  }

  /**
   * Measured drain rate, items per second (0 while nothing is measured). With `now`, a stall since the last
   * completion (while the queue was not empty) already counts.
   */
  drainRatePerSecond(now?: number): number {
    return this.drain.ratePerMs(now) * 1000;
  }

  /** True once a drain rate has been measured (until then a shed request gets defaultRetryAfterMs). */
  get hasDrainMeasurement(): boolean {
    return this.drain.hasMeasurement;
  }
}
