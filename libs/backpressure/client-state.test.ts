import type { BackpressureOptions } from './index';
import { AdmissionCode, ClientState, ConsumerSignal } from './index';
import { InflightGauge } from './inflight';

const options = (overrides: Partial<BackpressureOptions> = {}): BackpressureOptions => ({
  rateLimitRps: 0,
  maxInflightPerClient: 10,
  maxModelQueue: 100,
  ...overrides,
});

/** Admits one request the way the gateway does; returns whether the warning must be sent. */
function admit(state: ClientState, now = 0): boolean {
  expect(state.tryAcquire(now)).toBe(AdmissionCode.Admit);
  return state.onAdmitted();
}

describe('per-client in-flight cap', () => {
  it('computes the levels: warn at ceil(0.8 × max), episode ends at floor(0.5 × max)', () => {
    const state = new ClientState(options({ maxInflightPerClient: 1000 }), 0);
    expect(state.inflightWarnLevel).toBe(800);
    expect(state.inflightResetLevel).toBe(500);
    const small = new ClientState(options({ maxInflightPerClient: 1 }), 0);
    expect(small.inflightWarnLevel).toBe(1);
    expect(small.inflightResetLevel).toBe(0);
    const odd = new ClientState(options({ maxInflightPerClient: 7 }), 0);
    expect(odd.inflightWarnLevel).toBe(6); // ceil(5.6)
    expect(odd.inflightResetLevel).toBe(3); // floor(3.5)
    const noisy = new ClientState(options({ maxInflightPerClient: 30, warnInflightFraction: 0.1 }), 0);
    expect(noisy.inflightWarnLevel).toBe(3); // 0.1 × 30 = 3.0000000000000004 in floating point
  });

  it('warns once when in-flight reaches the warning level, rejects at the cap', () => {
    const state = new ClientState(options(), 0);
    const warnings: number[] = [];
    for (let i = 1; i <= 10; i++) {
      if (admit(state)) warnings.push(i);
      expect(state.inflight).toBe(i);
    }
    expect(warnings).toEqual([8]);
    expect(state.inflightWarning).toBe(true);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.ClientQueueFull);
    expect(state.retryAfterMs).toBe(0);
    expect(state.inflight).toBe(10); // tryAcquire never counts
  });

  it('does not warn again until in-flight drops to the reset level (hysteresis)', () => {
    const state = new ClientState(options(), 0);
    for (let i = 0; i < 8; i++) admit(state);
    expect(state.inflightWarning).toBe(true);
    // hovering between 6 and 9: still the same episode
    for (let round = 0; round < 5; round++) {
      state.onCompleted();
      state.onCompleted();
      expect(admit(state)).toBe(false);
      expect(admit(state)).toBe(false);
      expect(admit(state)).toBe(false);
      state.onCompleted();
    }
    expect(state.inflight).toBe(8);
    // down to 6: still open; down to 5 (= floor(0.5 × 10)): closed
    state.onCompleted();
    state.onCompleted();
    expect(state.inflightWarning).toBe(true);
    state.onCompleted();
    expect(state.inflight).toBe(5);
    expect(state.inflightWarning).toBe(false);
    // the climb back does not warn until 8 again
    expect(admit(state)).toBe(false);
    expect(admit(state)).toBe(false);
    expect(admit(state)).toBe(true);
    expect(state.inflight).toBe(8);
  });

  it('frees a slot at the cap as soon as one request completes', () => {
    const state = new ClientState(options({ maxInflightPerClient: 2 }), 0);
    admit(state);
    expect(admit(state)).toBe(true); // ceil(1.6) = 2
    expect(state.tryAcquire(0)).toBe(AdmissionCode.ClientQueueFull);
    state.onCompleted();
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
  });

  it('checks the cap before the rate limit, so a full client spends no token', () => {
    const state = new ClientState(
      options({ rateLimitRps: 1, rateLimitBurst: 2, maxInflightPerClient: 1 }),
      0,
    );
    admit(state);
    for (let i = 0; i < 5; i++) expect(state.tryAcquire(0)).toBe(AdmissionCode.ClientQueueFull);
    state.onCompleted();
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(1000);
  });

  it('honours the fractions and a warning level equal to the cap', () => {
    const state = new ClientState(
      options({ maxInflightPerClient: 4, warnInflightFraction: 1, inflightResetFraction: 0 }),
      0,
    );
    expect([admit(state), admit(state), admit(state), admit(state)]).toEqual([false, false, false, true]);
    state.onCompleted();
    state.onCompleted();
    state.onCompleted();
    expect(state.inflightWarning).toBe(true);
    state.onCompleted();
    expect(state.inflightWarning).toBe(false);
  });

  it('never goes below zero', () => {
    const state = new ClientState(options(), 0);
    state.onCompleted();
    expect(state.inflight).toBe(0);
    admit(state);
    state.onCompleted();
    state.onCompleted();
    expect(state.inflight).toBe(0);
  });

  it('InflightGauge reports the end of an episode', () => {
    const gauge = new InflightGauge(4, 3, 1);
    expect([gauge.add(), gauge.add(), gauge.add(), gauge.add()]).toEqual([false, false, true, false]);
    expect(gauge.full).toBe(true);
    expect([gauge.remove(), gauge.remove(), gauge.remove(), gauge.remove()]).toEqual([
      false,
      false,
      true,
      false,
    ]);
    expect(gauge.remove()).toBe(false);
  });
});

describe('slow consumer', () => {
  const KB = 1000;
  const state = (): ClientState =>
    new ClientState(
      options({
        slowConsumerWarnBytes: 100 * KB,
        slowConsumerCloseBytes: 800 * KB,
        slowConsumerResetBytes: 20 * KB,
      }),
      0,
    );

  it('warns once above the warning threshold, then closes above the hard limit', () => {
    const s = state();
    expect(s.observeBufferedAmount(0)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(100 * KB)).toBe(ConsumerSignal.Ok); // at the threshold is not above it
    expect(s.observeBufferedAmount(100 * KB + 1)).toBe(ConsumerSignal.Warn);
    expect(s.slowConsumerWarning).toBe(true);
    for (let bytes = 150 * KB; bytes <= 800 * KB; bytes += 50 * KB) {
      expect(s.observeBufferedAmount(bytes)).toBe(ConsumerSignal.Ok);
    }
    expect(s.closing).toBe(false);
    expect(s.observeBufferedAmount(800 * KB + 1)).toBe(ConsumerSignal.Close);
    expect(s.closing).toBe(true);
    // condemned: close stays the answer even if the buffer drains meanwhile
    expect(s.observeBufferedAmount(0)).toBe(ConsumerSignal.Close);
  });

  it('closes at once when one observation is already above the hard limit', () => {
    const s = state();
    expect(s.observeBufferedAmount(10_000 * KB)).toBe(ConsumerSignal.Close);
  });

  it('ends the episode only at or below the reset level, then warns again', () => {
    const s = state();
    expect(s.observeBufferedAmount(200 * KB)).toBe(ConsumerSignal.Warn);
    expect(s.observeBufferedAmount(50 * KB)).toBe(ConsumerSignal.Ok); // below warn, above reset
    expect(s.slowConsumerWarning).toBe(true);
    expect(s.observeBufferedAmount(200 * KB)).toBe(ConsumerSignal.Ok); // same episode
    expect(s.observeBufferedAmount(20 * KB)).toBe(ConsumerSignal.Ok); // reset level reached
    expect(s.slowConsumerWarning).toBe(false);
    expect(s.observeBufferedAmount(200 * KB)).toBe(ConsumerSignal.Warn);
  });

  it('uses the defaults: warn above 1 MiB, close above 8 MiB, reset at 512 KiB', () => {
    const s = new ClientState(options(), 0);
    const MIB = 1024 * 1024;
    expect(s.observeBufferedAmount(MIB)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(MIB + 1)).toBe(ConsumerSignal.Warn);
    expect(s.observeBufferedAmount(MIB / 2 + 1)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(2 * MIB)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(MIB / 2)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(2 * MIB)).toBe(ConsumerSignal.Warn);
    expect(s.observeBufferedAmount(8 * MIB)).toBe(ConsumerSignal.Ok);
    expect(s.observeBufferedAmount(8 * MIB + 1)).toBe(ConsumerSignal.Close);
  });

  it('is independent of the in-flight warning, and reset() forgets everything', () => {
    const s = state();
    for (let i = 0; i < 8; i++) admit(s);
    expect(s.inflightWarning).toBe(true);
    expect(s.observeBufferedAmount(200 * KB)).toBe(ConsumerSignal.Warn);
    expect(s.observeBufferedAmount(900 * KB)).toBe(ConsumerSignal.Close);
    s.reset(0);
    expect(s.inflight).toBe(0);
    expect(s.inflightWarning).toBe(false);
    expect(s.closing).toBe(false);
    expect(s.observeBufferedAmount(200 * KB)).toBe(ConsumerSignal.Warn);
  });
});

describe('reconfigure (a configuration reload reaching a live client)', () => {
  it('applies the new rate limit at once, with a full bucket of the new size', () => {
    const state = new ClientState(options({ rateLimitRps: 0 }), 0);
    for (let i = 0; i < 50; i++) expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
    state.reconfigure(options({ rateLimitRps: 2, rateLimitBurst: 2 }), 10);
    expect(state.tryAcquire(10)).toBe(AdmissionCode.Admit);
    expect(state.tryAcquire(10)).toBe(AdmissionCode.Admit);
    expect(state.tryAcquire(10)).toBe(AdmissionCode.RateLimited);
    expect(state.retryAfterMs).toBe(500);
  });

  it('keeps the requests in flight counted against the new cap', () => {
    const state = new ClientState(options({ maxInflightPerClient: 10 }), 0);
    for (let i = 0; i < 4; i++) admit(state);
    state.reconfigure(options({ maxInflightPerClient: 4 }), 0);
    expect(state.inflight).toBe(4);
    expect(state.tryAcquire(0)).toBe(AdmissionCode.ClientQueueFull);
    state.onCompleted();
    expect(state.tryAcquire(0)).toBe(AdmissionCode.Admit);
  });
});

describe('charging a frame before it is decoded (takeToken), the in-flight cap after routing', () => {
  it('every frame spends a token, whatever it turns out to be; the cap is checked apart and spends none', () => {
    const state = new ClientState(
      options({ rateLimitRps: 10, rateLimitBurst: 3, maxInflightPerClient: 1 }),
      0,
    );
    expect(state.takeToken(0)).toBe(true);
    expect(state.inflightFull).toBe(false);
    state.onAdmitted();
    expect(state.inflightFull).toBe(true);
    expect(state.takeToken(0)).toBe(true);
    expect(state.takeToken(0)).toBe(true);
    expect(state.takeToken(0)).toBe(false);
    expect(state.retryAfterMs).toBe(100);
    expect(state.takeToken(100)).toBe(true);
    expect(state.retryAfterMs).toBe(0);
  });
});
