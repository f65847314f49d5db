/**
 * The registry record's failure modes on a real two-host fleet (loopback, the shared test broker of broker-kit, a
 * fleet name of its own): a well-formed record naming a version no host has, a garbage record,
 * and a registry bucket lost while a host keeps running at a higher epoch. Each is written or deleted behind the
 * hosts' backs, as a bad restore or anyone with NATS access would.
 */
import { randomBytes } from 'node:crypto';
import { Kvm } from '@nats-io/kv';
import {
  connectFleet,
  type FleetConnection,
  type FleetRecord,
  RegistryStore,
} from '../../apps/supervisor/fleet';
import { TEST_NATS_URL } from './broker-kit';
import {
  admin,
  FLEET_TOKEN,
  type FleetHost,
  health,
  pixels,
  startFleetHost,
  stopHost,
  waitFor,
} from './fleet-kit';
import { createFleetNet, type FleetNet } from './netns-kit';

jest.setTimeout(120_000);

const NATS_URL = TEST_NATS_URL;
const FLEET = `fr${randomBytes(4).toString('hex')}`;
const HOST_OPTIONS = { fleet: FLEET, cluster: NATS_URL, env: { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '3000' } };

let net: FleetNet;
let nats: FleetConnection;
let store: RegistryStore;
const hosts: FleetHost[] = [];

beforeAll(async () => {
  net = await createFleetNet({ hosts: 2, isolation: 'loopback', prefix: 'sfr' });
  nats = await connectFleet({
    servers: NATS_URL,
    fleet: FLEET,
    hostId: 'operator',
    name: 'fleet-record-test',
  });
  // One at a time: the first founds the fleet, the second joins it.
  for (const i of [0, 1]) hosts.push(await startFleetHost(net, i, HOST_OPTIONS));
  store = await RegistryStore.open(nats);
});

afterAll(async () => {
  await Promise.all(hosts.map((host) => stopHost(host)));
  for (const stream of [
    `KV_streaminfer_fleet_${FLEET}`,
    `KV_streaminfer_fleet_${FLEET}_hosts`,
    `KV_streaminfer_fleet_${FLEET}_lease`,
    `OBJ_streaminfer_models_${FLEET}`,
  ])
    await nats?.jsm.streams.delete(stream).catch(() => undefined);
  await nats?.close();
  await net?.destroy();
});

async function predict(host: FleetHost): Promise<string> {
  const response = await fetch(`${host.url}/predict`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: 1, model: 'digits', input: pixels(host.index) }),
  });
  const body = (await response.json()) as { code?: string };
  return `${response.status} ${body.code ?? 'ok'}`;
}

async function metrics(host: FleetHost): Promise<string> {
  const response = await fetch(`${host.adminUrl}/metrics`, {
    headers: { authorization: `Bearer ${FLEET_TOKEN}` },
  });
  return response.text();
}

/** Both hosts answer /health 200 `ok` at one epoch above `above`; resolves with that epoch. */
async function together(above: number): Promise<number> {
  let epochs: unknown[] = [];
  await waitFor(
    async () => {
      const answers = await Promise.all(hosts.map((host) => health(host.url)));
      epochs = answers.map((answer) =>
        answer?.body.status === 'ok' ? answer.body.epoch : `${answer?.body.status}: ${answer?.body.behind}`,
      );
      return typeof epochs[0] === 'number' && epochs[0] > above && epochs[1] === epochs[0];
    },
    20_000,
    () => `hosts not together above epoch ${above}: ${JSON.stringify(epochs)}`,
  );
  return epochs[0] as number;
}

describe('the registry record behind the hosts’ backs', () => {
  test('a record naming a version no host has: every host keeps serving, degraded; POST /api/reload {} repairs', async () => {
    const current = (await store.read())!;
    const bad: FleetRecord = {
      ...current.record,
      epoch: current.record.epoch + 1,
      table: { defaultModel: 'digits', models: [{ name: 'digits', versions: ['99'], stable: '99' }] },
      reloadId: 'bad-restore',
      reason: 'a bad restore',
    };
    await store.commit(bad, current.revision);
    for (const host of hosts)
      await waitFor(
        async () => (await health(host.url))?.body.status === 'degraded',
        10_000,
        () => `host ${host.id} never said it is behind`,
      );
    for (const host of hosts) {
      const answer = (await health(host.url))!;
      expect(answer.status).toBe(200);
      expect(answer.body.behind).toContain('version 99 of model digits');
      expect(answer.body.epoch).toBe(current.record.epoch);
      expect(await predict(host)).toBe('200 ok');
      const text = await metrics(host);
      expect(text).toMatch(/^streaminfer_fleet_behind 1$/m);
      expect(text).toMatch(/^streaminfer_fleet_fenced 0$/m);
    }
    // A host restarted under that record starts (on its own table), serving and degraded: no crash loop.
    await stopHost(hosts[1]!);
    hosts[1] = await startFleetHost(net, 1, HOST_OPTIONS);
    const restarted = (await health(hosts[1]!.url))!;
    expect([restarted.status, restarted.body.status]).toEqual([200, 'degraded']);
    expect(restarted.body.behind).toContain('version 99 of model digits');
    expect(await predict(hosts[1]!)).toBe('200 ok');
    const repaired = await admin(hosts[0]!.adminUrl, 'POST', '/api/reload', {});
    expect([repaired.status, repaired.body.result]).toEqual([200, 'committed']);
    expect(await together(bad.epoch)).toBe(repaired.body.epoch);
    expect(await metrics(hosts[1]!)).toMatch(/^streaminfer_fleet_behind 0$/m);
  });

  test('a garbage record: admin writes answer 503 invalid_record; POST /api/reload {} rewrites it by CAS', async () => {
    const before = (await store.read())!;
    const kv = await new Kvm(nats.js).open(`streaminfer_fleet_${FLEET}`);
    await kv.put('registry', '{"format": 1, "epoch": "garbage');
    const refused = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
    expect([refused.status, refused.body.code]).toEqual([503, 'invalid_record']);
    expect(refused.body.message).toContain('POST /api/reload {}');
    expect((await admin(hosts[0]!.adminUrl, 'GET', '/api/fleet')).body.code).toBe('invalid_record');
    // Serving goes on meanwhile, and a host restarted now starts (degraded) instead of exiting.
    for (const host of hosts) expect(await predict(host)).toBe('200 ok');
    await stopHost(hosts[0]!);
    hosts[0] = await startFleetHost(net, 0, HOST_OPTIONS);
    expect((await health(hosts[0]!.url))!.body.behind).toContain('cannot be read');
    const repaired = await admin(hosts[1]!.adminUrl, 'POST', '/api/reload', {});
    expect([repaired.status, repaired.body.result]).toEqual([200, 'committed']);
    const view = await admin(hosts[0]!.adminUrl, 'GET', '/api/fleet');
    expect(view.status).toBe(200);
    expect(view.body.epoch).toBeGreaterThan(before.record.epoch);
    await together(before.record.epoch);
    const candidate = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '1',
    });
    expect(candidate.status).toBe(200);
  });

  test('the registry bucket lost, a host restarted: the fleet epoch never goes back and changes go on', async () => {
    // Host h0 well past epoch 0 (so a fleet re-founded at 0 would be below it).
    await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
    for (const percent of [10, 15])
      expect((await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/canary', { percent })).status).toBe(
        200,
      );
    const epoch = await together(1);
    // NATS restarted without its store, as far as the fleet's registry and heartbeats go.
    for (const stream of [`KV_streaminfer_fleet_${FLEET}`, `KV_streaminfer_fleet_${FLEET}_hosts`])
      await nats.jsm.streams.delete(stream);
    await stopHost(hosts[1]!);
    hosts[1] = await startFleetHost(net, 1, HOST_OPTIONS);
    // Every change from here is taken by both hosts, at one epoch above the one they had.
    // Both hosts in the barrier (h0 heartbeats into the bucket h1 made anew).
    await waitFor(
      async () =>
        ((await admin(hosts[1]!.adminUrl, 'GET', '/api/fleet')).body.hosts as unknown[])?.length === 2,
      10_000,
      () => 'h0 never heartbeated into the new hosts bucket',
    );
    const canary = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
    const second = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 20 });
    const third = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/canary', { percent: 30 });
    // Unfixed, h0 answered every PREPARE after the first "a reload is in progress on this host".
    expect(
      [canary, second, third].map((answer) => [answer.status, answer.body.error ?? answer.body.message]),
    ).toEqual([
      [200, undefined],
      [200, undefined],
      [200, undefined],
    ]);
    expect(canary.body.epoch).toBeGreaterThan(epoch);
    const after = await together(canary.body.epoch as number);
    expect(after).toBe(third.body.epoch);
    const shares = await Promise.all(
      hosts.map(async (host) => {
        const models = (await admin(host.adminUrl, 'GET', '/api/models')).body.models as Array<{
          name: string;
          canary_percent: number;
        }>;
        return models.find((model) => model.name === 'digits')?.canary_percent;
      }),
    );
    expect(shares).toEqual([30, 30]);
  });
});
