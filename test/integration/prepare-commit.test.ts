import { copyFileSync, mkdirSync, symlinkSync } from 'node:fs';
import * as path from 'node:path';
import type { ServerHandle } from './harness';
import { MODELS_DIR, modelsSubset, postJson, sleep, startServer, WsClient } from './harness';

/** Nodes log each version they finish loading; prepare is done when every node has logged it. */
async function waitForLoaded(server: ServerHandle, model: string, version: string, nodes: number) {
  const until = Date.now() + 15000;
  while (Date.now() < until) {
    const loaded = server
      .logs()
      .split('\n')
      .filter((line) => line.includes('"model loaded"'))
      .map((line) => {
        try {
          return JSON.parse(line) as { model?: string; version?: string };
        } catch {
          return {};
        }
      })
      .filter((entry) => entry.model === model && entry.version === version).length;
    if (loaded >= nodes) return;
    await sleep(20);
  }
  throw new Error(`${model} ${version} was not loaded in time`);
}

describe('PREPARE makes nothing routable before COMMIT', () => {
  let server: ServerHandle;
  let dir: string;
  beforeAll(async () => {
    dir = modelsSubset([], ['upper']);
    server = await startServer({
      modelsDir: dir,
      args: ['--nodes', '2', '--workers', '1', '--model', 'upper'],
      // Every node holds each commit this long after its prepare succeeded.
      env: { STREAMINFER_TEST_COMMIT_DELAY_MS: '1500' },
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('a prepared version answers unknown_version to pinned requests until the commit', async () => {
    // A version that appears after the start is loaded only when a reload names it.
    mkdirSync(path.join(dir, 'upper', '2'));
    copyFileSync(path.join(dir, 'upper', '1', 'model.onnx'), path.join(dir, 'upper', '2', 'model.onnx'));
    const client = await WsClient.connect(server.wsUrl);
    const reload = postJson(`${server.adminUrl}/api/models/upper/candidate`, { version: '2' });
    await waitForLoaded(server, 'upper', '2', 2);
    expect(await client.request({ id: 1, model: 'upper', version: '2', text: 'a' })).toMatchObject({
      type: 'error',
      code: 'unknown_version',
    });
    expect(await client.request({ id: 2, model: 'upper', text: 'a' })).toMatchObject({
      version: '1',
      result: 'A',
    });
    expect((await reload).status).toBe(200);
    expect(await client.request({ id: 3, model: 'upper', version: '2', text: 'a' })).toMatchObject({
      version: '2',
      result: 'A',
    });
    client.close();
  });

  test('a brand-new model answers unknown_model until the commit', async () => {
    symlinkSync(path.join(MODELS_DIR, 'echo'), path.join(dir, 'echo'));
    const client = await WsClient.connect(server.wsUrl);
    const reload = postJson(`${server.adminUrl}/api/reload`, { model: 'echo', version: '1' });
    await Promise.race([
      waitForLoaded(server, 'echo', '1', 2),
      reload.then((answer) => {
        throw new Error(`reload ended before the commit window: ${JSON.stringify(answer.body)}`);
      }),
    ]);
    expect(await client.request({ id: 1, model: 'echo', text: 'x' })).toMatchObject({
      type: 'error',
      code: 'unknown_model',
    });
    expect((await reload).status).toBe(200);
    expect(await client.request({ id: 2, model: 'echo', text: 'x' })).toMatchObject({
      model: 'echo',
      version: '1',
    });
    client.close();
  });
});
