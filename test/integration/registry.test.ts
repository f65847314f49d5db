import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import { digits, modelFile } from '../models/data';
import type { Answer, ServerHandle } from './harness';
import { postJson, runCli, startServer, WsClient } from './harness';

function pixels(row: number): number[] {
  return Array.from(digits().pixels.subarray(row * 64, row * 64 + 64));
}

async function counter(url: string, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return [...text.matchAll(new RegExp(`^${pattern.source}\\S* (\\S+)$`, 'gm'))].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

describe('registry: candidate, canary, shadow, promote, rollback, persistence', () => {
  let server: ServerHandle;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'registry-state-'));
  const start = () =>
    startServer({
      models: ['digits'],
      args: ['--nodes', '2', '--workers', '1', '--model', 'digits'],
      env: { STREAMINFER_STATE_DIR: stateDir },
    });
  beforeAll(async () => {
    server = await start();
  });
  afterAll(async () => {
    await server.stop();
  });

  test('stable = 2 at first (the repository default); deploy 1 as candidate; 10% canary over 2000 requests', async () => {
    await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' });
    await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' });
    // Make stable 1 and candidate 2, as the scenario has it.
    const deploy = await postJson(`${server.adminUrl}/api/models/digits/candidate`, { version: '2' });
    expect(deploy.status).toBe(200);
    expect(deploy.body.model).toMatchObject({ stable: '1', candidate: '2', canary_percent: 0 });
    expect(
      (await postJson(`${server.adminUrl}/api/models/digits/canary`, { percent: 10 })).body.model,
    ).toMatchObject({ canary_percent: 10 });
    const clients = await Promise.all(Array.from({ length: 8 }, () => WsClient.connect(server.wsUrl)));
    const versions: string[] = [];
    await Promise.all(
      clients.map(async (client, c) => {
        for (let i = 0; i < 250; i++)
          versions.push((await client.request({ id: i, input: pixels((c * 250 + i) % 1797) })).version!);
      }),
    );
    for (const client of clients) client.close();
    const share = versions.filter((v) => v === '2').length / versions.length;
    expect(versions).toHaveLength(2000);
    // σ = √(0.1 · 0.9 / 2000) ≈ 0.67 points: ±2.7 points is 4σ (a 3σ bound fails about one run in 370 by
    // chance, and did — 7.8 % on 2026-12-01).
    expect(share).toBeGreaterThan(0.073);
    expect(share).toBeLessThan(0.127);
    expect(
      await counter(
        server.adminUrl,
        /streaminfer_routed_requests_total\{[^}]*version="2"[^}]*route="canary"/,
      ),
    ).toBeGreaterThan(0);
  });

  test('sticky canary: one routing key always lands on one side', async () => {
    const client = await WsClient.connect(server.wsUrl);
    for (const key of ['alice', 'bob', 'carol', 'dave', 'erin']) {
      const seen = new Set<string>();
      for (let i = 0; i < 20; i++)
        seen.add((await client.request({ id: i, input: pixels(i), routing_key: key })).version!);
      expect(seen.size).toBe(1);
    }
    client.close();
  });

  test('shadow: clients only ever get stable answers; the disagreement counted equals the offline one', async () => {
    await postJson(`${server.adminUrl}/api/models/digits/canary`, { percent: 0 });
    expect((await postJson(`${server.adminUrl}/api/models/digits/shadow`, { enabled: true })).status).toBe(
      200,
    );
    const rows = Array.from({ length: 400 }, (_, i) => (i * 4) % 1797);
    const client = await WsClient.connect(server.wsUrl);
    const answers: Answer[] = [];
    for (let i = 0; i < rows.length; i += 20) {
      answers.push(
        ...(await Promise.all(
          rows.slice(i, i + 20).map((row, k) => client.request({ id: i + k, input: pixels(row) })),
        )),
      );
    }
    client.close();
    expect(answers.every((a) => a.version === '1')).toBe(true);
    // Offline: run both files on the same rows.
    const batch = new Float32Array(rows.length * 64);
    rows.forEach((row, i) => batch.set(pixels(row), i * 64));
    const labels = async (version: string) => {
      const session = await ort.InferenceSession.create(modelFile('digits', version));
      const out = (await session.run({ pixels: new ort.Tensor('float32', batch, [rows.length, 64]) }))
        .probabilities!.data as Float32Array;
      await session.release();
      return rows.map((_, i) => {
        const p = out.subarray(i * 10, i * 10 + 10);
        return p.indexOf(Math.max(...p));
      });
    };
    const [a, b] = await Promise.all([labels('1'), labels('2')]);
    const offlineDisagree = a.filter((label, i) => label !== b[i]).length;
    let agree = 0;
    let disagree = 0;
    for (let tries = 0; tries < 50 && agree + disagree < rows.length; tries++) {
      agree = await counter(server.adminUrl, /streaminfer_shadow_comparisons_total\{[^}]*agree="true"/);
      disagree = await counter(server.adminUrl, /streaminfer_shadow_comparisons_total\{[^}]*agree="false"/);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(agree + disagree).toBe(rows.length);
    expect(disagree).toBe(offlineDisagree);
    await postJson(`${server.adminUrl}/api/models/digits/shadow`, { enabled: false });
  });

  test('promote, then rollback under load: instant, zero failed requests', async () => {
    const promote = await postJson(`${server.adminUrl}/api/models/digits/promote`, {});
    expect(promote.body.model).toMatchObject({ stable: '2', previous_stable: '1', candidate: null });
    const clients = await Promise.all(Array.from({ length: 4 }, () => WsClient.connect(server.wsUrl)));
    let stop = false;
    const errors: string[] = [];
    const served: Array<{ at: number; version: string }> = [];
    const loops = clients.map(async (client) => {
      let id = 0;
      while (!stop) {
        const answer = await client.request({ id: id++, input: pixels(id % 1797) });
        if (answer.type === 'error') errors.push(answer.code!);
        else served.push({ at: performance.now(), version: answer.version! });
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 150));
    const called = performance.now();
    const rollback = await postJson(`${server.adminUrl}/api/models/digits/rollback`, {});
    await new Promise((resolve) => setTimeout(resolve, 150));
    stop = true;
    await Promise.all(loops);
    for (const client of clients) client.close();
    expect(rollback.body.model).toMatchObject({ stable: '1', previous_stable: '2' });
    expect(errors).toEqual([]);
    const firstOld = served.find((s) => s.at > called && s.version === '1');
    expect(firstOld).toBeDefined();
    expect(firstOld!.at - called).toBeLessThan(100);
    expect(rollback.body.duration_ms).toBeLessThan(100);
  });

  test('a restart serves exactly what was served before (aliases, canary, shadow)', async () => {
    await postJson(`${server.adminUrl}/api/models/digits/candidate`, { version: '2' });
    await postJson(`${server.adminUrl}/api/models/digits/canary`, { percent: 25 });
    await postJson(`${server.adminUrl}/api/models/digits/shadow`, { enabled: true });
    const before = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as { models: unknown[] };
    expect(await server.stop()).toEqual({ code: 0, signal: null });
    server = await start();
    const after = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as {
      models: Array<Record<string, unknown>>;
    };
    expect(after.models[0]).toMatchObject({
      aliases: { stable: '1', candidate: '2', previous_stable: '2' },
      canary_percent: 25,
      shadow: true,
    });
    expect(after.models).toEqual(before.models);
  });

  test('a corrupt state file falls back to the repository defaults with a warning', async () => {
    await server.stop();
    writeFileSync(path.join(stateDir, 'registry.json'), '{ not json');
    server = await start();
    const models = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as {
      models: Array<Record<string, unknown>>;
    };
    expect(models.models[0]).toMatchObject({ aliases: { stable: '2' }, canary_percent: 0, shadow: false });
    expect(server.logs()).toMatch(/registry.json is corrupt/);
  });

  test('the CLI drives the registry', async () => {
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = runCli([...args, '--url', server.adminUrl]);
        let out = '';
        child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.on('exit', (code) => resolve({ code, out }));
      });
    expect((await run(['models', 'deploy', 'digits', '1'])).out).toMatch(/stable=2 candidate=1/);
    expect((await run(['models', 'canary', 'digits', '10'])).out).toMatch(/canary=10%/);
    expect((await run(['models', 'shadow', 'digits', 'on'])).out).toMatch(/shadow=on/);
    expect((await run(['models', 'promote', 'digits'])).out).toMatch(/stable=1 candidate=- previous=2/);
    expect((await run(['models', 'rollback', 'digits'])).out).toMatch(/stable=2/);
    const list = await run(['models', 'list', '--json']);
    expect(JSON.parse(list.out).models[0].aliases.stable).toBe('2');
    const bad = await run(['models', 'canary', 'digits', '150']);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain('bad_request');
  });
});
