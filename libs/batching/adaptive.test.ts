import type { BatchPolicy, BatchPolicyOptions, QueueSnapshot } from './index';
import { createBatchPolicy } from './index';

const T = 100;
const TOTAL = 1000;

/**
 * Cost prior a = 5 ms, b = 0.1 ms/item, arrival rate warmed to 1 item/ms by two snapshots 100 ms apart with an
 * exact enqueuedTotal, and the same rate served: batches observed on the prior's line (so the fit stays
 * a = 5, b = 0.1), `servedShare` × the arrivals over the same 100 ms. Keep-up size n* = 1·5 / (1 − 0.1) = 5.56
 * → target 6.
 */
function warmed(overrides: Partial<BatchPolicyOptions> = {}, ratePerMs = 1, servedShare = 1): BatchPolicy {
  const options: BatchPolicyOptions = {
    policy: 'adaptive',
    maxBatchSize: 32,
    maxQueueDelayMs: 50,
    sloP99Ms: 100,
    costPrior: { interceptMs: 5, perItemMs: 0.1 },
    ...overrides,
  };
  const policy = createBatchPolicy(options);
  const { interceptMs, perItemMs } = options.costPrior!;
  policy.decide(
    { length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: TOTAL - 100 * ratePerMs },
    0,
  );
  policy.observe(4, interceptMs + 4 * perItemMs, 0);
  for (let left = 100 * ratePerMs * servedShare; left > 0; left -= 8) {
    const n = Math.min(8, left);
    policy.observe(n, interceptMs + n * perItemMs, T);
  }
  policy.decide({ length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: TOTAL }, T);
  return policy;
}
const snap = (length: number, age: number, inFlightBatches = 0): QueueSnapshot => ({
  length,
  oldestEnqueuedAt: T - age,
  inFlightBatches,
  enqueuedTotal: TOTAL,
});

describe('adaptive policy', () => {
  it('is idle on an empty queue and exposes its model', () => {
    const policy = warmed();
    expect(policy.decide(snap(0, 0), T)).toEqual({ kind: 'idle' });
    const state = policy.state();
    expect(state.targetBatchSize).toBe(6);
    expect(state.waitMs).toBe(0);
    expect(state.costIntercept).toBeCloseTo(5, 9);
    expect(state.costPerItem).toBeCloseTo(0.1, 9);
    expect(state.arrivalRatePerMs).toBeCloseTo(1, 10);
    expect(state.sloP99Ms).toBe(100);
  });

  it('dispatches a full batch at once, even with one in flight', () => {
    expect(warmed().decide(snap(40, 0), T)).toEqual({ kind: 'dispatch', size: 32 });
    expect(warmed().decide(snap(32, 0, 1), T)).toEqual({ kind: 'dispatch', size: 32 });
  });

  it('waits for the keep-up batch when arrivals would outgrow a smaller one', () => {
    const policy = warmed();
    const decision = policy.decide(snap(2, 1), T);
    expect(decision.kind).toBe('wait');
    // (target 6 − 2 queued) / 1 item per ms = 4 ms
    expect(decision.kind === 'wait' && decision.untilMs).toBeCloseTo(T + 4, 6);
    expect(policy.state().waitMs).toBeCloseTo(4, 6);
    expect(policy.state().targetBatchSize).toBe(6);
  });

  it('dispatches once the batch reaches the target (waiting would not raise throughput)', () => {
    expect(warmed().decide(snap(6, 4), T)).toEqual({ kind: 'dispatch', size: 6 });
    expect(warmed().decide(snap(9, 4), T)).toEqual({ kind: 'dispatch', size: 9 });
  });

  it('dispatches at once under light load (target 1)', () => {
    const policy = warmed({}, 0.1); // n* = 0.5 / 0.99 < 1
    expect(policy.decide(snap(1, 0), T)).toEqual({ kind: 'dispatch', size: 1 });
    expect(policy.state().targetBatchSize).toBe(1);
  });

  it('dispatches at once while no arrival rate is known', () => {
    const policy = createBatchPolicy({ policy: 'adaptive', maxBatchSize: 32, maxQueueDelayMs: 50 });
    expect(policy.decide({ length: 3, oldestEnqueuedAt: 0, inFlightBatches: 0 }, 0)).toEqual({
      kind: 'dispatch',
      size: 3,
    });
    expect(policy.state().arrivalRatePerMs).toBe(0);
  });

  it('never waits past maxQueueDelayMs (exactly at the deadline dispatches)', () => {
    const policy = warmed({ sloP99Ms: 1000 });
    const decision = policy.decide(snap(2, 48), T);
    expect(decision).toEqual({ kind: 'wait', untilMs: T + 2 });
    expect(warmed({ sloP99Ms: 1000 }).decide(snap(2, 50), T)).toEqual({ kind: 'dispatch', size: 2 });
    expect(warmed({ sloP99Ms: 1000 }).decide(snap(2, 70), T)).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('never waits past the point where the oldest item would miss the objective', () => {
    // L = 20: (0.95·20 − age − (5 + 0.1·2)) / (1 + 0.1·1); age 10 → 3.4545 ms (less than the 4 ms target wait)
    const decision = warmed({ sloP99Ms: 20 }).decide(snap(2, 10), T);
    expect(decision.kind === 'wait' && decision.untilMs - T).toBeCloseTo(3.8 / 1.1, 6);
    // age 14 → no slack left → dispatch
    expect(warmed({ sloP99Ms: 20 }).decide(snap(2, 14), T)).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('dispatches at once when even that cannot meet the objective', () => {
    expect(warmed({ sloP99Ms: 4 }).decide(snap(2, 0), T)).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('with a batch in flight, holds a partial batch as long as it is safe', () => {
    const policy = warmed({ sloP99Ms: 1000 });
    expect(policy.decide(snap(9, 1, 1), T)).toEqual({ kind: 'wait', untilMs: T + 49 });
    const tight = warmed({ sloP99Ms: 20 }).decide(snap(9, 1, 1), T);
    // (19 − 1 − 5.9) / 1.1
    expect(tight.kind === 'wait' && tight.untilMs - T).toBeCloseTo(12.1 / 1.1, 6);
    expect(warmed().decide(snap(9, 50, 1), T)).toEqual({ kind: 'dispatch', size: 9 });
  });

  it('does not wait on an idle device when even full batches cannot keep up (λ·b >= 1)', () => {
    // The old rule waited for maxBatchSize here: idle device time while the queue only grows.
    const policy = warmed({ costPrior: { interceptMs: 5, perItemMs: 1 } }, 1);
    expect(policy.decide(snap(2, 0), T)).toEqual({ kind: 'dispatch', size: 2 });
    expect(policy.state().targetBatchSize).toBe(32);
    // with a batch running it still holds the partial batch while that is safe
    expect(policy.decide(snap(2, 0, 1), T).kind).toBe('wait');
  });

  it('does not wait on an idle device near capacity (full batches would need more than 3/4 of it)', () => {
    // a = 5, b = 0.1, max 32: a full batch takes 8.2 ms, so λ·8.2/32 of the device; n* = 5λ / (1 − 0.1λ).
    // λ = 2.5: 64 %, n* = 16.7 → waits for 17; λ = 3: 77 % → sends what is queued (n* = 21.4 still shown)
    const below = warmed({}, 2.5);
    expect(below.decide(snap(2, 0), T).kind).toBe('wait');
    expect(below.state().targetBatchSize).toBe(17);
    const near = warmed({}, 3);
    expect(near.decide(snap(2, 0), T)).toEqual({ kind: 'dispatch', size: 2 });
    expect(near.state().targetBatchSize).toBe(22);
  });

  it('sizes its target on the items its own batches take, not every arrival (workers sharing a queue)', () => {
    // Two workers on one queue: each sees every arrival (2 items/ms) but serves about half of them.
    const shared = warmed({}, 2, 0.5);
    expect(shared.state().arrivalRatePerMs).toBeCloseTo(2, 10);
    shared.decide(snap(2, 0), T);
    expect(shared.state().targetBatchSize).toBe(6); // n* at 1 item/ms, not 12.5 at 2 items/ms
    const alone = warmed({}, 2, 1);
    alone.decide(snap(2, 0), T);
    expect(alone.state().targetBatchSize).toBe(13);
  });

  it('does not wait before its first batch completed (no served rate yet)', () => {
    const policy = createBatchPolicy({
      policy: 'adaptive',
      maxBatchSize: 32,
      maxQueueDelayMs: 50,
      sloP99Ms: 100,
    });
    policy.decide({ length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: 0 }, 0);
    policy.decide({ length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: 100 }, 100);
    expect(
      policy.decide({ length: 3, oldestEnqueuedAt: 100, inFlightBatches: 0, enqueuedTotal: 103 }, 100),
    ).toEqual({
      kind: 'dispatch',
      size: 3,
    });
  });

  it('snaps the target up to a preferred size and dispatches preferred sizes', () => {
    const policy = warmed({ preferredBatchSizes: [4, 8, 16] });
    const decision = policy.decide(snap(5, 0), T);
    expect(policy.state().targetBatchSize).toBe(8);
    expect(decision.kind === 'wait' && decision.untilMs - T).toBeCloseTo(3, 6);
    expect(warmed({ preferredBatchSizes: [4, 8, 16] }).decide(snap(10, 0), T)).toEqual({
      kind: 'dispatch',
      size: 8,
    });
    // on the cap deadline: the largest preferred size that fits, or everything when none fits
    expect(warmed({ preferredBatchSizes: [4, 8, 16] }).decide(snap(7, 50), T)).toEqual({
      kind: 'dispatch',
      size: 4,
    });
    expect(warmed({ preferredBatchSizes: [4, 8, 16] }).decide(snap(3, 50), T)).toEqual({
      kind: 'dispatch',
      size: 3,
    });
    // keep-up size above every preferred size → maxBatchSize
    const heavy = warmed({ preferredBatchSizes: [2, 4] }, 2);
    heavy.decide(snap(1, 0), T);
    expect(heavy.state().targetBatchSize).toBe(32);
  });

  it('infers arrivals from queue growth when enqueuedTotal is absent', () => {
    const policy = createBatchPolicy({ policy: 'adaptive', maxBatchSize: 64, maxQueueDelayMs: 1000 });
    let length = 0;
    for (let t = 0; t <= 1000; t++) {
      length += 2; // 2 arrivals per ms
      const decision = policy.decide({ length, oldestEnqueuedAt: t, inFlightBatches: 0 }, t);
      if (decision.kind === 'dispatch') length -= decision.size;
    }
    expect(policy.state().arrivalRatePerMs).toBeGreaterThan(1.6);
    expect(policy.state().arrivalRatePerMs).toBeLessThan(2.05);
  });

  it('learns its cost model from observe()', () => {
    const policy = createBatchPolicy({ policy: 'adaptive', maxBatchSize: 32, maxQueueDelayMs: 10 });
    for (let i = 0; i < 200; i++) {
      const n = 1 + (i % 32);
      policy.observe(n, 3 + 0.3 * n, i);
    }
    expect(policy.state().costIntercept).toBeCloseTo(3, 1);
    expect(policy.state().costPerItem).toBeCloseTo(0.3, 2);
  });

  it('defaults its objective to 2 × maxQueueDelayMs', () => {
    const policy = createBatchPolicy({ policy: 'adaptive', maxBatchSize: 8, maxQueueDelayMs: 12 });
    expect(policy.state().sloP99Ms).toBe(24);
  });

  it('never returns a wait that does not move the clock', () => {
    // At 2^52 ms the clock's resolution is 1 ms: a 0.003 ms wait would be untilMs === now.
    const now = 2 ** 52;
    const policy = createBatchPolicy({
      policy: 'adaptive',
      maxBatchSize: 32,
      maxQueueDelayMs: 50,
      sloP99Ms: 100,
      costPrior: { interceptMs: 0.001, perItemMs: 0 },
    });
    // 10^4 items/ms arrive and are served: n* = 10 → wait (10 − 2) / 10^4 = 0.0008 ms
    policy.decide({ length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: 0 }, now - 100);
    policy.observe(1, 0.001, now - 100);
    policy.observe(1e6, 0.001, now);
    policy.decide({ length: 0, oldestEnqueuedAt: 0, inFlightBatches: 0, enqueuedTotal: 1e6 }, now);
    const decision = policy.decide(
      { length: 2, oldestEnqueuedAt: now, inFlightBatches: 0, enqueuedTotal: 1e6 },
      now,
    );
    expect(policy.state().targetBatchSize).toBe(10);
    expect(decision).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('never waits with maxQueueDelayMs 0', () => {
    const policy = warmed({ maxQueueDelayMs: 0 });
    expect(policy.decide(snap(2, 0), T)).toEqual({ kind: 'dispatch', size: 2 });
    expect(policy.decide(snap(2, 0, 1), T)).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('counts arrivals exactly from enqueuedTotal, whatever the queue length does', () => {
    const policy = createBatchPolicy({ policy: 'adaptive', maxBatchSize: 64, maxQueueDelayMs: 50 });
    let total = 0;
    for (let t = 0; t <= 2000; t++) {
      total += 3; // 3 arrivals per ms; other consumers keep the queue short and its length says nothing
      policy.decide({ length: t % 2, oldestEnqueuedAt: t, inFlightBatches: 0, enqueuedTotal: total }, t);
    }
    expect(policy.state().arrivalRatePerMs).toBeCloseTo(3, 6);
  });

  it('does not count a dispatch the caller held back as new arrivals', () => {
    // 1 item/ms for 2 s; every decision says dispatch, but the worker holds it (a batch is running) and the
    // same items are still queued at the next snapshot. Only enqueuedTotal may move the rate.
    const run = (exact: boolean): number => {
      const policy = createBatchPolicy({
        policy: 'adaptive',
        maxBatchSize: 64,
        maxQueueDelayMs: 0,
        costPrior: { interceptMs: 5, perItemMs: 0.1 },
      });
      let length = 0;
      for (let t = 0; t <= 2000; t++) {
        length++;
        const queue = { length, oldestEnqueuedAt: t, inFlightBatches: 1 };
        const decision = policy.decide(exact ? { ...queue, enqueuedTotal: t + 1 } : queue, t);
        expect(decision.kind).toBe('dispatch'); // maxQueueDelayMs 0: never waits
        if (t % 10 === 9) length = 0; // held nine times, then claimed
      }
      return policy.state().arrivalRatePerMs!;
    };
    expect(run(true)).toBeCloseTo(1, 6);
    // Without it, every held batch is counted again (this is what the worker used to feed).
    expect(run(false)).toBeGreaterThan(3);
  });

  it('never plans a wait past the oldest item budget (objective and queue-delay cap)', () => {
    let seed = 7;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let i = 0; i < 2000; i++) {
      const sloP99Ms = 5 + random() * 100;
      const maxQueueDelayMs = random() * 80;
      const a = random() * 10;
      const b = random() * 0.5;
      const policy = warmed(
        { sloP99Ms, maxQueueDelayMs, costPrior: { interceptMs: a, perItemMs: b } },
        random() * 4,
      );
      const length = 1 + Math.floor(random() * 31);
      const age = random() * 60;
      const decision = policy.decide(snap(length, age, random() < 0.5 ? 1 : 0), T);
      if (decision.kind !== 'wait') continue;
      const oldest = T - age;
      expect(decision.untilMs).toBeLessThanOrEqual(oldest + maxQueueDelayMs + 1e-9);
      // at the wait's end the batch (grown at the rate) still finishes within the objective
      const rate = policy.state().arrivalRatePerMs!;
      const grown = Math.min(32, length + rate * (decision.untilMs - T));
      expect(decision.untilMs + a + b * grown).toBeLessThanOrEqual(oldest + sloP99Ms + 1e-9);
    }
  });

  it('never plans a wait that would finish the earliest known request past its deadline', () => {
    // Without a deadline: waits 4 ms for the target (see above). Cost of 2 items: 5.2 ms.
    const at = (deadlineIn: number) =>
      warmed({ sloP99Ms: 1000 }).decide({ ...snap(2, 1), earliestDeadlineAt: T + deadlineIn }, T);
    expect(at(1000)).toEqual({ kind: 'wait', untilMs: T + 4 });
    const tight = at(7.4); // (7.4 − 5.2) / (1 + 0.1·1) = 2 ms
    expect(tight.kind === 'wait' && tight.untilMs - T).toBeCloseTo(2, 6);
    expect(at(5)).toEqual({ kind: 'dispatch', size: 2 });
    // also while a batch runs (the busy-worker hold)
    const busy = warmed({ sloP99Ms: 1000 }).decide({ ...snap(9, 1, 1), earliestDeadlineAt: T + 16.9 }, T);
    expect(busy.kind === 'wait' && busy.untilMs - T).toBeCloseTo(11 / 1.1, 6);
  });
});
