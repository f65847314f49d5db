import { type CoalesceClock, Coalescer } from './coalesce';

/** A clock whose sleeps resolve only when the test advances time. */
function manualClock(): CoalesceClock & { advance(ms: number): Promise<void> } {
  let now = 1000;
  const sleepers: Array<{ until: number; wake: () => void }> = [];
  return {
    now: () => now,
    sleep: (ms) => new Promise((wake) => sleepers.push({ until: now + ms, wake })),
    async advance(ms) {
      now += ms;
      for (const sleeper of sleepers.splice(0)) {
        if (sleeper.until <= now) sleeper.wake();
        else sleepers.push(sleeper);
      }
      await flush();
    },
  };
}

async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

/** Fan-outs the test finishes by hand; each answers its own sequence number. */
function fanOuts() {
  const open: Array<() => void> = [];
  let started = 0;
  return {
    run: () => {
      const n = ++started;
      return new Promise<number>((resolve) => open.push(() => resolve(n)));
    },
    finishAll: async () => {
      for (const finish of open.splice(0)) finish();
      await flush();
    },
    get started() {
      return started;
    },
  };
}

test('concurrent callers share one fan-out in flight and one queued behind it', async () => {
  const clock = manualClock();
  const nodes = fanOuts();
  const c = new Coalescer(nodes.run, 50, clock);
  const first = c.get();
  // 49 more arrive while the first fan-out is in flight: they must not get its (older) answer.
  const rest = Array.from({ length: 49 }, () => c.get());
  expect(nodes.started).toBe(1);
  await nodes.finishAll();
  expect(await first).toBe(1);
  // The queued one waits for the minimum interval.
  expect(nodes.started).toBe(1);
  await clock.advance(50);
  expect(nodes.started).toBe(2);
  await nodes.finishAll();
  expect(new Set(await Promise.all(rest))).toEqual(new Set([2]));
  expect(c.fanOuts).toBe(2);
});

test('an answer never predates the call; fan-outs start at least minIntervalMs apart', async () => {
  const clock = manualClock();
  const nodes = fanOuts();
  const c = new Coalescer(nodes.run, 50, clock);
  const a = c.get();
  await nodes.finishAll();
  expect(await a).toBe(1);
  // Nothing in flight, but the last fan-out started 10 ms ago: the next caller waits, then gets a fresh one.
  await clock.advance(10);
  const b = c.get();
  await flush();
  expect(nodes.started).toBe(1);
  await clock.advance(40);
  expect(nodes.started).toBe(2);
  const late = c.get(); // arrives after fan-out 2 started: queued for fan-out 3
  await nodes.finishAll();
  expect(await b).toBe(2);
  await clock.advance(50);
  await nodes.finishAll();
  expect(await late).toBe(3);
});

test('a failed fan-out fails its callers only; the next call starts a new one', async () => {
  const clock = manualClock();
  let calls = 0;
  const c = new Coalescer(
    () => (++calls === 1 ? Promise.reject(new Error('node gone')) : Promise.resolve(calls)),
    0,
    clock,
  );
  const failed = c.get();
  const queued = c.get();
  await expect(failed).rejects.toThrow('node gone');
  expect(await queued).toBe(2);
});
