/**
 * The stream pipeline's external inference mode against the real server (1 node, delay-risk v1) with a
 * small per-client in-flight cap and a tight per-client rate limit, so shedding really happens; and through
 * a TCP proxy that cuts the connections mid-flight.
 */
import * as net from 'node:net';
import { ExternalInferenceError } from '../../apps/pipeline/inference/errors';
import type { ExternalBackend, ExternalBackendOptions } from '../../apps/pipeline/inference/external';
import { createExternalBackend } from '../../apps/pipeline/inference/external';
import type { ServerHandle } from './harness';
import { postJson, sleep, startServer } from './harness';

const PIN = { model: 'delay-risk', version: '1' };
const SERVER_INFLIGHT_CAP = 4;
const SERVER_RATE_RPS = 400;

/** Plausible delay-risk feature rows: speed km/h, km left, stops, traffic alerts, minutes to promise. */
const ROWS = Array.from({ length: 40 }, (_, i) =>
  Float32Array.from([(i * 7) % 60, ((i * 13) % 100) / 10, i % 5, i % 3, ((i * 11) % 50) - 10]),
);

let server: ServerHandle;
/** The server's HTTP answer for each row of ROWS. */
let expected: number[];

/** POST /predict, waiting out the (tight) rate limit the HTTP client shares with everyone on 127.0.0.1. */
async function httpPredict(row: Float32Array): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const response = await postJson(`${server.url}/predict`, { ...PIN, input: Array.from(row) });
    // JSON prints a float32 output as its shortest decimal: the float32 it names is the prediction.
    if (response.status === 200) return Math.fround((response.body.result as number[])[0]!);
    if (response.status !== 429) throw new Error(`HTTP ${response.status}: ${JSON.stringify(response.body)}`);
    await sleep(20);
  }
  throw new Error('HTTP predict kept being shed');
}

const backends: ExternalBackend[] = [];
async function open(url: string, options: Partial<ExternalBackendOptions> = {}): Promise<ExternalBackend> {
  const backend = await createExternalBackend({
    url,
    connections: 2,
    maxInflight: 16,
    backoff: { baseMs: 5, maxMs: 250 },
    maxAttempts: 200,
    ...options,
  });
  backends.push(backend);
  return backend;
}

beforeAll(async () => {
  server = await startServer({
    models: ['delay-risk'],
    args: ['--nodes', '1'],
    env: {
      STREAMINFER_MODEL_NAME: 'delay-risk',
      STREAMINFER_MAX_QUEUE_SIZE: String(SERVER_INFLIGHT_CAP),
      STREAMINFER_RATE_LIMIT_RPS: String(SERVER_RATE_RPS),
      STREAMINFER_RATE_LIMIT_BURST: '20',
    },
  });
  expected = [];
  for (const row of ROWS) expected.push(await httpPredict(row));
}, 60_000);

afterEach(async () => {
  await Promise.all(backends.splice(0).map((backend) => backend.close()));
});

afterAll(async () => {
  await server?.stop();
});

describe('external inference against a real server', () => {
  test('prepare accepts the served version and rejects an unknown version or model, typed', async () => {
    const backend = await open(server.wsUrl);
    await expect(backend.prepare(PIN)).resolves.toBeUndefined();
    const version = await backend
      .prepare({ model: 'delay-risk', version: '9' })
      .catch((error: unknown) => error);
    expect(version).toBeInstanceOf(ExternalInferenceError);
    expect(version).toMatchObject({ code: 'not_served', serverCode: 'unknown_version' });
    const model = await backend.prepare({ model: 'nope', version: '1' }).catch((error: unknown) => error);
    expect(model).toMatchObject({ code: 'not_served', serverCode: 'unknown_model' });
    // An unknown model in predict is final, not retried.
    const predicted = await backend
      .predict({ model: 'nope', version: '1' }, ROWS[0]!)
      .catch((error: unknown) => error);
    expect(predicted).toMatchObject({ code: 'rejected', serverCode: 'unknown_model' });
  });

  test('predictions equal the server HTTP answers, over binary frames (prepared) and JSON (not)', async () => {
    const binary = await open(server.wsUrl, { frames: 'binary' });
    await binary.prepare(PIN);
    const json = await open(server.wsUrl);
    const viaBinary = await Promise.all(ROWS.map((row) => binary.predict(PIN, row)));
    const viaJson = await Promise.all(ROWS.map((row) => json.predict(PIN, row)));
    expect(viaBinary).toEqual(expected);
    expect(viaJson).toEqual(expected);
    expect(new Set(expected).size).toBeGreaterThan(10);
  });

  test('2,000 concurrent predicts under a cap of 4 in flight and 400 rps per connection: all answered, none lost', async () => {
    const backend = await open(server.wsUrl);
    await backend.prepare(PIN);
    const started = performance.now();
    const results = await Promise.all(
      Array.from({ length: 2000 }, (_, i) => backend.predict(PIN, ROWS[i % ROWS.length]!)),
    );
    const seconds = (performance.now() - started) / 1000;
    results.forEach((value, i) => expect(value).toBe(expected[i % ROWS.length]));
    const retries = Object.values(backend.stats.retries).reduce((sum, n) => sum + n, 0);
    // 16 in flight over 2 connections is 8 a connection, over the server's 4: it sheds, and so does the rate.
    expect(backend.stats.retries.client_queue_full).toBeGreaterThan(0);
    expect(backend.stats.retries.rate_limited).toBeGreaterThan(0);
    expect(backend.stats.answered).toBe(2000);
    expect(backend.stats.failed).toBe(0);
    expect(backend.inflight).toBe(0);
    console.log(
      `2000 predicts in ${seconds.toFixed(2)} s (${Math.round(2000 / seconds)}/s, 2 × ${SERVER_RATE_RPS} rps allowed); ` +
        `${backend.stats.sent} frames sent, retries ${retries} ${JSON.stringify(backend.stats.retries)}`,
    );
  }, 60_000);

  test('connections cut mid-flight (TCP proxy): they reconnect, in-flight ids are re-sent, each answered once', async () => {
    const proxy = await cuttableProxy(server.port);
    try {
      const backend = await open(`ws://127.0.0.1:${proxy.port}/ws`, { maxInflight: 8 });
      await backend.prepare(PIN);
      const counts = new Array<number>(1000).fill(0);
      let answered = 0;
      let inflightAtCut = 0;
      const cut = new Promise<void>((resolve) => {
        const poll = setInterval(() => {
          if (answered < 300) return;
          clearInterval(poll);
          inflightAtCut = backend.inflight;
          proxy.cutAll();
          resolve();
        }, 1);
      });
      const results = await Promise.all(
        Array.from({ length: 1000 }, (_, i) =>
          backend.predict(PIN, ROWS[i % ROWS.length]!).then((value) => {
            counts[i]!++;
            answered++;
            return value;
          }),
        ),
      );
      await cut;
      results.forEach((value, i) => expect(value).toBe(expected[i % ROWS.length]));
      expect(counts.every((count) => count === 1)).toBe(true);
      expect(inflightAtCut).toBeGreaterThan(0);
      expect(proxy.cuts).toBeGreaterThanOrEqual(2);
      expect(backend.stats.resent).toBeGreaterThan(0);
      expect(backend.stats.reconnects).toBeGreaterThanOrEqual(2);
      expect(backend.stats.answered).toBe(1000);
    } finally {
      await proxy.close();
    }
  }, 60_000);
});

/** A TCP pass-through to the server whose open connections a test can cut at once. */
async function cuttableProxy(
  targetPort: number,
): Promise<{ port: number; cuts: number; cutAll: () => void; close: () => Promise<void> }> {
  const pairs = new Set<[net.Socket, net.Socket]>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream).pipe(client);
    const drop = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const handle = {
    port: (server.address() as net.AddressInfo).port,
    cuts: 0,
    cutAll: () => {
      for (const [client, upstream] of [...pairs]) {
        handle.cuts++;
        client.destroy();
        upstream.destroy();
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        handle.cutAll();
        server.close(() => resolve());
      }),
  };
  return handle;
}
