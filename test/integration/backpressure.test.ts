import type { Answer, ServerHandle } from './harness';
import { sleep, startServer, WsClient } from './harness';

async function metricValue(url: string, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return [...text.matchAll(new RegExp(`^${pattern.source}\\S* (\\S+)$`, 'gm'))].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

describe('per-client token bucket', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo', 'upper'],
      env: { STREAMINFER_RATE_LIMIT_RPS: '5', STREAMINFER_RATE_LIMIT_BURST: '5' },
    });
  });
  afterAll(async () => {
    await server.stop();
  });

  test('WebSocket: beyond the burst a client gets rate_limited with retry_after_ms; others are untouched', async () => {
    const greedy = await WsClient.connect(server.wsUrl);
    const polite = await WsClient.connect(server.wsUrl);
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => greedy.request({ id: i, model: 'upper', text: 'x' })),
    );
    const ok = answers.filter((a) => a.type !== 'error');
    const limited = answers.filter((a) => a.code === 'rate_limited');
    expect(ok).toHaveLength(5);
    expect(limited).toHaveLength(15);
    for (const answer of limited) {
      expect(answer.retry_after_ms).toBeGreaterThan(0);
      expect(answer.retry_after_ms).toBeLessThanOrEqual(200);
    }
    // Another connection has its own bucket.
    expect(await polite.request({ id: 'p', model: 'upper', text: 'fine' })).toMatchObject({ result: 'FINE' });
    // Waiting the advised time is enough.
    await sleep(Math.max(...limited.map((a) => a.retry_after_ms!)) + 5);
    expect(await greedy.request({ id: 'later', model: 'upper', text: 'ok' })).toMatchObject({ result: 'OK' });
    greedy.close();
    polite.close();
    expect(
      await metricValue(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="rate_limited"/),
    ).toBeGreaterThanOrEqual(15);
  });

  test('HTTP: an address beyond its rate gets 429 with Retry-After', async () => {
    const responses = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        fetch(`${server.url}/predict`, {
          method: 'POST',
          body: JSON.stringify({ id: i, model: 'upper', text: 'h' }),
        }),
      ),
    );
    const limited = responses.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThanOrEqual(7);
    for (const response of limited) {
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(await response.json()).toMatchObject({ type: 'error', code: 'rate_limited' });
    }
  });
});

describe('per-client in-flight cap, model queue bound, deadlines, priorities', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['bench'],
      args: ['--model', 'bench', '--workers', '1'],
      env: {
        STREAMINFER_MAX_QUEUE_SIZE: '10',
        STREAMINFER_MAX_MODEL_QUEUE: '24',
        STREAMINFER_BATCH_SIZE: '4',
      },
    });
  });
  afterAll(async () => {
    await server.stop();
  });
  const features = Array.from({ length: 256 }, (_, i) => (i % 17) / 4);

  test('past 80% of the cap one warning per episode; at the cap client_queue_full', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const answers = await Promise.all(
      Array.from({ length: 14 }, (_, i) => client.request({ id: i, input: features })),
    );
    const full = answers.filter((a) => a.code === 'client_queue_full');
    expect(full).toHaveLength(4);
    expect(answers.filter((a) => a.type !== 'error')).toHaveLength(10);
    const warnings = client.unmatched.filter(
      (m) => m.type === 'warning' && m.code === 'consumer_falling_behind',
    );
    expect(warnings).toHaveLength(1);
    client.close();
  });

  test('a full model queue sheds at once with overloaded and a Retry-After from the drain rate', async () => {
    const clients = await Promise.all(Array.from({ length: 5 }, () => WsClient.connect(server.wsUrl)));
    const started = Date.now();
    const answers: Answer[] = (
      await Promise.all(
        clients.map((client, c) =>
          Promise.all(
            Array.from({ length: 10 }, (_, i) => client.request({ id: c * 100 + i, input: features })),
          ),
        ),
      )
    ).flat();
    const shed = answers.filter((a) => a.code === 'overloaded');
    const ok = answers.filter((a) => a.type !== 'error');
    expect(shed.length).toBeGreaterThan(0);
    expect(ok.length).toBeGreaterThanOrEqual(24);
    expect(ok.length + shed.length).toBe(50);
    for (const answer of shed) {
      expect(answer.retry_after_ms).toBeGreaterThanOrEqual(10);
      expect(answer.retry_after_ms).toBeLessThanOrEqual(30000);
    }
    expect(Date.now() - started).toBeLessThan(20000);
    for (const client of clients) client.close();
    expect(await metricValue(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="model_queue_full"/)).toBe(
      shed.length,
    );
  });

  test('a request whose deadline passes in the queue is answered deadline_exceeded and never computed', async () => {
    const before = await metricValue(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="deadline"/);
    const batchesBefore = await metricValue(
      server.adminUrl,
      /streaminfer_batch_size_sum\{[^}]*model="bench"/,
    );
    const clients = await Promise.all(Array.from({ length: 2 }, () => WsClient.connect(server.wsUrl)));
    // 8 slow requests occupy the worker; then 4 with a 1 ms deadline queue behind them.
    const busy = Array.from({ length: 8 }, (_, i) => clients[0]!.request({ id: i, input: features }));
    await sleep(2);
    const hurried = await Promise.all(
      Array.from({ length: 4 }, (_, i) => clients[1]!.request({ id: i, input: features, deadline_ms: 1 })),
    );
    await Promise.all(busy);
    const expired = hurried.filter((a) => a.code === 'deadline_exceeded');
    expect(expired.length).toBeGreaterThan(0);
    expect(await metricValue(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="deadline"/)).toBe(
      before + expired.length,
    );
    // Items computed = the busy ones and the hurried ones that made it in time; the expired ones never ran.
    const computed =
      (await metricValue(server.adminUrl, /streaminfer_batch_size_sum\{[^}]*model="bench"/)) - batchesBefore;
    expect(computed).toBe(8 + (4 - expired.length));
    for (const client of clients) client.close();
  });

  test('batches are filled from higher priority first', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const order: string[] = [];
    const low = Array.from({ length: 16 }, (_, i) =>
      client
        .request({ id: `low-${i}`, input: features, priority: 'low' })
        .then((a) => order.push(String(a.id))),
    );
    await sleep(1);
    const high = Array.from({ length: 2 }, (_, i) =>
      client
        .request({ id: `high-${i}`, input: features, priority: 'high' })
        .then((a) => order.push(String(a.id))),
    );
    await Promise.all([...low, ...high]);
    // The first low batches may already be claimed; the high ones jump every low request still queued.
    const lastHigh = Math.max(order.indexOf('high-0'), order.indexOf('high-1'));
    expect(lastHigh).toBeLessThan(order.length - 4);
    expect(order.slice(lastHigh + 1).every((id) => id.startsWith('low-'))).toBe(true);
    client.close();
  });
});

describe('slow consumer', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo'],
      env: {
        STREAMINFER_SLOW_CONSUMER_WARN_BYTES: '262144',
        STREAMINFER_SLOW_CONSUMER_CLOSE_BYTES: '1048576',
      },
    });
  });
  afterAll(async () => {
    await server.stop();
  });

  test('a client that stops reading is warned, then closed with 1013; others carry on', async () => {
    const slow = await WsClient.connect(server.wsUrl);
    const normal = await WsClient.connect(server.wsUrl);
    const tcp = (slow.socket as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    tcp.pause();
    const input = Array.from({ length: 4096 }, (_, i) => i + 0.5);
    const frame = JSON.stringify({ id: 0, model: 'echo', input });
    // ~40 KB answers; far more than socket buffers hold.
    for (let i = 0; i < 600; i++) slow.socket.send(frame);
    for (let i = 0; i < 20; i++)
      expect(await normal.request({ id: i, model: 'echo', input: [i] })).toMatchObject({ result: [i] });
    await sleep(1500);
    tcp.resume();
    const closed = await slow.closed;
    expect(closed.code).toBe(1013);
    expect(await normal.request({ id: 'after', model: 'echo', input: [1] })).toMatchObject({ result: [1] });
    normal.close();
    const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(text).toMatch(/streaminfer_slow_consumer_closes_total 1/);
    expect(text).toMatch(/streaminfer_shed_total\{[^}]*reason="slow_consumer"\} 1/);
  });
});
