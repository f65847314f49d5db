import { loadSession } from '../../libs/inference';
import type { ServerHandle } from './harness';
import { MODELS_DIR, modelsSubset, postJson, runCliToExit, startServer, WsClient } from './harness';

interface Health {
  ready: boolean;
  device: string;
  nodes: Array<{ node: number; state: string; ws_connections: number }>;
  models: Array<{
    name: string;
    versions: Array<{ version: string; execution_provider: string; fallback_reason?: string }>;
  }>;
}

/** Whether a strict WebGPU session loads on this host (it does not without a GPU and a Vulkan driver). */
async function webgpuWorksHere(): Promise<boolean> {
  try {
    const loaded = await loadSession(`${MODELS_DIR}/echo/1/model.onnx`, {
      device: { kind: 'webgpu', deviceId: 0 },
      intraOpThreads: 1,
    });
    await loaded.session.release();
    return true;
  } catch {
    return false;
  }
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
      '--admin-port',
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

describe('--device webgpu on this host: strict fails the start naming the device, auto falls back visibly', () => {
  let webgpuWorks = false;
  beforeAll(async () => {
    webgpuWorks = await webgpuWorksHere();
  });

  test('--device webgpu stops the start with the WebGPU error, or runs on webgpu where a GPU is', async () => {
    if (webgpuWorks) {
      const server = await startServer({ models: ['echo'], args: ['--device', 'webgpu'] });
      const body = await health(server);
      expect(body.device).toBe('webgpu:0');
      expect(body.models[0]!.versions[0]!.execution_provider).toBe('webgpu');
      expect(await server.stop()).toEqual({ code: 0, signal: null });
      return;
    }
    const started = Date.now();
    const result = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--models-dir',
      modelsSubset(['echo']),
      '--device',
      'webgpu',
    ]);
    expect(result.code).toBe(1);
    expect(result.out).toMatch(/"start failed"/);
    expect(result.out).toMatch(
      /node 0 failed to start: model echo version 1: WebGPU session failed \(webgpu:0: \S/,
    );
    expect(result.out).not.toMatch(/"err":"[^"]*onnxruntime_src/);
    expect(result.out).not.toContain('streaminfer ready');
    expect(Date.now() - started).toBeLessThan(15000);
  });

  test('--nodes 2 --device cpu,webgpu:1 stops the start naming webgpu:1 (the binding opens only adapter 0)', async () => {
    const result = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--models-dir',
      modelsSubset(['echo']),
      '--nodes',
      '2',
      '--device',
      'cpu,webgpu:1',
    ]);
    expect(result.code).toBe(1);
    expect(result.out).toContain(
      'node 1 failed to start: model echo version 1: --device webgpu:1: this onnxruntime-node build opens only the default WebGPU adapter (webgpu:0)',
    );
    expect(result.out).not.toContain('streaminfer ready');
  });

  test('--device auto serves, on cpu here with the reasons in /health and the log', async () => {
    const server = await startServer({ models: ['echo'], args: ['--device', 'auto'] });
    try {
      const body = await health(server);
      expect(body.ready).toBe(true);
      expect(body.device).toBe('auto');
      const version = body.models.find((model) => model.name === 'echo')!.versions[0]!;
      const response = await postJson(`${server.url}/predict`, { id: 1, model: 'echo', input: [1, 2] });
      expect(response.body).toMatchObject({ id: 1, result: [1, 2] });
      const metrics = await (await fetch(`${server.adminUrl}/metrics`)).text();
      expect(metrics).toMatch(
        new RegExp(
          `streaminfer_model_info\\{[^}]*model="echo"[^}]*execution_provider="${version.execution_provider}"`,
        ),
      );
      if (webgpuWorks) return; // a GPU host: the CUDA/WebGPU outcome is the session tests' business
      expect(version.execution_provider).toBe('cpu');
      expect(version.fallback_reason).toMatch(/^cuda:0: .+; webgpu:0: \S/);
      expect(version.fallback_reason).not.toMatch(/onnxruntime_src/);
      expect(server.logs()).toMatch(/--device auto fell back to cpu/);
      console.log(`device auto on this host: cpu, fallback_reason: ${version.fallback_reason}`);
    } finally {
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    }
  });
});
