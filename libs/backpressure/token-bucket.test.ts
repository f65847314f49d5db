import { AdmissionCode, ClientState } from './index';
import { TokenBucket } from './token-bucket';

const client = (rateLimitRps: number, rateLimitBurst?: number, now = 0): ClientState =>
  new ClientState({ rateLimitRps, rateLimitBurst, maxInflightPerClient: 1_000_000, maxModelQueue: 1 }, now);

/** Takes tokens at `now` until refused; returns how many were granted. */
function drain(state: ClientState, now: number): number {
  let granted = 0;
  while (state.tryAcquire(now) === AdmissionCode.Admit) granted++;
  return granted;
}

describe('token bucket (per-client rate limit)', () => {
  it('starts full: a burst of `rateLimitBurst` requests at once, then rate_limited', () => {
    const state = client(10, 5);
    expect(drain(state, 0)).toBe(5);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(100);
  });

  it('retry_after is the exact wait until one whole token is available', () => {
    const state = client(10, 2);
    expect(drain(state, 0)).toBe(2);
    expect(state.retryAfterMs).toBe(100);
    expect(state.tryAcquire(30)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(70);
    expect(state.tryAcquire(99)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(1);
    expect(state.tryAcquire(100)).toBe(AdmissionCode.Admit);
    expect(state.retryAfterMs).toBe(0);
    expect(state.tryAcquire(100)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(100);
  });

  it('a refused request spends nothing: waiting retry_after_ms always succeeds', () => {
    const state = client(3, 1);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
    let now = 0;
    for (let i = 0; i < 50; i++) {
      expect(state.tryAcquire(now)).toBe(AdmissionCode.RateLimited);
      expect(state.tryAcquire(now)).toBe(AdmissionCode.RateLimited); // asking again changes nothing
      now += state.retryAfterMs;
      expect(state.tryAcquire(now)).toBe(AdmissionCode.Admit);
    }
    // 3 per second: 50 more tokens took ~ 50 / 3 s (each wait rounded up to the next ms)
    expect(now).toBeGreaterThanOrEqual(50_000 / 3);
    expect(now).toBeLessThanOrEqual(50_000 / 3 + 50);
  });

  it('for any rate, waiting exactly retry_after_ms is always enough and 1 ms less never is', () => {
    let seed = 12345;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    for (const rps of [0.1, 0.37, 1, 3, 7, 10, 33.3, 100, 999, 12_345, 100_000]) {
      const bucket = new TokenBucket(rps, 1 + Math.floor(random() * 5), 0);
      let now = 0;
      for (let i = 0; i < 300; i++) {
        now += Math.floor(random() * 3 * (1000 / rps));
        if (bucket.tryTake(now)) continue;
        const wait = bucket.retryAfterMs;
        expect(wait).toBeGreaterThanOrEqual(1);
        if (wait > 1) {
          expect(bucket.tryTake(now + wait - 1)).toBe(false);
          expect(bucket.retryAfterMs).toBe(1);
        }
        now += wait;
        expect(bucket.tryTake(now)).toBe(true);
      }
    }
  });

  it('rounds a fractional wait up (1000 / 3 ms → 334)', () => {
    const state = client(3, 1);
    state.tryAcquire(0);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(334);
    expect(state.tryAcquire(333)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(1);
    expect(state.tryAcquire(334)).toBe(AdmissionCode.Admit);
  });

  it('refills continuously and never above the burst', () => {
    const state = client(10, 5);
    drain(state, 0);
    expect(state.availableTokens(250)).toBeCloseTo(2.5, 12);
    expect(drain(state, 250)).toBe(2);
    expect(state.availableTokens(250)).toBeCloseTo(0.5, 12);
    expect(state.availableTokens(60_000)).toBe(5);
    expect(drain(state, 60_000)).toBe(5);
  });

  it('sustains exactly the rate over a long run', () => {
    const state = client(50, 10);
    let granted = 0;
    for (let now = 0; now <= 10_000; now++) granted += drain(state, now);
    // the burst plus 50/s × 10 s
    expect(granted).toBe(10 + 500);
  });

  it('handles fractional rates (0.5 rps → one request per 2 s)', () => {
    const state = client(0.5);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(2000);
    expect(state.tryAcquire(1500)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(500);
    expect(state.tryAcquire(2000)).toBe(AdmissionCode.Admit);
  });

  it('handles a 0.1 rps rate and a fractional burst', () => {
    const slow = client(0.1, 1);
    slow.tryAcquire(0);
    expect(slow.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(slow.retryAfterMs).toBe(10_000);
    expect(slow.tryAcquire(9_999)).toBe(AdmissionCode.RateLimited);
    expect(slow.retryAfterMs).toBe(1);
    expect(slow.tryAcquire(10_000)).toBe(AdmissionCode.Admit);

    const frac = client(7, 2.5);
    expect(drain(frac, 0)).toBe(2);
    expect(frac.retryAfterMs).toBe(72); // ceil(0.5 × 1000 / 7) = ceil(71.43)
    expect(frac.availableTokens(10_000)).toBe(2.5);
  });

  it('rps 0 means unlimited', () => {
    const state = client(0, 0);
    let admitted = 0;
    for (let i = 0; i < 10_000; i++) if (state.tryAcquire(0) === AdmissionCode.Admit) admitted++;
    expect(admitted).toBe(10_000);
    expect(state.retryAfterMs).toBe(0);
  });

  it('counts from the construction time', () => {
    const state = client(10, 1, 5_000);
    expect(state.tryAcquire(5_000)).toBe(AdmissionCode.Admit);
    expect(state.tryAcquire(5_050)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(50);
  });

  it('tolerates a clock going backwards (no refill, no un-refill)', () => {
    const bucket = new TokenBucket(10, 2, 1000);
    expect(bucket.tryTake(1000)).toBe(true);
    expect(bucket.tryTake(1000)).toBe(true);
    expect(bucket.tryTake(900)).toBe(false);
    expect(bucket.retryAfterMs).toBe(100);
    expect(bucket.tryTake(1050)).toBe(false);
    expect(bucket.retryAfterMs).toBe(50);
    expect(bucket.tryTake(1100)).toBe(true);
  });

  it('reset() refills the bucket', () => {
    const bucket = new TokenBucket(1, 3, 0);
    while (bucket.tryTake(0));
    bucket.reset(10);
    expect(bucket.available(10)).toBe(3);
    expect(bucket.retryAfterMs).toBe(0);
  });
});

describe('model error penalty (a client whose requests fail the model)', () => {
  const penalized = (rateLimitRps: number, rateLimitBurst: number, modelErrorPenalty?: number): ClientState =>
    new ClientState(
      { rateLimitRps, rateLimitBurst, modelErrorPenalty, maxInflightPerClient: 1_000_000, maxModelQueue: 1 },
      0,
    );

  /**
   * A client sending as fast as it is let through for `ms` ms (one try per ms); every `failEvery`-th admitted
   * request is answered model_error at once. Returns how many were admitted.
   */
  function run(state: ClientState, ms: number, failEvery: number): number {
    let admitted = 0;
    for (let now = 0; now < ms; now++) {
      if (state.tryAcquire(now) !== AdmissionCode.Admit) continue;
      admitted++;
      if (admitted % failEvery === 0) state.chargeModelError(now);
    }
    return admitted;
  }

  it('holds a client whose every request fails the model to rate / (1 + penalty)', () => {
    // 100 s at 10/s with the default penalty (9 tokens): the burst, then 1 request a second.
    expect(run(penalized(10, 10), 100_000, 1)).toBeLessThanOrEqual(10 + 100 + 1);
    expect(run(penalized(10, 10), 100_000, 1)).toBeGreaterThanOrEqual(100);
    // Without a penalty the same client gets the whole rate.
    expect(run(penalized(10, 10, 0), 100_000, 1)).toBeGreaterThanOrEqual(1_000);
  });

  it('leaves a client with an occasional model error most of its rate', () => {
    // 1 error in 100 requests costs 109 tokens per 100: 91.7 % of the rate.
    const admitted = run(penalized(100, 100), 10_000, 100);
    expect(admitted).toBeGreaterThanOrEqual(0.9 * (100 + 1_000));
  });

  it('answers rate_limited with the wait until the debt is paid back', () => {
    const state = penalized(10, 10);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
    state.chargeModelError(0); // 9 tokens left - 9 = 0
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(100);
    state.chargeModelError(0); // -9: ten tokens short of the next request
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(1_000);
    expect(state.tryAcquire(999)).toBe(AdmissionCode.RateLimited);
    expect(state.tryAcquire(1_000)).toBe(AdmissionCode.Admit);
  });

  it('bounds the debt at burst × penalty tokens (the longest wait (1 + penalty) × burst / rate)', () => {
    const state = penalized(10, 5, 3);
    for (let i = 0; i < 1_000; i++) state.chargeModelError(0);
    expect(state.availableTokens(0)).toBe(-15);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(1_600);
  });

  it('charges nothing while rate limiting is off, and reconfigure() forgives the debt', () => {
    const unlimited = penalized(0, 0);
    unlimited.chargeModelError(0);
    expect(unlimited.tryAcquire(0)).toBe(AdmissionCode.Admit);
    const state = penalized(10, 10);
    for (let i = 0; i < 5; i++) state.chargeModelError(0);
    state.reconfigure(
      { rateLimitRps: 10, rateLimitBurst: 10, maxInflightPerClient: 10, maxModelQueue: 1 },
      0,
    );
    expect(state.availableTokens(0)).toBe(10);
  });

  it('refills from the debt at the rate, whatever the clock does', () => {
    const bucket = new TokenBucket(10, 10, 0);
    bucket.charge(25, 0, 100);
    expect(bucket.available(0)).toBe(-15);
    expect(bucket.available(-500)).toBe(-15);
    expect(bucket.available(1_000)).toBe(-5);
    expect(bucket.available(10_000)).toBe(10);
  });
});
