/**
 * The fleet's proof: three `streaminfer serve` hosts, each in its own network namespace with its own address,
 * one fleet on a nats-server of the test's own (on the bridge). Canary seen fleet-wide, a fleet promote under
 * load, a host killed mid-PREPARE, a host partitioned at COMMIT, two operators at once, NATS stopped under load.
 * Without network namespaces (not root, no `ip netns`), the hosts share the loopback on distinct ports and the
 * partition case is skipped, saying so.
 */
import { createHash, randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  admin,
  FLEET_TOKEN,
  type FleetHost,
  health,
  pixels,
  probeFromInside,
  pulledFile,
  startFleetHost,
  stopHost,
  waitFor,
} from './fleet-kit';
import { type Answer, MODELS_DIR, runCliToExit, sleep, WsClient } from './harness';
import { createFleetNet, type FleetNet } from './netns-kit';

jest.setTimeout(240_000);

const FLEET = `t${randomBytes(3).toString('hex')}`;
// Short enough for a test: a host silent in a step this long fails it; a prepared host waits this long for COMMIT.
const STEP_ENV = { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '4000' };

let net: FleetNet;
const hosts: FleetHost[] = [];

async function epochOf(host: FleetHost): Promise<number | undefined> {
  const answer = await health(host.url);
  return answer?.body.epoch as number | undefined;
}

async function fleetView(host: FleetHost) {
  return (await admin(host.adminUrl, 'GET', '/api/fleet')).body as {
    epoch: number;
    revision: number;
    hosts: Array<{ host: string; epoch: number; ready: boolean; fenced: boolean }>;
  };
}

/** Every host at `epoch`, ready and not fenced, by its own heartbeat and its own /health. */
async function converged(epoch: number, timeoutMs = 30_000): Promise<void> {
  await waitFor(
    async () => {
      const epochs = await Promise.all(hosts.map(epochOf));
      return epochs.every((e) => e === epoch);
    },
    timeoutMs,
    () => `hosts did not all reach epoch ${epoch}`,
  );
}

/** Host i again, with test hooks in its environment, once every host is back at `epoch`. */
async function restartHost(i: number, env: Record<string, string>, epoch: number): Promise<void> {
  await stopHost(hosts[i]!);
  hosts[i] = await startFleetHost(net, i, { fleet: FLEET, env: { ...STEP_ENV, ...env } });
  await converged(epoch);
}

/** Load on every host: one WebSocket connection each, `inFlight` requests at a time, until stopped. */
function load(inFlight = 4) {
  let running = true;
  const answers: Array<{ host: number; answer: Answer }> = [];
  const failures: Array<{ host: number; error: string }> = [];
  const done = Promise.all(
    hosts.map(async (host, h) => {
      const client = await WsClient.connect(host.wsUrl);
      let id = 0;
      await Promise.all(
        Array.from({ length: inFlight }, async () => {
          while (running) {
            const n = id++;
            try {
              const answer = await client.request({ id: n, model: 'digits', input: pixels(n) }, 30_000);
              if (answer.type === 'error')
                failures.push({ host: h, error: `${answer.code}: ${answer.message}` });
              else answers.push({ host: h, answer });
            } catch (error) {
              failures.push({ host: h, error: (error as Error).message });
            }
          }
        }),
      );
      client.close();
    }),
  );
  return {
    answers,
    failures,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

beforeAll(async () => {
  net = await createFleetNet({ hosts: 3, prefix: 'sif' });
  await net.startNats();
  // One at a time: the first founds the fleet with its table, the others join it.
  for (let i = 0; i < 3; i++) hosts.push(await startFleetHost(net, i, { fleet: FLEET, env: STEP_ENV }));
});

afterAll(async () => {
  await Promise.all(hosts.map((host) => stopHost(host)));
  await net?.destroy();
});

describe('a fleet of three hosts', () => {
  test('the hosts see one another and serve the fleet’s table at the fleet’s epoch', async () => {
    await waitFor(
      async () => (await fleetView(hosts[0]!)).hosts?.length === 3,
      15_000,
      () => 'three hosts never heartbeated',
    );
    const view = await fleetView(hosts[2]!);
    expect(view.hosts.map((h) => h.host)).toEqual(['h0', 'h1', 'h2']);
    expect(new Set(view.hosts.map((h) => h.epoch))).toEqual(new Set([view.epoch]));
  });

  test('canary 10% set once on one host is seen by all three (±2 pp over 3,000 requests)', async () => {
    const candidate = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '1',
    });
    expect(candidate.status).toBe(200);
    const canary = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 10 });
    expect(canary.status).toBe(200);
    const epoch = canary.body.epoch as number;
    await converged(epoch);
    const versions = await Promise.all(
      hosts.map(async (host) => {
        const client = await WsClient.connect(host.wsUrl);
        const seen: string[] = [];
        for (let k = 0; k < 1000; k += 50)
          seen.push(
            ...(
              await Promise.all(
                Array.from({ length: 50 }, (_, j) =>
                  client.request({ id: k + j, model: 'digits', input: pixels(k + j) }),
                ),
              )
            ).map((answer) => answer.version!),
          );
        client.close();
        return seen;
      }),
    );
    for (const [h, seen] of versions.entries()) {
      const share = seen.filter((v) => v === '1').length / seen.length;
      // Each host alone: 1,000 requests, 10% ± 3.5 pp (about 4 standard deviations).
      expect({ host: h, ok: share > 0.065 && share < 0.135 }).toEqual({ host: h, ok: true });
    }
    const all = versions.flat();
    const share = all.filter((v) => v === '1').length / all.length;
    expect(all).toHaveLength(3000);
    expect(Math.abs(share - 0.1)).toBeLessThanOrEqual(0.02);
  });

  test('a fleet promote under load: every host switches, 0 failed, never the old version after the new on a connection', async () => {
    // Candidate 1 on 0% share: only the promote moves traffic to it.
    expect(
      (await admin(hosts[2]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 0 })).status,
    ).toBe(200);
    const traffic = load();
    await sleep(1500);
    const promote = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/promote');
    expect(promote.status).toBe(200);
    expect(promote.body.fleet).toMatchObject({
      hosts: [
        { host: 'h0', state: 'committed' },
        { host: 'h1', state: 'committed' },
        { host: 'h2', state: 'committed' },
      ],
    });
    await sleep(1500);
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
    for (let h = 0; h < 3; h++) {
      const seen = traffic.answers.filter((a) => a.host === h).map((a) => a.answer.version);
      const firstNew = seen.indexOf('1');
      expect(firstNew).toBeGreaterThan(0);
      expect(seen.slice(firstNew).filter((v) => v !== '1')).toEqual([]);
    }
    await converged(promote.body.epoch as number);
  });

  test('two operators at once: exactly one wins, the other gets 409 conflict with the current state', async () => {
    const before = await fleetView(hosts[0]!);
    const [a, b] = await Promise.all([
      admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/rollback'),
      admin(hosts[2]!.adminUrl, 'POST', '/api/models/digits/rollback'),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 409]);
    const loser = a.status === 409 ? a : b;
    expect(loser.body).toMatchObject({ code: 'conflict' });
    // A write from a stale revision loses too, with what won.
    const stale = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/canary', {
      percent: 5,
      if_revision: before.revision,
    });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ code: 'conflict', current: { revision: before.revision + 1 } });
    // Two at once on the same host: the same rule.
    const [c, d] = await Promise.all([
      admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' }),
      admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '2' }),
    ]);
    expect([c.status, d.status].sort()).toEqual([200, 409]);
    expect((c.status === 409 ? c : d).body).toMatchObject({ code: 'conflict' });
    await converged((c.status === 200 ? c : d).body.epoch as number);
  });

  test('--strategy rolling goes host by host: every host rolled, each at the fleet epoch', async () => {
    const current = await fleetView(hosts[0]!);
    const stable = (current as unknown as { record: { table: { models: Array<{ stable: string }> } } }).record
      .table.models[0]!.stable;
    const target = stable === '1' ? '2' : '1';
    const rolled = await admin(hosts[2]!.adminUrl, 'POST', '/api/reload', {
      model: 'digits',
      version: target,
      strategy: 'rolling',
    });
    expect(rolled.status).toBe(200);
    expect(rolled.body).toMatchObject({
      strategy: 'rolling',
      epoch: current.epoch + 1,
      fleet: {
        hosts: [
          { host: 'h0', state: 'rolled' },
          { host: 'h1', state: 'rolled' },
          { host: 'h2', state: 'rolled' },
        ],
      },
    });
    await converged(current.epoch + 1);
    // Every host in its turn, the coordinator (h2, last in the order) included: none caught up on its own.
    for (const host of hosts) {
      expect(host.logs()).toContain(`fleet roll to epoch ${current.epoch + 1}`);
      expect(host.logs()).not.toContain(`caught up to fleet epoch ${current.epoch + 1} (`);
    }
    for (const host of hosts) {
      const models = (await health(host.url))!.body.models as Array<{ aliases: { stable: string } }>;
      expect(models[0]!.aliases.stable).toBe(target);
    }
  });

  test('hostile admin bodies on a fleet host: typed 4xx, nothing written, the host still serving', async () => {
    const before = await fleetView(hosts[0]!);
    const cases: Array<[string, unknown]> = [
      ['/api/models/digits/canary', { percent: 10, if_revision: 'seven' }],
      ['/api/models/digits/canary', { percent: 10, if_revision: -1 }],
      ['/api/models/digits/canary', { percent: 'ten' }],
      ['/api/models/digits/candidate', { version: '99' }],
      ['/api/models/nope/promote', {}],
      ['/api/reload', { model: 'digits', version: '1', if_revision: 1.5 }],
      ['/api/reload', { model: 'digits', version: '../../etc' }],
      ['/api/fleet', {}],
    ];
    for (const [route, body] of cases) {
      const answer = await admin(hosts[1]!.adminUrl, 'POST', route, body);
      expect({ route, body, status: answer.status >= 400 && answer.status < 500 }).toEqual({
        route,
        body,
        status: true,
      });
      expect(typeof answer.body.code).toBe('string');
    }
    const after = await fleetView(hosts[0]!);
    expect(after.revision).toBe(before.revision);
    expect((await health(hosts[1]!.url))?.status).toBe(200);
  });

  test('a version pushed to the fleet is fetched by every host that lacks it, checksum verified, before it loads', async () => {
    // Version 3 exists nowhere but in an operator's directory: `models push` puts it in the fleet's store.
    const operator = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-push-'));
    cpSync(path.join(MODELS_DIR, 'digits'), path.join(operator, 'digits'), { recursive: true });
    cpSync(path.join(operator, 'digits', '1'), path.join(operator, 'digits', '3'), { recursive: true });
    const pushed = await runCliToExit([
      'models',
      'push',
      'digits',
      '3',
      '--models-dir',
      operator,
      '--cluster',
      net.natsUrl,
      '--fleet',
      FLEET,
      '--json',
    ]);
    expect(pushed.code).toBe(0);
    const sha256 = (JSON.parse(pushed.out.trim().split('\n').pop()!) as { sha256: string }).sha256;
    const local = createHash('sha256')
      .update(readFileSync(path.join(operator, 'digits', '3', 'model.onnx')))
      .digest('hex');
    expect(sha256).toBe(local);
    for (const host of hosts) expect(existsSync(path.join(host.modelsDir, 'digits', '3'))).toBe(false);
    const candidate = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '3',
    });
    expect(candidate.status).toBe(200);
    await converged(candidate.body.epoch as number);
    for (const host of hosts) {
      const file = pulledFile(host, 'digits', '3');
      expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(sha256);
    }
    const client = await WsClient.connect(hosts[2]!.wsUrl);
    expect((await client.request({ id: 1, model: 'digits', version: '3', input: pixels(1) })).version).toBe(
      '3',
    );
    client.close();
    // A version pushed nowhere and missing here: refused, nothing written.
    const before = (await fleetView(hosts[0]!)).revision;
    const missing = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '9' });
    expect(missing.status).toBeGreaterThanOrEqual(400);
    expect((await fleetView(hosts[0]!)).revision).toBe(before);
  });

  test('a host killed mid-PREPARE aborts the reload everywhere: nothing changes', async () => {
    const epoch = (await fleetView(hosts[0]!)).epoch;
    // h2 holds every PREPARE for 20 s: it is killed inside it.
    await restartHost(2, { STREAMINFER_TEST_HOLD_PREPARE_MS: '20000' }, epoch);
    // A new candidate: every host's nodes PREPARE it.
    const reload = admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
    await waitFor(
      () => hosts[2]!.logs().includes('holding PREPARE'),
      15_000,
      () => `h2 never received PREPARE:\n${hosts[2]!.logs().slice(-2000)}`,
    );
    await stopHost(hosts[2]!, 'SIGKILL');
    const answer = await reload;
    expect(answer.status).toBe(500);
    expect(answer.body).toMatchObject({ code: 'reload_failed' });
    expect(String(answer.body.message)).toContain('h2');
    expect((await fleetView(hosts[0]!)).epoch).toBe(epoch);
    expect(await epochOf(hosts[0]!)).toBe(epoch);
    expect(await epochOf(hosts[1]!)).toBe(epoch);
    // h2 comes back and joins at the fleet's epoch.
    hosts[2] = await startFleetHost(net, 2, { fleet: FLEET, env: STEP_ENV });
    await converged(epoch);
  });

  test('a host partitioned at COMMIT is fenced, and rejoins at the new epoch once it is back', async () => {
    if (!net.available) {
      console.warn('fleet: no network namespaces here; the partition case needs them and is skipped');
      return;
    }
    const epoch = (await fleetView(hosts[0]!)).epoch;
    // h0 coordinates, and holds the commit point 3 s after every host prepared: h1 is cut off meanwhile.
    await restartHost(0, { STREAMINFER_TEST_FLEET_COMMIT_DELAY_MS: '3000' }, epoch);
    const reload = admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
    await waitFor(
      () => hosts[0]!.logs().includes('holding the commit point'),
      15_000,
      () => 'the coordinator never reached its commit point',
    );
    net.partition(1);
    const answer = await reload;
    expect(answer.status).toBe(200);
    expect(answer.body.fleet).toMatchObject({
      hosts: expect.arrayContaining([{ host: 'h1', state: 'fenced', error: expect.any(String) }]),
    });
    const next = answer.body.epoch as number;
    expect(next).toBe(epoch + 1);
    // Inside its namespace, h1 refuses traffic while in doubt.
    await waitFor(
      () => hosts[1]!.logs().includes('fleet: fenced'),
      20_000,
      () => `h1 was not fenced:\n${hosts[1]!.logs().slice(-2000)}`,
    );
    // Fenced: not ready, and a request is refused (the typed `fenced`), not served from a table in doubt.
    expect(await probeFromInside(net, hosts[1]!)).toEqual({ health: 503, code: 'fenced' });
    await net.heal(1);
    await converged(next, 60_000);
    expect((await health(hosts[1]!.url))?.status).toBe(200);
    expect(hosts[1]!.logs()).toContain('fence lifted');
    const metrics = await (
      await fetch(`${hosts[1]!.adminUrl}/metrics`, { headers: { authorization: `Bearer ${FLEET_TOKEN}` } })
    ).text();
    expect(metrics).toMatch(/^streaminfer_fleet_in_doubt_total 1$/m);
    expect(metrics).toMatch(/^streaminfer_fleet_fenced 0$/m);
    expect(metrics).toMatch(new RegExp(`^streaminfer_fleet_record_epoch ${next}$`, 'm'));
    expect(metrics).toMatch(/^streaminfer_fleet_cluster_up 1$/m);
  });

  test('NATS stopped for 10 s under load: 0 failed requests, writes refused cluster_unavailable, converged after', async () => {
    const epoch = (await fleetView(hosts[0]!)).epoch;
    const traffic = load(2);
    await sleep(1000);
    await net.stopNats();
    await sleep(1500);
    const refused = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 30 });
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ code: 'cluster_unavailable' });
    expect(
      await (
        await fetch(`${hosts[1]!.adminUrl}/metrics`, { headers: { authorization: `Bearer ${FLEET_TOKEN}` } })
      ).text(),
    ).toMatch(/^streaminfer_fleet_cluster_up 0$/m);
    expect((await admin(hosts[2]!.adminUrl, 'GET', '/api/fleet')).body).toMatchObject({
      code: 'cluster_unavailable',
    });
    await sleep(8500);
    await net.startNats();
    await waitFor(
      async () =>
        (await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 30 })).status ===
        200,
      30_000,
      () => 'admin writes never worked again after NATS came back',
    );
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
    expect(traffic.answers.length).toBeGreaterThan(100);
    await converged(epoch + 1);
  });
});
