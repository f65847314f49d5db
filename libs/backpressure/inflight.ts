/**
 * Per-client count of requests in flight, with a cap and a once-per-episode warning with hysteresis.
 *
 * - full: `inflight >= max` (the next request is refused).
 * - An admission that brings `inflight` to `warnLevel` or above, while no warning is outstanding, starts an
 *   episode: add() returns true once (send the warning now).
 * - The episode ends when a completion brings `inflight` down to `resetLevel` or below; the next climb to
 *   `warnLevel` warns again. `resetLevel < warnLevel`, so a client hovering around the warning level is
 *   warned once, not on every request.
 */
export class InflightGauge {
  private count = 0;
  private warned = false;

  constructor(
    readonly max: number,
    readonly warnLevel: number,
    readonly resetLevel: number,
  ) {}

  get inflight(): number {
    return this.count;
  }

  get full(): boolean {
    return this.count >= this.max;
  }

  /** True while a warning episode is open. */
  get warning(): boolean {
    return this.warned;
  }

  /** Takes over another gauge's count and episode (same client, new limits). */
  carry(from: InflightGauge): void {
    this.count = from.count;
    this.warned = from.warned && this.count > this.resetLevel;
  }

  /** One more request in flight. Returns true when this opened a warning episode. */
  add(): boolean {
    this.count++;
    if (!this.warned && this.count >= this.warnLevel) {
      this.warned = true;
      return true;
    }
    return false;
  }

  /** One request fewer (never below 0). Returns true when this closed a warning episode. */
  remove(): boolean {
    if (this.count === 0) return false;
    this.count--;
    if (this.warned && this.count <= this.resetLevel) {
      this.warned = false;
      return true;
    }
    return false;
  }

  reset(): void {
    this.count = 0;
    this.warned = false;
  }
}
