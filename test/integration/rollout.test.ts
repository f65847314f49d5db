/**
 * Progressive delivery against the real server (`streaminfer serve`, one node) on the shipped digits model
 * (v1 and v2 disagree on 2.67 % of the rows) under a light load of real WebSocket requests: a rollout steps
 * and promotes; one with a tiny disagreement threshold rolls back by itself, the candidate gets no traffic
 * one interval later, the reason is recorded and the candidate stays loaded.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { lintExposition } from '../../libs/metrics';
import type { ServerHandle } from './harness';
import { postJson, runCliToExit, sleep, startServer } from './harness';
import { Load, rollout, stableOf, type View, waitFor } from './rollout-kit';

describe('progressive delivery: automatic canary analysis', () => {
  let server: ServerHandle;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'rollout-state-'));
  beforeAll(async () => {
    server = await startServer({
      models: ['digits'],
      args: ['--nodes', '1', '--workers', '1', '--model', 'digits'],
      env: { STREAMINFER_STATE_DIR: stateDir },
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  test('a healthy candidate steps 25 → 50 % and is promoted', async () => {
    // The repository's default stable is 2: roll out 1.
    const load = new Load(server.wsUrl);
    const started = Date.now();
    try {
      const start = await postJson(`${server.adminUrl}/api/models/digits/rollout`, {
        version: '1',
        steps: [25, 50, 100],
        dwell_s: 1,
        min_requests: 20,
        interval_s: 0.5,
        min_samples: 20,
        checks: { error_rate: { max_increase: 0.2 }, disagreement: { max: 0.2 } },
      });
      expect(start.status).toBe(200);
      const view = (start.body as unknown as { rollout: View }).rollout;
      expect(view).toMatchObject({
        model: 'digits',
        stable: '2',
        candidate: '1',
        state: 'progressing',
        step: 0,
        share: 25,
      });
      // a second rollout of the same model is refused while this one runs
      const again = await postJson(`${server.adminUrl}/api/models/digits/rollout`, { version: '1' });
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('conflict');
      // and so are registry changes by hand
      expect((await postJson(`${server.adminUrl}/api/models/digits/canary`, { percent: 90 })).status).toBe(
        409,
      );
      expect(
        (await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' })).status,
      ).toBe(409);
      const done = await waitFor(server.adminUrl, (v) => v.state === 'promoted');
      expect(done.transitions.map((t) => `${t.from}>${t.to}:${t.reason}`)).toEqual([
        'none>step_0:started',
        'step_0>step_1:step_passed',
        'step_1>promoted:all_steps_passed',
      ]);
      expect(done.share).toBe(100);
      expect(done.checks.every((check) => check.verdict === 'pass')).toBe(true);
    } finally {
      await load.stop();
    }
    console.log(`promote: ${Date.now() - started} ms`);
    expect(await stableOf(server.adminUrl, '1')).toBe('1');
    const metrics = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(
      /streaminfer_rollout_transitions_total\{model="digits",from="step_1",to="promoted",reason="all_steps_passed"\} 1/,
    );
    expect(metrics).toMatch(/streaminfer_rollout_share\{model="digits"\} 100/);
    const evaluation = (field: string) =>
      Number(
        new RegExp(`^streaminfer_rollout_evaluation_duration_seconds_${field} (\\S+)$`, 'm').exec(
          metrics,
        )?.[1],
      );
    console.log(
      `one evaluation (collect + analysis + persist): mean ${((evaluation('sum') / evaluation('count')) * 1000).toFixed(2)} ms over ${evaluation('count')}`,
    );
    expect(metrics).toMatch(/streaminfer_rollout_check_verdict\{model="digits",check="disagreement"\} 1/);
  });

  test('a candidate over its disagreement threshold is rolled back by itself; it gets no traffic after', async () => {
    // stable is 1 now; candidate 2 at 50 % must not disagree on more than 0.1 % of the mirrored requests.
    const load = new Load(server.wsUrl);
    let view: View;
    try {
      const start = await postJson(`${server.adminUrl}/api/models/digits/rollout`, {
        version: '2',
        steps: [50],
        dwell_s: 60,
        interval_s: 0.5,
        min_samples: 20,
        failures_to_rollback: 2,
        checks: { disagreement: { max: 0.001 } },
      });
      expect(start.status).toBe(200);
      view = await waitFor(server.adminUrl, (v) => v.state !== 'progressing');
      expect(view.state).toBe('rolled_back');
      // one interval later the candidate serves nothing
      await sleep(500);
      load.versions.length = 0;
      await sleep(1000);
    } finally {
      await load.stop();
    }
    expect(load.versions.length).toBeGreaterThan(50);
    expect(load.versions.filter((v) => v !== '1')).toEqual([]);
    expect(view.transitions[view.transitions.length - 1]).toMatchObject({
      from: 'step_0',
      to: 'rolled_back',
      reason: 'failed_disagreement',
    });
    expect(view.reason).toMatch(/^disagreement failed 2 evaluations in a row: disagreement \d+\/\d+/);
    expect(view.share).toBe(0);
    // the candidate stays loaded for inspection, with no share and no mirroring
    const models = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as {
      models: {
        name: string;
        aliases: Record<string, string>;
        canary_percent: number;
        shadow: boolean;
        versions: { version: string }[];
      }[];
    };
    const digitsModel = models.models.find((m) => m.name === 'digits')!;
    expect(digitsModel.aliases.candidate).toBe('2');
    expect(digitsModel.canary_percent).toBe(0);
    expect(digitsModel.shadow).toBe(false);
    expect(digitsModel.versions.map((v) => v.version)).toContain('2');
    // a finished rollout cannot be paused; its record is still there
    const pause = await postJson(`${server.adminUrl}/api/models/digits/rollout/pause`, {});
    expect(pause.status).toBe(409);
    expect((await rollout(server.adminUrl)).view.state).toBe('rolled_back');
    // the CLI shows it; `--wait` on a finished rollout exits 1 unless it was promoted
    const status = await runCliToExit([
      'models',
      'rollout-status',
      'digits',
      '--wait',
      '--url',
      server.adminUrl,
    ]);
    expect(status.code).toBe(1);
    expect(status.out).toContain('digits: 2 over 1 — rolled_back, step 1/1, candidate share 0%');
    expect(status.out).toContain('step_0 → rolled_back (failed_disagreement)');
    const metrics = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(lintExposition(metrics)).toEqual([]);
    if (spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0)
      expect(spawnSync('promtool', ['check', 'metrics'], { input: metrics, encoding: 'utf8' }).stdout).toBe(
        '',
      );
    expect(metrics).toMatch(/streaminfer_rollout_state\{model="digits",state="rolled_back"\} 1/);
    expect(metrics).toMatch(/streaminfer_rollout_check_verdict\{model="digits",check="disagreement"\} -1/);
  });

  test('bad requests are typed errors, never a crash', async () => {
    const cases: [string, string, unknown, number, string][] = [
      ['POST', '/api/models/nope/rollout', { version: '1' }, 404, 'not_found'],
      ['POST', '/api/models/digits/rollout', { version: '9' }, 404, 'not_found'],
      ['POST', '/api/models/digits/rollout', { version: '1' }, 400, 'bad_request'], // 1 is stable
      ['POST', '/api/models/digits/rollout', { version: '2', steps: [50, 10] }, 400, 'bad_request'],
      ['POST', '/api/models/digits/rollout', { version: '2', chekcs: {} }, 400, 'bad_request'],
      ['POST', '/api/models/digits/rollout', '[1]', 400, 'bad_request'],
      ['POST', '/api/models/digits/rollout/resume', {}, 409, 'conflict'],
      ['GET', '/api/models/nope/rollout', undefined, 404, 'not_found'],
      ['PUT', '/api/models/digits/rollout', {}, 405, 'method_not_allowed'],
      ['GET', '/api/models/digits/rollout/abort', undefined, 405, 'method_not_allowed'],
      ['POST', '/api/models/%zz/rollout', {}, 400, 'bad_request'],
    ];
    for (const [method, url, body, status, code] of cases) {
      const response = await fetch(`${server.adminUrl}${url}`, {
        method,
        headers: { 'content-type': 'application/json' },
        ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
      });
      const answer = (await response.json()) as { code?: string };
      expect([url, response.status, answer.code]).toEqual([url, status, code]);
    }
    // random bodies: always a JSON answer below 500
    for (let i = 0; i < 200; i++) {
      const values = [null, 0, -1, 1e9, 'x', [], {}, [5, 10], true, { max: 2 }, Number.NaN];
      const pick = () => values[Math.floor(Math.random() * values.length)];
      const body: Record<string, unknown> = {};
      for (const key of [
        'version',
        'steps',
        'dwell_s',
        'min_requests',
        'interval_s',
        'shadow',
        'checks',
        'junk',
      ])
        if (Math.random() < 0.5) body[key] = pick();
      const response = await fetch(`${server.adminUrl}/api/models/digits/rollout`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const answer = (await response.json()) as { code?: string; rollout?: unknown };
      expect(response.status).toBeLessThan(500);
      if (response.status === 200) {
        // it started one: abort it so the next can start
        expect((await postJson(`${server.adminUrl}/api/models/digits/rollout/abort`, {})).status).toBe(200);
      } else expect(typeof answer.code).toBe('string');
    }
  });
});
