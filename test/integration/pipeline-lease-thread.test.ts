/**
 * Leases kept on their own thread (LeaseKeeper) against the real broker (the shared test broker,
 * broker-kit): a main thread blocked past the TTL keeps its partitions, one blocked past
 * maxStallMs loses them, a dead lease thread drops them at once, and option and bucket errors arrive typed.
 * The main thread is blocked by a synchronous busy loop, as a large restore or snapshot blocks it.
 */
import { Kvm } from '@nats-io/kv';
import pino from 'pino';
import {
  connectNats,
  LeaseKeeper,
  type LeaseKeeperOptions,
  type NatsHandle,
  PartitionLeases,
  PipelineIoError,
} from '../../apps/pipeline';
import { loadNatsAuth } from '../../libs/nats-auth';

import { bucketNames, pollUntil, Timeline } from './lease-kit';
import { NATS_URL } from './pipeline-kit';

const logger = pino({ level: 'silent' });
const GROUP = 'lease-thread';

let nats: NatsHandle;
const names = bucketNames('lthread');
const running: LeaseKeeper[] = [];

/** What a checkpoint restore or a big snapshot does to the event loop. */
function blockMainThread(ms: number): void {
  const until = Date.now() + ms;
  let spins = 0;
  while (Date.now() < until) spins++;
  if (spins < 0) throw new Error('unreachable');
}

function options(bucket: string, id: string, partitions: number, ttlMs: number): LeaseKeeperOptions {
  return {
    auth: loadNatsAuth({ servers: NATS_URL }),
    bucket,
    group: GROUP,
    instanceId: id,
    partitions,
    ttlMs,
    logger,
  };
}

async function keeper(
  bucket: string,
  id: string,
  timeline: Timeline,
  partitions: number,
  ttlMs: number,
  maxStallMs?: number,
): Promise<LeaseKeeper> {
  const k = await LeaseKeeper.open({
    ...options(bucket, id, partitions, ttlMs),
    ...(maxStallMs !== undefined ? { maxStallMs } : {}),
  });
  running.push(k);
  k.start(timeline.handlers(id));
  return k;
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-lease-thread-test' });
});

afterEach(async () => {
  for (const k of running.splice(0)) await k.stop().catch(() => undefined);
});

afterAll(async () => {
  for (const bucket of names.all) await nats.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
  await nats.close();
});

test('main thread blocked for 2.5 × TTL: the lease thread renews, every partition is kept', async () => {
  const bucket = names.next();
  const timeline = new Timeline();
  const ttlMs = 1500;
  const a = await keeper(bucket, 'inst-a', timeline, 4, ttlMs);
  await pollUntil('a works all 4', () => timeline.of('inst-a', 'acquire').length === 4);
  // The competitor's own thread claims any lease that lapses while this thread is blocked.
  const b = await keeper(bucket, 'inst-b', timeline, 4, ttlMs);
  const blockedAt = Date.now();
  blockMainThread(2.5 * ttlMs);
  const blockedMs = Date.now() - blockedAt;
  // Before any message is handled: the fence is exact without the main thread's help.
  expect(range(4).map((p) => a.holds(p, timeline.token('inst-a', p)))).toEqual([true, true, true, true]);

  // b only gets partitions a gives back by rebalance, after the block.
  await pollUntil('2/2', () => a.owned().length === 2 && b.owned().length === 2, 10_000);
  expect(timeline.events.some((e) => e.reason === 'lost')).toBe(false);
  expect(timeline.of('inst-a', 'release').map((e) => e.reason)).toEqual(['rebalance', 'rebalance']);
  expect(timeline.violations).toEqual([]);
  process.stderr.write(`lease thread: main blocked ${blockedMs} ms (ttl ${ttlMs}): nothing lost\n`);
});

test('main thread blocked past maxStallMs: renewals stop, the competitor takes the partitions', async () => {
  const bucket = names.next();
  const timeline = new Timeline();
  const ttlMs = 1500;
  const maxStallMs = 2000;
  const a = await keeper(bucket, 'inst-a', timeline, 4, ttlMs, maxStallMs);
  // The competitor keeps the default maxStallMs: its thread goes on renewing and claiming through the block.
  const b = await keeper(bucket, 'inst-b', timeline, 4, ttlMs);
  await pollUntil(
    '2/2',
    () =>
      a.owned().length === 2 &&
      b.owned().length === 2 &&
      a.owned().every((p) => a.holds(p, timeline.token('inst-a', p))),
  );
  // Let the last acquire handler return: a pass waiting on the blocked main thread claims nothing more.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const mine = a.owned();
  const releasesBefore = timeline.of('inst-a', 'release').length;
  const blockedAt = Date.now();
  // Stall seen within maxStallMs + one renewal interval, the leases lapse one TTL later, then b's next pass
  // (~4.6 s); the margin covers a key listing that waits out its 3 s timeout when keys expire under it.
  blockMainThread(maxStallMs + 5 * ttlMs);
  const unblockedAt = Date.now();
  expect(mine.map((p) => a.holds(p, timeline.token('inst-a', p)))).toEqual([false, false]);

  const kv = await new Kvm(nats.js).open(bucket);
  const entries = await Promise.all(range(4).map((p) => kv.get(`${GROUP}.p.${p}`)));
  const holders = entries.flatMap((e, p) =>
    e?.operation === 'PUT'
      ? [{ p, instance: JSON.parse(e.string()).instance as string, created: e.created.getTime() }]
      : [],
  );
  // b's thread claimed a lapsed lease of a's while a was blocked; a's thread wrote nothing once it saw the stall.
  expect(holders.some((h) => mine.includes(h.p) && h.instance === 'inst-b' && h.created < unblockedAt)).toBe(
    true,
  );
  const stallSeenBy = blockedAt + maxStallMs + 250;
  expect(
    holders.filter((h) => h.instance === 'inst-a' && h.created > stallSeenBy && h.created < unblockedAt),
  ).toEqual([]);

  await pollUntil(
    'a released its 2 as lost',
    () => timeline.of('inst-a', 'release').length === releasesBefore + 2,
  );
  const released = timeline.of('inst-a', 'release').slice(releasesBefore);
  expect(released.map((e) => e.reason)).toEqual(['lost', 'lost']);
  expect(released.map((e) => e.partition).sort()).toEqual(mine);
  // Responsive again: a heartbeats and claims again, the two split the partitions.
  await pollUntil('2/2 again', () => a.owned().length === 2 && b.owned().length === 2, 10_000);
  process.stderr.write(
    `lease thread: main blocked ${unblockedAt - blockedAt} ms (maxStallMs ${maxStallMs}, ttl ${ttlMs}): ` +
      `leases lapsed, competitor claimed during the block\n`,
  );
});

test('the lease thread dies: holds() is false at once, every partition is released as lost', async () => {
  const bucket = names.next();
  const timeline = new Timeline();
  const a = await keeper(bucket, 'inst-a', timeline, 2, 1500);
  const fatal: Error[] = [];
  a.onFatal = (err) => fatal.push(err);
  await pollUntil('a works both', () => timeline.of('inst-a', 'acquire').length === 2);
  expect([a.holds(0, timeline.token('inst-a', 0)), a.holds(1, timeline.token('inst-a', 1))]).toEqual([
    true,
    true,
  ]);
  const killedAt = Date.now();
  await a.killThreadForTest();
  // Well inside the TTL: a lease that lapses only later would still hold here.
  expect(Date.now() - killedAt).toBeLessThan(1000);
  expect([a.holds(0, timeline.token('inst-a', 0)), a.holds(1, timeline.token('inst-a', 1))]).toEqual([
    false,
    false,
  ]);
  expect(a.owned()).toEqual([]);
  expect(timeline.of('inst-a', 'release').map((e) => [e.partition, e.reason])).toEqual(
    expect.arrayContaining([
      [0, 'lost'],
      [1, 'lost'],
    ]),
  );
  expect(fatal).toHaveLength(1);
  await expect(a.peers()).rejects.toMatchObject({ code: 'lease_lost' });
  await expect(a.stop()).resolves.toBeUndefined();
});

test('lost and claimed again: the old acquisition fails holds() while the new one passes', async () => {
  const bucket = names.next();
  const timeline = new Timeline();
  const a = await keeper(bucket, 'inst-a', timeline, 1, 1500);
  await pollUntil('a works 0', () => timeline.of('inst-a', 'acquire').length === 1);
  const first = timeline.token('inst-a', 0);
  expect(a.holds(0, first)).toBe(true);
  const kv = await new Kvm(nats.js).open(bucket);
  const key = `${GROUP}.p.0`;
  await kv.put(key, JSON.stringify({ instance: 'intruder', acquiredAt: new Date().toISOString() }));
  await pollUntil(
    'released as lost',
    () => timeline.of('inst-a', 'release').some((e) => e.reason === 'lost'),
    3000,
  );
  expect(a.holds(0, first)).toBe(false);
  // The key goes: the lease thread claims the partition again, a new acquisition with a token of its own.
  await kv.delete(key);
  await pollUntil('claimed again', () => timeline.of('inst-a', 'acquire').length === 2, 5000);
  const second = timeline.token('inst-a', 0);
  expect(second).toBeGreaterThan(first);
  expect(a.holds(0, second)).toBe(true);
  // A loop still running under the first acquisition stays fenced (a per-partition fence let it pass).
  expect(a.holds(0, first)).toBe(false);
});

test('options and bucket errors arrive with the codes PartitionLeases gives', async () => {
  const base = options('unused', 'a', 4, 1500);
  const codeOf = (p: Promise<unknown>) =>
    p.then(
      () => 'resolved',
      (err: unknown) => (err instanceof PipelineIoError ? err.code : `untyped: ${String(err)}`),
    );
  for (const bad of [
    { instanceId: 'a.b' },
    { instanceId: '' },
    { partitions: 0 },
    { ttlMs: 999 },
    { group: 'g.*' },
  ]) {
    const direct = await codeOf(PartitionLeases.open({ ...base, nats, ...bad }));
    expect(direct).toBe('invalid_options');
    expect(await codeOf(LeaseKeeper.open({ ...base, ...bad }))).toBe(direct);
  }
  expect(await codeOf(LeaseKeeper.open({ ...base, maxStallMs: 1500 }))).toBe('invalid_options');

  // A bucket error comes from the thread: an existing bucket with another TTL.
  const bucket = names.next();
  await new Kvm(nats.js).create(bucket, { ttl: 5000, history: 1 });
  const mismatch = { ...base, bucket };
  expect(await codeOf(PartitionLeases.open({ ...mismatch, nats }))).toBe('stream_mismatch');
  await expect(LeaseKeeper.open(mismatch)).rejects.toMatchObject({
    name: 'PipelineIoError',
    code: 'stream_mismatch',
    message: expect.stringContaining('ttl 5000'),
  });
  expect(
    await codeOf(LeaseKeeper.open({ ...base, auth: loadNatsAuth({ servers: 'nats://127.0.0.1:1' }) })),
  ).toBe('nats_unreachable');
});
