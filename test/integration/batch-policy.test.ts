import type { ServerHandle } from './harness';
import { sleep, startServer, WsClient } from './harness';

const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 17) / 4);
const PIXELS = Array.from({ length: 64 }, (_, i) => (i * 5) % 17);

/** The value of one series, or undefined when the text has no such series. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((entry) => entry.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const BENCH = 'model="bench",version="1"';

describe('batch policy state on /metrics', () => {
  let server: ServerHandle | undefined;
  afterEach(async () => {
    if (server) expect(await server.stop()).toEqual({ code: 0, signal: null });
    server = undefined;
  });

  test('bench declares an objective and batches adaptively: its learned model, rate, target and wait', async () => {
    server = await startServer({ models: ['bench'], args: ['--model', 'bench'] });
    const url = server.adminUrl;
    const clients = await Promise.all(Array.from({ length: 8 }, () => WsClient.connect(server!.wsUrl)));
    let answered = 0;
    let running = true;
    const loops = clients.map(async (client, c) => {
      for (let i = 0; running; i++) {
        const answer = await client.request({ id: `${c}-${i}`, input: FEATURES });
        expect(answer.code).toBeUndefined();
        answered++;
      }
    });
    // Closed loop, 8 in flight: measure the served rate over a window after a warm-up, scrape inside it.
    await sleep(1500);
    const from = answered;
    const started = Date.now();
    await sleep(2000);
    const text = await (await fetch(`${url}/metrics`)).text();
    const servedRate = (answered - from) / ((Date.now() - started) / 1000);
    running = false;
    await Promise.all(loops);
    for (const client of clients) client.close();

    const a = sample(text, 'streaminfer_batch_cost_intercept_seconds', BENCH);
    const b = sample(text, 'streaminfer_batch_cost_per_item_seconds', BENCH);
    const rate = sample(text, 'streaminfer_batch_arrival_rate', BENCH);
    const target = sample(text, 'streaminfer_batch_target_size', BENCH);
    const wait = sample(text, 'streaminfer_batch_wait_seconds', BENCH);
    console.log(
      `bench under 8 closed-loop clients: served ${servedRate.toFixed(0)} items/s; gauges a=${a} s, b=${b} s/item, ` +
        `arrival rate=${rate} items/s, target=${target}, wait=${wait} s`,
    );
    // a cost model exists only under adaptive: the objective made it the policy
    expect(a).toBeGreaterThan(0);
    expect(a).toBeLessThan(1);
    // b may fit to 0: batches of 6–8 under this load barely separate a from b (the model keeps b >= 0)
    expect(b).toBeGreaterThanOrEqual(0);
    expect(b).toBeLessThan(0.1);
    expect(rate).toBeGreaterThan(servedRate / 3);
    expect(rate).toBeLessThan(servedRate * 3);
    expect(target).toBeGreaterThanOrEqual(1);
    expect(target).toBeLessThanOrEqual(64);
    expect(wait).toBeGreaterThanOrEqual(0);
    expect(wait).toBeLessThanOrEqual(0.05); // max_queue_delay_ms
    expect(server.logs()).toMatch(
      /batch cost model fit changed.*"model":"bench"|"model":"bench".*batch cost model fit changed/,
    );
  }, 60_000);

  test('an explicit --batch-policy overrides the model objective: fixed has no cost model, targets its max', async () => {
    server = await startServer({
      models: ['digits'],
      args: ['--model', 'digits', '--batch-policy', 'fixed'],
    });
    const client = await WsClient.connect(server.wsUrl);
    for (let i = 0; i < 5; i++) expect((await client.request({ id: i, input: PIXELS })).code).toBeUndefined();
    client.close();
    const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
    const labels = 'model="digits",version="2"';
    expect(sample(text, 'streaminfer_batch_target_size', labels)).toBe(64);
    expect(sample(text, 'streaminfer_batch_cost_intercept_seconds', labels)).toBeUndefined();
  }, 60_000);
});
