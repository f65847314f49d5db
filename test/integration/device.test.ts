import type { ServerHandle } from './harness';
import { postJson, runCliToExit, startServer, WsClient } from './harness';

interface Health {
  ready: boolean;
  device: string;
  nodes: Array<{ node: number; state: string; ws_connections: number }>;
  models: Array<{ name: string; versions: Array<{ version: string; execution_provider: string }> }>;
}

async function health(server: ServerHandle): Promise<Health> {
  return (await (await fetch(`${server.url}/health`)).json()) as Health;
}

describe('--nodes 2 --device cpu,cpu: one device per node, end to end', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['echo', 'upper'], args: ['--nodes', '2', '--device', 'cpu,cpu'] });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('both nodes start ready and /health reports the device and the provider each model runs on', async () => {
    const body = await health(server);
    expect(body.ready).toBe(true);
    expect(body.device).toBe('cpu,cpu');
    expect(body.nodes.map((node) => [node.node, node.state])).toEqual([
      [0, 'ready'],
      [1, 'ready'],
    ]);
    expect(body.models.map((model) => model.name).sort()).toEqual(['echo', 'upper']);
    for (const model of body.models)
      for (const version of model.versions) expect(version.execution_provider).toBe('cpu');
    expect(server.logs()).not.toMatch(/devices for 1 nodes|node failed to start/);
  });

  test('connections on both nodes get their answers', async () => {
    const clients: WsClient[] = [];
    // The kernel spreads connections over the two listeners: open them until each node holds some.
    let perNode = [0, 0];
    while (clients.length < 64 && perNode.some((count) => count === 0)) {
      clients.push(...(await Promise.all(Array.from({ length: 4 }, () => WsClient.connect(server.wsUrl)))));
      perNode = (await health(server)).nodes.map((node) => node.ws_connections);
    }
    expect(perNode.every((count) => count > 0)).toBe(true);
    const answers = await Promise.all(
      clients.map((client, c) => client.request({ id: c, model: 'upper', text: `node test ${c}` })),
    );
    answers.forEach((answer, c) => expect(answer).toMatchObject({ id: c, result: `NODE TEST ${c}` }));
    for (const client of clients) client.close();
    for (let i = 0; i < 4; i++) {
      const response = await postJson(`${server.url}/predict`, { id: i, model: 'echo', input: [i, 2] });
      expect(response.body).toMatchObject({ id: i, result: [i, 2] });
    }
    console.log(`device cpu,cpu: ${clients.length} connections, per node ${perNode.join('/')}, all answered`);
  });
});

describe('a device list that does not match --nodes fails at start, naming the setting', () => {
  test.each([1, 3])('--nodes %d --device cpu,cpu', async (nodes) => {
    const started = Date.now();
    const result = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--nodes',
      String(nodes),
      '--device',
      'cpu,cpu',
    ]);
    expect(result.code).toBe(2);
    expect(result.out).toContain(
      `invalid value "cpu,cpu" for --device (command-line flag): it lists 2 devices but nodes is ${nodes}`,
    );
    expect(result.out).not.toContain('streaminfer ready');
    expect(Date.now() - started).toBeLessThan(10000);
  });
});
