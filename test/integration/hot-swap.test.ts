import { copyFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { ServerHandle } from './harness';
import { modelsSubset, postJson, runCli, sleep, startServer, WsClient } from './harness';

const PIXELS = Array.from({ length: 64 }, (_, i) => (i * 5) % 17);

interface Seen {
  version: string;
  epoch: number;
}

/** Clients streaming digits requests until stopped (`depth` in flight each); records every answer in arrival order. */
async function stream(url: string, clients: number, depth = 1) {
  const sockets = await Promise.all(Array.from({ length: clients }, () => WsClient.connect(url)));
  const seen: Seen[][] = sockets.map(() => []);
  const errors: string[] = [];
  let stop = false;
  let id = 0;
  const loops = sockets.flatMap((socket, c) =>
    Array.from({ length: depth }, async () => {
      while (!stop) {
        const answer = await socket.request({ id: id++, model: 'digits', input: PIXELS });
        if (answer.type === 'error') errors.push(`${answer.code}: ${answer.message}`);
        else seen[c]!.push({ version: answer.version!, epoch: answer.epoch! });
      }
    }),
  );
  return {
    seen,
    errors,
    async stop() {
      stop = true;
      await Promise.all(loops);
      for (const socket of sockets) socket.close();
    },
  };
}

/** On one connection, once a version's answers begin, an earlier one never comes back. */
function monotonic(answers: Seen[]): boolean {
  for (let i = 1; i < answers.length; i++) if (answers[i]!.epoch < answers[i - 1]!.epoch) return false;
  return true;
}

describe('hot-swap on --nodes 2 --workers 2', () => {
  let server: ServerHandle;
  let dir: string;
  beforeAll(async () => {
    dir = modelsSubset([], ['digits']);
    server = await startServer({
      modelsDir: dir,
      args: ['--nodes', '2', '--workers', '2', '--model', 'digits', '--pid-file', path.join(dir, 'pid')],
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('atomic reload under load: zero failures, a new epoch, and no old answer after a new one', async () => {
    // Pipelined connections (8 in flight each) too: ordering must hold across the commit.
    const load = await stream(server.wsUrl, 6, 8);
    await sleep(200);
    const response = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({
      ok: true,
      result: 'committed',
      strategy: 'atomic',
      changes: [{ model: 'digits', from: '2', to: '1' }],
    });
    const epoch = response.body.epoch as number;
    expect(epoch).toBe((response.body.epoch_before as number) + 1);
    await sleep(200);
    await load.stop();
    expect(load.errors).toEqual([]);
    for (const answers of load.seen) {
      expect(monotonic(answers)).toBe(true);
      expect(answers.at(-1)).toEqual({ version: '1', epoch });
      // Every answer of the new epoch comes from the new stable version.
      expect(answers.filter((a) => a.epoch === epoch).every((a) => a.version === '1')).toBe(true);
    }
  });

  test('rolling reload under load: node by node, zero failures, the old version released', async () => {
    const load = await stream(server.wsUrl, 6);
    await sleep(200);
    const response = await postJson(`${server.adminUrl}/api/reload`, {
      model: 'digits',
      version: '2',
      strategy: 'rolling',
    });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({
      result: 'committed',
      strategy: 'rolling',
      changes: [{ model: 'digits', from: '1', to: '2' }],
    });
    await sleep(200);
    await load.stop();
    expect(load.errors).toEqual([]);
    for (const answers of load.seen) expect(answers.at(-1)!.version).toBe('2');
    const client = await WsClient.connect(server.wsUrl);
    // Rolling swaps in place: version 1 is no longer loaded anywhere.
    expect(await client.request({ id: 1, model: 'digits', version: '1', input: PIXELS })).toMatchObject({
      code: 'unknown_version',
    });
    client.close();
    const health = (await (await fetch(`${server.url}/health`)).json()) as {
      models: Array<{ name: string; default_version: string; versions: Array<{ version: string }> }>;
    };
    const digits = health.models.find((model) => model.name === 'digits')!;
    expect(digits.default_version).toBe('2');
    expect(digits.versions.map((v) => v.version)).toEqual(['2']);
  });

  test('a corrupt model file fails the reload with a clear message; traffic never notices', async () => {
    mkdirSync(path.join(dir, 'digits', '3'), { recursive: true });
    writeFileSync(path.join(dir, 'digits', '3', 'model.onnx'), 'this is not an onnx file');
    const before = (await (await fetch(`${server.adminUrl}/api/reload`)).json()) as { epoch: number };
    const load = await stream(server.wsUrl, 4);
    const response = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '3' });
    await sleep(100);
    await load.stop();
    expect(response.status).toBe(500);
    expect(response.body).toMatchObject({
      type: 'error',
      code: 'reload_failed',
      result: 'failed',
      epoch: before.epoch,
    });
    expect(String(response.body.message)).toMatch(
      /prepare failed, nothing changed: node \d: model digits version 3/,
    );
    expect(load.errors).toEqual([]);
    for (const answers of load.seen)
      expect(answers.every((a) => a.version === '2' && a.epoch === before.epoch)).toBe(true);
    const metrics = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(/streaminfer_reloads_total\{result="failed",strategy="atomic"\} 1/);
    expect(metrics).toMatch(/streaminfer_model_epoch \d+/);
    rmSync(path.join(dir, 'digits', '3'), { recursive: true });
  });

  test('SIGHUP (via `streaminfer reload --pid-file`) re-reads the repository; the CLI prints the outcome', async () => {
    // A new version 4 and a config that makes it the default.
    mkdirSync(path.join(dir, 'digits', '4'), { recursive: true });
    copyFileSync(path.join(dir, 'digits', '1', 'model.onnx'), path.join(dir, 'digits', '4', 'model.onnx'));
    const config = JSON.parse(readFileSync(path.join(dir, 'digits', 'config.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    writeFileSync(
      path.join(dir, 'digits', 'config.json'),
      JSON.stringify({ ...config, default_version: '4' }),
    );
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = runCli(args);
        let out = '';
        child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.on('exit', (code) => resolve({ code, out }));
      });
    const hup = await run(['reload', '--pid-file', path.join(dir, 'pid'), '--url', server.adminUrl]);
    expect(hup.out).toMatch(/committed \(atomic\)/);
    expect(hup.out).toMatch(/digits: \d -> 4/);
    expect(hup.code).toBe(0);
    const client = await WsClient.connect(server.wsUrl);
    expect(await client.request({ id: 1, input: PIXELS })).toMatchObject({ model: 'digits', version: '4' });
    client.close();
    const cli = await run([
      'reload',
      '--model',
      'digits',
      '--version',
      '2',
      '--strategy',
      'rolling',
      '--url',
      server.adminUrl,
    ]);
    expect(cli.code).toBe(0);
    expect(cli.out).toMatch(/digits: 4 -> 2/);
    expect(cli.out).toMatch(/committed \(rolling\)/);
    const bad = await run(['reload', '--model', 'digits', '--version', '9', '--url', server.adminUrl]);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain('unknown_version');
  });
});

describe('a reload while another runs', () => {
  test('is refused with 409 reload_in_progress, every time; the first one commits', async () => {
    // Each PREPARE is held 2 s (test hook), so the second reload always arrives while the first runs.
    const server = await startServer({
      models: ['digits'],
      args: ['--model', 'digits'],
      env: { STREAMINFER_TEST_HOLD_PREPARE_MS: '2000' },
    });
    try {
      const started = Date.now();
      const first = postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' });
      while (!server.logs().includes('test hook: holding PREPARE')) {
        expect(Date.now() - started).toBeLessThan(10000);
        await sleep(10);
      }
      const second = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '2' });
      expect(second.status).toBe(409);
      expect(second.body).toMatchObject({ type: 'error', code: 'reload_in_progress' });
      expect(await first).toMatchObject({
        status: 200,
        body: { result: 'committed', changes: [{ model: 'digits', from: '2', to: '1' }] },
      });
      expect(Date.now() - started).toBeGreaterThanOrEqual(2000);
      // Once the first is done, the refused one goes through.
      const again = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '2' });
      expect(again).toMatchObject({ status: 200, body: { result: 'committed' } });
      console.log(
        `reload_in_progress: second reload refused while the first held PREPARE (${Date.now() - started} ms)`,
      );
    } finally {
      await server.stop();
    }
  });
});

describe('answer order across a commit, with slow batches on two workers', () => {
  test('a pipelined connection never gets an old-version answer after a new-version one', async () => {
    const dir = modelsSubset([]);
    mkdirSync(path.join(dir, 'bench', '1'), { recursive: true });
    mkdirSync(path.join(dir, 'bench', '2'), { recursive: true });
    const shipped = path.resolve(__dirname, '../../../models/bench');
    copyFileSync(path.join(shipped, 'config.json'), path.join(dir, 'bench', 'config.json'));
    for (const version of ['1', '2'])
      symlinkSync(path.join(shipped, '1', 'model.onnx'), path.join(dir, 'bench', version, 'model.onnx'));
    const config = JSON.parse(readFileSync(path.join(dir, 'bench', 'config.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    writeFileSync(
      path.join(dir, 'bench', 'config.json'),
      JSON.stringify({ ...config, default_version: '1' }),
    );
    const server = await startServer({
      modelsDir: dir,
      args: ['--workers', '2', '--model', 'bench'],
      env: { STREAMINFER_BATCH_SIZE: '4' },
    });
    const features = Array.from({ length: 256 }, (_, i) => i % 7);
    const client = await WsClient.connect(server.wsUrl);
    const seen: Seen[] = [];
    let stop = false;
    let id = 0;
    const loops = Array.from({ length: 16 }, async () => {
      while (!stop) {
        const answer = await client.request({ id: id++, input: features });
        expect(answer.type).toBeUndefined();
        seen.push({ version: answer.version!, epoch: answer.epoch! });
      }
    });
    await sleep(300);
    expect((await postJson(`${server.adminUrl}/api/reload`, { model: 'bench', version: '2' })).status).toBe(
      200,
    );
    await sleep(300);
    stop = true;
    await Promise.all(loops);
    client.close();
    expect(seen.some((a) => a.version === '1')).toBe(true);
    expect(seen.at(-1)!.version).toBe('2');
    expect(monotonic(seen)).toBe(true);
    await server.stop();
  });
});
