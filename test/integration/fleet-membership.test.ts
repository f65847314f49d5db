/**
 * Fleet membership: three hosts on loopback, on the shared test broker (broker-kit), one fleet of a name of their own. Membership is the registry record's `members` (joined and
 * left by CAS), never the heartbeat bucket: a heartbeat key for a host that is not a member is ignored; a
 * member killed (-9) is skipped at once (no responder on its step subject); an operator excludes a silent
 * (SIGSTOPped) member and the next change goes on without it; the excluded host, woken, re-joins by CAS once
 * it has caught up, and a host stopped cleanly leaves.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connectFleet, type HostBeat, HostBoard } from '../../apps/supervisor/fleet';
import { TEST_NATS_URL } from './broker-kit';
import { admin, FLEET_TOKEN, type FleetHost, health, startFleetHost, stopHost, waitFor } from './fleet-kit';
import { runCliToExit } from './harness';
import { createFleetNet, type FleetNet } from './netns-kit';

jest.setTimeout(120_000);

const NATS_URL = TEST_NATS_URL;
const FLEET = `m${randomBytes(3).toString('hex')}`;
// A step timeout well above the heartbeat TTL (10 s): a silent member must not cost a change the step timeout.
const ENV = { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '30000' };

let net: FleetNet;
const hosts: FleetHost[] = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-membership-'));
const tokenFile = path.join(tmp, 'token');
writeFileSync(tokenFile, FLEET_TOKEN, { mode: 0o600 });

interface View {
  epoch: number;
  members: Array<{ host: string; live: boolean }>;
  strangers: string[];
  hosts: Array<{ host: string }>;
}

async function view(host: FleetHost): Promise<View> {
  return (await admin(host.adminUrl, 'GET', '/api/fleet')).body as unknown as View;
}

const memberIds = async (host: FleetHost) => (await view(host)).members?.map((m) => m.host);

/** A canary share change asked of host 0: its answer and how long it took. */
async function change(percent: number) {
  const started = Date.now();
  const answer = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/canary', { percent });
  return { ...answer, ms: Date.now() - started };
}

/** A well-formed heartbeat of a host that does not exist. */
function ghostBeat(now: string): HostBeat {
  return {
    host: 'ghost',
    address: 'http://203.0.113.9:8000',
    epoch: 0,
    ready: true,
    fenced: false,
    defaultModel: 'digits',
    models: [],
    nodes: 1,
    nodesReady: 1,
    requestsPerSecond: 0,
    startedAt: now,
    beatAt: now,
  };
}

const start = (i: number) => startFleetHost(net, i, { fleet: FLEET, cluster: NATS_URL, env: ENV });

beforeAll(async () => {
  net = await createFleetNet({ hosts: 3, prefix: 'mem', isolation: 'loopback' });
  for (let i = 0; i < 3; i++) hosts.push(await start(i));
  // A candidate at 0%: every later change is a canary share.
  expect(
    (await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' })).status,
  ).toBe(200);
});

/** The fleet's NATS resources, deleted after the test. */
const STREAMS = (fleet: string) => [
  `KV_streaminfer_fleet_${fleet}`,
  `KV_streaminfer_fleet_${fleet}_hosts`,
  `KV_streaminfer_fleet_${fleet}_lease`,
  `OBJ_streaminfer_models_${fleet}`,
];
const OLD_FLEET = `${FLEET}v1`;

afterAll(async () => {
  for (const host of hosts) {
    if (host.child.signalCode === null && host.child.exitCode === null)
      process.kill(host.child.pid!, 'SIGCONT');
    await stopHost(host);
  }
  await net?.destroy();
  const conn = await connectFleet({ servers: NATS_URL, fleet: FLEET, hostId: 'cleanup' });
  for (const stream of [...STREAMS(FLEET), ...STREAMS(OLD_FLEET)])
    await conn.jsm.streams.delete(stream).catch(() => undefined);
  await conn.close();
  rmSync(tmp, { recursive: true, force: true });
});

test('a heartbeat key written straight into the hosts bucket is not a member: the change goes on', async () => {
  const conn = await connectFleet({ servers: NATS_URL, fleet: FLEET, hostId: 'intruder' });
  const kv = await new Kvm(conn.js).open(`streaminfer_fleet_${FLEET}_hosts`);
  const fake = ghostBeat(new Date().toISOString());
  // Kept fresh for the whole test, as an attacker (or a stale host id) would.
  await kv.put('ghost', JSON.stringify(fake));
  const refresh = setInterval(() => void kv.put('ghost', JSON.stringify(fake)).catch(() => undefined), 2000);
  try {
    const answer = await change(5);
    expect(answer.status).toBe(200);
    expect(answer.body.fleet).toMatchObject({
      hosts: [
        { host: 'h0', state: 'committed' },
        { host: 'h1', state: 'committed' },
        { host: 'h2', state: 'committed' },
      ],
    });
    const seen = await view(hosts[1]!);
    expect(seen.members.map((m) => m.host)).toEqual(['h0', 'h1', 'h2']);
    expect(seen.strangers).toEqual(['ghost']);
    expect(seen.hosts.map((h) => h.host)).toEqual(['h0', 'h1', 'h2']);
    // Ignored and said once, however many changes see it.
    expect((await change(6)).status).toBe(200);
    expect(hosts[0]!.logs().match(/heartbeat of a host that is not a member/g)).toHaveLength(1);
  } finally {
    clearInterval(refresh);
    await kv.delete('ghost');
    await conn.close();
  }
});

/** Freezes (SIGSTOP) or wakes (SIGCONT) host i's whole process group: a member that is silent, not gone. */
function freeze(host: FleetHost, signal: 'SIGSTOP' | 'SIGCONT'): void {
  process.kill(-host.child.pid!, signal);
}

test('a member killed (-9) is skipped at once: no responder on its step subject; back, it catches up', async () => {
  await stopHost(hosts[1]!, 'SIGKILL');
  const answer = await change(10);
  expect(answer.status).toBe(200);
  expect(answer.body.fleet).toMatchObject({
    hosts: [
      { host: 'h0', state: 'committed' },
      { host: 'h1', state: 'down', error: expect.stringContaining('not connected to NATS') },
      { host: 'h2', state: 'committed' },
    ],
  });
  // Its heartbeat is still fresh (TTL 10 s): the change did not wait for it.
  expect(answer.ms).toBeLessThan(3000);
  console.log(`membership: change with a member killed -9: ${answer.ms} ms`);
  hosts[1] = await start(1);
  expect((await health(hosts[1]!.url))?.body.epoch).toBe(answer.body.epoch);
  expect(await memberIds(hosts[1]!)).toEqual(['h0', 'h1', 'h2']);
});

test('a silent member (SIGSTOP) holds a change at most until its heartbeat expires, then it is down', async () => {
  freeze(hosts[1]!, 'SIGSTOP');
  let answer: Awaited<ReturnType<typeof change>>;
  try {
    answer = await change(15);
  } finally {
    freeze(hosts[1]!, 'SIGCONT');
  }
  expect(answer.status).toBe(200);
  expect(answer.body.fleet).toMatchObject({
    hosts: [
      { host: 'h0', state: 'committed' },
      { host: 'h1', state: 'down', error: expect.stringContaining('went silent') },
      { host: 'h2', state: 'committed' },
    ],
  });
  // The heartbeat TTL (10 s) and one poll, not the step timeout (30 s).
  expect(answer.ms).toBeLessThan(12_500);
  console.log(`membership: change with a member frozen: ${answer.ms} ms`);
  // Woken, still a member: it catches up from the record.
  await waitFor(
    async () => (await health(hosts[1]!.url))?.body.epoch === answer.body.epoch,
    15_000,
    () => `h1 did not catch up:\n${hosts[1]!.logs().slice(-2000)}`,
  );
});

test('an operator excludes a silent member: the change goes on at once; woken, it catches up and re-joins', async () => {
  freeze(hosts[2]!, 'SIGSTOP');
  let answer: Awaited<ReturnType<typeof change>>;
  try {
    const excluded = await runCliToExit([
      'fleet',
      'exclude',
      'h2',
      '--url',
      hosts[0]!.adminUrl,
      '--token-file',
      tokenFile,
    ]);
    expect(excluded).toMatchObject({ code: 0 });
    expect(excluded.out).toContain('host h2 excluded');
    expect(excluded.out).toContain('members: h0, h1');
    answer = await change(20);
  } finally {
    freeze(hosts[2]!, 'SIGCONT');
  }
  expect(answer.status).toBe(200);
  expect(answer.body.fleet).toMatchObject({
    hosts: [
      { host: 'h0', state: 'committed' },
      { host: 'h1', state: 'committed' },
    ],
  });
  expect(answer.ms).toBeLessThan(3000);
  console.log(`membership: change after excluding a frozen member: ${answer.ms} ms`);
  await waitFor(
    async () => (await memberIds(hosts[0]!))?.join() === 'h0,h1,h2',
    20_000,
    () => `h2 did not re-join:\n${hosts[2]!.logs().slice(-2000)}`,
  );
  expect((await health(hosts[2]!.url))?.body.epoch).toBe(answer.body.epoch);
  expect((await health(hosts[2]!.url))?.status).toBe(200);
  const logs = hosts[2]!.logs();
  expect(logs).toContain('excluded from the members; catching up, then re-joining');
  expect(logs).toContain('re-joined the members after an exclusion');
  // Behind when it woke: fenced until caught up and a member again.
  expect(logs).toContain(
    `excluded from fleet ${FLEET} at epoch ${answer.body.epoch}: catching up before it re-joins`,
  );
  const metrics = await (
    await fetch(`${hosts[2]!.adminUrl}/metrics`, { headers: { authorization: `Bearer ${FLEET_TOKEN}` } })
  ).text();
  expect(metrics).toMatch(/^streaminfer_fleet_member 1$/m);
  expect(metrics).toMatch(/^streaminfer_fleet_fenced 0$/m);
  // The API refuses what makes no sense.
  expect((await admin(hosts[0]!.adminUrl, 'POST', '/api/fleet/hosts/nobody/exclude')).status).toBe(404);
  expect((await admin(hosts[0]!.adminUrl, 'POST', '/api/fleet/hosts/h0/exclude')).status).toBe(400);
  expect((await admin(hosts[0]!.adminUrl, 'GET', '/api/fleet/hosts/h2/exclude')).status).toBe(405);
});

test('a host stopped cleanly leaves the members: the next change names only the others', async () => {
  await stopHost(hosts[1]!);
  expect(await memberIds(hosts[0]!)).toEqual(['h0', 'h2']);
  const answer = await change(25);
  expect(answer.status).toBe(200);
  expect(answer.body.fleet).toMatchObject({
    hosts: [
      { host: 'h0', state: 'committed' },
      { host: 'h2', state: 'committed' },
    ],
  });
});

test('a format-1 record (before membership) is read, and the first host to join writes its members', async () => {
  const conn = await connectFleet({ servers: NATS_URL, fleet: OLD_FLEET, hostId: 'upgrade' });
  const kvm = new Kvm(conn.js);
  // This fleet's record as an older build wrote it: format 1, no members; and a hand-written heartbeat.
  const current = await (await kvm.open(`streaminfer_fleet_${FLEET}`)).get('registry');
  const { members: _members, ...old } = JSON.parse(current!.string()) as Record<string, unknown>;
  const registry = await kvm.create(`streaminfer_fleet_${OLD_FLEET}`, { history: 5 });
  await registry.create('registry', JSON.stringify({ ...old, format: 1 }));
  const board = await HostBoard.open(conn);
  const now = new Date().toISOString();
  await board.beat({ ...ghostBeat(now), host: 'ghost' });
  try {
    // Slot 1's address and ports (its host left the other fleet in the test before).
    await stopHost(hosts[1]!);
    const upgraded = await startFleetHost(net, 1, { fleet: OLD_FLEET, cluster: NATS_URL, env: ENV });
    hosts.push(upgraded);
    // It joins once its nodes are up (its /health may say ready a moment before).
    const read = async () =>
      JSON.parse((await registry.get('registry'))!.string()) as Record<string, unknown>;
    await waitFor(
      async () => (await read()).format === 2,
      10_000,
      () => `h1 never wrote the members:\n${upgraded.logs().slice(-2000)}`,
    );
    const record = await read();
    expect(record).toMatchObject({ format: 2, members: ['h1'], epoch: old.epoch });
    expect(upgraded.logs()).toContain('first members written (format-1 record)');
    expect((await health(upgraded.url))?.body.epoch).toBe(old.epoch);
  } finally {
    await conn.close();
  }
});
