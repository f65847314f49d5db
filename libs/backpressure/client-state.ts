import { AdmissionCode, type ConsumerSignal } from './codes';
import { InflightGauge } from './inflight';
import { type BackpressureOptions, ceilShare, floorShare, validateBackpressureOptions } from './options';
import { SlowConsumerMonitor } from './slow-consumer';
import { TokenBucket } from './token-bucket';

/**
 * Backpressure state of one client: a WebSocket connection, or an HTTP client address (kept in a ClientTable).
 * Created once per client and reused for every request: no method allocates.
 *
 * Per request: tryAcquire(now) → on `admit`, and once the request is really queued, onAdmitted() (send the
 * `consumer_falling_behind` warning when it returns true); when the request is answered, onCompleted(), and
 * chargeModelError() too when the answer is `model_error`.
 * The gateway splits tryAcquire in two: takeToken(now) for every frame before decoding, inflightFull once the
 * request is routed.
 */
export class ClientState {
  private bucket: TokenBucket;
  private gauge: InflightGauge;
  private readonly consumer: SlowConsumerMonitor;
  private retryMs = 0;
  private modelErrorPenalty: number;
  private maxDebt: number;

  constructor(options: BackpressureOptions, now: number) {
    const o = validateBackpressureOptions(options);
    this.bucket = new TokenBucket(o.rateLimitRps, o.rateLimitBurst, now);
    this.modelErrorPenalty = o.modelErrorPenalty;
    this.maxDebt = o.modelErrorPenalty * o.rateLimitBurst;
    this.gauge = ClientState.gaugeFor(
      o.maxInflightPerClient,
      o.warnInflightFraction,
      o.inflightResetFraction,
    );
    this.consumer = new SlowConsumerMonitor(
      o.slowConsumerWarnBytes,
      o.slowConsumerCloseBytes,
      o.slowConsumerResetBytes,
    );
  }

  private static gaugeFor(max: number, warnFraction: number, resetFraction: number): InflightGauge {
    return new InflightGauge(max, Math.max(1, ceilShare(warnFraction, max)), floorShare(resetFraction, max));
  }

  /**
   * New rate limit and in-flight cap for a live client (a configuration reload). The bucket starts full at the
   * new size; the requests in flight stay counted against the new cap. Slow-consumer thresholds are kept.
   */
  reconfigure(options: BackpressureOptions, now: number): void {
    const o = validateBackpressureOptions(options);
    this.bucket = new TokenBucket(o.rateLimitRps, o.rateLimitBurst, now);
    this.modelErrorPenalty = o.modelErrorPenalty;
    this.maxDebt = o.modelErrorPenalty * o.rateLimitBurst;
    const gauge = ClientState.gaugeFor(
      o.maxInflightPerClient,
      o.warnInflightFraction,
      o.inflightResetFraction,
    );
    gauge.carry(this.gauge);
    this.gauge = gauge;
    this.retryMs = 0;
  }

  /**
   * Decides on one request. `client_queue_full` when `inflight >= maxInflightPerClient` (no token is spent);
   * otherwise takes a token: `rate_limited` when none is available (`retryAfterMs` = wait until one is), else
   * `admit`. The token is spent even if the request is refused later on (e.g. the model queue is full).
   * Does NOT count the request in flight: call onAdmitted() once it is actually queued.
   */
  tryAcquire(now: number): AdmissionCode {
    if (this.gauge.full) {
      this.retryMs = 0;
      return AdmissionCode.ClientQueueFull;
    }
    return this.takeToken(now) ? AdmissionCode.Admit : AdmissionCode.RateLimited;
  }

  /**
   * Charges one frame or request body, before anything of it is decoded (so malformed frames and unknown
   * models pay like valid requests): false when no token is left (`retryAfterMs` = wait until one is).
   */
  takeToken(now: number): boolean {
    if (this.bucket.tryTake(now)) {
      this.retryMs = 0;
      return true;
    }
    this.retryMs = this.bucket.retryAfterMs;
    return false;
  }

  /** True at the in-flight cap: a routed request is refused `client_queue_full` (after its token was paid). */
  get inflightFull(): boolean {
    return this.gauge.full;
  }

  /** Wait (ms) for the last `rate_limited` answer of tryAcquire() or takeToken(); 0 after any other answer. */
  get retryAfterMs(): number {
    return this.retryMs;
  }

  /** Counts one more request in flight; true when it opened a falling-behind episode (warn the client now). */
  onAdmitted(): boolean {
    return this.gauge.add();
  }

  /**
   * One of this client's requests was answered `model_error`: the model failed on what it sent. It costs
   * `modelErrorPenalty` more tokens (the bucket may go into debt, at most burst × penalty tokens), so a client
   * whose requests keep failing the model is throttled with `rate_limited` like one that sends too fast: one
   * whose every request fails gets rate / (1 + penalty). Nothing while rate limiting is off.
   */
  chargeModelError(now: number): void {
    if (this.modelErrorPenalty > 0) this.bucket.charge(this.modelErrorPenalty, now, this.maxDebt);
  }

  /** Counts one request answered (never below 0); ends the warning episode at the reset level. */
  onCompleted(): void {
    this.gauge.remove();
  }

  get inflight(): number {
    return this.gauge.inflight;
  }

  /** True while a falling-behind (in-flight) episode is open. */
  get inflightWarning(): boolean {
    return this.gauge.warning;
  }

  /** Level at which the in-flight warning is sent: max(1, ceil(warnInflightFraction × maxInflightPerClient)). */
  get inflightWarnLevel(): number {
    return this.gauge.warnLevel;
  }

  /** In-flight count at or below which the episode ends: floor(inflightResetFraction × maxInflightPerClient). */
  get inflightResetLevel(): number {
    return this.gauge.resetLevel;
  }

  /** Tokens in the rate-limit bucket at `now`, below 0 while a model error penalty is paid back (metrics, tests). */
  availableTokens(now: number): number {
    return this.bucket.available(now);
  }

  /**
   * Slow consumer (WebSocket only): feed the unsent bytes after each send. `warn` on the first crossing of
   * slowConsumerWarnBytes in an episode, `close` (sticky) above slowConsumerCloseBytes, else `ok`.
   */
  observeBufferedAmount(bytes: number): ConsumerSignal {
    return this.consumer.observe(bytes);
  }

  /** True while a slow-consumer episode is open. */
  get slowConsumerWarning(): boolean {
    return this.consumer.warning;
  }

  /** True once observeBufferedAmount() has answered `close`. */
  get closing(): boolean {
    return this.consumer.closing;
  }

  /** Forgets everything: full bucket, nothing in flight, no episode open. */
  reset(now: number): void {
    this.bucket.reset(now);
    this.gauge.reset();
    this.consumer.reset();
    this.retryMs = 0;
  }
}
