/**
 * kv-ttl: how a key nobody rewrites leaves a TTL bucket, the hand-built way (the bucket's max_age; takers and
 * observers find out by polling: nats-server 2.9 has nothing else) against the native one (per-key Nats-TTL
 * and limit markers that reach watchers, 2.11+), side by side on the same broker in the same run:
 *
 * - takeover: two PartitionLeases instances share the partitions; one stops renewing and its connection
 *   closes (as a kill -9 leaves it); from each orphaned lease's last renewal (its server timestamp) to the
 *   survivor's acquire of it;
 * - heartbeat gone: a fleet host stops beating (its connection closed); from its last beat (server
 *   timestamp) to a peer's HostBoard.whenSilent (what a fleet step waiting on it uses) saying so;
 * - steady state: messages each lease instance sends and receives per second (every publish and API request
 *   is one message out, every answer and watch delivery one in) and messages stored per lease-second.
 *
 * Needs a 2.11+ broker for the native side: STREAMINFER_TEST_NATS=nats://127.0.0.1:4223 npm run bench --
 * --scenario kv-ttl. On 2.9 the native side reports itself unavailable.
 */
import { Kvm } from '@nats-io/kv';
import pino from 'pino';
import { connectNats, type NatsHandle, PartitionLeases } from '../../apps/pipeline';
import { FleetConnection, type HostBeat, HostBoard, SILENCE_POLL_MS } from '../../apps/supervisor/fleet';
import { type KvExpiry, type KvExpiryWanted, serverHasKeyTtl } from '../../libs/jetstream';
import { fmt, markdownTable } from '../../scripts/markdown';
import { fmtRatio } from '../harness/report';
import { errText, median, ratio } from '../harness/scenario-kit';
import type { Ratio, RunRecord, Scenario } from '../harness/types';
import { natsUrl } from '../pipeline/broker';

interface Plan {
  ttlMs: number;
  partitions: number;
  /** crash trials per side per round (each: a fresh bucket, two instances, one stops) */
  leaseTrials: number;
  heartbeatTrials: number;
  /** steady-state window measured once per side per round, before its first crash */
  steadyMs: number;
}

const FULL: Plan = { ttlMs: 2000, partitions: 8, leaseTrials: 3, heartbeatTrials: 4, steadyMs: 6000 };
const QUICK: Plan = { ttlMs: 2000, partitions: 4, leaseTrials: 1, heartbeatTrials: 2, steadyMs: 3000 };

const SIDES: { label: string; wanted: KvExpiryWanted; expect: KvExpiry }[] = [
  { label: 'bucket TTL (max_age, polled)', wanted: 'bucket', expect: 'bucket' },
  { label: 'per-key TTL + limit markers', wanted: 'auto', expect: 'key' },
];

const logger = pino({ level: 'silent' });
const GROUP = 'bench';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

interface Steady {
  outPerS: number;
  inPerS: number;
  storedPerLeaseS: number;
}

interface Side {
  label: string;
  expiry?: KvExpiry;
  takeoverMs: number[];
  goneMs: number[];
  steady: Steady[];
  error?: string;
}

let bucketCounter = 0;

/** One lease trial: A and B split the partitions, (optionally) a steady window, then B stops renewing. */
async function leaseTrial(
  url: string,
  plan: Plan,
  wanted: KvExpiryWanted,
  measureSteady: boolean,
): Promise<{ expiry: KvExpiry; takeoverMs: number[]; steady?: Steady }> {
  const bucket = `benchkvttl${process.pid}n${bucketCounter++}`;
  const handles: NatsHandle[] = [];
  const running: PartitionLeases[] = [];
  try {
    const open = async (id: string, acquire: (p: number) => void) => {
      const nats = await connectNats({ servers: url, name: `bench-kv-ttl-${id}` });
      handles.push(nats);
      const leases = await PartitionLeases.open({
        nats,
        bucket,
        group: GROUP,
        instanceId: id,
        partitions: plan.partitions,
        ttlMs: plan.ttlMs,
        logger,
        expiry: wanted,
      });
      running.push(leases);
      leases.start({ acquire: async (p) => acquire(p), release: async () => undefined });
      return { nats, leases };
    };
    const acquiredAt = new Map<number, number>();
    let crashed = false;
    const a = await open('a', (p) => {
      if (crashed && !acquiredAt.has(p)) acquiredAt.set(p, Date.now());
    });
    const b = await open('b', () => undefined);
    const half = plan.partitions / 2;
    await until(
      'an even split',
      () => a.leases.owned().length === half && b.leases.owned().length === half,
      plan.ttlMs * 5,
    );

    let steady: Steady | undefined;
    if (measureSteady) {
      // One TTL to settle (the join's passes), then the window.
      await sleep(plan.ttlMs);
      const stream = `KV_${bucket}`;
      const seq0 = (await a.nats.jsm.streams.info(stream)).state.last_seq;
      const s0 = [a.nats.nc.stats(), b.nats.nc.stats()];
      const t0 = Date.now();
      await sleep(plan.steadyMs);
      const s1 = [a.nats.nc.stats(), b.nats.nc.stats()];
      const seconds = (Date.now() - t0) / 1000;
      const seq1 = (await a.nats.jsm.streams.info(stream)).state.last_seq;
      const perInstance = (k: 'outMsgs' | 'inMsgs') =>
        (s1[0]![k] - s0[0]![k] + s1[1]![k] - s0[1]![k]) / 2 / seconds;
      steady = {
        outPerS: perInstance('outMsgs'),
        inPerS: perInstance('inMsgs'),
        storedPerLeaseS: (seq1 - seq0) / plan.partitions / seconds,
      };
    }

    const orphans = b.leases.owned();
    b.leases.abandon();
    crashed = true;
    // A renewal in flight may still land: read the last write's server timestamp once it has.
    await sleep(100);
    const kv = await new Kvm(a.nats.js).open(bucket);
    const lastWrite = new Map<number, number>();
    for (const p of orphans) {
      const entry = await kv.get(`${GROUP}.p.${p}`);
      if (entry?.operation === 'PUT') lastWrite.set(p, entry.created.getTime());
    }
    // As a kill -9 leaves it: B's watch and connection are gone, its keys stay until they expire.
    await b.nats.close();
    await until('A owns every partition', () => a.leases.owned().length === plan.partitions, plan.ttlMs * 5);
    const takeoverMs = orphans
      .filter((p) => lastWrite.has(p) && acquiredAt.has(p))
      .map((p) => acquiredAt.get(p)! - lastWrite.get(p)!);
    return { expiry: a.leases.expiry, takeoverMs, ...(steady ? { steady } : {}) };
  } finally {
    for (const leases of running) await leases.stop().catch(() => undefined);
    const [first] = handles;
    if (first) await first.jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
    for (const h of handles) await h.close().catch(() => undefined);
  }
}

function beat(host: string): HostBeat {
  const now = new Date().toISOString();
  return {
    host,
    address: `http://${host}:8000`,
    epoch: 1,
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

/** One heartbeat trial: a host beats every TTL/4, stops (connection closed); a peer waits as a fleet step does. */
async function heartbeatTrial(url: string, plan: Plan, wanted: KvExpiryWanted): Promise<number> {
  const fleet = `benchkvttl${process.pid}f${bucketCounter++}`;
  const peer = await FleetConnection.open({ servers: url, fleet, hostId: 'peer' });
  const gone = await FleetConnection.open({ servers: url, fleet, hostId: 'gone' });
  let closedGone = false;
  try {
    const peerBoard = await HostBoard.open(peer, { ttlMs: plan.ttlMs, expiry: wanted });
    const goneBoard = await HostBoard.open(gone, { ttlMs: plan.ttlMs, expiry: wanted });
    goneBoard.start(() => beat('gone'));
    await until('the host beats', () => peerBoard.alive('gone'), plan.ttlMs * 2);
    // A few beats, at a random phase against the peer's poll.
    await sleep(plan.ttlMs / 2 + Math.random() * plan.ttlMs);
    const wait = peerBoard.whenSilent('gone', SILENCE_POLL_MS);
    await sleep(Math.random() * SILENCE_POLL_MS);
    goneBoard.stop();
    await sleep(100);
    const kv = await new Kvm(peer.js).open(peer.names.hostsBucket);
    const last = (await kv.get('gone'))?.created.getTime() ?? Date.now();
    await gone.close();
    closedGone = true;
    const seenAt = await Promise.race([
      wait.silent.then(() => Date.now()),
      sleep(plan.ttlMs * 4).then(() => undefined),
    ]);
    wait.stop();
    if (seenAt === undefined) throw new Error('the peer never saw the host silent');
    return seenAt - last;
  } finally {
    await peer.jsm.streams.delete(`KV_${peer.names.hostsBucket}`).catch(() => undefined);
    if (!closedGone) await gone.close().catch(() => undefined);
    await peer.close().catch(() => undefined);
  }
}

function sideRecord(side: Side, plan: Plan): RunRecord {
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : undefined);
  return {
    label: side.label,
    target: `kv-ttl/${side.expiry ?? 'unavailable'}`,
    metrics: {
      ttlMs: plan.ttlMs,
      takeoverP50Ms: median(side.takeoverMs),
      takeoverMaxMs: side.takeoverMs.length ? Math.max(...side.takeoverMs) : undefined,
      takeovers: side.takeoverMs.length,
      heartbeatGoneP50Ms: median(side.goneMs),
      heartbeatGoneMaxMs: side.goneMs.length ? Math.max(...side.goneMs) : undefined,
      heartbeatTrials: side.goneMs.length,
      outMsgsPerS: mean(side.steady.map((s) => s.outPerS)),
      inMsgsPerS: mean(side.steady.map((s) => s.inPerS)),
      storedPerLeaseS: mean(side.steady.map((s) => s.storedPerLeaseS)),
    },
    ...(side.error ? { error: side.error } : {}),
  };
}

export const kvTtl: Scenario = {
  name: 'kv-ttl',
  description:
    'leases and heartbeats: bucket-wide TTL (max_age, polled) vs per-key TTL + limit markers (nats 2.11+): takeover after a holder stops, a crashed host seen gone, broker messages at steady state',
  async run(ctx) {
    const plan = ctx.quick ? QUICK : FULL;
    const url = natsUrl();
    const probe = await connectNats({ servers: url, name: 'bench-kv-ttl-probe' });
    const version = probe.nc.info?.version ?? 'unknown';
    const apiLevel = await probe.jsm
      .getAccountInfo()
      .then((i) => i.api.level)
      .catch(() => undefined);
    await probe.close();
    const native = serverHasKeyTtl({ version, ...(apiLevel !== undefined ? { apiLevel } : {}) });
    ctx.log(`broker ${url}: nats-server ${version} (API level ${apiLevel ?? 'none'})`);

    const sides: Side[] = SIDES.map((s) => ({ label: s.label, takeoverMs: [], goneMs: [], steady: [] }));
    for (let round = 0; round < ctx.rounds; round++) {
      // Alternating which side goes first: a drifting load on the shared host hits both alike.
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) {
        const spec = SIDES[i]!;
        const side = sides[i]!;
        if (spec.expect === 'key' && !native) {
          side.error = `nats-server ${version} has no per-key TTL (2.11+)`;
          continue;
        }
        try {
          for (let t = 0; t < plan.leaseTrials; t++) {
            const r = await leaseTrial(url, plan, spec.wanted, t === 0);
            side.expiry = r.expiry;
            if (r.expiry !== spec.expect) throw new Error(`the leases ran ${r.expiry}, not ${spec.expect}`);
            side.takeoverMs.push(...r.takeoverMs);
            if (r.steady) side.steady.push(r.steady);
          }
          for (let t = 0; t < plan.heartbeatTrials; t++)
            side.goneMs.push(await heartbeatTrial(url, plan, spec.wanted));
          ctx.log(
            `round ${round + 1} ${spec.label}: takeover p50 ${fmt(median(side.takeoverMs))} ms, heartbeat gone p50 ${fmt(median(side.goneMs))} ms`,
          );
        } catch (e) {
          side.error = errText(e);
          ctx.log(`${spec.label}: ${side.error}`);
        }
      }
    }

    const runs = sides.map((s) => sideRecord(s, plan));
    const [hand, nat] = runs.map((r) => r.metrics ?? {});
    const r = (name: string, key: string, note: string): Ratio => ({
      name,
      value: ratio(nat?.[key], hand?.[key]),
      note,
    });
    const ratios: Ratio[] = [
      r('takeover p50: per-key / bucket TTL', 'takeoverP50Ms', '< 1: the native side hands over sooner'),
      r('takeover max: per-key / bucket TTL', 'takeoverMaxMs', ''),
      r('heartbeat gone p50: per-key / bucket TTL', 'heartbeatGoneP50Ms', '< 1: peers see a crash sooner'),
      r('heartbeat gone max: per-key / bucket TTL', 'heartbeatGoneMaxMs', ''),
      r('messages out per instance-second: per-key / bucket TTL', 'outMsgsPerS', '< 1: fewer broker calls'),
      r('messages in per instance-second: per-key / bucket TTL', 'inMsgsPerS', ''),
      r('messages stored per lease-second: per-key / bucket TTL', 'storedPerLeaseS', ''),
    ];
    const better = (key: string) =>
      hand?.[key] !== undefined && nat?.[key] !== undefined ? nat[key]! <= hand[key]! : undefined;
    const asGood = ['takeoverP50Ms', 'heartbeatGoneP50Ms', 'outMsgsPerS'].map(better);
    const verdict = asGood.every((v) => v === true);
    const rows = runs.map((run) => {
      const m = run.metrics ?? {};
      return [
        run.label,
        run.error ?? (run.target.split('/')[1] as string),
        m['takeoverP50Ms'] ?? '–',
        m['takeoverMaxMs'] ?? '–',
        m['heartbeatGoneP50Ms'] ?? '–',
        m['heartbeatGoneMaxMs'] ?? '–',
        m['outMsgsPerS'] ?? '–',
        m['inMsgsPerS'] ?? '–',
        m['storedPerLeaseS'] ?? '–',
      ];
    });
    const markdown = [
      `nats-server ${version} at ${url}; TTL ${plan.ttlMs} ms, renewals every ${Math.floor(plan.ttlMs / 3)} ms, ` +
        `${plan.partitions} partitions over 2 instances; heartbeats every ${plan.ttlMs / 4} ms, the peer polls every ${SILENCE_POLL_MS} ms.`,
      '',
      markdownTable(
        [
          'side',
          'mode',
          'takeover p50 ms',
          'takeover max ms',
          'heartbeat gone p50 ms',
          'heartbeat gone max ms',
          'msgs out /s per instance',
          'msgs in /s per instance',
          'stored /lease-s',
        ],
        rows,
      ),
      '',
      `Takeover and heartbeat-gone times run from the last write's server timestamp (the earliest a TTL can start), so the TTL (${plan.ttlMs} ms) is their floor.`,
      '',
      `Ratios (per-key / bucket TTL): ${ratios.map((x) => `${x.name.split(':')[0]} ${fmtRatio(x.value)}`).join('; ')}.`,
      '',
      `Native at least as good on takeover, heartbeat gone and messages out: ${verdict ? 'yes' : 'no'}.`,
    ].join('\n');
    return {
      params: {
        broker: url,
        version,
        apiLevel: apiLevel ?? 'none',
        ...plan,
        rounds: ctx.rounds,
        pollMs: SILENCE_POLL_MS,
      },
      // No load runs (the report's load table would be empty): the sides are in the table above and in data.
      runs: [],
      ratios,
      charts: [],
      notes: [
        `broker nats-server ${version}; both sides on it, alternating per round`,
        `native at least as good on takeover p50, heartbeat gone p50 and messages out: ${verdict}`,
      ],
      markdown,
      data: { sides: runs, samples: sides, verdict },
    };
  },
};
