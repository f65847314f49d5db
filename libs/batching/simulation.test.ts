import type { BatchPolicyName } from './index';
import { createBatchPolicy } from './index';
import { poissonArrivals, seededRandom, simulate } from './sim.test-util';

const max = (values: number[]) => values.reduce((m, v) => Math.max(m, v), 0);
const mean = (values: number[]) => values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);

/** True device cost: 2 ms per batch + 0.2 ms per item (capacity 32 / 8.4 ms ≈ 3.8 items/ms at batch 32). */
const cost = (n: number) => 2 + 0.2 * n;

function run(policy: BatchPolicyName, maxBatchSize: number, arrivals: number[], extra = {}, costFn = cost) {
  const options = { policy, maxBatchSize, maxQueueDelayMs: 10, ...extra };
  const instance = createBatchPolicy(options);
  return { instance, result: simulate({ policy: instance, arrivals, cost: costFn, maxBatchSize }) };
}

describe('adaptive policy in a simulated queue', () => {
  it('meets a feasible objective for every item at moderate load and learns the cost model', () => {
    const arrivals = poissonArrivals(2, 3000, 11); // 2 items/ms, about half the device capacity
    const { instance, result } = run('adaptive', 32, arrivals, { sloP99Ms: 25 });
    expect(result.completed).toBe(arrivals.length);
    expect(max(result.latencies)).toBeLessThanOrEqual(25);
    expect(mean(result.batchSizes)).toBeGreaterThan(3);
    const state = instance.state();
    expect(state.costIntercept).toBeCloseTo(2, 1);
    expect(state.costPerItem).toBeCloseTo(0.2, 2);
    expect(state.arrivalRatePerMs).toBeGreaterThan(1.6);
    expect(state.arrivalRatePerMs).toBeLessThan(2.4);
  });

  it('meets the objective with noisy compute times', () => {
    const random = seededRandom(5);
    const noisy = (n: number) => cost(n) * (0.9 + 0.2 * random());
    const arrivals = poissonArrivals(1.5, 3000, 12);
    const { result } = run('adaptive', 32, arrivals, { sloP99Ms: 30 }, noisy);
    expect(result.completed).toBe(arrivals.length);
    expect(max(result.latencies)).toBeLessThanOrEqual(30);
  });

  it('does not wait needlessly under light load', () => {
    const arrivals = poissonArrivals(0.02, 5000, 13); // one item every 50 ms
    const { result } = run('adaptive', 32, arrivals, { sloP99Ms: 40 });
    expect(result.completed).toBe(arrivals.length);
    // cost(1) = 2.2 ms; an idle worker sends each item at once
    expect(mean(result.latencies)).toBeLessThan(2.5);
  });

  it('beats no batching (maxBatchSize 1) on throughput under heavy load', () => {
    const arrivals = poissonArrivals(5, 1000, 14); // 5 items/ms: more than the device can take even at batch 32
    const horizon = { horizonMs: 1000 };
    const batched = simulate({
      policy: createBatchPolicy({ policy: 'adaptive', maxBatchSize: 32, maxQueueDelayMs: 10 }),
      arrivals,
      cost,
      maxBatchSize: 32,
      ...horizon,
    });
    const single = simulate({
      policy: createBatchPolicy({ policy: 'adaptive', maxBatchSize: 1, maxQueueDelayMs: 10 }),
      arrivals,
      cost,
      maxBatchSize: 1,
      ...horizon,
    });
    // No batching: 1 item per 2.2 ms ≈ 450 items/s; batches of 32: ≈ 3800 items/s.
    expect(single.completed).toBeLessThan(460);
    expect(batched.completed).toBeGreaterThan(3 * 1000);
    expect(batched.completed).toBeGreaterThan(6 * single.completed);
    expect(mean(batched.batchSizes)).toBeGreaterThan(28);
  });

  it('keeps up with a load that needs batching, where greedy and fixed also do', () => {
    const arrivals = poissonArrivals(3, 2000, 15); // needs batches of about 15 to keep up
    const results = (['adaptive', 'greedy', 'fixed'] as const).map((name) => run(name, 32, arrivals).result);
    for (const result of results) expect(result.completed).toBe(arrivals.length);
    const [adaptive] = results;
    // adaptive's default objective is 2 × maxQueueDelayMs = 20 ms
    expect(max(adaptive!.latencies)).toBeLessThanOrEqual(20);
  });
});

describe('every policy keeps its contract in a simulated queue', () => {
  const arrivals = [
    ...poissonArrivals(0.05, 500, 21),
    ...poissonArrivals(4, 800, 22, 500),
    ...poissonArrivals(0.5, 1500, 23, 800),
  ].sort((a, b) => a - b);
  it.each([
    ['fixed', {}],
    ['fixed', { preferredBatchSizes: [4, 8] }],
    ['greedy', {}],
    ['greedy', { minBatchSize: 4 }],
    ['greedy', { preferredBatchSizes: [4, 8] }],
    ['adaptive', {}],
    ['adaptive', { preferredBatchSizes: [4, 8], sloP99Ms: 15 }],
  ] as const)('%s %j serves every item, never waits past the flush timeout for long', (name, extra) => {
    const { result } = run(name, 16, arrivals, extra);
    expect(result.completed).toBe(arrivals.length);
    expect(result.batchSizes.every((size) => size >= 1 && size <= 16)).toBe(true);
  });

  it('fixed and greedy never hold an item longer than maxQueueDelayMs plus the device backlog at low load', () => {
    const light = poissonArrivals(0.05, 2000, 31);
    for (const name of ['fixed', 'greedy'] as const) {
      const { result } = run(name, 16, light);
      // queue delay <= 10 ms, one batch of a few items <= about 3 ms, plus a possible batch ahead
      expect(max(result.latencies)).toBeLessThanOrEqual(10 + 2 * cost(16));
    }
  });
});
