/**
 * A rollout survives a restart of the supervisor: stopped (SIGTERM) while at step 1, the server comes back on
 * the same state directory, serves step 1's share from its first answer (the registry state), resumes the
 * rollout at step 1 with the step's clock kept, and carries it on to the promotion. Started once more on the
 * same state directory, the promoted rollout stays finished: version reloads of the model go through.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ServerHandle } from './harness';
import { postJson, startServer } from './harness';
import { Load, quickPlan, rollout, type View, waitFor } from './rollout-kit';

describe('progressive delivery: a restart resumes the rollout at its step', () => {
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'rollout-restart-'));
  const start = () =>
    startServer({
      models: ['digits'],
      args: ['--nodes', '1', '--workers', '1', '--model', 'digits'],
      env: { STREAMINFER_STATE_DIR: stateDir },
    });
  let server: ServerHandle | undefined;
  afterAll(async () => {
    await server?.stop();
  });

  test('stop at step 1, start again: step 1, then promoted', async () => {
    server = await start();
    let load = new Load(server.wsUrl);
    let before: View;
    try {
      const started = await postJson(`${server.adminUrl}/api/models/digits/rollout`, quickPlan([10, 30, 60]));
      expect(started.status).toBe(200);
      before = await waitFor(server.adminUrl, (v) => v.step >= 1);
    } finally {
      await load.stop();
    }
    expect(before).toMatchObject({ state: 'progressing', step: 1, share: 30 });
    await server.stop();
    const persisted = JSON.parse(readFileSync(path.join(stateDir, 'rollouts.json'), 'utf8')) as {
      rollouts: { driver: string; record: { state: string; step: number } }[];
    };
    expect(persisted.rollouts[0]).toMatchObject({
      driver: 'local',
      record: { state: 'progressing', step: 1 },
    });

    server = await start();
    const after = (await rollout(server.adminUrl)).view;
    expect(after).toMatchObject({ state: 'progressing', step: 1, share: 30, candidate: '1', stable: '2' });
    expect(after.step_started_at).toBe(before.step_started_at);
    expect(server.logs()).toContain('rollout resumed after a restart');
    const models = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as {
      models: { name: string; canary_percent: number }[];
    };
    expect(models.models.find((m) => m.name === 'digits')!.canary_percent).toBe(30);
    load = new Load(server.wsUrl);
    try {
      const done = await waitFor(server.adminUrl, (v) => v.state !== 'progressing');
      expect(done.state).toBe('promoted');
      expect(done.transitions.map((t) => `${t.from}>${t.to}`)).toEqual([
        'none>step_0',
        'step_0>step_1',
        'step_1>step_2',
        'step_2>promoted',
      ]);
    } finally {
      await load.stop();
    }
  });

  // A promoted rollout must not come back to life after a restart on the same state dir.
  test('promoted, start again: version reloads of the model are never refused as "a rollout is running"', async () => {
    const persisted = () =>
      (
        JSON.parse(readFileSync(path.join(stateDir, 'rollouts.json'), 'utf8')) as {
          rollouts: { settled: boolean; record: { state: string } }[];
        }
      ).rollouts[0]!;
    // Promoted and settled (the registry holds the promotion): nothing is left for a restart to finish.
    for (let tries = 0; tries < 100 && !persisted().settled; tries++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    expect(persisted()).toMatchObject({ settled: true, record: { state: 'promoted' } });
    await server!.stop();
    server = await start();
    for (const version of ['2', '1', '2', '1']) {
      const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version });
      expect([reload.status, reload.body.result, reload.body.message]).toEqual([200, 'committed', undefined]);
      expect((await rollout(server.adminUrl)).view.state).toBe('promoted');
    }
    expect(server.logs()).not.toContain('rollout resumed after a restart');
  });
});
