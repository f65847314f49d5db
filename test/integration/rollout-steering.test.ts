/**
 * Anonymous clients must not steer a rollout. While a healthy candidate rolls out under a
 * light load, attacker connections send requests with an impossible deadline (`deadline_ms` 0.001): pinned
 * to the candidate by name and by the `candidate` alias, and routed to the canary side by a chosen
 * `routing_key`. Every one of them is answered `deadline_exceeded`, and none may count: pinned requests are
 * not the router's, and a deadline below the version's measured service time is the client's fault. The
 * mirror attack poisons the stable side the same way; the error-rate check must not move (before the fix it
 * read about −0.9: a bad candidate would have looked fine).
 */
import { routingKeyDraw } from '../../libs/registry';
import type { ServerHandle } from './harness';
import { postJson, sleep, startServer, WsClient } from './harness';
import { Load, pixels, quickPlan, rollout, type View, waitFor } from './rollout-kit';

/** A routing key whose draw lands below (canary side) or at/above (stable side) `fraction`. */
function routingKey(side: 'canary' | 'stable', fraction: number): string {
  for (let i = 0; ; i++) {
    const key = `attacker-${i}`;
    if (side === 'canary' ? routingKeyDraw(key) < fraction : routingKeyDraw(key) >= fraction) return key;
  }
}

/**
 * One attacker connection: `inFlight` requests at a time, each with an impossible deadline, until stopped.
 */
class Attacker {
  private running = true;
  readonly codes = new Map<string, number>();
  private readonly done: Promise<void>;

  constructor(wsUrl: string, fields: Record<string, unknown>, inFlight = 2) {
    this.done = WsClient.connect(wsUrl).then(async (client) => {
      let id = 0;
      await Promise.all(
        Array.from({ length: inFlight }, async () => {
          while (this.running) {
            // Once promoted, `candidate` names no version: a flood of unknown_version may close the
            // connection (1008, frame-cost.test.ts), which ends this attacker.
            const answer = await Promise.race([
              client.request({
                id: `a${id++}`,
                model: 'digits',
                deadline_ms: 0.001,
                input: pixels(id % 1797),
                ...fields,
              }),
              client.closed.then(() => undefined),
            ]);
            if (answer === undefined) break;
            const code = String(answer.code ?? 'ok');
            this.codes.set(code, (this.codes.get(code) ?? 0) + 1);
          }
        }),
      );
      client.close();
    });
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

const errorRate = (view: View) => view.checks.find((check) => check.name === 'error_rate');

describe('rollouts judge only what they routed', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['digits'],
      args: ['--nodes', '1', '--workers', '1', '--model', 'digits'],
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  test('pinned and short-deadline requests on the candidate do not roll a healthy candidate back', async () => {
    // stable 2, candidate 1 at 25 % then 50 %; the attack starts with the rollout, and one attacker pins the
    // stable version too, so both lanes of the one worker answer impossible deadlines at once
    // (test/integration/expired-lanes.test.ts is that case on its own).
    const load = new Load(server.wsUrl);
    let attackers: Attacker[] = [];
    let done: View;
    try {
      await sleep(300);
      const start = await postJson(`${server.adminUrl}/api/models/digits/rollout`, quickPlan([25, 50, 100]));
      expect(start.status).toBe(200);
      attackers = [
        new Attacker(server.wsUrl, { version: '1' }),
        new Attacker(server.wsUrl, { version: 'candidate' }),
        new Attacker(server.wsUrl, { routing_key: routingKey('canary', 0.25) }),
        new Attacker(server.wsUrl, { version: 'stable' }),
      ];
      done = await waitFor(server.adminUrl, (v) => v.state !== 'progressing', 30000);
    } finally {
      await load.stop();
      await Promise.all(attackers.map((attacker) => attacker.stop()));
    }
    for (const attacker of attackers) {
      console.log(`attacker answers: ${JSON.stringify(Object.fromEntries(attacker.codes))}`);
      expect(attacker.codes.get('deadline_exceeded') ?? 0).toBeGreaterThan(100);
    }
    expect(done.state).toBe('promoted');
    expect(done.transitions.map((t) => t.reason)).toEqual(['started', 'step_passed', 'all_steps_passed']);
  }, 60000);

  test('the mirror attack on the stable side does not move the error-rate check', async () => {
    // stable 1 after the first test (2 if it failed): the other version at 25 % then 50 %; the stable side is the
    // draws at or above 0.5.
    const listing = (await (await fetch(`${server.adminUrl}/api/models`)).json()) as {
      models: { name: string; aliases: Record<string, string> }[];
    };
    const stable = listing.models.find((m) => m.name === 'digits')!.aliases.stable!;
    const load = new Load(server.wsUrl);
    const values: number[] = [];
    let attackers: Attacker[] = [];
    let done: View;
    try {
      await sleep(300);
      const start = await postJson(`${server.adminUrl}/api/models/digits/rollout`, {
        ...quickPlan([25, 50, 100]),
        version: stable === '1' ? '2' : '1',
      });
      expect(start.status).toBe(200);
      attackers = [
        new Attacker(server.wsUrl, { version: stable }),
        new Attacker(server.wsUrl, { version: 'stable' }),
        new Attacker(server.wsUrl, { routing_key: routingKey('stable', 0.5) }),
      ];
      const deadline = Date.now() + 30000;
      for (;;) {
        done = (await rollout(server.adminUrl)).view;
        const value = errorRate(done)?.value;
        if (typeof value === 'number') values.push(value);
        if (done.state !== 'progressing' || Date.now() > deadline) break;
        await sleep(100);
      }
    } finally {
      await load.stop();
      await Promise.all(attackers.map((attacker) => attacker.stop()));
    }
    for (const attacker of attackers)
      expect(attacker.codes.get('deadline_exceeded') ?? 0).toBeGreaterThan(100);
    console.log(
      `error-rate check values under the stable-side attack: min ${Math.min(...values)}, max ${Math.max(...values)}, n ${values.length}`,
    );
    expect(values.length).toBeGreaterThan(0);
    expect(Math.min(...values)).toBeGreaterThan(-0.05);
    expect(done.state).toBe('promoted');
  }, 60000);
});
