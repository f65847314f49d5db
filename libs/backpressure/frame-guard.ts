/**
 * Per-connection guards against protocol abuse, pure (time is the `now` passed in) and allocation-free per
 * call: identical id-less errors coalesced into one answer per window, and a count of protocol errors per
 * second past which the connection is closed (1008).
 */

/**
 * Coalesces errors that cannot be told apart by the client (no readable id): per error code, the first in a
 * window is answered and the repeats until the window ends are only counted; the next answer of that code
 * carries the count (`suppressed`). Codes are small integers below `codes` (the wire index of ErrorCode).
 */
export class ErrorCoalescer {
  private readonly openedAt: Float64Array;
  private readonly suppressed: Uint32Array;

  constructor(
    private windowMs: number,
    private readonly codes: number,
  ) {
    this.openedAt = new Float64Array(codes).fill(Number.NEGATIVE_INFINITY);
    this.suppressed = new Uint32Array(codes);
  }

  setWindow(windowMs: number): void {
    this.windowMs = windowMs;
  }

  /**
   * One id-less error of `code` at `now`: -1 when it is to be suppressed (counted only), else answer it,
   * reporting the returned number of repeats suppressed since this code's previous answer.
   */
  offer(code: number, now: number): number {
    if (this.windowMs <= 0 || code < 0 || code >= this.codes) return 0;
    const openedAt = this.openedAt[code]!;
    // A clock that went backwards is treated as inside the window (it ends by the next forward step).
    if (now - openedAt < this.windowMs) {
      this.suppressed[code]!++;
      return -1;
    }
    const repeats = this.suppressed[code]!;
    this.openedAt[code] = now;
    this.suppressed[code] = 0;
    return repeats;
  }

  /** Repeats of `code` counted and not yet reported. */
  pending(code: number): number {
    return this.suppressed[code] ?? 0;
  }
}

/**
 * Protocol errors (malformed frames, unknown models, bad requests: 4xx decided before admission, never
 * rate_limited or overloaded) counted in one-second windows; more than `maxPerSecond` in one window is a
 * violation, and stays one (the caller closes the connection). 0 disables the check.
 */
export class ProtocolViolations {
  private windowStart = Number.NEGATIVE_INFINITY;
  private count = 0;
  private tripped = false;

  constructor(private maxPerSecond: number) {}

  setLimit(maxPerSecond: number): void {
    this.maxPerSecond = maxPerSecond;
  }

  /** Counts one protocol error at `now`; true when it is one too many (and from then on). */
  record(now: number): boolean {
    if (this.tripped) return true;
    if (this.maxPerSecond <= 0) return false;
    if (now - this.windowStart >= 1000 || now < this.windowStart) {
      this.windowStart = now;
      this.count = 0;
    }
    this.count++;
    if (this.count > this.maxPerSecond) this.tripped = true;
    return this.tripped;
  }

  get violated(): boolean {
    return this.tripped;
  }
}
