/**
 * Progressive delivery in a fleet (two hosts on loopback, on the shared test broker of
 * broker-kit): a rollout started on one host moves the share on every host (the fleet's barrier) and is
 * readable from any host (KV `rollout.<model>`); when its driver stops, the other host takes it over at its
 * step and carries it to the promotion.
 */
import { randomBytes } from 'node:crypto';
import { connectFleet } from '../../apps/supervisor/fleet';
import { TEST_NATS_URL } from './broker-kit';
import type { ServerHandle } from './harness';
import { postJson, sleep, startServer } from './harness';
import { Load, quickPlan, rollout, stableOf, waitFor } from './rollout-kit';

const NATS_URL = TEST_NATS_URL;

describe('progressive delivery in a fleet', () => {
  const fleet = `r${process.pid}_${randomBytes(4).toString('hex')}`;
  const hosts: ServerHandle[] = [];
  const start = (id: string) =>
    startServer({
      models: ['digits'],
      args: [
        '--nodes',
        '1',
        '--workers',
        '1',
        '--model',
        'digits',
        '--cluster',
        NATS_URL,
        '--fleet',
        fleet,
        '--host-id',
        id,
      ],
      env: { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '3000' },
    });
  afterAll(async () => {
    for (const host of hosts) await host.stop();
    const conn = await connectFleet({
      servers: NATS_URL,
      fleet,
      hostId: 'cleanup',
      name: 'rollout-fleet-test',
    });
    for (const stream of [
      `KV_streaminfer_fleet_${fleet}`,
      `KV_streaminfer_fleet_${fleet}_hosts`,
      `KV_streaminfer_fleet_${fleet}_lease`,
      `OBJ_streaminfer_models_${fleet}`,
    ])
      await conn.jsm.streams.delete(stream).catch(() => undefined);
    await conn.close();
  });

  test('every host follows; the second host takes over when the driver stops', async () => {
    hosts.push(await start('ha'), await start('hb'));
    const [a, b] = hosts as [ServerHandle, ServerHandle];
    let load = new Load(a.wsUrl);
    try {
      const started = await postJson(`${a.adminUrl}/api/models/digits/rollout`, quickPlan([20, 40, 60]));
      expect(started.status).toBe(200);
      // the share is the fleet's: host b serves it too, and reads the rollout from the fleet's store
      const models = (await (await fetch(`${b.adminUrl}/api/models`)).json()) as {
        models: { name: string; canary_percent: number; aliases: Record<string, string> }[];
      };
      expect(models.models.find((m) => m.name === 'digits')).toMatchObject({
        canary_percent: 20,
        aliases: { stable: '2', candidate: '1' },
      });
      expect((await rollout(b.adminUrl)).view).toMatchObject({ state: 'progressing', candidate: '1' });
      // a second start on the other host is refused: one rollout per model in the fleet
      expect((await postJson(`${b.adminUrl}/api/models/digits/rollout`, { version: '1' })).status).toBe(409);
      await waitFor(a.adminUrl, (v) => v.step >= 1);
      // Stop the driver once step 1's share is the fleet's (a host stopped in the middle of coordinating a
      // fleet change leaves the coordinator lease to expire, 15 s, before anyone can change the fleet again).
      const deadline = Date.now() + 10000;
      while (Date.now() < deadline) {
        const listing = (await (await fetch(`${b.adminUrl}/api/models`)).json()) as {
          models: { name: string; canary_percent: number }[];
        };
        if (listing.models.find((m) => m.name === 'digits')!.canary_percent === 40) break;
        await sleep(50);
      }
    } finally {
      await load.stop();
    }
    const stoppedAt = Date.now();
    await a.stop();
    load = new Load(b.wsUrl);
    try {
      const done = await waitFor(b.adminUrl, (v) => v.state === 'promoted', 30000);
      console.log(`fleet takeover to promotion: ${Date.now() - stoppedAt} ms after the driver stopped`);
      expect(done.transitions.map((t) => t.to)).toEqual(['step_0', 'step_1', 'step_2', 'promoted']);
    } finally {
      await load.stop();
    }
    expect(b.logs()).toContain('rollout taken over from a silent host');
    // the promotion itself goes through the fleet's barrier in the same evaluation
    const stable = await stableOf(b.adminUrl, '1');
    if (stable !== '1')
      console.log(
        b
          .logs()
          .split('\n')
          .filter((line) => /rollout|reload|fleet/.test(line))
          .slice(-30)
          .join('\n'),
      );
    expect(stable).toBe('1');
  }, 60000);
});
