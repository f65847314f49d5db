import type { BackpressureOptions, QueuePriority } from './index';
import { AdmissionCode, ModelQueueGuard, QUEUE_PRIORITIES } from './index';

const options = (overrides: Partial<BackpressureOptions> = {}): BackpressureOptions => ({
  rateLimitRps: 0,
  maxInflightPerClient: 10,
  maxModelQueue: 100,
  ...overrides,
});

/** Reports completions at `perMs` items per ms every `stepMs` from `from` (busy from `from`) to `to`. */
function feed(guard: ModelQueueGuard, perMs: number, from: number, to: number, stepMs = 10): void {
  guard.tryAdmit(0, 'normal', from); // the queue was empty at `from`: busy time starts there
  for (let t = from + stepMs; t <= to; t += stepMs) guard.onCompleted(perMs * stepMs, t);
}

describe('model queue: priority thresholds', () => {
  it('admits while the queue is below the limit of the priority', () => {
    const guard = new ModelQueueGuard(options(), 0);
    const limits: Record<QueuePriority, number> = { shadow: 25, low: 50, normal: 100, high: 110 };
    for (const priority of QUEUE_PRIORITIES) {
      const limit = limits[priority];
      expect(guard.limitFor(priority)).toBe(limit);
      expect(guard.tryAdmit(0, priority, 0)).toBe(AdmissionCode.Admit);
      expect(guard.tryAdmit(limit - 1, priority, 0)).toBe(AdmissionCode.Admit);
      expect(guard.retryAfterMs).toBe(0);
      expect(guard.tryAdmit(limit, priority, 0)).toBe(AdmissionCode.ModelQueueFull);
      expect(guard.tryAdmit(limit + 1000, priority, 0)).toBe(AdmissionCode.ModelQueueFull);
    }
  });

  it('sheds the lowest priorities first as the queue fills', () => {
    const guard = new ModelQueueGuard(options({ maxModelQueue: 4096 }), 0);
    const admitted = (length: number): QueuePriority[] =>
      QUEUE_PRIORITIES.filter((p) => guard.tryAdmit(length, p, 0) === AdmissionCode.Admit);
    expect(admitted(0)).toEqual(['shadow', 'low', 'normal', 'high']);
    expect(admitted(1023)).toEqual(['shadow', 'low', 'normal', 'high']);
    expect(admitted(1024)).toEqual(['low', 'normal', 'high']);
    expect(admitted(2047)).toEqual(['low', 'normal', 'high']);
    expect(admitted(2048)).toEqual(['normal', 'high']);
    expect(admitted(4095)).toEqual(['normal', 'high']);
    expect(admitted(4096)).toEqual(['high']);
    expect(admitted(4505)).toEqual(['high']); // 4096 + ceil(409.6)
    expect(admitted(4506)).toEqual([]);
  });

  it('admits every priority into an empty queue, even a queue of 1', () => {
    const guard = new ModelQueueGuard(options({ maxModelQueue: 1 }), 0);
    expect(QUEUE_PRIORITIES.map((p) => guard.limitFor(p))).toEqual([1, 1, 1, 2]);
    for (const p of QUEUE_PRIORITIES) expect(guard.tryAdmit(0, p, 0)).toBe(AdmissionCode.Admit);
  });

  it('follows the configured fractions', () => {
    const guard = new ModelQueueGuard(
      options({
        maxModelQueue: 10,
        lowPriorityQueueFraction: 0.7,
        shadowPriorityQueueFraction: 0.1,
        highPriorityHeadroomFraction: 0,
      }),
      0,
    );
    expect(QUEUE_PRIORITIES.map((p) => guard.limitFor(p))).toEqual([1, 7, 10, 10]);
  });

  it('treats an unknown priority like shadow (the most restricted)', () => {
    const guard = new ModelQueueGuard(options(), 0);
    expect(guard.limitFor('urgent' as QueuePriority)).toBe(25);
  });
});

describe('model queue: Retry-After from the drain rate', () => {
  it('answers defaultRetryAfterMs while nothing has been measured', () => {
    const guard = new ModelQueueGuard(options(), 0);
    expect(guard.hasDrainMeasurement).toBe(false);
    expect(guard.drainRatePerSecond()).toBe(0);
    expect(guard.tryAdmit(100, 'normal', 5000)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(1000);
    const custom = new ModelQueueGuard(options({ defaultRetryAfterMs: 250 }), 0);
    custom.tryAdmit(100, 'normal', 0);
    expect(custom.retryAfterMs).toBe(250);
    // completions reported at the very instant busy time started measure nothing yet
    custom.onCompleted(5, 0);
    expect(custom.hasDrainMeasurement).toBe(false);
  });

  it('is queueLength / drain rate, rounded up', () => {
    const guard = new ModelQueueGuard(options(), 0);
    feed(guard, 1, 0, 5000); // 1 item per ms = 1000 per second
    expect(guard.hasDrainMeasurement).toBe(true);
    expect(guard.drainRatePerSecond()).toBeCloseTo(1000, 9);
    expect(guard.tryAdmit(100, 'normal', 5000)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(100);
    expect(guard.tryAdmit(50, 'low', 5000)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(50);
    expect(guard.tryAdmit(110, 'high', 5000)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(110);
    expect(guard.tryAdmit(99, 'normal', 5000)).toBe(AdmissionCode.Admit);
    expect(guard.retryAfterMs).toBe(0);
    expect(guard.estimateRetryAfterMs(333, 5000)).toBe(333);

    const slow = new ModelQueueGuard(options(), 0);
    feed(slow, 0.03, 0, 10_000); // 30 per second
    expect(slow.tryAdmit(100, 'normal', 10_000)).toBe(AdmissionCode.ModelQueueFull);
    expect(slow.retryAfterMs).toBe(3334); // ceil(100 / 0.03)
  });

  it('clamps to [minRetryAfterMs, maxRetryAfterMs]', () => {
    const fast = new ModelQueueGuard(options(), 0);
    feed(fast, 100, 0, 2000); // 100 000 per second: 100 items drain in 1 ms
    fast.tryAdmit(100, 'normal', 2000);
    expect(fast.retryAfterMs).toBe(10);
    const slow = new ModelQueueGuard(options(), 0);
    feed(slow, 0.001, 0, 20_000, 1000); // 1 per second: 100 items take 100 s
    slow.tryAdmit(100, 'normal', 20_000);
    expect(slow.retryAfterMs).toBe(30_000);
    const custom = new ModelQueueGuard(options({ minRetryAfterMs: 200, maxRetryAfterMs: 5000 }), 0);
    feed(custom, 100, 0, 2000);
    custom.tryAdmit(100, 'normal', 2000);
    expect(custom.retryAfterMs).toBe(200);
  });

  it('answers maxRetryAfterMs for a measured drain rate of zero', () => {
    const guard = new ModelQueueGuard(options(), 0);
    guard.onCompleted(0, 500);
    expect(guard.hasDrainMeasurement).toBe(true);
    expect(guard.drainRatePerSecond()).toBe(0);
    expect(guard.tryAdmit(100, 'normal', 500)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(30_000);
  });

  it('counts a stall of a busy model: the rate decays ~ exp(-stall / window)', () => {
    const guard = new ModelQueueGuard(options(), 0);
    feed(guard, 1, 0, 10_000);
    const retries: number[] = [];
    for (const stall of [0, 1000, 3000, 5000, 12_000]) {
      guard.tryAdmit(100, 'normal', 10_000 + stall);
      retries.push(guard.retryAfterMs);
    }
    // 100 ms × e^(stall / 1 s)
    expect(retries[0]).toBe(100);
    expect(Math.abs(retries[1]! - 100 * Math.exp(1))).toBeLessThan(2);
    expect(Math.abs(retries[2]! - 100 * Math.exp(3))).toBeLessThan(2);
    expect(Math.abs(retries[3]! - 100 * Math.exp(5))).toBeLessThan(2);
    expect(retries[4]).toBe(30_000);
    expect(guard.drainRatePerSecond(15_000)).toBeCloseTo(1000 * Math.exp(-5), 1);
    expect(guard.drainRatePerSecond()).toBeCloseTo(1000, 9); // as of the last completion
  });

  it('does not count idle time (the queue was reported empty) as slowness', () => {
    const guard = new ModelQueueGuard(options(), 0);
    feed(guard, 1, 0, 2000);
    // quiet minute: the next request finds the queue empty...
    expect(guard.tryAdmit(0, 'normal', 62_000)).toBe(AdmissionCode.Admit);
    // ...and a burst fills it right after
    expect(guard.tryAdmit(100, 'normal', 62_000)).toBe(AdmissionCode.ModelQueueFull);
    expect(guard.retryAfterMs).toBe(100);
    // the first completions after the burst continue the same measurement
    guard.onCompleted(20, 62_020);
    expect(guard.drainRatePerSecond()).toBeCloseTo(1000, 6);
  });

  it('is unbiased by irregular reporting (batches of any size at any time)', () => {
    const guard = new ModelQueueGuard(options(), 0);
    guard.tryAdmit(0, 'normal', 0);
    let last = 0;
    for (const t of [3, 10, 11, 30, 31, 70, 700, 701, 1500]) {
      guard.onCompleted(2 * (t - last), t); // 2 items per ms
      last = t;
    }
    expect(guard.drainRatePerSecond()).toBeCloseTo(2000, 6);
    // several reports in the same millisecond add up
    guard.onCompleted(10, 1510);
    guard.onCompleted(10, 1510);
    expect(guard.drainRatePerSecond()).toBeCloseTo(2000, 6);
    // a report of nothing over 10 ms lowers it
    guard.onCompleted(0, 1520);
    expect(guard.drainRatePerSecond()).toBeLessThan(1990);
    expect(guard.drainRatePerSecond()).toBeGreaterThan(1950);
  });

  it('ignores nonsense counts (negative, NaN, Infinity count as 0)', () => {
    const guard = new ModelQueueGuard(options(), 0);
    feed(guard, 1, 0, 1000);
    for (const bad of [-5, Number.NaN, Number.POSITIVE_INFINITY]) guard.onCompleted(bad, 1000);
    expect(guard.drainRatePerSecond()).toBeCloseTo(1000, 9);
  });

  it('follows a change of rate within a few windows', () => {
    const guard = new ModelQueueGuard(options(), 0);
    feed(guard, 1, 0, 5000);
    for (let t = 5010; t <= 10_000; t += 10) guard.onCompleted(20, t); // now 2 per ms
    expect(guard.drainRatePerSecond()).toBeGreaterThan(1990);
    expect(guard.drainRatePerSecond()).toBeLessThanOrEqual(2000 + 1e-6);
    const quick = new ModelQueueGuard(options({ drainRateWindowMs: 100 }), 0);
    feed(quick, 1, 0, 5000);
    for (let t = 5010; t <= 6000; t += 10) quick.onCompleted(20, t);
    expect(quick.drainRatePerSecond()).toBeCloseTo(2000, 0);
  });
});

describe('reconfigured (a configuration reload)', () => {
  it('takes the new bound and keeps the measured drain rate', () => {
    const guard = new ModelQueueGuard(options({ maxModelQueue: 100 }), 0);
    feed(guard, 1, 0, 1000); // 1 item per ms
    const measured = guard.estimateRetryAfterMs(50, 1000);
    const smaller = guard.reconfigured(options({ maxModelQueue: 10 }), 1000);
    expect(smaller.capacity).toBe(10);
    expect(smaller.tryAdmit(9, 'normal', 1000)).toBe(AdmissionCode.Admit);
    expect(smaller.tryAdmit(10, 'normal', 1000)).toBe(AdmissionCode.ModelQueueFull);
    expect(smaller.estimateRetryAfterMs(50, 1000)).toBe(measured);
    // A fresh guard has measured nothing: it would answer the default instead.
    expect(new ModelQueueGuard(options({ maxModelQueue: 10 }), 1000).estimateRetryAfterMs(50, 1000)).not.toBe(
      measured,
    );
  });
});
