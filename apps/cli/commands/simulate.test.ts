import { SimulateOptionError } from './errors';
import { LogHistogram, parseSimulateFlags, publishBounded } from './simulate';

describe('publishBounded (the backpressure of `streaminfer simulate`)', () => {
  it('never has more than maxInflight publishes pending and pulls no item while full', async () => {
    let pulled = 0;
    async function* items() {
      for (let i = 0; i < 50; i++) {
        pulled++;
        yield i;
      }
    }
    const pending: Array<() => void> = [];
    const started: number[] = [];
    let maxPending = 0;
    const publish = (i: number) =>
      new Promise<void>((resolve) => {
        started.push(i);
        pending.push(resolve);
        maxPending = Math.max(maxPending, pending.length);
      });
    const done = publishBounded(items(), publish, 4, () => false);
    // A broker that acks nothing: the loop stops at the bound instead of queueing the rest.
    await new Promise((r) => setTimeout(r, 20));
    expect(started).toEqual([0, 1, 2, 3]);
    expect(pulled).toBe(5);
    // A slow broker, one ack at a time: the bound holds throughout and nothing is skipped.
    while (started.length < 50 || pending.length > 0) {
      pending.shift()?.();
      await new Promise((r) => setImmediate(r));
    }
    await done;
    expect(maxPending).toBe(4);
    expect(started).toEqual([...Array(50).keys()]);
  });

  it('stops pulling once stopped, and waits for what is in flight', async () => {
    let settled = 0;
    let stop = false;
    async function* items() {
      for (let i = 0; ; i++) {
        if (i === 10) stop = true;
        yield i;
      }
    }
    const publish = async () => {
      await new Promise((r) => setTimeout(r, 5));
      settled++;
    };
    await publishBounded(items(), publish, 3, () => stop);
    expect(settled).toBe(10);
  });
});

describe('parseSimulateFlags', () => {
  it('converts seconds and applies the contract defaults', () => {
    const c = parseSimulateFlags({
      rate: '100',
      deliveries: '200',
      duration: '2.5',
      disorderS: '3',
      json: true,
    });
    expect(c).toMatchObject({
      nats: 'nats://127.0.0.1:4222',
      rate: 100,
      deliveries: 200,
      durationMs: 2500,
      disorderMs: 3000,
      duplicateFraction: 0,
      tooLateFraction: 0,
      tooLateDelayMs: 300_000,
      seed: 1,
      subjectRoot: '',
      eventsStream: 'DELIVERY_EVENTS',
      duplicateWindowMs: 120_000,
      replicas: 1,
      maxInflight: 256,
      json: true,
    });
    expect(parseSimulateFlags({ rate: '1', deliveries: '1', duration: '1', replicas: '3' }).replicas).toBe(3);
  });

  it('without --deliveries scales deliveries with the rate (GPS ~4 s); --deliveries is honoured; the ramp', () => {
    const auto = parseSimulateFlags({ rate: '3000', duration: '30' });
    expect(auto).toMatchObject({
      deliveries: 12_000,
      deliveriesFromRate: true,
      rampMs: 30_000,
      subSecondTimes: false,
    });
    const given = parseSimulateFlags({
      rate: '3000',
      deliveries: '3000',
      duration: '600',
      rampS: '5',
      subSecond: true,
    });
    expect(given).toMatchObject({
      deliveries: 3000,
      deliveriesFromRate: false,
      rampMs: 5000,
      subSecondTimes: true,
    });
    // The historical ramp by default: the duration, at most 5 min.
    expect(parseSimulateFlags({ rate: '10', duration: '900' }).rampMs).toBe(300_000);
  });

  it('names the option in every refusal', () => {
    const ok = { rate: '5', deliveries: '5', duration: '1' };
    const refusals: Array<[Record<string, string>, string]> = [
      [{ ...ok, rate: '-1' }, '--rate'],
      [{ ...ok, deliveries: '1.5' }, '--deliveries'],
      [{ ...ok, replicas: '6' }, '--replicas'],
      [{ ...ok, duration: '0' }, '--duration'],
      [{ ...ok, invalid: '1' }, '--invalid'],
      [{ ...ok, seed: '1.2' }, '--seed'],
      [{ ...ok, maxInflight: '0' }, '--max-inflight'],
      [{ ...ok, duplicateWindowS: '0' }, '--duplicate-window-s'],
      [{ ...ok, tooLateDelayS: '-1' }, '--too-late-delay-s'],
      [{ ...ok, rampS: '-1' }, '--ramp-s'],
      [{ ...ok, rampS: 'soon' }, '--ramp-s'],
      [{ rate: '3000', deliveries: '100', duration: '1' }, '--deliveries'],
    ];
    for (const [flags, name] of refusals) {
      expect(() => parseSimulateFlags(flags)).toThrow(SimulateOptionError);
      expect(() => parseSimulateFlags(flags)).toThrow(name);
    }
  });
});

describe('LogHistogram (PubAck latency in constant memory)', () => {
  it('reports percentiles within 2 % of the exact ones', () => {
    const h = new LogHistogram();
    const values = Array.from({ length: 10_000 }, (_, i) => 0.05 + (i % 1000) * 0.37);
    for (const v of values) h.record(v);
    const sorted = [...values].sort((a, b) => a - b);
    const exact = (q: number) => sorted[Math.ceil(q * sorted.length) - 1]!;
    for (const q of [0.5, 0.95, 0.99]) {
      expect(h.quantile(q)).toBeGreaterThanOrEqual(exact(q) * 0.98);
      expect(h.quantile(q)).toBeLessThanOrEqual(exact(q) * 1.02);
    }
    expect(h.summary().max).toBeCloseTo(sorted[sorted.length - 1]!, 2);
    expect(h.count).toBe(10_000);
  });
});
