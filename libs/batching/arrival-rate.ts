/**
 * Exponentially weighted arrival rate (items per ms) from counts observed over irregular intervals.
 *
 * Each record(count, now) says `count` items arrived since the previous record. Both the counts and the elapsed
 * time are weighted by exp(-age / timeConstantMs), treating arrivals as spread evenly over their interval, so
 * irregular sampling (the policy is asked at arbitrary moments) does not bias the rate and a quiet spell decays
 * it smoothly. Until `minWindowMs` of history exists the rate is computed over that window instead, erring low
 * (an unknown rate makes the adaptive policy dispatch rather than wait).
 */
export class ArrivalRateEstimator {
  private weightedCount = 0;
  private weightedTime = 0;
  private lastAt: number | undefined;

  constructor(
    private readonly timeConstantMs = 1000,
    private readonly minWindowMs = 10,
  ) {}

  record(count: number, now: number): void {
    if (this.lastAt === undefined) {
      this.lastAt = now;
      return;
    }
    const arrivals = Number.isFinite(count) && count > 0 ? count : 0;
    const elapsed = now - this.lastAt;
    if (elapsed > 0) {
      const keep = Math.exp(-elapsed / this.timeConstantMs);
      const fresh = this.timeConstantMs * (1 - keep);
      this.weightedCount = this.weightedCount * keep + arrivals * (fresh / elapsed);
      this.weightedTime = this.weightedTime * keep + fresh;
      this.lastAt = now;
    } else {
      this.weightedCount += arrivals;
    }
  }

  /** Items per ms; 0 while nothing is known. */
  ratePerMs(): number {
    if (this.weightedCount <= 0) return 0;
    return this.weightedCount / Math.max(this.weightedTime, this.minWindowMs);
  }
}
