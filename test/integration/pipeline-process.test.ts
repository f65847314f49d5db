/**
 * `streaminfer pipeline` as a user runs it: the supervised pipeline process on the real broker with the
 * shipped delay-risk model (embedded), its probes, metrics and admin API, `streaminfer reload` through the
 * epoch barrier, a kill -9 of the pipeline process (the supervisor restarts it on the pinned version), SIGTERM;
 * and the external mode against a real server, which must predict exactly what the embedded mode does.
 */
import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { lintExposition } from '../../libs/metrics';
import { ODD_VALUE_TEXTS, ODD_VALUES, Random } from './fuzz-kit';
import { MODELS_DIR, modelsSubset, runCliToExit, type ServerHandle, startServer } from './harness';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  type PipelineCli,
  partitionsDrained,
  pickupThenGps,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from './pipeline-kit';

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];
let server: ServerHandle | undefined;

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-process-test' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await server?.stop();
  await deleteStreams(nats, created);
  await nats.close();
});

function startPipeline(args: string[]): PipelineCli {
  const stream = startPipelineCli(args);
  children.push(stream.child);
  return stream;
}

function configFile(names: StreamNames, over: Record<string, unknown> = {}): string {
  return writePipelineConfig(
    names,
    { maxAckPending: 512, ackWaitMs: 5_000, batchSize: 64 },
    {
      concurrency: 256,
      logLevel: 'info',
      checkpoint: { enabled: true, intervalMs: 1_000, bucket: `${names.tag}_ckpt` },
      ...over,
    },
  );
}

async function publish(names: StreamNames, delivery: string, items: Array<{ payload: string; id: string }>) {
  for (const it of items)
    await nats.js.publish(eventSubjectFor(names, delivery, 4), it.payload, { msgID: it.id });
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

/** The pipeline on a model repository where delay-risk also has a version 2 (a copy of 1) to reload to. */
async function startWithTwoVersions(names: StreamNames) {
  created.push(names);
  const models = modelsSubset([], ['delay-risk']);
  cpSync(path.join(MODELS_DIR, 'delay-risk', '1'), path.join(models, 'delay-risk', '2'), { recursive: true });
  const file = configFile(names, { inference: { mode: 'embedded', modelsDir: models } });
  const stream = startPipeline(['--config', file]);
  const { admin, pid } = await stream.ready();
  return { file, stream, admin, pid };
}

describe('streaminfer pipeline (embedded, the shipped model)', () => {
  it('predicts, serves probes and metrics, reloads through the epoch barrier, survives kill -9, drains on SIGTERM', async () => {
    const names = uniqueNames('sp');
    const { stream, admin, pid } = await startWithTwoVersions(names);

    await publish(names, 'd1', pickupThenGps('d1', 0, 20));
    await waitFor('20 predictions', async () => (await predictions(names)).length >= 20, 30_000);
    const first = await predictions(names);
    expect(first.every((p) => p.version === '1' && p.epoch === 1 && p.risk >= 0 && p.risk <= 1)).toBe(true);

    // 200 once every partition it owns consumes: d1's partition predicts while the others may still be
    // starting (each takes its lease, records its first checkpoint and opens its consumer in turn).
    await waitFor(
      'every partition consuming',
      async () => (await get(admin, '/health')).status === 200,
      15_000,
    );
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
    await publish(names, 'd1', pickupThenGps('d1', 20, 10));
    await waitFor('30 predictions', async () => (await predictions(names)).length >= 30, 30_000);
    const after = (await predictions(names)).slice(20);
    expect(after.every((p) => p.version === '2' && p.epoch === 2)).toBe(true);

    // kill -9 the pipeline process: the supervisor restarts it, on the pinned version, in the same epoch.
    process.kill(pid, 'SIGKILL');
    const again = await stream.ready(2);
    expect(again.pid).not.toBe(pid);
    await publish(names, 'd1', pickupThenGps('d1', 30, 10));
    // Checkpoints (on by default): the restarted process restored d1's state, so d1 goes on being predicted;
    // a fresh delivery is predicted too.
    await publish(names, 'd2', pickupThenGps('d2', 0, 5));
    await waitFor(
      'd1 and d2 predictions',
      async () => {
        const ids = new Set((await predictions(names)).map((p) => p.event_id));
        return ids.has('d1-g39') && ids.has('d2-g4');
      },
      30_000,
    );
    const continued = (await predictions(names)).filter((p) => /^d1-g(3\d)$/.test(p.event_id));
    expect(continued.length).toBe(10);
    expect(continued.every((p) => p.version === '2' && p.epoch === 2)).toBe(true);
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

  it('SIGHUP re-reads the config: a new version goes through the epoch barrier; hostile admin requests and event payloads never crash it', async () => {
    const names = uniqueNames('sph');
    const { file, stream, admin, pid } = await startWithTwoVersions(names);
    await publish(names, 'd1', pickupThenGps('d1', 0, 5));
    await waitFor('5 predictions', async () => (await predictions(names)).length >= 5, 30_000);

    const config = JSON.parse(readFileSync(file, 'utf8'));
    writeFileSync(file, JSON.stringify({ ...config, model: { name: 'delay-risk', version: '2' } }));
    stream.child.kill('SIGHUP');
    await waitFor('epoch 2', async () => JSON.parse((await get(admin, '/health')).text).epoch === 2, 30_000);
    await publish(names, 'd1', pickupThenGps('d1', 5, 5));
    await waitFor('10 predictions', async () => (await predictions(names)).length >= 10, 30_000);
    expect((await predictions(names)).slice(5).every((p) => p.version === '2' && p.epoch === 2)).toBe(true);
    // A config the pipeline refuses changes nothing.
    writeFileSync(file, '{"model": {"version": "../x"}}');
    stream.child.kill('SIGHUP');
    await waitFor('the refusal logged', () => stream.output().includes('config refused'), 10_000);
    expect(JSON.parse((await get(admin, '/health')).text).epoch).toBe(2);

    // Admin routes: random methods, paths (bad escapes, traversal, huge), bodies (odd JSON, garbage).
    const random = new Random(12);
    const paths = [
      '/health',
      '/ready',
      '/metrics',
      '/api/reload',
      '/api/pipeline',
      '/api/pause',
      '/api/resume',
      '/api/%',
      '/api/%E0%A4%A',
      '/../../etc/passwd',
      `/${'a'.repeat(5000)}`,
      '/api/reload?x=%zz',
      '//',
      '/api/',
    ];
    const methods = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'];
    const statuses = new Set<number>();
    for (let i = 0; i < 300; i++) {
      const route = random.pick(paths);
      const method = random.pick(methods);
      // Never a real pause or reload from the fuzzer: those routes get bodies only via POST with odd values.
      if (method === 'POST' && (route === '/api/pause' || route === '/api/resume')) continue;
      const body =
        method === 'GET' || method === 'HEAD'
          ? undefined
          : random.pick([
              ...ODD_VALUE_TEXTS,
              '{"version":',
              '\u0000',
              'x'.repeat(70_000),
              JSON.stringify({ version: random.pick(ODD_VALUES) }),
            ]);
      // JSON, as the admin listener requires of a body (without it: 415, before the body is read).
      const headers = body === undefined ? undefined : { 'content-type': 'application/json' };
      const res = await fetch(`http://127.0.0.1:${admin}${route}`, { method, body, headers });
      statuses.add(res.status);
      const text = await res.text();
      if (res.status >= 400 && method !== 'HEAD')
        expect(JSON.parse(text)).toMatchObject({ code: expect.any(String) });
      expect(res.status).toBeLessThan(500);
    }
    expect([...statuses].sort()).toEqual(expect.arrayContaining([200, 400, 404, 405]));

    // Hostile event payloads: random bytes, odd JSON, valid-looking events with odd field values.
    const hostile: string[] = [];
    for (let i = 0; i < 150; i++) {
      const kind = random.below(3);
      if (kind === 0) hostile.push(Buffer.from(random.bytes(random.below(200))).toString('latin1'));
      else if (kind === 1) hostile.push(random.pick(ODD_VALUE_TEXTS));
      else {
        const event: Record<string, unknown> = JSON.parse(pickupThenGps('d9', 0, 2)[2]!.payload);
        event[random.pick(Object.keys(event))] = random.pick(ODD_VALUES);
        event.event_id = `fz-${i}`;
        hostile.push(JSON.stringify(event));
      }
    }
    for (const [i, payload] of hostile.entries())
      await nats.js.publish(eventSubjectFor(names, 'd9', 4), payload, { msgID: `fz-${i}` });
    await waitFor('the hostile events settled', () => partitionsDrained(nats, names, 4), 30_000);
    const health = JSON.parse((await get(admin, '/health')).text);
    expect(health).toMatchObject({ state: 'running', consuming: true });
    expect(health.counts.invalid).toBeGreaterThan(100);
    const dlq = await readStream(nats, names.side, `${names.tag}.delivery.dlq`);
    expect(dlq.length).toBe(health.counts.invalid);
    expect(dlq.every((m) => /^\S+: /.test(m.json<{ reason: string }>().reason))).toBe(true);
    // Still the same pipeline process: nothing crashed it.
    expect(stream.output().match(/"pipeline process exited/g)).toBeNull();
    expect(() => process.kill(pid, 0)).not.toThrow();
    stream.child.kill('SIGTERM');
    expect(await stream.exited).toBe(0);
  }, 180_000);

  it('a bad config is refused before anything starts, with the setting named', async () => {
    const names = uniqueNames('spb');
    const file = configFile(names, { consumer: { maxAckPending: 10, batchSize: 64 } });
    const { code, out } = await runCliToExit(['pipeline', '--config', file]);
    expect(code).toBe(2);
    expect(out).toContain('consumer.batchSize');
  });
});

describe('streaminfer pipeline --mode external', () => {
  it('predicts through a server over WebSocket exactly what the embedded mode predicts', async () => {
    server = await startServer({ models: ['delay-risk'], env: { STREAMINFER_MODEL_NAME: 'delay-risk' } });
    const embeddedNames = uniqueNames('spee');
    const externalNames = uniqueNames('spex');
    created.push(embeddedNames, externalNames);
    const embedded = startPipeline(['--config', configFile(embeddedNames)]);
    const external = startPipeline([
      '--config',
      configFile(externalNames, { inference: { mode: 'external', url: server.wsUrl } }),
    ]);
    await Promise.all([embedded.ready(), external.ready()]);
    const items = pickupThenGps('d1', 0, 40);
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
