/**
 * The fleet network kit: three namespaces with addresses of their own, reachable from the root namespace; NATS
 * on the bridge reachable from each; a partition cuts one host off (NATS and clients) and heal restores it; NATS
 * restarted on the same port keeps its JetStream state; destroy leaves nothing; a crashed run's leftovers are
 * removed. Needs root for namespaces: without them only the loopback fallback is tested (and says so).
 */
import { type ChildProcess, execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Kvm } from '@nats-io/kv';
import { connectNats } from '../../apps/pipeline';
import { cleanStale, createFleetNet, type FleetNet, netnsAvailable } from './netns-kit';

const PREFIX = 'sit';
const HOSTS = 3;

/** Serves its own address; prints its IPv4 interface addresses once listening. */
const SERVER = `
const os = require('node:os');
const [host, port] = process.argv.slice(1);
require('node:http').createServer((_, res) => res.end(host)).listen(+port, host, () => {
  const mine = Object.values(os.networkInterfaces()).flat().filter((a) => a.family === 'IPv4');
  console.log(JSON.stringify(mine.map((a) => a.address).sort()));
});`;

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr?.on('data', (chunk) => (err += chunk));
    child.stdout?.on('data', (chunk) => {
      out += chunk;
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.once('exit', (code) => reject(new Error(`exited ${code} before a line: ${err}`)));
  });
}

/** The body, or `error:<name>` (a partition is a black hole: `error:TimeoutError`). */
async function get(url: string): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
    return await res.text();
  } catch (err) {
    return `error:${(err as Error).name}`;
  }
}

function leftovers(tag: string): string[] {
  const all =
    execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }) +
    execFileSync('ip', ['-o', 'link'], { encoding: 'utf8' });
  return all.split('\n').filter((line) => line.includes(tag));
}

const describeNetns = netnsAvailable() ? describe : describe.skip;
if (!netnsAvailable())
  console.warn('netns-kit: network namespaces are not available here (root needed): netns cases skipped');

describeNetns('fleet net on network namespaces', () => {
  let fleet: FleetNet;

  beforeAll(async () => {
    fleet = await createFleetNet({ hosts: HOSTS, prefix: PREFIX });
    await fleet.startNats();
    await Promise.all(
      [0, 1, 2].map(async (i) => {
        const server = fleet.spawnIn(i, process.execPath, [
          '-e',
          SERVER,
          fleet.address(i),
          String(fleet.port(i)),
        ]);
        expect(JSON.parse(await firstLine(server))).toEqual([fleet.address(i), '127.0.0.1'].sort());
      }),
    );
  });

  afterAll(() => fleet?.destroy());

  test('each host has an address of its own, reachable from the root namespace', async () => {
    const addresses = [0, 1, 2].map((i) => fleet.address(i));
    expect(new Set(addresses).size).toBe(HOSTS);
    expect(fleet.available).toBe(true);
    for (let i = 0; i < HOSTS; i++) expect(await get(fleet.url(i))).toBe(fleet.address(i));
  });

  test('NATS on the bridge address is reachable from every namespace', async () => {
    const port = Number(new URL(fleet.natsUrl).port);
    const reach = await Promise.all([0, 1, 2].map((i) => fleet.canConnect(i, fleet.gateway, port)));
    expect(reach).toEqual([true, true, true]);
  });

  test('a partitioned host loses NATS and clients; the others do not; heal restores it', async () => {
    const port = Number(new URL(fleet.natsUrl).port);
    fleet.partition(1);
    try {
      const reach = await Promise.all([0, 1, 2].map((i) => fleet.canConnect(i, fleet.gateway, port, 800)));
      expect(reach).toEqual([true, false, true]);
      expect(await get(fleet.url(1))).toBe('error:TimeoutError');
      expect(await get(fleet.url(0))).toBe(fleet.address(0));
      expect(await get(fleet.url(2))).toBe(fleet.address(2));
    } finally {
      await fleet.heal(1);
    }
    const started = Date.now();
    expect(await fleet.canConnect(1, fleet.gateway, port, 2000)).toBe(true);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(await get(fleet.url(1))).toBe(fleet.address(1));
  });

  test('NATS stopped and started again: same URL, JetStream KV kept', async () => {
    const url = fleet.natsUrl;
    const bucket = `netnskit${process.pid}t${Date.now() % 1_000_000}`;
    let nats = await connectNats({ servers: url, name: 'netns-kit-test' });
    await (await new Kvm(nats.js).create(bucket)).put('registry', 'epoch 7');
    await nats.close();

    await fleet.stopNats();
    const port = Number(new URL(url).port);
    expect(await fleet.canConnect(0, fleet.gateway, port)).toBe(false);
    await fleet.startNats();
    expect(fleet.natsUrl).toBe(url);

    nats = await connectNats({ servers: url, name: 'netns-kit-test' });
    try {
      const entry = await (await new Kvm(nats.js).open(bucket)).get('registry');
      expect(entry?.string()).toBe('epoch 7');
    } finally {
      await nats.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
      await nats.close();
    }
  });

  test('destroy kills, deletes every namespace and link, and can be called again', async () => {
    const extra = await createFleetNet({ hosts: 2, prefix: PREFIX });
    await extra.startNats();
    const child = extra.spawnIn(0, 'sleep', ['60']);
    expect(leftovers(extra.tag).length).toBeGreaterThanOrEqual(4);
    await extra.destroy();
    await extra.destroy();
    expect(child.exitCode !== null || child.signalCode !== null).toBe(true);
    expect(leftovers(extra.tag)).toEqual([]);
    expect(existsSync(extra.natsStoreDir)).toBe(false);
    expect(() => extra.spawnIn(0, 'true', [])).toThrow(/destroyed/);
  });

  test("a crashed run's namespaces and links are removed by the next", () => {
    // A pid that is surely dead: a process that has exited.
    const dead = spawnSync('true').pid;
    const tag = `${PREFIX}${dead}z`;
    execFileSync('ip', ['netns', 'add', `${tag}-0`]);
    execFileSync('ip', ['link', 'add', `${tag}b`, 'type', 'bridge']);
    expect(leftovers(tag).length).toBe(2);
    expect(cleanStale(PREFIX).sort()).toEqual([`${tag}-0`, `${tag}b`]);
    expect(leftovers(tag)).toEqual([]);
  });
});

describe('fleet net on loopback (the fallback without namespaces)', () => {
  test('distinct ports on 127.0.0.1; no partitions', async () => {
    const fleet = await createFleetNet({ hosts: 2, prefix: PREFIX, isolation: 'loopback' });
    try {
      expect(fleet.available).toBe(false);
      expect([fleet.address(0), fleet.address(1)]).toEqual(['127.0.0.1', '127.0.0.1']);
      expect(fleet.port(0)).not.toBe(fleet.port(1));
      const server = fleet.spawnIn(1, process.execPath, [
        '-e',
        SERVER,
        fleet.address(1),
        String(fleet.port(1)),
      ]);
      await firstLine(server);
      expect(await get(fleet.url(1))).toBe('127.0.0.1');
      await fleet.startNats();
      expect(fleet.natsUrl).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
      expect(() => fleet.partition(0)).toThrow(/namespaces/);
    } finally {
      await fleet.destroy();
    }
  });
});
