import { parseSimulateFlags, publishBounded, SimulateOptionError } from './simulate';

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
      maxInflight: 256,
      json: true,
    });
  });

  it('names the option in every refusal', () => {
    const ok = { rate: '5', deliveries: '5', duration: '1' };
    const refusals: Array<[Record<string, string>, string]> = [
      [{ ...ok, rate: '-1' }, '--rate'],
      [{ ...ok, deliveries: '1.5' }, '--deliveries'],
      [{ ...ok, duration: '0' }, '--duration'],
      [{ ...ok, invalid: '1' }, '--invalid'],
      [{ ...ok, seed: '1.2' }, '--seed'],
      [{ ...ok, maxInflight: '0' }, '--max-inflight'],
      [{ ...ok, duplicateWindowS: '0' }, '--duplicate-window-s'],
      [{ ...ok, tooLateDelayS: '-1' }, '--too-late-delay-s'],
    ];
    for (const [flags, name] of refusals) {
      expect(() => parseSimulateFlags(flags)).toThrow(SimulateOptionError);
      expect(() => parseSimulateFlags(flags)).toThrow(name);
    }
  });
});
