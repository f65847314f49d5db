/**
 * How leases and heartbeats nobody rewrites leave their buckets, on a nats-server of our own of each kind: the
 * current release (per-key TTL and limit markers: a taker or observer learns of an expiry from its watch) and
 * Debian's 2.9 (the bucket's max_age, found by polling). On each: the mechanism chosen, a holder that stops
 * (its connection gone, as a kill -9 leaves it) taken over within the bound its mechanism promises and never
 * before the TTL, a crashed host's heartbeat gone for a peer within its bound, and a bucket created under the
 * other mechanism opened with a clear word.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Kvm } from '@nats-io/kv';
import pino from 'pino';
import { connectNats, LeaseKeeper, type NatsHandle, PartitionLeases } from '../../apps/pipeline';
import { FleetConnection, type HostBeat, HostBoard } from '../../apps/supervisor/fleet';
import { type KvExpiry, noticeBoundMs, serverFacts, serverHasKeyTtl } from '../../libs/jetstream';
import { loadNatsAuth } from '../../libs/nats-auth';
import { CURRENT_NATS, DEBIAN_NATS, freePort } from './nats-auth-kit';

const silent = pino({ level: 'silent' });
const GROUP = 'expiry';
/** Server lag (the TTL timer wheel, max_age's timer), marker delivery, the debounce and a pass, on a busy box. */
const SLACK_MS = 900;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

interface OwnServer {
  url: string;
  stop(): Promise<void>;
}

async function startServer(binary: string): Promise<OwnServer> {
  const port = await freePort();
  const store = mkdtempSync(path.join(os.tmpdir(), 'kv-expiry-'));
  let out = '';
  const child: ChildProcess = spawn(binary, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-20_000)));
  child.stderr!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-20_000)));
  const url = `nats://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const nats = await connectNats({ servers: url, connectTimeoutMs: 500 }).catch(() => undefined);
    if (nats) {
      await nats.close();
      break;
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${binary} did not start on ${port}:\n${out}`);
    }
    await sleep(50);
  }
  return {
    url,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(store, { recursive: true, force: true });
    },
  };
}

function beat(host: string): HostBeat {
  const now = new Date().toISOString();
  return {
    host,
    address: `http://${host}:8000`,
    epoch: 1,
    ready: true,
    fenced: false,
    defaultModel: 'digits',
    models: [],
    nodes: 1,
    nodesReady: 1,
    requestsPerSecond: 0,
    startedAt: now,
    beatAt: now,
  };
}

/** A logger whose lines a test reads. */
function capturing(): { logger: pino.Logger; lines: () => Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, sink), lines: () => lines };
}

// The current release when it is built (CI builds it), else Debian's: the expected mechanism follows the server.
const CURRENT = existsSync(CURRENT_NATS) ? CURRENT_NATS : DEBIAN_NATS;

describe.each([
  ['the current release', CURRENT],
  ['Debian 2.9', DEBIAN_NATS],
])('on %s', (_name, binary) => {
  let server: OwnServer;
  let nats: NatsHandle;
  let expected: KvExpiry;
  let version: string;
  const handles: NatsHandle[] = [];
  const connections: FleetConnection[] = [];

  beforeAll(async () => {
    server = await startServer(binary);
    nats = await connectNats({ servers: server.url, name: 'kv-expiry-test' });
    const facts = await serverFacts(nats);
    version = facts.version ?? '?';
    expected = serverHasKeyTtl(facts) ? 'key' : 'bucket';
    if (binary === CURRENT_NATS) expect(expected).toBe('key');
  });

  afterAll(async () => {
    for (const h of handles.splice(0)) await h.close().catch(() => undefined);
    for (const c of connections.splice(0)) await c.close().catch(() => undefined);
    await nats?.close().catch(() => undefined);
    await server?.stop();
  });

  async function instance(bucket: string, id: string, ttlMs: number, onAcquire: (p: number) => void) {
    const own = await connectNats({ servers: server.url, name: `kv-expiry-${id}` });
    handles.push(own);
    const leases = await PartitionLeases.open({
      nats: own,
      bucket,
      group: GROUP,
      instanceId: id,
      partitions: 4,
      ttlMs,
      logger: silent,
    });
    leases.start({ acquire: async (p) => onAcquire(p), release: async () => undefined });
    return { own, leases };
  }

  test('a holder that stops is taken over within its mechanism’s bound, never before the TTL', async () => {
    const ttlMs = 3000;
    const bucket = `kvexp${process.pid}l${Date.now() % 100_000}`;
    let crashedAt = 0;
    const takenAt = new Map<number, number>();
    const a = await instance(bucket, 'inst-a', ttlMs, (p) => {
      if (crashedAt > 0 && !takenAt.has(p)) takenAt.set(p, Date.now());
    });
    const b = await instance(bucket, 'inst-b', ttlMs, () => undefined);
    try {
      expect(a.leases.expiry).toBe(expected);
      await until('2/2', () => a.leases.owned().length === 2 && b.leases.owned().length === 2, ttlMs * 3);
      // One TTL of steady state: in per-key mode the passes are few, the watch carries the changes.
      await sleep(ttlMs);
      const orphans = b.leases.owned();
      b.leases.abandon();
      crashedAt = Date.now();
      await sleep(100);
      const kv = await new Kvm(nats.js).open(bucket);
      const lastWrite = new Map<number, number>();
      for (const p of orphans) lastWrite.set(p, (await kv.get(`${GROUP}.p.${p}`))!.created.getTime());
      await b.own.close();
      await until('a owns all 4', () => a.leases.owned().length === 4, ttlMs * 4);
      const renewEveryMs = Math.floor(ttlMs / 3);
      const bound = noticeBoundMs(expected, ttlMs, renewEveryMs) + SLACK_MS;
      const takeovers = orphans.map((p) => takenAt.get(p)! - lastWrite.get(p)!);
      for (const ms of takeovers) {
        expect(ms).toBeGreaterThanOrEqual(ttlMs);
        expect(ms).toBeLessThanOrEqual(bound);
      }
      process.stderr.write(
        `kv-expiry: nats-server ${version}, ${expected} mode: takeover ${takeovers.join(', ')} ms after the last ` +
          `renewal (ttl ${ttlMs}, bound ${bound})\n`,
      );
    } finally {
      await a.leases.stop();
      await nats.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
    }
  });

  test('a crashed host’s heartbeat is gone for a peer within its mechanism’s bound', async () => {
    const ttlMs = 2000;
    const fleet = `kvexp${process.pid}h${Date.now() % 100_000}`;
    const peer = await FleetConnection.open({ servers: server.url, fleet, hostId: 'peer' });
    const gone = await FleetConnection.open({ servers: server.url, fleet, hostId: 'gone' });
    connections.push(peer, gone);
    const peerBoard = await HostBoard.open(peer, { ttlMs });
    const goneBoard = await HostBoard.open(gone, { ttlMs });
    expect(peerBoard.mode).toBe(expected);
    const kv = await new Kvm(peer.js).open(peer.names.hostsBucket);
    const watch = await kv.watch({ key: 'gone', include: 'updates' });
    const seen: string[] = [];
    void (async () => {
      for await (const e of watch) seen.push(e.operation);
    })();
    try {
      goneBoard.start(() => beat('gone'));
      await until('the host beats', () => peerBoard.alive('gone'), ttlMs * 2);
      // A poll this slow leaves per-key mode to its watch: the bound below is far inside it.
      const pollMs = expected === 'key' ? 30_000 : 1000;
      const wait = peerBoard.whenSilent('gone', pollMs);
      goneBoard.stop();
      await sleep(100);
      const last = (await kv.get('gone'))!.created.getTime();
      await gone.close();
      const seenAt = await Promise.race([wait.silent.then(() => Date.now()), sleep(ttlMs * 4).then(() => 0)]);
      wait.stop();
      const goneMs = seenAt - last;
      const bound = noticeBoundMs(expected, ttlMs, pollMs) + SLACK_MS;
      expect(seenAt).toBeGreaterThan(0);
      expect(goneMs).toBeGreaterThanOrEqual(ttlMs);
      expect(goneMs).toBeLessThanOrEqual(bound);
      expect((await peerBoard.list()).map((h) => h.host)).toEqual([]);
      if (expected === 'key') {
        // Removed on the server, and every watcher was told (a limit marker reads as a purge).
        await until('the server removed it', async () => (await kv.get('gone'))?.operation !== 'PUT', 2000);
        expect(seen.at(-1)).toBe('PURGE');
      }
      process.stderr.write(
        `kv-expiry: nats-server ${version}, ${expected} mode: heartbeat gone for the peer ${goneMs} ms after ` +
          `the last beat (ttl ${ttlMs}, bound ${bound})\n`,
      );
    } finally {
      watch.stop();
      await peer.jsm.streams.delete(`KV_${peer.names.hostsBucket}`).catch(() => undefined);
    }
  });

  test('the pipeline’s lease thread chooses the same mechanism; markers only where the server has them', async () => {
    const bucket = `kvexp${process.pid}k${Date.now() % 100_000}`;
    const keeper = await LeaseKeeper.open({
      auth: loadNatsAuth({ servers: server.url }),
      bucket,
      group: GROUP,
      instanceId: 'thread',
      partitions: 1,
      ttlMs: 2000,
      logger: silent,
    });
    try {
      expect(keeper.expiry).toBe(expected);
      let token = -1;
      keeper.start({
        acquire: async (_partition, acquired) => {
          token = acquired;
        },
        release: async () => undefined,
      });
      await until('the lease', () => keeper.holds(0, token), 5000);
      const status = await (await new Kvm(nats.js).open(bucket)).status();
      // Limit markers where the server has them; max_age, the backstop, always.
      expect(status.markerTTL > 0).toBe(expected === 'key');
      expect(status.ttl).toBe(2000);
    } finally {
      await keeper.stop();
      await nats.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
    }
  });

  test('a bucket created under the other mechanism: opened with a clear word; another TTL still refused', async () => {
    const bucket = `kvexp${process.pid}m${Date.now() % 100_000}`;
    const ttlMs = 1000;
    try {
      // Created by the hand-built mechanism (what 2.9 or an older build leaves), opened by an auto one.
      const first = await PartitionLeases.open({
        nats,
        bucket,
        group: GROUP,
        instanceId: 'old',
        partitions: 1,
        ttlMs,
        logger: silent,
        expiry: 'bucket',
      });
      expect(first.expiry).toBe('bucket');
      const { logger, lines } = capturing();
      const next = await PartitionLeases.open({
        nats,
        bucket,
        group: GROUP,
        instanceId: 'new',
        partitions: 1,
        ttlMs,
        logger,
      });
      expect(next.expiry).toBe('bucket');
      const said = lines().find((l) => l['bucket'] === bucket);
      expect(said).toBeDefined();
      if (expected === 'key') {
        expect(said!['level']).toBe(40);
        expect(String(said!['msg'])).toContain(`lease bucket ${bucket} was created without limit markers`);
      } else expect(String(said!['msg'])).toContain('has no per-key TTL');
      // The TTL check still stands in both mechanisms.
      await expect(
        PartitionLeases.open({
          nats,
          bucket,
          group: GROUP,
          instanceId: 'x',
          partitions: 1,
          ttlMs: 2000,
          logger,
        }),
      ).rejects.toMatchObject({ code: 'stream_mismatch' });
    } finally {
      await nats.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
    }
  });
});
