/**
 * Drain rate of one model queue (items completed per ms), an exponentially weighted average over BUSY time.
 *
 * Completions are reported as they arrive: record(count, now) says `count` items completed since the previous
 * report. Each report closes an interval [start, now] of busy time: count and time are both weighted by
 * exp(-age / timeConstantMs), the completions spread evenly over their interval, so irregular reporting does
 * not bias the rate (a steady r items/ms gives exactly r whatever the report times).
 *
 * Items reported with no time elapsed since the previous report count as part of that report's interval.
 *
 * Idle time must not count (an idle model completes nothing because it has nothing to do, not because it is
 * slow): markIdle(now) says the queue is empty at `now`, which restarts the open interval there.
 *
 * ratePerMs(now) also counts the open interval (busy, nothing completed yet), so a model that stops completing
 * while its queue is full sees its rate decay towards 0: for a stall of t ms the rate is multiplied by about
 * exp(-t / timeConstantMs).
 */
export class DrainRateEstimator {
  private weightedCount = 0;
  private weightedTime = 0;
  /** Weight of one item of the last closed interval (items reported with no time elapsed join it). */
  private lastScale = 1;
  private openSince: number;

  constructor(
    private readonly timeConstantMs: number,
    now: number,
  ) {
    this.openSince = now;
  }

  /** True once at least one report closed an interval of positive length. */
  get hasMeasurement(): boolean {
    return this.weightedTime > 0;
  }

  /** The queue is empty at `now`: time before it is not busy time. */
  markIdle(now: number): void {
    if (now > this.openSince) this.openSince = now;
  }

  record(count: number, now: number): void {
    const items = Number.isFinite(count) && count > 0 ? count : 0; // NaN or ±Infinity must not poison the average
    const elapsed = now - this.openSince;
    if (elapsed > 0) {
      const keep = Math.exp(-elapsed / this.timeConstantMs);
      const fresh = this.timeConstantMs * (1 - keep);
      this.lastScale = fresh / elapsed;
      this.weightedCount = this.weightedCount * keep + items * this.lastScale;
      this.weightedTime = this.weightedTime * keep + fresh;
      this.openSince = now;
    } else {
      this.weightedCount += items * this.lastScale;
    }
  }

  /**
   * Items per ms; 0 while nothing is measured. Without `now`: as of the last report. With `now`: including the
   * open busy interval since the last report (or since markIdle), in which nothing has completed yet.
   */
  ratePerMs(now?: number): number {
    let count = this.weightedCount;
    let time = this.weightedTime;
    if (time <= 0) return 0;
    if (now !== undefined && now > this.openSince) {
      const keep = Math.exp(-(now - this.openSince) / this.timeConstantMs);
      count *= keep;
      time = time * keep + this.timeConstantMs * (1 - keep);
    }
    return count / time;
  }
}
