import type { Answer, ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

describe('--nodes 2 --workers 2', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['echo', 'upper'], args: ['--nodes', '2', '--workers', '2'] });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('connections spread over both nodes all get correct answers, and /metrics counts the whole host', async () => {
    const clients = await Promise.all(Array.from({ length: 24 }, () => WsClient.connect(server.wsUrl)));
    const perClient = 50;
    const all: Array<Promise<Answer>> = [];
    clients.forEach((client, c) => {
      for (let i = 0; i < perClient; i++) {
        all.push(
          i % 2
            ? client.request({ id: i, model: 'upper', text: `c${c}-${i}` })
            : client.request({ id: i, model: 'echo', input: [c, i] }),
        );
      }
    });
    const answers = await Promise.all(all);
    let index = 0;
    clients.forEach((_, c) => {
      for (let i = 0; i < perClient; i++) {
        const answer = answers[index++]!;
        expect(answer.result).toEqual(i % 2 ? `C${c}-${i}` : [c, i]);
      }
    });
    for (const client of clients) client.close();
    const health = (await (await fetch(`${server.url}/health`)).json()) as {
      nodes: Array<{ pid: number; workers: number; workers_ready: number }>;
    };
    expect(health.nodes).toHaveLength(2);
    expect(new Set(health.nodes.map((node) => node.pid)).size).toBe(2);
    for (const node of health.nodes) expect(node).toMatchObject({ workers: 2, workers_ready: 2 });
    const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
    const total = [...text.matchAll(/^streaminfer_requests_total\{([^}]*)\} (\d+)/gm)]
      .filter((match) => match[1]!.includes('code="ok"') && match[1]!.includes('protocol="ws"'))
      .reduce((sum, match) => sum + Number(match[2]), 0);
    expect(total).toBeGreaterThanOrEqual(clients.length * perClient);
  });

  test('HTTP and health answer for the whole host from either node', async () => {
    for (let i = 0; i < 10; i++) {
      const response = await postJson(`${server.url}/predict`, { id: i, model: 'upper', text: 'x' });
      expect(response.body).toMatchObject({ id: i, result: 'X' });
      const health = (await (await fetch(`${server.url}/health`)).json()) as { nodes: unknown[] };
      expect(health.nodes).toHaveLength(2);
    }
  });
});
