import type { ServerHandle } from './harness';
import { postJson, runCli, startServer, WsClient } from './harness';

describe('POST /api/reload switches the default model with zero failed requests', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['echo', 'upper'], args: ['--nodes', '2', '--workers', '2'] });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('clients streaming text see echo, then upper, and no error', async () => {
    const clients = await Promise.all(Array.from({ length: 8 }, () => WsClient.connect(server.wsUrl)));
    let stop = false;
    const seen: string[][] = clients.map(() => []);
    let errors = 0;
    const loops = clients.map(async (client, c) => {
      let id = 0;
      while (!stop) {
        const answer = await client.request({ id: id++, text: `client ${c}` });
        if (answer.type === 'error') errors++;
        else seen[c]!.push(`${answer.model}:${String(answer.result)}`);
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const response = await postJson(`${server.adminUrl}/api/reload`, { model: 'upper' });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ ok: true, default_model: 'upper', previous: 'echo' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    stop = true;
    await Promise.all(loops);
    expect(errors).toBe(0);
    seen.forEach((answers, c) => {
      expect(answers.length).toBeGreaterThan(2);
      // Each connection sees echo answers, then only upper answers: one switch, never back.
      const firstUpper = answers.findIndex((a) => a.startsWith('upper:'));
      expect(firstUpper).toBeGreaterThan(-1);
      expect(answers.slice(0, firstUpper).every((a) => a === `echo:client ${c}`)).toBe(true);
      expect(answers.slice(firstUpper).every((a) => a === `upper:CLIENT ${c}`)).toBe(true);
    });
    for (const client of clients) client.close();
    const health = (await (await fetch(`${server.url}/health`)).json()) as {
      default_model: string;
      nodes: unknown[];
    };
    expect(health.default_model).toBe('upper');
    expect(health.nodes).toHaveLength(2);
  });

  test('reload to an unknown model is refused and changes nothing', async () => {
    const before = (await (await fetch(`${server.url}/health`)).json()) as { default_model: string };
    const response = await postJson(`${server.adminUrl}/api/reload`, { model: 'missing' });
    expect(response.status).toBe(404);
    expect(response.body).toMatchObject({ type: 'error', code: 'unknown_model' });
    const after = (await (await fetch(`${server.url}/health`)).json()) as { default_model: string };
    expect(after.default_model).toBe(before.default_model);
  });

  test('malformed admin bodies get typed errors', async () => {
    expect((await postJson(`${server.adminUrl}/api/reload`, '{nope')).body).toMatchObject({
      code: 'bad_request',
    });
    expect((await postJson(`${server.adminUrl}/api/reload`, { model: 7 })).body).toMatchObject({
      code: 'bad_request',
    });
    const put = { method: 'PUT', headers: { 'content-type': 'application/json' } };
    expect((await fetch(`${server.adminUrl}/api/reload`, put)).status).toBe(405);
    expect(await (await fetch(`${server.adminUrl}/api/reload`)).json()).toMatchObject({
      result: 'committed',
    });
  });

  test('streaminfer reload and status work against the running server', async () => {
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = runCli(args);
        let out = '';
        child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.on('exit', (code) => resolve({ code, out }));
      });
    const reload = await run(['reload', '--model', 'echo', '--url', server.adminUrl]);
    expect(reload.code).toBe(0);
    expect(reload.out).toMatch(/default model: \w+ -> echo/);
    const status = await run(['status', '--url', server.adminUrl, '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.out)).toMatchObject({ status: 'ok', default_model: 'echo' });
    const bad = await run(['reload', '--model', 'missing', '--url', server.adminUrl]);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain('unknown_model');
  });
});

describe('admin token', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['echo', 'upper'], env: { STREAMINFER_ADMIN_TOKEN: 's3cret' } });
  });
  afterAll(async () => {
    await server.stop();
  });

  test('with a token configured, /api/* needs it (even from loopback)', async () => {
    const without = await postJson(`${server.adminUrl}/api/reload`, { model: 'upper' });
    expect(without.status).toBe(401);
    expect(without.body).toMatchObject({ code: 'unauthorized' });
    const wrong = await postJson(
      `${server.adminUrl}/api/reload`,
      { model: 'upper' },
      { authorization: 'Bearer nope' },
    );
    expect(wrong.status).toBe(401);
    const right = await postJson(
      `${server.adminUrl}/api/reload`,
      { model: 'upper' },
      { authorization: 'Bearer s3cret' },
    );
    expect(right.status).toBe(200);
    // Data-plane endpoints stay open.
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});
