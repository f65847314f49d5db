/**
 * One corrupt model.onnx must not keep the whole server from starting. What loads is
 * served; what does not is unavailable (health `degraded` with the reason, a metric, a log line, and
 * `model_unavailable` answers), its last good version stays stable, and only `--strict-models` or a repository
 * with nothing left refuses the start. A reload that adds a broken version leaves the others serving.
 */
import { copyFileSync, cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { pixels } from './fleet-kit';
import { MODELS_DIR, modelsSubset, postJson, runCliToExit, type ServerHandle, startServer } from './harness';

jest.setTimeout(90_000);

const CORRUPT = 'this is not an ONNX model';

function corrupt(dir: string, model: string, version: string): string {
  mkdirSync(path.join(dir, model, version), { recursive: true });
  const file = path.join(dir, model, version, 'model.onnx');
  writeFileSync(file, CORRUPT);
  return file;
}

async function health(server: ServerHandle): Promise<Record<string, unknown>> {
  return (await (await fetch(`${server.adminUrl}/health`)).json()) as Record<string, unknown>;
}

describe('a repository with broken models', () => {
  let server: ServerHandle;
  let dir: string;

  beforeAll(async () => {
    // digits: 1 and 2 good, 3 corrupt and config.json's default; echo: its only version corrupt; upper good.
    dir = modelsSubset(['upper'], ['digits', 'echo']);
    corrupt(dir, 'digits', '3');
    const config = path.join(dir, 'digits', 'config.json');
    writeFileSync(
      config,
      JSON.stringify({ ...JSON.parse(readFileSync(config, 'utf8')), default_version: '3' }),
    );
    corrupt(dir, 'echo', '1');
    server = await startServer({
      modelsDir: dir,
      args: ['--nodes', '2', '--workers', '1', '--model', 'digits'],
    });
  });

  afterAll(async () => {
    await server?.stop();
  });

  test('serves what loads; health is degraded and names each failure', async () => {
    const body = await health(server);
    expect(body.status).toBe('degraded');
    expect(body.ready).toBe(true);
    const unavailable = body.unavailable as Array<{ model: string; version?: string; reason: string }>;
    expect(unavailable.map((u) => `${u.model}/${u.version}`).sort()).toEqual(['digits/3', 'echo/1']);
    expect(unavailable.find((u) => u.model === 'digits')!.reason).toMatch(/digits[/\\]3[/\\]model\.onnx/);
    // The last good version is stable: config.json's default (3) did not load.
    const digits = (body.models as Array<{ name: string; aliases: { stable: string } }>).find(
      (m) => m.name === 'digits',
    );
    expect(digits!.aliases.stable).toBe('2');
    const answer = await postJson(`${server.url}/predict`, { id: 1, model: 'digits', input: pixels(0) });
    expect(answer.status).toBe(200);
    expect(answer.body.version).toBe('2');
    const upper = await postJson(`${server.url}/predict`, { id: 2, model: 'upper', input: 'abc' });
    expect(upper.status).toBe(200);
    expect(server.logs()).toMatch(/model version unavailable: it did not load/);
  });

  test('a request for an unavailable model or version is answered model_unavailable, not a 404', async () => {
    const echo = await postJson(`${server.url}/predict`, { id: 3, model: 'echo', input: [1, 2] });
    expect(echo.status).toBe(503);
    expect(echo.body.code).toBe('model_unavailable');
    expect(echo.body.message).toMatch(/echo.*did not load/);
    const pinned = await postJson(`${server.url}/predict`, {
      id: 4,
      model: 'digits',
      version: '3',
      input: pixels(0),
    });
    expect(pinned.status).toBe(503);
    expect(pinned.body.code).toBe('model_unavailable');
    const v2 = await postJson(`${server.url}/v2/models/echo/infer`, {
      inputs: [{ name: 'input', shape: [2], datatype: 'FP32', data: [1, 2] }],
    });
    expect(v2.status).toBe(503);
    const ready = await fetch(`${server.url}/v2/models/echo/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ ready: false, code: 'model_unavailable' });
    const metadata = await fetch(`${server.url}/v2/models/digits/versions/3`);
    expect(metadata.status).toBe(503);
    const unknown = await postJson(`${server.url}/predict`, { id: 5, model: 'nope', input: [1] });
    expect(unknown.body.code).toBe('unknown_model');
  });

  test('the metrics count each failure and show what is unavailable', async () => {
    const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(text).toMatch(/streaminfer_model_load_failures_total\{model="digits",version="3"\} 1/);
    expect(text).toMatch(/streaminfer_model_unavailable\{model="echo",version="1"\} 1/);
  });

  test('a rescan skips what failed from the same file; a reload adding a broken version fails alone', async () => {
    const rescan = await postJson(`${server.adminUrl}/api/reload`, {});
    expect(rescan.status).toBe(200);
    corrupt(dir, 'digits', '4');
    const broken = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '4' });
    expect(broken.status).toBe(500);
    expect(broken.body.code).toBe('reload_failed');
    const still = await postJson(`${server.url}/predict`, { id: 6, model: 'digits', input: pixels(1) });
    expect(still.status).toBe(200);
    expect(still.body.version).toBe('2');
    expect((await health(server)).ready).toBe(true);
    // Listed unavailable from its failed PREPARE, and left out of the next rescan.
    const listed = (await health(server)).unavailable as Array<{ model: string; version?: string }>;
    expect(listed.map((u) => `${u.model}/${u.version}`)).toContain('digits/4');
    expect((await postJson(`${server.adminUrl}/api/reload`, {})).status).toBe(200);
  });

  test('a served model whose config.json breaks keeps serving through a rescan, listed unavailable', async () => {
    const config = path.join(dir, 'upper', 'config.json');
    const good = readFileSync(config, 'utf8');
    // `upper` is a symlink to the shipped model: replace the link with a copy before breaking it.
    rmSync(path.join(dir, 'upper'));
    cpSync(path.join(MODELS_DIR, 'upper'), path.join(dir, 'upper'), { recursive: true });
    writeFileSync(config, '{ not json');
    const rescan = await postJson(`${server.adminUrl}/api/reload`, {});
    expect(rescan.status).toBe(200);
    const upper = await postJson(`${server.url}/predict`, { id: 8, model: 'upper', input: 'abc' });
    expect(upper.status).toBe(200);
    const body = await health(server);
    expect((body.unavailable as Array<{ model: string; reason: string }>).map((u) => u.model)).toContain(
      'upper',
    );
    writeFileSync(config, good);
  });

  test('a repaired file is loaded by the next rescan', async () => {
    copyFileSync(path.join(MODELS_DIR, 'echo', '1', 'model.onnx'), path.join(dir, 'echo', '1', 'model.onnx'));
    const rescan = await postJson(`${server.adminUrl}/api/reload`, {});
    expect(rescan.status).toBe(200);
    const echo = await postJson(`${server.url}/predict`, { id: 7, model: 'echo', input: [1, 2] });
    expect(echo.status).toBe(200);
    const body = await health(server);
    expect(
      (body.unavailable as Array<{ model: string; version?: string }>).map((u) => `${u.model}/${u.version}`),
    ).toEqual(['digits/3', 'digits/4']);
  });
});

test('--strict-models refuses to start on one broken version, naming the file', async () => {
  const dir = modelsSubset([], ['digits']);
  const file = corrupt(dir, 'digits', '3');
  const run = await runCliToExit(
    [
      'serve',
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--admin-port',
      '0',
      '--models-dir',
      dir,
      '--model',
      'digits',
      '--strict-models',
    ],
    { STREAMINFER_STATE_DIR: path.join(dir, '.state') },
  );
  expect(run.code).not.toBe(0);
  expect(run.out).toContain('--strict-models');
  expect(run.out).toContain(file);
});

test('a repository where nothing loads refuses to start', async () => {
  const dir = modelsSubset([], ['echo']);
  corrupt(dir, 'echo', '1');
  const run = await runCliToExit(
    [
      'serve',
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--admin-port',
      '0',
      '--models-dir',
      dir,
      '--model',
      'echo',
    ],
    { STREAMINFER_STATE_DIR: path.join(dir, '.state') },
  );
  expect(run.code).not.toBe(0);
  expect(run.out).toMatch(/no model of the repository loads/);
});

test('a restarted node that cannot load what the host serves is restarted; the other nodes keep serving', async () => {
  const dir = modelsSubset([], ['digits']);
  const server = await startServer({
    modelsDir: dir,
    args: ['--nodes', '2', '--workers', '1', '--model', 'digits'],
  });
  try {
    const file = path.join(dir, 'digits', '2', 'model.onnx');
    const good = readFileSync(file);
    writeFileSync(file, CORRUPT);
    process.kill(server.nodePids[1]!, 'SIGKILL');
    const deadline = Date.now() + 20_000;
    while (!/this node cannot load what the host serves/.test(server.logs()) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(server.logs()).toMatch(
      /node 1 failed to start: model digits version 2: .*this node cannot load what the host serves/,
    );
    // The host's table did not lose version 2: node 0 serves it throughout.
    for (let i = 0; i < 20; i++) {
      const answer = await postJson(`${server.url}/predict`, { id: i, model: 'digits', input: pixels(i) });
      expect([answer.status, answer.body.version]).toEqual([200, '2']);
    }
    writeFileSync(file, good);
    while ((await health(server)).ready !== true && Date.now() < deadline + 20_000)
      await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await health(server)).toMatchObject({ ready: true, status: 'ok' });
  } finally {
    await server.stop();
  }
});

test('a reload that adds a broken version fails alone, atomic or rolling: every model keeps serving', async () => {
  const dir = modelsSubset(['echo'], ['digits']);
  const server = await startServer({
    modelsDir: dir,
    args: ['--nodes', '2', '--workers', '1', '--model', 'digits'],
  });
  try {
    corrupt(dir, 'digits', '3');
    for (const strategy of ['atomic', 'rolling']) {
      const reload = await postJson(`${server.adminUrl}/api/reload`, {
        model: 'digits',
        version: '3',
        strategy,
      });
      expect([strategy, reload.status, reload.body.code]).toEqual([strategy, 500, 'reload_failed']);
      expect(reload.body.message).toContain(path.join(dir, 'digits', '3', 'model.onnx'));
    }
    // The version that failed is listed unavailable and left out of a rescan, which loads the rest.
    const rescan = await postJson(`${server.adminUrl}/api/reload`, {});
    expect(rescan.status).toBe(200);
    for (let i = 0; i < 10; i++) {
      const digits = await postJson(`${server.url}/predict`, { id: i, model: 'digits', input: pixels(i) });
      expect([digits.status, digits.body.version]).toEqual([200, '2']);
      const echo = await postJson(`${server.url}/predict`, { id: i, model: 'echo', input: [i] });
      expect(echo.status).toBe(200);
    }
    expect(await health(server)).toMatchObject({
      ready: true,
      status: 'degraded',
      unavailable: [{ model: 'digits', version: '3' }],
    });
  } finally {
    await server.stop();
  }
});
