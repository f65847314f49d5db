/**
 * A node's share of a tenant's rate limit: a token bucket whose rate and size the supervisor moves (see
 * shares.ts). It starts empty with no rate: a node admits nothing of a tenant until it is given a share.
 * Lowering the share clamps the tokens at once, so no node ever holds more than its share of the burst.
 */
const TOKEN_EPSILON = 1e-9;

export class ShareBucket {
  private tokens = 0;
  private rate = 0;
  private capacity = 0;
  private updatedAt: number;
  private retryMs = 0;
  /** Requests that asked for a token since the last report (the node's demand for this tenant). */
  attempts = 0;

  constructor(now: number) {
    this.updatedAt = now;
  }

  get ratePerSecond(): number {
    return this.rate;
  }

  get size(): number {
    return this.capacity;
  }

  /** Wait (ms) computed by the last refused tryTake. */
  get retryAfterMs(): number {
    return this.retryMs;
  }

  /** A new share: tokens earned so far at the old rate are kept, up to the new size. */
  setShare(ratePerSecond: number, capacity: number, now: number): void {
    this.refill(now);
    this.rate = ratePerSecond;
    this.capacity = capacity;
    if (this.tokens > capacity) this.tokens = capacity;
  }

  tryTake(now: number): boolean {
    this.attempts++;
    this.refill(now);
    if (this.tokens >= 1 - TOKEN_EPSILON) {
      this.tokens = this.tokens > 1 ? this.tokens - 1 : 0;
      return true;
    }
    // With no share yet (or one under a token), the next rebalance is the soonest a token can come.
    this.retryMs =
      this.rate > 0 && this.capacity >= 1
        ? Math.ceil(((1 - TOKEN_EPSILON - this.tokens) * 1000) / this.rate)
        : REBALANCE_RETRY_MS;
    return false;
  }

  available(now: number): number {
    this.refill(now);
    return this.tokens;
  }

  private refill(now: number): void {
    const elapsed = now - this.updatedAt;
    if (elapsed > 0) {
      this.tokens = Math.min(this.tokens + (elapsed * this.rate) / 1000, this.capacity);
      this.updatedAt = now;
    }
  }
}

/** Retry-After for a refusal by a node that holds no usable share: about one rebalance period. */
export const REBALANCE_RETRY_MS = 50;
