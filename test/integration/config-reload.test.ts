/**
 * A configuration reload (SIGHUP, then `streaminfer reload --config`) applies every live setting on every node
 * of a 2-node server — batch size, payload limit, rate limit, log level — to connections already open, keeps
 * command-line flags winning over the file, and names the settings that need a restart.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { modelsSubset, runCliToExit, sleep, startServer, WsClient } from './harness';

interface Outcome {
  id: number;
  ok?: boolean;
  result?: string;
  settings_applied?: string[];
  restart_required?: string[];
  nodes?: Array<{ node: number; state: string }>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject()));
    });
  });
}

/** Sums a histogram's `_count` and its le="1" bucket for one model. */
function batchHistogram(metrics: string, model: string): { count: number; ones: number } {
  let count = 0;
  let ones = 0;
  for (const line of metrics.split('\n')) {
    if (!line.includes(`model="${model}"`)) continue;
    const value = Number(line.split(' ').pop());
    if (line.startsWith('streaminfer_batch_size_count')) count += value;
    else if (line.startsWith('streaminfer_batch_size_bucket') && line.includes('le="1"')) ones += value;
  }
  return { count, ones };
}

describe('configuration reload on a 2-node server', () => {
  test('SIGHUP and `reload --config` apply live settings on every node; restart-only ones are named', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-config-'));
    const configFile = path.join(dir, 'config.json');
    const port = await freePort();
    const base = {
      port,
      host: '127.0.0.1',
      adminPort: 0,
      nodes: 2,
      modelsDir: modelsSubset(['echo']),
      stateDir: path.join(dir, 'state'),
      batchPolicy: 'fixed',
      // Lanes are loaded with buffers for batches of 2: growing to 16 later needs new ones.
      batchSize: 2,
      batchTimeoutMs: 30,
      maxPayloadBytes: 1024 * 1024,
      rateLimitRps: 0,
      logLevel: 'info',
    };
    writeFileSync(configFile, JSON.stringify(base));
    // A flag given at start keeps winning over the file on every reload.
    const server = await startServer({
      args: ['--config', configFile, '--max-queue-size', '500'],
      addressFromConfig: true,
      env: { STREAMINFER_RATE_LIMIT_RPS: '', STREAMINFER_TEST_HOOKS: '', STREAMINFER_STATE_DIR: '' },
      timeoutMs: 30000,
    });
    const child = server.child;
    // The admin listener: reloads, their outcomes and /metrics.
    const url = server.adminUrl;
    const clients: WsClient[] = [];
    try {
      const lastReload = async (): Promise<Outcome> =>
        (await (await fetch(`${url}/api/reload`)).json()) as Outcome;

      // Connections on both nodes (the kernel spreads them; /health counts them per node).
      for (let i = 0; i < 64; i++) {
        clients.push(await WsClient.connect(`ws://127.0.0.1:${port}/ws`));
        if (clients.length < 4) continue;
        const health = (await (await fetch(`${url}/health`)).json()) as {
          nodes: Array<{ ws_connections: number }>;
        };
        if (health.nodes.every((node) => node.ws_connections >= 2)) break;
      }
      let id = 0;
      const burst = (client: WsClient, n: number, text = 'hi') =>
        Promise.all(Array.from({ length: n }, () => client.request({ id: id++, text })));
      const big = 'x'.repeat(3000);

      // Before: batches of several, a 3 kB request is fine, no rate limit.
      const m0 = batchHistogram(await (await fetch(`${url}/metrics`)).text(), 'echo');
      const before = (await Promise.all(clients.map((client) => burst(client, 8, big)))).flat();
      expect(before.every((answer) => answer.type !== 'error')).toBe(true);
      const m1 = batchHistogram(await (await fetch(`${url}/metrics`)).text(), 'echo');
      expect(m1.count - m0.count).toBeLessThan(before.length);

      // SIGHUP with batch size 1, a 2 kB payload limit, the queue size the flag masks, and two restart-only changes.
      const first = (await lastReload()).id;
      writeFileSync(
        configFile,
        JSON.stringify({
          ...base,
          batchSize: 1,
          maxPayloadBytes: 2048,
          maxQueueSize: 1,
          workers: 2,
          port: port + 1,
        }),
      );
      process.kill(child.pid!, 'SIGHUP');
      let hup = await lastReload();
      while (hup.id === first) {
        await sleep(50);
        hup = await lastReload();
      }
      expect(hup).toMatchObject({
        ok: true,
        result: 'committed',
        restart_required: ['port', 'workers'],
        nodes: [
          { node: 0, state: 'committed' },
          { node: 1, state: 'committed' },
        ],
      });
      expect(new Set(hup.settings_applied)).toEqual(new Set(['batchSize', 'maxPayloadBytes']));
      expect(server.logs()).toContain('these settings take effect only after a restart');

      // Every open connection, on both nodes: batches of 1 only; 3 kB is now too large; 8 in flight still
      // fine (the --max-queue-size flag won over the file's 1).
      const small = (await Promise.all(clients.map((client) => burst(client, 8)))).flat();
      expect(small.filter((answer) => answer.type === 'error')).toEqual([]);
      const m2 = batchHistogram(await (await fetch(`${url}/metrics`)).text(), 'echo');
      expect(m2.count - m1.count).toBe(small.length);
      expect(m2.ones - m1.ones).toBe(small.length);
      const tooBig = await Promise.all(clients.map((client) => client.request({ id: id++, text: big })));
      for (const answer of tooBig) expect(answer).toMatchObject({ type: 'error', code: 'payload_too_large' });
      const http = await fetch(`${url}/predict`, {
        method: 'POST',
        body: JSON.stringify({ id: 1, text: big }),
      });
      expect(http.status).toBe(413);

      // `streaminfer reload --config` with a rate limit and log level warn.
      const second = path.join(dir, 'second.json');
      writeFileSync(
        second,
        JSON.stringify({
          ...base,
          batchSize: 16,
          maxPayloadBytes: 2048,
          workers: 2,
          port: port + 1,
          rateLimitRps: 2,
          rateLimitBurst: 2,
          logLevel: 'warn',
        }),
      );
      const committedLogsBefore = (server.logs().match(/"msg":"model table committed"/g) ?? []).length;
      expect(committedLogsBefore).toBeGreaterThanOrEqual(2);
      const cli = await runCliToExit(['reload', '--config', second, '--url', url]);
      expect(cli.code).toBe(0);
      expect(cli.out).toMatch(/settings applied: .*rateLimitRps/);
      expect(cli.out).toMatch(/settings applied: .*batchSize/);
      expect(cli.out).toContain('need a restart to take effect: port, workers');
      const json = await runCliToExit(['reload', '--config', second, '--url', url, '--json']);
      expect(JSON.parse(json.out)).toMatchObject({
        ok: true,
        settings_applied: [],
        restart_required: ['port', 'workers'],
      });
      // (That second, identical reload changed nothing but still names what needs a restart.)

      // Every open connection is now rate-limited: 2 tokens, then rate_limited.
      // Batches grow back to 16 (lanes whose buffers were sized for 1): the admitted answers are batched again,
      // and right.
      const m3 = batchHistogram(await (await fetch(`${url}/metrics`)).text(), 'echo');
      const limited = await Promise.all(clients.map((client) => burst(client, 6)));
      for (const answers of limited) {
        expect(answers.filter((answer) => answer.type !== 'error').length).toBeLessThanOrEqual(3);
        expect(answers.some((answer) => answer.code === 'rate_limited')).toBe(true);
      }
      const admitted = limited.flat().filter((answer) => answer.type !== 'error');
      expect(admitted.every((answer) => answer.result === 'hi')).toBe(true);
      const m4 = batchHistogram(await (await fetch(`${url}/metrics`)).text(), 'echo');
      // Fewer batches than requests, and more than 2 per batch on average on some node.
      expect(m4.count - m3.count).toBeLessThan(admitted.length / 2);
      // Log level warn on every node and the supervisor: a reload logs no info lines any more.
      const mark = server.logs().length;
      const quiet = await fetch(`${url}/api/reload`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(quiet.status).toBe(200);
      await sleep(200);
      expect(server.logs().slice(mark)).not.toContain('"msg":"model table committed"');
      expect(server.logs().slice(mark)).not.toContain('"msg":"reload committed"');

      // An invalid configuration changes nothing and says why.
      const bad = await fetch(`${url}/api/reload`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ config: { ...base, batchSize: 0 } }),
      });
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({
        code: 'bad_request',
        message: expect.stringContaining('batchSize'),
      });

      // The admin token is a supervisor-side setting. A SIGHUP and concurrent `reload --config` requests carry
      // the same file: whichever runs installs it, the others are refused (409) without undoing it.
      const token = 'a-long-enough-admin-token-0123';
      const withToken = {
        ...base,
        maxPayloadBytes: 2048,
        rateLimitRps: 2,
        rateLimitBurst: 2,
        adminToken: token,
      };
      writeFileSync(configFile, JSON.stringify(withToken));
      process.kill(child.pid!, 'SIGHUP');
      const concurrent = await Promise.all(
        Array.from({ length: 5 }, () =>
          fetch(`${url}/api/reload`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ config: withToken }),
          }),
        ),
      );
      for (const response of concurrent) expect([200, 401, 409]).toContain(response.status);
      const authorized = { authorization: `Bearer ${token}` };
      let settled = (await (await fetch(`${url}/api/reload`, { headers: authorized })).json()) as Outcome;
      for (let i = 0; i < 100 && settled.settings_applied?.includes('adminToken') !== true; i++) {
        await sleep(50);
        settled = (await (await fetch(`${url}/api/reload`, { headers: authorized })).json()) as Outcome;
      }
      expect((await fetch(`${url}/api/reload`)).status).toBe(401);
      expect((await fetch(`${url}/api/reload`, { headers: authorized })).status).toBe(200);
    } finally {
      for (const client of clients) client.close();
      expect((await server.stop()).code).toBe(0);
    }
  }, 60000);
});
