import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { generate, type LoadgenOptions } from '../../loadtest/harness/loadgen';
import { freePort } from '../../loadtest/harness/server-process';
import { mergePartials, type PartialResult } from '../../loadtest/harness/stats';

/**
 * A scripted WebSocket server: per request (conn = floor(id / 1e7), seq = id % 1e7)
 * - seq % 5 == 0 → error "overloaded"
 * - otherwise → ok, version "2" for odd conns, "1" for even
 * - after seq % 10 == 0 → also a {"type":"warning"} message
 * - conn 1, seq 3 → also an answer for an id nobody sent
 * - conn 2 → closed with 1013 when seq reaches 4 (before answering it)
 * - conn 3 → never answered
 */
async function scriptedServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  wss.on('connection', (ws) => {
    ws.on('message', (data) => {
      const req = JSON.parse(data.toString()) as { id: number };
      const conn = Math.floor(req.id / 1e7);
      const seq = req.id % 1e7;
      if (conn === 3) return;
      if (conn === 2 && seq >= 4) {
        ws.close(1013, 'slow consumer');
        return;
      }
      if (seq % 5 === 0) {
        ws.send(JSON.stringify({ id: req.id, type: 'error', code: 'overloaded', message: 'busy' }));
      } else {
        ws.send(
          JSON.stringify({
            id: req.id,
            model: 'echo',
            version: conn % 2 ? '2' : '1',
            result: [],
            latency_ms: 0,
          }),
        );
      }
      if (seq % 10 === 0) ws.send(JSON.stringify({ type: 'warning', code: 'consumer_falling_behind' }));
      if (conn === 1 && seq === 3)
        ws.send(JSON.stringify({ id: 999, model: 'echo', version: '1', result: [] }));
    });
  });
  const port = (wss.address() as AddressInfo).port;
  return {
    url: `ws://127.0.0.1:${port}/ws`,
    close: () => new Promise((r) => wss.close(() => r())),
  };
}

const META = {
  body: 'echo-floats',
  inFlightPerConnection: 1,
  ratePerConnection: null,
  warmupPerConnection: 0,
};

function merge(p: PartialResult, o: LoadgenOptions) {
  return mergePartials([p], { ...META, url: o.url, requestsPerConnection: o.requestsPerConnection });
}

describe('generate (load generator core)', () => {
  let server: { url: string; close: () => Promise<void> };
  beforeAll(async () => {
    server = await scriptedServer();
  });
  afterAll(async () => {
    await server.close();
  });

  it('counts ok/errors/warnings/versions and survives early closes and silent peers', async () => {
    const opts: LoadgenOptions = {
      url: server.url,
      connections: 4,
      requestsPerConnection: 20,
      body: 'echo-floats',
      timeLimitMs: 1500,
    };
    const r = merge(await generate(opts), opts);
    expect(r.connectionsOpened).toBe(4);
    // conn 0 and 1: 20 answers each, 4 of them errors (seq 5,10,15,20)
    // conn 2: seq 1..3 answered (0 errors), closed at seq 4 → 1 connection_closed, 16 never sent
    // conn 3: seq 1 sent, never answered → client_timeout, 19 never sent
    expect(r.ok).toBe(32 + 3);
    expect(r.errors).toEqual({ overloaded: 8, connection_closed: 1, client_timeout: 1 });
    expect(r.completed).toBe(43);
    expect(r.versions).toEqual({ '1': 16 + 3, '2': 16 });
    expect(r.warnings).toEqual({ consumer_falling_behind: 4 });
    expect(r.unmatched).toBe(1);
    expect(r.notSent).toBe(16 + 19);
    expect(r.sent).toBe(40 + 4 + 1);
    expect(r.stoppedBy).toBe('time_limit');
    expect(r.closes).toHaveLength(1);
    expect(r.closes[0]).toMatchObject({ conn: 2, code: 1013, reason: 'slow consumer', pending: 1 });
    expect(r.latencyMs.count).toBe(35);
    expect(r.durationMs).toBeGreaterThanOrEqual(1400);
  });

  it('excludes warm-up requests from the stats', async () => {
    const opts: LoadgenOptions = {
      url: server.url,
      connections: 2,
      requestsPerConnection: 4,
      warmupPerConnection: 5,
      body: 'echo-floats',
      timeLimitMs: 5000,
    };
    const r = merge(await generate(opts), opts);
    // warm-up is seq 1..5 (seq 5 answers "overloaded"); measured is seq 6..9, all ok
    expect(r.sent).toBe(8);
    expect(r.ok).toBe(8);
    expect(r.errorCount).toBe(0);
    expect(r.warmupErrors).toBe(2); // seq 5 on each connection
    expect(r.stoppedBy).toBe('completed');
  });

  it('keeps several requests in flight and paces by rate', async () => {
    const opts: LoadgenOptions = {
      url: server.url,
      connections: 2,
      requestsPerConnection: 10,
      inFlightPerConnection: 4,
      ratePerConnection: 100,
      body: 'echo-floats',
      timeLimitMs: 5000,
      recordSamples: true,
    };
    const r = merge(await generate(opts), opts);
    expect(r.sent).toBe(20);
    expect(r.ok).toBe(16);
    expect(r.errors).toEqual({ overloaded: 4 });
    // 10 requests at 100/s per connection take at least ~90 ms
    expect(r.durationMs).toBeGreaterThanOrEqual(80);
    expect(r.samples).toHaveLength(20);
  });

  it('reports connections that cannot open instead of crashing', async () => {
    const port = await freePort();
    const opts: LoadgenOptions = {
      url: `ws://127.0.0.1:${port}/ws`,
      connections: 3,
      requestsPerConnection: 5,
      body: 'echo-floats',
      timeLimitMs: 1000,
      connectTimeoutMs: 2000,
    };
    const r = merge(await generate(opts), opts);
    expect(r.connectionsOpened).toBe(0);
    expect(r.connectFailures).toHaveLength(3);
    expect(r.connectFailures[0]!.message).toMatch(/ECONNREFUSED/);
    expect(r.stoppedBy).toBe('no_connections');
    expect(r.notSent).toBe(15);
    expect(r.ok).toBe(0);
  });
});
