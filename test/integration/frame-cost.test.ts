/**
 * Every frame costs: frames are charged to the rate limit
 * before they are decoded, identical id-less errors are coalesced, a connection that keeps violating the
 * protocol is closed with 1008, WebSocket upgrades are capped per node and per client address, a rate limit
 * can belong to an address instead of a connection, and behind trusted proxies the address is the rightmost
 * untrusted X-Forwarded-For hop.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import WebSocket from 'ws';
import type { Answer, ServerHandle } from './harness';
import { modelsSubset, sleep, startServer, WsClient } from './harness';

async function metricSum(url: string, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return [...text.matchAll(new RegExp(`^${pattern.source}\\S* (\\S+)$`, 'gm'))].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

/** A raw client that records every answer and how it was closed. */
class RawClient {
  readonly answers: Answer[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data) => this.answers.push(JSON.parse(data.toString()) as Answer));
    this.closed = new Promise((resolve) =>
      socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  static open(url: string, forwardedFor?: string): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(
        url,
        forwardedFor === undefined ? {} : { headers: { 'x-forwarded-for': forwardedFor } },
      );
      socket.once('open', () => resolve(new RawClient(socket)));
      socket.once('error', reject);
    });
  }

  async answersAtLeast(count: number, timeoutMs = 5000): Promise<Answer[]> {
    const until = Date.now() + timeoutMs;
    while (this.answers.length < count && Date.now() < until) await sleep(5);
    return this.answers;
  }

  async close(): Promise<void> {
    this.socket.close();
    await this.closed;
    // Let the server see the close before the next upgrade is counted.
    await sleep(50);
  }
}

/** An upgrade the server refuses: its status, Retry-After and JSON body. */
function refusedUpgrade(
  url: string,
  forwardedFor: string,
): Promise<{ status: number; retryAfter: string | undefined; body: Answer }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers: { 'x-forwarded-for': forwardedFor } });
    socket.once('open', () => {
      socket.close();
      reject(new Error(`upgrade for ${forwardedFor} was accepted`));
    });
    socket.once('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          retryAfter: response.headers['retry-after'] as string | undefined,
          body: JSON.parse(text) as Answer,
        }),
      );
    });
    socket.once('error', () => {});
  });
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    promise,
    sleep(ms).then(() => {
      throw new Error(`${what} within ${ms} ms`);
    }),
  ]);
}

describe('a connection that floods malformed frames', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo', 'upper'],
      env: {
        STREAMINFER_RATE_LIMIT_RPS: '100',
        STREAMINFER_MAX_PROTOCOL_ERRORS_PER_SECOND: '50',
        STREAMINFER_ERROR_COALESCE_MS: '1000',
      },
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('1-byte text frames: closed with 1008 after ~50, answered once, while a victim is served', async () => {
    const victim = await WsClient.connect(server.wsUrl);
    const attacker = await RawClient.open(server.wsUrl);
    const FLOOD = 20_000;
    for (let i = 0; i < FLOOD; i++) attacker.socket.send('x');
    const victimAnswers = Promise.all(
      Array.from({ length: 30 }, (_, i) => victim.request({ id: i, model: 'upper', text: `v${i}` })),
    );
    const closed = await withTimeout(attacker.closed, 5000, 'no 1008 close');
    expect(closed.code).toBe(1008);
    expect(closed.reason).toMatch(/protocol errors/);
    // Coalesced: the id-less bad_request is answered once, not once per frame.
    expect(attacker.answers.length).toBeLessThanOrEqual(2);
    expect(attacker.answers[0]).toMatchObject({ id: null, type: 'error', code: 'bad_request' });
    for (const [i, answer] of (await victimAnswers).entries())
      expect(answer).toMatchObject({ id: i, result: `V${i}` });
    // Bounded: the node decoded at most the 51 frames it took to decide, not the flood.
    const decoded = await metricSum(server.adminUrl, /streaminfer_requests_total\{[^}]*code="bad_request"/);
    expect(decoded).toBeGreaterThanOrEqual(51);
    expect(decoded).toBeLessThanOrEqual(60);
    expect(
      await metricSum(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="protocol_violation"/),
    ).toBeGreaterThanOrEqual(1);
    victim.close();
  });

  test('identical id-less errors are answered once per window, with the count of those suppressed', async () => {
    const client = await RawClient.open(server.wsUrl);
    const started = Date.now();
    for (let i = 0; i < 30; i++) client.socket.send('x');
    // A readable id is never coalesced: it gets its own answer.
    client.socket.send(JSON.stringify({ id: 'own', model: 'nope', input: [1] }));
    await client.answersAtLeast(2);
    await sleep(200);
    expect(client.answers).toHaveLength(2);
    expect(client.answers[0]).toMatchObject({ id: null, code: 'bad_request' });
    expect(client.answers[0]!).not.toHaveProperty('suppressed');
    expect(client.answers[1]).toMatchObject({ id: 'own', code: 'unknown_model' });
    await sleep(Math.max(0, started + 1100 - Date.now()));
    client.socket.send('x');
    await client.answersAtLeast(3);
    expect(client.answers[2]).toMatchObject({ id: null, code: 'bad_request', suppressed: 29 });
    await client.close();
  });
});

describe('a connection that keeps sending past its rate limit', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo', 'upper'],
      env: {
        STREAMINFER_RATE_LIMIT_RPS: '50',
        STREAMINFER_RATE_LIMIT_BURST: '50',
        STREAMINFER_MAX_RATE_LIMITED_PER_SECOND: '200',
      },
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('valid frames with ids far past the bucket: closed with 1008, not answered one by one', async () => {
    const victim = await WsClient.connect(server.wsUrl);
    const attacker = await RawClient.open(server.wsUrl);
    const FLOOD = 20_000;
    for (let i = 0; i < FLOOD; i++) attacker.socket.send(`{"id":${i},"model":"upper","text":"a"}`);
    const victimAnswers = Promise.all(
      Array.from({ length: 30 }, (_, i) => victim.request({ id: i, model: 'upper', text: `v${i}` })),
    );
    const closed = await withTimeout(attacker.closed, 5000, 'no 1008 close');
    expect(closed.code).toBe(1008);
    expect(closed.reason).toMatch(/rate limit/);
    // At most the burst is served (its answers may still be in the worker when the connection closes: those
    // are dropped), and at most the 200 refusals of one second are answered before the close.
    const served = attacker.answers.filter((answer) => answer.type !== 'error');
    const refused = attacker.answers.filter((answer) => answer.code === 'rate_limited');
    expect(served.length).toBeLessThanOrEqual(60);
    expect(refused.length).toBeLessThanOrEqual(201);
    expect(served.length + refused.length).toBe(attacker.answers.length);
    const computed = await metricSum(
      server.url,
      /streaminfer_requests_total\{[^}]*model="upper"[^}]*code="ok"/,
    );
    expect(computed).toBeLessThanOrEqual(60 + 30);
    for (const [i, answer] of (await victimAnswers).entries())
      expect(answer).toMatchObject({ id: i, result: `V${i}` });
    expect(
      await metricSum(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="rate_limit_violation"/),
    ).toBe(1);
    victim.close();
  });

  test('a client at 3× its limit that reads its refusals stays connected', async () => {
    const client = await RawClient.open(server.wsUrl);
    // 150 frames per second for 2 s: 100 refusals a second, under the 200 that close a connection.
    for (let tick = 0; tick < 20; tick++) {
      for (let i = 0; i < 15; i++) client.socket.send(`{"id":"${tick}-${i}","model":"upper","text":"a"}`);
      await sleep(100);
    }
    await client.answersAtLeast(300);
    expect(client.answers).toHaveLength(300);
    expect(client.socket.readyState).toBe(WebSocket.OPEN);
    await client.close();
  });
});

describe('budgets per address, caps, trusted proxies', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo', 'upper'],
      env: {
        STREAMINFER_TRUSTED_PROXIES: '127.0.0.1/32,10.0.0.0/8',
        STREAMINFER_RATE_LIMIT_KEY: 'ip',
        STREAMINFER_RATE_LIMIT_RPS: '3',
        STREAMINFER_RATE_LIMIT_BURST: '3',
        STREAMINFER_MAX_CONNECTIONS: '3',
        STREAMINFER_MAX_CONNECTIONS_PER_IP: '2',
        STREAMINFER_MAX_PROTOCOL_ERRORS_PER_SECOND: '1000',
      },
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('unknown-model requests are charged to the bucket: rate_limited after the burst, valid ones too', async () => {
    const client = await RawClient.open(server.wsUrl, '198.51.100.10');
    for (let i = 0; i < 6; i++) client.socket.send(JSON.stringify({ id: i, model: 'nope', input: [1] }));
    client.socket.send(JSON.stringify({ id: 'valid', model: 'echo', input: [1] }));
    const answers = await client.answersAtLeast(7);
    expect(answers.map((a) => [a.id, a.code])).toEqual([
      [0, 'unknown_model'],
      [1, 'unknown_model'],
      [2, 'unknown_model'],
      [3, 'rate_limited'],
      [4, 'rate_limited'],
      [5, 'rate_limited'],
      ['valid', 'rate_limited'],
    ]);
    expect(answers[3]!.retry_after_ms).toBeGreaterThan(0);
    await client.close();
  });

  test('keyed by address: two connections from one client share one budget (HTTP too)', async () => {
    const a = await RawClient.open(server.wsUrl, '198.51.100.11');
    const b = await RawClient.open(server.wsUrl, '198.51.100.11');
    for (let i = 0; i < 3; i++) {
      a.socket.send(JSON.stringify({ id: `a${i}`, model: 'echo', input: [i] }));
      b.socket.send(JSON.stringify({ id: `b${i}`, model: 'echo', input: [i] }));
    }
    await a.answersAtLeast(3);
    await b.answersAtLeast(3);
    const all = [...a.answers, ...b.answers];
    expect(all).toHaveLength(6);
    expect(all.filter((answer) => answer.type !== 'error')).toHaveLength(3);
    expect(all.filter((answer) => answer.code === 'rate_limited')).toHaveLength(3);
    const http = await fetch(`${server.url}/predict`, {
      method: 'POST',
      headers: { 'x-forwarded-for': '198.51.100.11' },
      body: JSON.stringify({ id: 'h', model: 'echo', input: [1] }),
    });
    expect(http.status).toBe(429);
    await a.close();
    await b.close();
  });

  test('upgrades past maxConnectionsPerIp get 429, past maxConnections 503; a spoofed first hop changes nothing', async () => {
    const a1 = await RawClient.open(server.wsUrl, '9.9.9.1, 198.51.100.20');
    const a2 = await RawClient.open(server.wsUrl, '9.9.9.2, 198.51.100.20');
    const perIp = await refusedUpgrade(server.wsUrl, '9.9.9.3, 198.51.100.20');
    expect(perIp.status).toBe(429);
    expect(Number(perIp.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(perIp.body).toMatchObject({ type: 'error', code: 'rate_limited' });
    expect(perIp.body.message).toMatch(/2 WebSocket connections/);
    const b1 = await RawClient.open(server.wsUrl, '198.51.100.21, 10.0.0.7');
    const node = await refusedUpgrade(server.wsUrl, '198.51.100.22');
    expect(node.status).toBe(503);
    expect(Number(node.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(node.body).toMatchObject({ type: 'error', code: 'overloaded' });
    expect(await metricSum(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="connection_cap_ip"/)).toBe(
      1,
    );
    expect(await metricSum(server.adminUrl, /streaminfer_shed_total\{[^}]*reason="connection_cap"/)).toBe(1);
    // Closing one frees its place.
    await a1.close();
    const a3 = await RawClient.open(server.wsUrl, '198.51.100.20');
    for (const client of [a2, b1, a3]) await client.close();
  });

  test('HTTP behind a trusted proxy: the rightmost untrusted hop is the client, whatever the first hop says', async () => {
    const post = (forwardedFor: string): Promise<number> =>
      fetch(`${server.url}/predict`, {
        method: 'POST',
        headers: { 'x-forwarded-for': forwardedFor },
        body: JSON.stringify({ id: 1, model: 'echo', input: [1] }),
      }).then(async (response) => {
        await response.text();
        return response.status;
      });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push(await post(`203.0.113.${i}, 198.51.100.30, 10.0.0.9`));
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    // Another client behind the same proxies has its own budget.
    expect(await post('203.0.113.1, 198.51.100.31, 10.0.0.9')).toBe(200);
  });
});

describe('configuration reload', () => {
  test('SIGHUP applies trusted proxies, the caps and the protocol-error limit, on open connections too', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-frame-cost-'));
    const configFile = path.join(dir, 'config.json');
    const base = { modelsDir: modelsSubset(['echo']), rateLimitRps: 0, maxProtocolErrorsPerSecond: 0 };
    writeFileSync(configFile, JSON.stringify(base));
    const server = await startServer({
      args: ['--config', configFile],
      env: { STREAMINFER_RATE_LIMIT_RPS: '' },
    });
    try {
      const lastReload = async (): Promise<{ id: number; ok?: boolean; settings_applied?: string[] }> =>
        (await (await fetch(`${server.adminUrl}/api/reload`)).json()) as { id: number };
      const open = await RawClient.open(server.wsUrl, '198.51.100.40');
      const first = (await lastReload()).id;
      writeFileSync(
        configFile,
        JSON.stringify({
          ...base,
          trustedProxies: '127.0.0.1/32',
          maxConnectionsPerIp: 1,
          maxProtocolErrorsPerSecond: 5,
        }),
      );
      process.kill(server.pid, 'SIGHUP');
      let hup = await lastReload();
      while (hup.id === first) {
        await sleep(50);
        hup = await lastReload();
      }
      expect(hup.ok).toBe(true);
      expect(new Set(hup.settings_applied)).toEqual(
        new Set(['trustedProxies', 'maxConnectionsPerIp', 'maxProtocolErrorsPerSecond']),
      );
      // The connection opened before the reload was counted under the peer (127.0.0.1): proxies were not
      // trusted yet. Two connections for one proxied client: the second is refused.
      const a = await RawClient.open(server.wsUrl, '198.51.100.41');
      expect((await refusedUpgrade(server.wsUrl, '203.0.113.9, 198.51.100.41')).status).toBe(429);
      // The open connection now closes at 6 protocol errors in a second.
      for (let i = 0; i < 10; i++) open.socket.send('x');
      expect((await withTimeout(open.closed, 5000, 'no 1008 close')).code).toBe(1008);
      await a.close();
    } finally {
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    }
  });
});
