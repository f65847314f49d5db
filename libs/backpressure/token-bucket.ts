/** Token counts this close below 1 count as a whole token (float noise of refill = elapsed × rate / 1000). */
const TOKEN_EPSILON = 1e-9;

/**
 * Token bucket: holds up to `capacity` tokens (starts full), refills continuously at `ratePerSecond`; each
 * request takes one whole token. Rate 0 means unlimited (every take succeeds, nothing is tracked).
 *
 * On refusal `retryAfterMs` = ceil((1 − tokens) × 1000 / rate): the wait until one whole token is available,
 * so a client that waits exactly that long is admitted (unless it spent the token elsewhere meanwhile). Both
 * the test and the wait allow TOKEN_EPSILON of float noise, so 0.3 + 0.69 tokens (0.98999…) waits 1 ms at
 * 10/s, not 2.
 * A clock that goes backwards refills nothing and never un-refills.
 *
 * charge() takes extra tokens for a request that proved costly (a model error): the bucket may go below 0,
 * down to `-maxDebt`, and the client waits until the debt is refilled.
 */
export class TokenBucket {
  private tokens: number;
  private updatedAt: number;
  private retryMs = 0;

  constructor(
    private readonly ratePerSecond: number,
    private readonly capacity: number,
    now: number,
  ) {
    this.tokens = capacity;
    this.updatedAt = now;
  }

  get unlimited(): boolean {
    return this.ratePerSecond === 0;
  }

  /** Wait computed by the last refused tryTake(); 0 after a success. */
  get retryAfterMs(): number {
    return this.retryMs;
  }

  /** Takes one token if a whole one is available. */
  tryTake(now: number): boolean {
    if (this.ratePerSecond === 0) {
      this.retryMs = 0;
      return true;
    }
    this.refill(now);
    if (this.tokens >= 1 - TOKEN_EPSILON) {
      this.tokens = this.tokens > 1 ? this.tokens - 1 : 0;
      this.retryMs = 0;
      return true;
    }
    this.retryMs = Math.ceil(((1 - TOKEN_EPSILON - this.tokens) * 1000) / this.ratePerSecond);
    return false;
  }

  /** Takes `tokens` more at `now`, down to at most `maxDebt` below 0 (nothing when unlimited). */
  charge(tokens: number, now: number, maxDebt: number): void {
    if (this.ratePerSecond === 0) return;
    this.refill(now);
    this.tokens = Math.max(this.tokens - tokens, -maxDebt);
  }

  /** Tokens available at `now` (capacity when unlimited; below 0 while a charge is being paid back). */
  available(now: number): number {
    if (this.ratePerSecond === 0) return this.capacity;
    this.refill(now);
    return this.tokens;
  }

  /** Back to a full bucket. */
  reset(now: number): void {
    this.tokens = this.capacity;
    this.updatedAt = now;
    this.retryMs = 0;
  }

  private refill(now: number): void {
    const elapsed = now - this.updatedAt;
    if (elapsed > 0) {
      const tokens = this.tokens + (elapsed * this.ratePerSecond) / 1000;
      this.tokens = Math.min(tokens, this.capacity);
      this.updatedAt = now;
    }
  }
}
