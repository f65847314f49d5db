/**
 * `streaminfer stream` as a user runs it: the supervised pipeline process on the real broker with the
 * shipped delay-risk model (embedded), its probes, metrics and admin API, `streaminfer reload` through the
 * epoch barrier, a kill -9 of the pipeline process (the supervisor restarts it on the pinned version), SIGTERM;
 * and the external mode against a real server, which must predict exactly what the embedded mode does.
 */
import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connectNats, keySubject, type NatsHandle } from '../../apps/stream';
import { lintExposition } from '../../libs/metrics';
import type { Prediction } from '../../libs/stream';
import { MODELS_DIR, modelsSubset, runCli, runCliToExit, type ServerHandle, startServer } from './harness';
import { deleteStreams, NATS_URL, readStream, type StreamNames, uniqueNames, waitFor } from './stream-kit';

const T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];
let server: ServerHandle | undefined;

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'stream-process-test' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await server?.stop();
  await deleteStreams(nats, created);
  await nats.close();
});

interface Running {
  child: ChildProcess;
  output: () => string;
  /** Resolves with the admin port and pipeline pid at the n-th 'pipeline ready' (1-based). */
  ready: (n?: number) => Promise<{ admin: number; pid: number }>;
  exited: Promise<number | null>;
}

function startStream(args: string[]): Running {
  const child = runCli(['stream', ...args]);
  children.push(child);
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const readies = () =>
    output
      .split('\n')
      .filter((l) => l.includes('"pipeline ready"') && l.includes('stream-supervisor'))
      .map((l) => JSON.parse(l) as { admin: number; pid: number });
  return {
    child,
    output: () => output,
    exited,
    ready: async (n = 1) => {
      await waitFor(
        `pipeline ready #${n}`,
        () => readies().length >= n || child.exitCode !== null,
        90_000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${output.slice(-3000)}`);
      });
      const r = readies()[n - 1];
      if (!r) throw new Error(`stream exited (${child.exitCode}):\n${output.slice(-3000)}`);
      return r;
    },
  };
}

function configFile(names: StreamNames, over: Record<string, unknown> = {}): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'stream-config-'));
  const file = path.join(dir, 'pipeline.json');
  writeFileSync(
    file,
    JSON.stringify({
      nats: NATS_URL,
      subjectRoot: names.tag,
      streams: { events: names.events, predictions: names.predictions, side: names.side },
      consumer: { durable: `${names.tag}_pipeline`, maxAckPending: 512, ackWaitMs: 5_000, batchSize: 64 },
      concurrency: 256,
      admin: { port: 0 },
      logLevel: 'info',
      ...over,
    }),
  );
  return file;
}

/** The delivery workload of these tests: one pickup and GPS points every 5 s, driving north. */
function workload(delivery: string, from: number, count: number): Array<{ payload: string; id: string }> {
  const out: Array<{ payload: string; id: string }> = [];
  if (from === 0)
    out.push({
      id: `st-${delivery}`,
      payload: JSON.stringify({
        event_id: `st-${delivery}`,
        delivery_id: delivery,
        event_time: iso(T0),
        type: 'status',
        status: 'picked_up',
        promised_time: iso(T0 + 12 * 60_000),
        dest_lat: 13.02,
        dest_lon: 77.5946,
        route_id: 'r1',
      }),
    });
  for (let i = from; i < from + count; i++) {
    const id = `${delivery}-g${i}`;
    out.push({
      id,
      payload: JSON.stringify({
        event_id: id,
        delivery_id: delivery,
        event_time: iso(T0 + (i + 1) * 5_000),
        type: 'gps',
        driver_lat: 12.9716 + i * 0.0002,
        driver_lon: 77.5946,
      }),
    });
  }
  return out;
}

async function publish(names: StreamNames, delivery: string, items: Array<{ payload: string; id: string }>) {
  for (const it of items)
    await nats.js.publish(keySubject(`${names.tag}.delivery.events`, delivery), it.payload, { msgID: it.id });
}

async function predictions(names: StreamNames): Promise<Prediction[]> {
  return (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
    m.json<Prediction>(),
  );
}

async function get(port: number, route: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${route}`);
  return { status: res.status, text: await res.text() };
}

function hasPromtool(): boolean {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('streaminfer stream (embedded, the shipped model)', () => {
  it('predicts, serves probes and metrics, reloads through the epoch barrier, survives kill -9, drains on SIGTERM', async () => {
    const names = uniqueNames('sp');
    created.push(names);
    // A model repository where delay-risk also has a version 2 (a copy of 1) to reload to.
    const models = modelsSubset([], ['delay-risk']);
    cpSync(path.join(MODELS_DIR, 'delay-risk', '1'), path.join(models, 'delay-risk', '2'), {
      recursive: true,
    });
    const file = configFile(names, { inference: { mode: 'embedded', modelsDir: models } });
    const stream = startStream(['--config', file]);
    const { admin, pid } = await stream.ready();

    await publish(names, 'd1', workload('d1', 0, 20));
    await waitFor('20 predictions', async () => (await predictions(names)).length >= 20, 30_000);
    const first = await predictions(names);
    expect(first.every((p) => p.version === '1' && p.epoch === 1 && p.risk >= 0 && p.risk <= 1)).toBe(true);

    const health = await get(admin, '/health');
    expect(health.status).toBe(200);
    expect(JSON.parse(health.text)).toMatchObject({
      state: 'running',
      consuming: true,
      epoch: 1,
      mode: 'embedded',
    });
    const metrics = await get(admin, '/metrics');
    expect(metrics.status).toBe(200);
    expect(lintExposition(metrics.text)).toEqual([]);
    for (const name of [
      'streaminfer_stream_freshness_seconds_bucket',
      'streaminfer_stream_consumer_pending_messages',
      'streaminfer_stream_watermark_lag_seconds',
      'streaminfer_stream_state_keys',
      'streaminfer_stream_inference_duration_seconds_bucket{le="0.001",mode="embedded"}',
      'streaminfer_stream_pinned_model_info{model="delay-risk",version="1"} 1',
    ])
      expect(metrics.text).toContain(name);
    expect(metrics.text).toMatch(/streaminfer_stream_predictions_total\{kind="first"\} 2\d/);
    if (hasPromtool()) execFileSync('promtool', ['check', 'metrics'], { input: metrics.text });
    expect((await get(admin, '/nope')).status).toBe(404);

    // streaminfer reload, as against a server: the epoch barrier pins version 2.
    const reload = await runCliToExit([
      'reload',
      '--url',
      `http://127.0.0.1:${admin}`,
      '--model',
      'delay-risk',
      '--version',
      '2',
    ]);
    expect(reload.out).toContain('epoch 1 -> 2');
    expect(reload.code).toBe(0);
    const bad = await runCliToExit([
      'reload',
      '--url',
      `http://127.0.0.1:${admin}`,
      '--model',
      'delay-risk',
      '--version',
      '7',
    ]);
    expect(bad.code).not.toBe(0);
    await publish(names, 'd1', workload('d1', 20, 10));
    await waitFor('30 predictions', async () => (await predictions(names)).length >= 30, 30_000);
    const after = (await predictions(names)).slice(20);
    expect(after.every((p) => p.version === '2' && p.epoch === 2)).toBe(true);

    // kill -9 the pipeline process: the supervisor restarts it, on the pinned version, in the same epoch.
    process.kill(pid, 'SIGKILL');
    const again = await stream.ready(2);
    expect(again.pid).not.toBe(pid);
    await publish(names, 'd1', workload('d1', 30, 10));
    // After a crash the keyed state starts empty (checkpoints are the next issue): events of d1 have no
    // pickup in the new state, so a fresh delivery shows the restarted pipeline predicting.
    await publish(names, 'd2', workload('d2', 0, 5));
    await waitFor(
      'd2 predictions',
      async () => (await predictions(names)).some((p) => p.event_id === 'd2-g4'),
      30_000,
    );
    const restarted = (await predictions(names)).filter((p) => p.event_id.startsWith('d2-'));
    expect(restarted.every((p) => p.version === '2' && p.epoch === 2)).toBe(true);
    const epochs = (await readStream(nats, names.predictions, `${names.tag}.delivery.epochs`)).map((m) =>
      m.json<{ epoch: number; version: string }>(),
    );
    expect(epochs.map((e) => [e.epoch, e.version])).toEqual([
      [1, '1'],
      [2, '2'],
    ]);

    stream.child.kill('SIGTERM');
    expect(await stream.exited).toBe(0);
    expect(stream.output()).toContain('pipeline stopped');
  }, 180_000);

  it('a bad config is refused before anything starts, with the setting named', async () => {
    const names = uniqueNames('spb');
    const file = configFile(names, { consumer: { maxAckPending: 10, batchSize: 64 } });
    const { code, out } = await runCliToExit(['stream', '--config', file]);
    expect(code).toBe(2);
    expect(out).toContain('consumer.batchSize');
  });
});

describe('streaminfer stream --mode external', () => {
  it('predicts through a serving cluster over WebSocket exactly what the embedded mode predicts', async () => {
    server = await startServer({ models: ['delay-risk'], env: { STREAMINFER_MODEL_NAME: 'delay-risk' } });
    const embeddedNames = uniqueNames('spee');
    const externalNames = uniqueNames('spex');
    created.push(embeddedNames, externalNames);
    const embedded = startStream(['--config', configFile(embeddedNames)]);
    const external = startStream([
      '--config',
      configFile(externalNames, { inference: { mode: 'external', url: server.wsUrl } }),
    ]);
    await Promise.all([embedded.ready(), external.ready()]);
    const items = workload('d1', 0, 40);
    await Promise.all([publish(embeddedNames, 'd1', items), publish(externalNames, 'd1', items)]);
    await waitFor(
      'both pipelines to predict',
      async () =>
        (await predictions(embeddedNames)).length >= 40 && (await predictions(externalNames)).length >= 40,
      60_000,
    );
    const byId = (ps: Prediction[]) => new Map(ps.map((p) => [`${p.event_id}:${p.revision}`, p.risk]));
    const a = byId(await predictions(embeddedNames));
    const b = byId(await predictions(externalNames));
    expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
    for (const [k, risk] of a) expect(b.get(k)).toBeCloseTo(risk, 6);
    embedded.child.kill('SIGTERM');
    external.child.kill('SIGTERM');
    expect(await embedded.exited).toBe(0);
    expect(await external.exited).toBe(0);
  }, 180_000);
});
