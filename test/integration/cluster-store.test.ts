/**
 * The fleet's NATS I/O (apps/supervisor/fleet) against a real nats-server: the shared NATS at
 * (broker-kit's TEST_NATS_URL) for the stores, and one of our own, stopped and restarted,
 * for the watch resume and the fail-fast while NATS is down.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import {
  ArtifactRefusedError,
  CoordinatorLease,
  connectFleet,
  type FleetConnection,
  FleetError,
  type FleetRecord,
  fileSha256,
  type HostBeat,
  HostBoard,
  hostStepClient,
  ModelArtifacts,
  RegistryStore,
  serveHostSteps,
} from '../../apps/supervisor/fleet';
import { keyIdOf } from '../../libs/signing';
import { TEST_NATS_URL, testNatsServer } from './broker-kit';

const NATS_URL = TEST_NATS_URL;
const NATS_SERVER = testNatsServer();

const connections: FleetConnection[] = [];
const fleets: string[] = [];
const tempDirs: string[] = [];

function newFleet(): string {
  const fleet = `t${process.pid}_${randomBytes(4).toString('hex')}`;
  fleets.push(fleet);
  return fleet;
}

async function open(fleet: string, hostId = 'host-a', servers = NATS_URL): Promise<FleetConnection> {
  const conn = await connectFleet({
    servers,
    fleet,
    hostId,
    name: 'cluster-store-test',
    reconnectWaitMs: 250,
  });
  connections.push(conn);
  return conn;
}

function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

function record(epoch: number, reason: string): FleetRecord {
  return {
    format: 1,
    epoch,
    table: { models: [{ name: 'digits', versions: ['1'], stable: '1' }], defaultModel: 'digits' },
    reloadId: `r${epoch}`,
    reason,
    strategy: 'atomic',
    committedBy: 'host-a',
    committedAt: new Date().toISOString(),
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
    models: [{ name: 'digits', stable: '1', canaryPercent: 0, shadow: false }],
    nodes: 1,
    nodesReady: 1,
    requestsPerSecond: 0,
    startedAt: now,
    beatAt: now,
  };
}

async function errorOf(promise: Promise<unknown>): Promise<FleetError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof FleetError) return err;
    throw err;
  }
  throw new Error('expected a FleetError, got a result');
}

async function pollUntil(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

afterAll(async () => {
  const admin = connections[0];
  if (admin?.available)
    for (const fleet of fleets) {
      for (const stream of [
        `KV_streaminfer_fleet_${fleet}`,
        `KV_streaminfer_fleet_${fleet}_hosts`,
        `KV_streaminfer_fleet_${fleet}_lease`,
        `OBJ_streaminfer_models_${fleet}`,
      ])
        await admin.jsm.streams.delete(stream).catch(() => undefined);
    }
  for (const conn of connections) await conn.close();
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('registry record', () => {
  it('is written only by CAS: of two writers from one revision exactly one wins, the other sees the winner', async () => {
    const fleet = newFleet();
    const [a, b] = [
      await RegistryStore.open(await open(fleet)),
      await RegistryStore.open(await open(fleet, 'host-b')),
    ];
    expect(await a.read()).toBeUndefined();
    const first = await a.create(record(0, 'join'));
    const taken = await errorOf(b.create(record(0, 'join b')));
    expect(taken.code).toBe('conflict');
    expect(taken.current?.revision).toBe(first);
    expect(taken.current?.record.reason).toBe('join');

    const results = await Promise.allSettled([
      a.commit(record(1, 'reload by a'), first),
      b.commit(record(1, 'reload by b'), first),
    ]);
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    const conflict = lost[0]!.reason as FleetError;
    expect(conflict).toBeInstanceOf(FleetError);
    expect(conflict.code).toBe('conflict');
    const now = await a.read();
    expect(conflict.current).toEqual(now);
    expect(now?.record.reason).toBe(results[0]!.status === 'fulfilled' ? 'reload by a' : 'reload by b');
    expect(now?.revision).toBe((won[0] as PromiseFulfilledResult<number>).value);
  });

  it('reads a malformed record as invalid_record, and its watch reports it without stopping', async () => {
    const fleet = newFleet();
    const conn = await open(fleet);
    const store = await RegistryStore.open(conn);
    const seen: number[] = [];
    const errors: string[] = [];
    const watch = store.watch(
      (r) => seen.push(r.epoch),
      (err) => errors.push(err instanceof FleetError ? err.code : String(err)),
    );
    const rev = await store.create(record(0, 'join'));
    await pollUntil('the first record', () => seen.length === 1);
    const kv = await new Kvm(conn.js).open(conn.names.registryBucket);
    const bad = await kv.put('registry', JSON.stringify({ ...record(1, 'bad'), format: 9 }));
    expect((await errorOf(store.read())).code).toBe('invalid_record');
    await pollUntil('the bad record reported', () => errors.length === 1);
    expect(errors).toEqual(['invalid_record']);
    await store.commit(record(2, 'good again'), bad);
    await pollUntil('the next good record', () => seen.length === 2);
    expect(seen).toEqual([0, 2]);
    expect(rev).toBeGreaterThan(0);
    watch.stop();
  });
});

describe('coordinator lease', () => {
  it('is exclusive, kept by renewals past its TTL, expires when its holder dies, and is freed by release', async () => {
    const fleet = newFleet();
    const ttlMs = 2000;
    const dying = await open(fleet, 'host-a');
    const lost: string[] = [];
    const a = await CoordinatorLease.open(dying, { ttlMs, onLost: (_h, why) => lost.push(why) });
    const b = await CoordinatorLease.open(await open(fleet, 'host-b'), { ttlMs });
    expect(await a.acquire({ host: 'host-a', reloadId: 'ra' })).toEqual({ held: true });
    const refused = await b.acquire({ host: 'host-b', reloadId: 'rb' });
    expect(refused).toMatchObject({ held: false, holder: { host: 'host-a', reloadId: 'ra' } });

    // Renewed every TTL/3: still a's after 1.5 TTL.
    await sleep(ttlMs * 1.5);
    expect(a.holds).toBe(true);
    expect(await b.acquire({ host: 'host-b', reloadId: 'rb' })).toMatchObject({ held: false });

    // a's process dies (its connection goes): the lease must expire by the bucket's max_age.
    const diedAt = Date.now();
    await dying.close();
    await pollUntil(
      'b takes the expired lease',
      async () => (await b.acquire({ host: 'host-b', reloadId: 'rb' })).held,
      ttlMs * 3,
    );
    const handOverMs = Date.now() - diedAt;
    // Its last renewal was at most TTL/3 before it died: not earlier than that, not much later than the TTL.
    expect(handOverMs).toBeGreaterThanOrEqual((ttlMs * 2) / 3 - 100);
    expect(handOverMs).toBeLessThan(ttlMs * 2);
    expect(await b.current()).toMatchObject({ host: 'host-b', reloadId: 'rb' });
    await pollUntil('a notices it lost the lease', () => lost.length === 1, ttlMs * 2);

    await b.release();
    expect(await b.current()).toBeUndefined();
    const c = await CoordinatorLease.open(await open(fleet, 'host-c'), { ttlMs });
    expect(await c.acquire({ host: 'host-c', reloadId: 'rc' })).toEqual({ held: true });
    await c.release();
    process.stdout.write(`lease hand-over after the holder died: ${handOverMs} ms (ttl ${ttlMs} ms)\n`);
  });
});

describe('host board', () => {
  it('lists live hosts sorted; a host that stops beating drops out after the TTL; remove() at once', async () => {
    const fleet = newFleet();
    const ttlMs = 1000;
    const errors: unknown[] = [];
    const boardB = await HostBoard.open(await open(fleet, 'host-b'), {
      ttlMs,
      onError: (e) => errors.push(e),
    });
    const boardA = await HostBoard.open(await open(fleet, 'host-a'), {
      ttlMs,
      onError: (e) => errors.push(e),
    });
    boardB.start(() => beat('host-b'));
    boardA.start(() => beat('host-a'));
    await pollUntil('both beats', async () => (await boardA.list()).length === 2);
    expect((await boardB.list()).map((b) => b.host)).toEqual(['host-a', 'host-b']);

    boardA.stop();
    const stoppedAt = Date.now();
    await pollUntil('host-a drops out', async () => (await boardB.list()).length === 1, ttlMs * 3);
    const dropMs = Date.now() - stoppedAt;
    expect((await boardB.list()).map((b) => b.host)).toEqual(['host-b']);
    // Not before its TTL (its last beat was at most TTL/4 before the stop).
    expect(dropMs).toBeGreaterThanOrEqual(ttlMs * 0.75 - 50);
    // B kept beating past several TTLs.
    await sleep(ttlMs * 1.2);
    expect((await boardB.list()).map((b) => b.host)).toEqual(['host-b']);

    await boardB.remove();
    expect(await boardB.list()).toEqual([]);
    expect(errors).toEqual([]);
    process.stdout.write(`heartbeat drop-out after the last beat stopped: ${dropMs} ms (ttl ${ttlMs} ms)\n`);
  });
});

describe('host steps', () => {
  it('answers steps, and every failure is ok:false without throwing', async () => {
    const fleet = newFleet();
    const conn = await open(fleet, 'host-a');
    const server = serveHostSteps(conn, async (request) => {
      if (request.step === 'abort') throw new Error('abort failed here');
      if (request.step === 'roll') await sleep(1500);
      return {
        ok: true,
        data: { step: request.step, epoch: request.epoch, models: request.plan?.models.length },
      };
    });
    const client = hostStepClient(await open(fleet, 'host-b'), 500);
    const plan = record(1, 'x').table;
    expect(await client.call('host-a', { step: 'commit', reloadId: 'r1', epoch: 4, plan })).toEqual({
      ok: true,
      data: { step: 'commit', epoch: 4, models: 1 },
    });
    expect(await client.call('host-a', { step: 'abort', reloadId: 'r1' })).toEqual({
      ok: false,
      error: 'abort failed here',
    });
    // A malformed request: answered, not thrown.
    const raw = await conn.nc.request(
      conn.names.hostSubject('host-a'),
      new TextEncoder().encode('{"step":"x"}'),
    );
    expect(JSON.parse(new TextDecoder().decode(raw.data))).toMatchObject({ ok: false });

    let at = Date.now();
    const slow = await client.call('host-a', { step: 'roll', reloadId: 'r1', epoch: 4, plan });
    const timeoutMs = Date.now() - at;
    expect(slow.ok).toBe(false);
    expect(slow.error).toMatch(/timeout/i);
    expect(timeoutMs).toBeGreaterThanOrEqual(450);
    expect(timeoutMs).toBeLessThan(1400);

    at = Date.now();
    const nobody = await client.call('host-z', { step: 'prepare', reloadId: 'r1', plan });
    expect(nobody.ok).toBe(false);
    expect(nobody.error).toMatch(/no responders/i);
    expect(nobody.down).toBe(true);
    expect(Date.now() - at).toBeLessThan(450);

    const bad = await client.call('not a host id', { step: 'prepare', reloadId: 'r1' });
    expect(bad.ok).toBe(false);
    server.stop();
  });
});

describe('model artifacts', () => {
  it('pushes, fetches with a checked digest, verifies a local copy, and refuses corrupted bytes', async () => {
    const fleet = newFleet();
    const conn = await open(fleet);
    const artifacts = await ModelArtifacts.open(conn);
    const src = tempDir('cluster-src-');
    const onnx = path.join(src, 'model.onnx');
    const config = path.join(src, 'config.json');
    // Several 128 KiB chunks.
    writeFileSync(onnx, randomBytes(300_000));
    writeFileSync(config, JSON.stringify({ name: 'digits' }));
    const pushed = await artifacts.push('digits', '2', onnx, config);
    expect(pushed).toEqual({ sha256: await fileSha256(onnx), bytes: 300_000 });
    expect(await artifacts.digest('digits', '2')).toBe(pushed.sha256);
    expect(await artifacts.digest('digits', '9')).toBeUndefined();
    // The store's own digest format.
    const store = await new Objm(conn.js).open(conn.names.modelsBucket);
    const info = await store.info('digits/2/model.onnx');
    expect(info?.digest).toBe(`SHA-256=${Buffer.from(pushed.sha256, 'hex').toString('base64url')}=`);

    const dir = tempDir('cluster-models-');
    expect(await artifacts.verifyLocal(dir, 'digits', '2')).toBe('missing');
    expect(await artifacts.fetchInto(dir, 'digits', '2')).toEqual({ ...pushed, fetched: true });
    // Buffer.equals: jest's toEqual walks 300,000 elements for seconds.
    expect(readFileSync(path.join(dir, 'digits/2/model.onnx')).equals(readFileSync(onnx))).toBe(true);
    expect(readFileSync(path.join(dir, 'digits/config.json'), 'utf8')).toBe(readFileSync(config, 'utf8'));
    expect(await artifacts.fetchInto(dir, 'digits', '2')).toEqual({ ...pushed, fetched: false });
    expect(await artifacts.verifyLocal(dir, 'digits', '2')).toBe('ok');
    expect(await artifacts.verifyLocal(dir, 'digits', '9')).toBe('not_pushed');

    // A local copy that differs by one byte.
    const local = path.join(dir, 'digits/2/model.onnx');
    const bytes = readFileSync(local);
    bytes[1000] = (bytes[1000]! + 1) % 256;
    writeFileSync(local, bytes);
    expect(await artifacts.verifyLocal(dir, 'digits', '2')).toBe('mismatch');
    // fetchInto repairs it.
    expect((await artifacts.fetchInto(dir, 'digits', '2')).fetched).toBe(true);
    expect(await artifacts.verifyLocal(dir, 'digits', '2')).toBe('ok');

    expect((await errorOf(artifacts.fetchInto(dir, 'digits', '9'))).code).toBe('artifact_missing');

    // Corrupt the stored chunks (same sizes, one byte changed): the digest no longer matches the bytes.
    const chunkSubject = `$O.${conn.names.modelsBucket}.C.${info!.nuid}`;
    const stream = `OBJ_${conn.names.modelsBucket}`;
    const chunks: Uint8Array[] = [];
    for (let seq = 1; chunks.length < info!.chunks; seq++) {
      const msg = await conn.jsm.streams.getMessage(stream, { seq });
      if (msg?.subject === chunkSubject) chunks.push(msg.data);
    }
    chunks[1]![5] = (chunks[1]![5]! + 1) % 256;
    await conn.jsm.streams.purge(stream, { filter: chunkSubject });
    for (const chunk of chunks) await conn.js.publish(chunkSubject, chunk);
    const fresh = tempDir('cluster-models-');
    const mismatch = await errorOf(artifacts.fetchInto(fresh, 'digits', '2'));
    expect(mismatch.code).toBe('checksum_mismatch');
    expect(readdirSync(path.join(fresh, 'digits/2'))).toEqual([]);
  });
});

describe('signed model artifacts', () => {
  it('a fresh host pulls a signed version and its signed config.json; a replaced config.json is refused, nothing written', async () => {
    const fleet = newFleet();
    const conn = await open(fleet);
    const signer = generateKeyPairSync('ed25519');
    const trusted = new Map([[keyIdOf(signer.publicKey), signer.publicKey]]);
    const refused: ArtifactRefusedError[] = [];
    const pusher = await ModelArtifacts.open(conn);
    const host = await ModelArtifacts.open(conn, { keys: () => trusted, refused: (e) => refused.push(e) });
    const src = tempDir('cluster-src-');
    const onnx = path.join(src, 'model.onnx');
    const config = path.join(src, 'config.json');
    writeFileSync(onnx, randomBytes(200_000));
    writeFileSync(config, JSON.stringify({ name: 'digits' }));
    const pushed = await pusher.push('digits', '2', onnx, config, signer.privateKey);
    expect(pushed.keyId).toBe(keyIdOf(signer.publicKey));
    const dir = tempDir('cluster-models-');
    expect(await host.fetchInto(dir, 'digits', '2')).toMatchObject({ fetched: true, keyId: pushed.keyId });
    expect(readFileSync(path.join(dir, 'digits/config.json'), 'utf8')).toBe(readFileSync(config, 'utf8'));

    // A NATS writer replaces the config.json signed with version 2: a host without one refuses the version.
    const store = await new Objm(conn.js).open(conn.names.modelsBucket);
    await store.putBlob(
      { name: 'digits/2/config.json' },
      new TextEncoder().encode('{"name":"digits","x":1}'),
    );
    const fresh = tempDir('cluster-models-');
    const error = await errorOf(host.fetchInto(fresh, 'digits', '2'));
    expect(error).toBeInstanceOf(ArtifactRefusedError);
    expect(error.message).toMatch(/^model digits version 2 refused: tampered: config\.json is 23 bytes/);
    expect(refused.map((e) => e.reason)).toEqual(['tampered']);
    expect(readdirSync(path.join(fresh, 'digits'))).toEqual([]);
    // A host that has a config.json of its own (its repository) pulls only the model, which verifies.
    writeFileSync(path.join(fresh, 'digits', 'config.json'), '{"name":"digits"}');
    expect(await host.fetchInto(fresh, 'digits', '2')).toMatchObject({ fetched: true });
    // Without trusted keys: the checksum only, as before.
    const unverified = tempDir('cluster-models-');
    expect(await pusher.fetchInto(unverified, 'digits', '2')).toMatchObject({ fetched: true });
    expect(await pusher.fetchInto(unverified, 'digits', '2')).not.toHaveProperty('keyId');
  });
});

describe('NATS restart', () => {
  let server: ChildProcess | undefined;

  afterAll(() => {
    server?.kill('SIGKILL');
  });

  async function freePort(): Promise<number> {
    return new Promise((resolve, reject) => {
      const probe = createServer();
      probe.listen(0, '127.0.0.1', () => {
        const address = probe.address();
        probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject()));
      });
    });
  }

  function startNats(port: number, storeDir: string): Promise<ChildProcess> {
    return new Promise((resolve, reject) => {
      const child = spawn(NATS_SERVER, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir]);
      let err = '';
      const timer = setTimeout(() => reject(new Error(`nats-server did not start: ${err}`)), 10_000);
      child.stderr.on('data', (chunk: Buffer) => {
        err += chunk.toString();
        if (err.includes('Server is ready')) {
          clearTimeout(timer);
          resolve(child);
        }
      });
      child.on('error', reject);
    });
  }

  async function stopNats(child: ChildProcess): Promise<void> {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }

  it('fails fast while NATS is down, and the registry watch resumes after a restart', async () => {
    const port = await freePort();
    const storeDir = tempDir('cluster-nats-');
    server = await startNats(port, storeDir);
    const url = `nats://127.0.0.1:${port}`;
    const fleet = newFleet();
    const conn = await open(fleet, 'host-a', url);
    const availability: boolean[] = [];
    conn.onAvailability((available) => availability.push(available));
    const store = await RegistryStore.open(conn);
    const board = await HostBoard.open(conn, { ttlMs: 5000 });
    const client = hostStepClient(conn, 3000);
    const seen: number[] = [];
    const watchErrors: string[] = [];
    const watch = store.watch(
      (r) => seen.push(r.epoch),
      (err) => watchErrors.push(String(err)),
      500,
    );
    await store.create(record(0, 'join'));
    await pollUntil('epoch 0 watched', () => seen.length === 1);

    await stopNats(server);
    await pollUntil('the connection is seen down', () => !conn.available, 5000);
    let at = Date.now();
    expect((await errorOf(store.read())).code).toBe('cluster_unavailable');
    expect((await errorOf(store.commit(record(1, 'x'), 1))).code).toBe('cluster_unavailable');
    expect((await errorOf(board.list())).code).toBe('cluster_unavailable');
    const step = await client.call('host-b', { step: 'prepare', reloadId: 'r' });
    const downMs = Date.now() - at;
    expect(step.ok).toBe(false);
    expect(downMs).toBeLessThan(200);

    await sleep(2000);
    server = await startNats(port, storeDir);
    await pollUntil('the connection is back', () => conn.available, 10_000);
    expect(availability).toEqual([false, true]);
    at = Date.now();
    const current = await store.read();
    expect(current?.record.epoch).toBe(0);
    await store.commit(record(1, 'after restart'), current!.revision);
    await pollUntil('epoch 1 watched', () => seen.length === 2, 10_000);
    const resumeMs = Date.now() - at;
    expect(seen).toEqual([0, 1]);
    // One consumer: the watch was not made twice, and none was left behind by the restart.
    const consumers = await conn.jsm.consumers.list(`KV_${conn.names.registryBucket}`).next();
    expect(consumers).toHaveLength(1);
    // Its consumer deleted under it: the watch comes back (nats.js's reset, or ours when the iterator ends).
    at = Date.now();
    await conn.jsm.consumers.delete(`KV_${conn.names.registryBucket}`, consumers[0]!.name);
    await store.commit(record(2, 'after consumer loss'), (await store.read())!.revision);
    await pollUntil('epoch 2 watched', () => seen.length === 3, 5000);
    const lossMs = Date.now() - at;
    expect(seen).toEqual([0, 1, 2]);
    expect(watchErrors.some((e) => /stalled before revision/.test(e))).toBe(true);

    // Unreachable at start: a typed error, not a hang.
    await stopNats(server);
    server = undefined;
    at = Date.now();
    const unreachable = await errorOf(connectFleet({ servers: url, fleet, hostId: 'host-a' }));
    expect(unreachable.code).toBe('cluster_unavailable');
    const connectMs = Date.now() - at;
    watch.stop();
    process.stdout.write(
      `down: 4 calls failed in ${downMs} ms; watch delivered a post-restart write ${resumeMs} ms after it; ` +
        `after its consumer was deleted in ${lossMs} ms; unreachable at start failed in ${connectMs} ms\n`,
    );
  });
});
