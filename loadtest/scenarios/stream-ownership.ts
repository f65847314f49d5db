/**
 * stream-ownership: who works a partition — the pipeline's KV leases (apps/pipeline/leases/leases.ts, on their own
 * thread) against NATS 2.11 pull-consumer priority groups with a pinned client — measured side by side on
 * one broker of the current release (its own nats-server, own store dir, free port). Per side and round,
 * two worker instances (loadtest/pipeline/ownership-worker.ts) share `partitions` partitions, each with its
 * own durable; the pinned side's durables carry priority group `owners`, policy pinned_client and
 * priority_timeout = the lease TTL (the same time to tell a dead owner), and every instance pulls from
 * every partition; the pinned-timed side also fences itself once its last pull is priority_timeout old.
 * Three phases:
 *
 *   throughput  a backlog published while the workers are gated, then released: effects/s to drain it,
 *               and how many partitions each instance ended up working;
 *   kill        steady load, the owner of partition 0 kill -9'd: per partition it worked, last effect of
 *               the old owner → first of the new one; effects lost and duplicated across instances;
 *   stall       the same owner SIGSTOPped for TTL + 4 s (a GC pause, a frozen VM) then SIGCONTed: effects
 *               it still emitted after the new owner's first — a fence (a token the effect path can
 *               check) makes that 0; duplicates across instances.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import { nanos } from '../../apps/pipeline/io/nanos';
import { fmt, markdownTable } from '../../scripts/markdown';
import { errText, median, ratio } from '../harness/scenario-kit';
import { freePort } from '../harness/server-process';
import type { Ratio, RunRecord, Scenario, ScenarioContext } from '../harness/types';
import {
  type EffectCounts,
  effectCounts,
  failoverOf,
  ownerAt,
  type PartitionFailover,
  parseWorkerLine,
  spreadOf,
  throughputOf,
  type WorkerRecord,
} from '../pipeline/ownership-analysis';
import { type OwnershipWorkerConfig, PRIORITY_GROUP } from '../pipeline/ownership-worker-config';

type Mode = OwnershipWorkerConfig['mode'];

const MODES: readonly Mode[] = ['lease', 'pinned', 'pinned-timed'];

/** BENCH_OWNERSHIP_SIDES=lease,pinned: only these sides (default all three). */
function sides(): readonly Mode[] {
  const wanted = (process.env['BENCH_OWNERSHIP_SIDES'] ?? '').split(',').filter(Boolean);
  const unknown = wanted.filter((w) => !MODES.includes(w as Mode));
  if (unknown.length)
    throw new Error(`BENCH_OWNERSHIP_SIDES: unknown ${unknown.join(', ')} (known: ${MODES.join(', ')})`);
  return wanted.length ? MODES.filter((m) => wanted.includes(m)) : MODES;
}

const LABELS: Record<Mode, string> = {
  lease: 'KV leases',
  pinned: 'pinned client',
  'pinned-timed': 'pinned client + last-pull fence',
};

interface Plan {
  partitions: number;
  ttlMs: number;
  ackWaitMs: number;
  rate: number;
  backlog: number;
  workUs: number;
  batch: number;
  warmMs: number;
  /** After the kill: this long past the TTL the load goes on. */
  afterTtlMs: number;
}

const FULL: Plan = {
  partitions: 4,
  ttlMs: 10_000,
  ackWaitMs: 20_000,
  rate: 400,
  backlog: 20_000,
  workUs: 200,
  batch: 100,
  warmMs: 4000,
  afterTtlMs: 6000,
};

const QUICK: Plan = {
  partitions: 4,
  ttlMs: 3000,
  ackWaitMs: 8000,
  rate: 200,
  backlog: 4000,
  workUs: 200,
  batch: 100,
  warmMs: 3000,
  afterTtlMs: 3000,
};

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Every process this scenario started: none may outlive the bench (its SIGINT handler ends in exit). */
const children = new Set<ChildProcess>();
let exitHook = false;

function track(child: ChildProcess): ChildProcess {
  if (!exitHook) {
    process.once('exit', () => {
      for (const c of children) c.kill('SIGKILL');
    });
    exitHook = true;
  }
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

// ---- The broker: the current release, its own process. ----

function currentNatsServer(): string {
  return (
    process.env['STREAMINFER_NATS_SERVER_CURRENT'] ||
    path.join(
      process.env['XDG_CACHE_HOME'] || path.join(os.homedir(), '.cache'),
      'streaminfer/nats-server-v2.15.2/nats-server',
    )
  );
}

interface Broker {
  url: string;
  version: string;
  stop(): Promise<void>;
}

async function startBroker(binary: string): Promise<Broker> {
  if (!fs.existsSync(binary))
    throw new Error(
      `${binary} not found: build the current nats-server with scripts/nats-server.sh (or set STREAMINFER_NATS_SERVER_CURRENT)`,
    );
  const version = execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-ownership-'));
  const port = await freePort();
  const child = track(
    spawn(binary, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], {
      stdio: ['ignore', 'ignore', 'ignore'],
    }),
  );
  const url = `nats://127.0.0.1:${port}`;
  const stop = async () => {
    child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    if (child.exitCode === null) child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 50; i++) {
    try {
      const h = await connectNats({ servers: url, connectTimeoutMs: 500 });
      await h.close();
      return { url, version, stop };
    } catch {
      await sleep(100);
    }
  }
  await stop();
  throw new Error(`${binary} did not answer on ${url}`);
}

// ---- One side's run: its stream, durables and two workers. ----

interface Worker {
  id: string;
  child: ChildProcess;
  owns: Set<number>;
}

class Run {
  readonly records: WorkerRecord[] = [];
  readonly published = new Set<number>();
  readonly workers: Worker[] = [];
  readonly tag: string;
  readonly prefix: string;
  private publishFailures = 0;

  constructor(
    readonly mode: Mode,
    readonly phase: string,
    readonly plan: Plan,
    readonly nats: NatsHandle,
    readonly url: string,
    readonly repoRoot: string,
  ) {
    this.tag = `own${mode}${phase}${process.pid}t${(Date.now() % 10_000_000).toString(36)}`;
    this.prefix = `${this.tag}.ev`;
  }

  get durable(): string {
    return `${this.tag}_d`;
  }

  async provision(): Promise<void> {
    const { jsm } = this.nats;
    await jsm.streams.add({ name: this.tag, subjects: [`${this.prefix}.>`] });
    for (let p = 0; p < this.plan.partitions; p++)
      await jsm.consumers.add(this.tag, {
        durable_name: `${this.durable}-p${p}`,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: `${this.prefix}.${p}.*`,
        ack_wait: nanos(this.plan.ackWaitMs),
        max_ack_pending: 10_000,
        max_deliver: -1,
        ...(this.mode !== 'lease'
          ? {
              priority_groups: [PRIORITY_GROUP],
              priority_policy: 'pinned_client' as const,
              priority_timeout: nanos(this.plan.ttlMs),
            }
          : {}),
      });
  }

  start(gated: boolean): void {
    const script = path.join(this.repoRoot, 'dist', 'loadtest', 'pipeline', 'ownership-worker.js');
    for (const id of ['a', 'b']) {
      const cfg: OwnershipWorkerConfig = {
        mode: this.mode,
        url: this.url,
        stream: this.tag,
        subjectPrefix: this.prefix,
        durable: this.durable,
        bucket: `${this.tag}_leases`,
        instanceId: `${this.mode}-${id}`,
        partitions: this.plan.partitions,
        ttlMs: this.plan.ttlMs,
        ackWaitMs: this.plan.ackWaitMs,
        expiresMs: Math.max(1000, Math.floor(this.plan.ttlMs / 3)),
        batch: this.plan.batch,
        workUs: this.plan.workUs,
        gated,
      };
      const child = track(
        spawn(process.execPath, [script, JSON.stringify(cfg)], {
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      const w: Worker = { id: cfg.instanceId, child, owns: new Set() };
      let buf = '';
      child.stdout!.setEncoding('utf8');
      child.stdout!.on('data', (d: string) => {
        buf += d;
        let nl = buf.indexOf('\n');
        while (nl >= 0) {
          this.onLine(w, buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          nl = buf.indexOf('\n');
        }
      });
      child.stderr!.resume();
      this.workers.push(w);
    }
  }

  private onLine(w: Worker, text: string): void {
    const r = parseWorkerLine(w.id, text);
    if (!r) return;
    this.records.push(r);
    if (r.kind === 'G') w.owns.add(r.partition);
    else if (r.kind === 'L') w.owns.delete(r.partition);
  }

  /** Lease side: until every partition has one holder and the split is even (the leases settled). */
  async settled(timeoutMs: number): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    const share = Math.floor(this.plan.partitions / this.workers.length);
    while (Date.now() < until) {
      const held = this.workers.reduce((n, w) => n + w.owns.size, 0);
      if (held === this.plan.partitions && this.workers.every((w) => w.owns.size >= share)) return true;
      await sleep(100);
    }
    return false;
  }

  private counter = 0;

  private publishOne(): Promise<void> {
    const i = this.counter++;
    const p = i % this.plan.partitions;
    return this.nats.js.publish(`${this.prefix}.${p}.k${i}`, new Uint8Array(64)).then(
      (ack) => {
        this.published.add(ack.seq);
      },
      () => {
        this.publishFailures++;
      },
    );
  }

  async publishBacklog(n: number): Promise<void> {
    const inflight = new Set<Promise<void>>();
    for (let i = 0; i < n; i++) {
      const pr = this.publishOne().finally(() => inflight.delete(pr));
      inflight.add(pr);
      if (inflight.size >= 512) await Promise.race(inflight);
    }
    await Promise.all(inflight);
  }

  /** Publishes at plan.rate until the returned stop() is called. */
  publishAtRate(): () => Promise<void> {
    const perTick = this.plan.rate / 100;
    let owed = 0;
    const pending = new Set<Promise<void>>();
    const t = setInterval(() => {
      owed += perTick;
      while (owed >= 1) {
        owed--;
        const pr = this.publishOne().finally(() => pending.delete(pr));
        pending.add(pr);
      }
    }, 10);
    return async () => {
      clearInterval(t);
      await Promise.all(pending);
    };
  }

  effectedAll(): boolean {
    const seen = new Set<number>();
    for (const r of this.records) if (r.kind === 'E') seen.add(r.seq);
    for (const s of this.published) if (!seen.has(s)) return false;
    return true;
  }

  async drained(timeoutMs: number): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if (this.effectedAll()) return true;
      await sleep(200);
    }
    return this.effectedAll();
  }

  get failures(): number {
    return this.publishFailures;
  }

  worker(id: string): Worker {
    return this.workers.find((w) => w.id === id)!;
  }

  async cleanup(): Promise<void> {
    for (const w of this.workers) {
      if (w.child.exitCode === null && w.child.signalCode === null) {
        try {
          w.child.kill('SIGCONT');
        } catch {
          // already gone
        }
        w.child.kill('SIGKILL');
      }
    }
    await sleep(200);
    await this.nats.jsm.streams.delete(this.tag).catch(() => undefined);
    await this.nats.jsm.streams.delete(`KV_${this.tag}_leases`).catch(() => undefined);
  }
}

/** BENCH_OWNERSHIP_RECORDS=DIR: every run's worker lines as JSON, one file per run (to look into a figure). */
function dumpRecords(run: Run): void {
  const dir = process.env['BENCH_OWNERSHIP_RECORDS'];
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, `${run.tag}.json`),
    JSON.stringify({ mode: run.mode, phase: run.phase, records: run.records, published: [...run.published] }),
  );
}

// ---- The phases. ----

interface ThroughputFigures {
  effectsPerS: number | null;
  spread: Record<string, number>;
  counts: EffectCounts;
  drained: boolean;
}

async function throughputPhase(run: Run): Promise<ThroughputFigures> {
  await run.provision();
  run.start(true);
  if (run.mode === 'lease' && !(await run.settled(30_000))) throw new Error('leases did not settle in 30 s');
  if (run.mode !== 'lease') await sleep(1500);
  await run.publishBacklog(run.plan.backlog);
  await sleep(500);
  const released = Date.now();
  for (const w of run.workers) w.child.kill('SIGUSR2');
  const drained = await run.drained(120_000);
  return {
    effectsPerS: throughputOf(run.records, released),
    spread: spreadOf(run.records),
    counts: effectCounts(run.records, run.published),
    drained,
  };
}

interface FaultFigures {
  victim: string;
  partitions: PartitionFailover[];
  counts: EffectCounts;
  drained: boolean;
}

async function faultPhase(run: Run, fault: 'kill' | 'stall'): Promise<FaultFigures> {
  await run.provision();
  run.start(false);
  if (run.mode === 'lease' && !(await run.settled(30_000))) throw new Error('leases did not settle in 30 s');
  const stopLoad = run.publishAtRate();
  try {
    await sleep(run.plan.warmMs);
    const faultMs = Date.now();
    const victim = ownerAt(run.records, 0, faultMs);
    if (!victim) throw new Error('nobody worked partition 0');
    const child = run.worker(victim).child;
    if (fault === 'kill') {
      child.kill('SIGKILL');
      await sleep(run.plan.ttlMs + run.plan.afterTtlMs);
    } else {
      child.kill('SIGSTOP');
      await sleep(run.plan.ttlMs + 4000);
      child.kill('SIGCONT');
      await sleep(run.plan.afterTtlMs);
    }
    await stopLoad();
    const drained = await run.drained(run.plan.ackWaitMs + 10_000);
    return {
      victim,
      partitions: failoverOf(run.records, victim, faultMs),
      counts: effectCounts(run.records, run.published),
      drained,
    };
  } finally {
    await stopLoad();
  }
}

interface RoundFigures {
  mode: Mode;
  round: number;
  throughput?: ThroughputFigures;
  kill?: FaultFigures;
  stall?: FaultFigures;
  error?: string;
}

async function measureSide(
  ctx: ScenarioContext,
  nats: NatsHandle,
  url: string,
  plan: Plan,
  mode: Mode,
  round: number,
): Promise<RoundFigures> {
  const out: RoundFigures = { mode, round };
  const phases: Array<['throughput' | 'kill' | 'stall', (r: Run) => Promise<unknown>]> = [
    ['throughput', throughputPhase],
    ['kill', (r) => faultPhase(r, 'kill')],
    ['stall', (r) => faultPhase(r, 'stall')],
  ];
  for (const [name, fn] of phases) {
    const run = new Run(mode, name, plan, nats, url, ctx.repoRoot);
    try {
      ctx.log(`stream-ownership: ${mode} round ${round}: ${name}`);
      const figures = await fn(run);
      (out as unknown as Record<string, unknown>)[name] = figures;
      if (run.failures > 0) out.error = `${run.failures} publishes failed in ${name}`;
    } catch (e) {
      out.error = `${name}: ${errText(e)}`;
      break;
    } finally {
      await run.cleanup();
      dumpRecords(run);
    }
  }
  return out;
}

// ---- Analysis and report. ----

const maxOf = (xs: Array<number | null>): number | undefined => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? Math.max(...v) : undefined;
};

function sideFigures(rounds: RoundFigures[]) {
  const failover = rounds.map((r) => maxOf(r.kill?.partitions.map((p) => p.failoverMs) ?? []));
  return {
    effectsPerS: median(rounds.map((r) => r.throughput?.effectsPerS ?? undefined).filter(isNum)),
    failoverMs: median(failover.filter(isNum)),
    killDuplicates: sum(rounds.map((r) => r.kill?.counts.duplicatesAcrossInstances ?? 0)),
    killLost: sum(rounds.map((r) => r.kill?.counts.lost ?? 0)),
    stallDeposed: sum(rounds.map((r) => sum(r.stall?.partitions.map((p) => p.deposedEffects) ?? []))),
    stallFenced: sum(rounds.map((r) => sum(r.stall?.partitions.map((p) => p.fenced) ?? []))),
    stallDuplicates: sum(rounds.map((r) => r.stall?.counts.duplicatesAcrossInstances ?? 0)),
    stallLost: sum(rounds.map((r) => r.stall?.counts.lost ?? 0)),
    maxPartitionsOnOne: Math.max(
      0,
      ...rounds.map((r) => Math.max(0, ...Object.values(r.throughput?.spread ?? {}))),
    ),
  };
}

function isNum(x: number | undefined): x is number {
  return x !== undefined && Number.isFinite(x);
}

function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

function roundRows(all: RoundFigures[]): (string | number)[][] {
  return all.map((r) => {
    const kill = r.kill?.partitions ?? [];
    const stall = r.stall?.partitions ?? [];
    return [
      r.mode,
      r.round,
      r.throughput?.effectsPerS ?? '–',
      Object.entries(r.throughput?.spread ?? {})
        .sort()
        .map(([id, n]) => `${id}:${n}`)
        .join(' '),
      kill
        .map((p) => `p${p.partition} ${p.failoverMs === null ? 'none' : fmt(p.failoverMs / 1000)}`)
        .join(', '),
      r.kill ? `${r.kill.counts.duplicatesAcrossInstances} / ${r.kill.counts.lost}` : '–',
      stall.length ? sum(stall.map((p) => p.deposedEffects)) : '–',
      stall.length ? sum(stall.map((p) => p.fenced)) : '–',
      r.stall ? `${r.stall.counts.duplicatesAcrossInstances} / ${r.stall.counts.lost}` : '–',
      r.error ?? '',
    ];
  });
}

export const streamOwnership: Scenario = {
  name: 'stream-ownership',
  description:
    'partition ownership: KV leases vs NATS 2.11 pinned-client priority groups, with and without a last-pull fence (failover after kill -9, throughput, duplicates, a stalled owner’s effects)',
  async run(ctx) {
    const plan = ctx.quick ? QUICK : FULL;
    const broker = await startBroker(currentNatsServer());
    const nats = await connectNats({ servers: broker.url });
    const all: RoundFigures[] = [];
    try {
      const pinnedOk = /v?2\.(1[1-9]|[2-9]\d)\./.test(broker.version);
      for (let round = 1; round <= ctx.rounds; round++)
        for (const mode of sides()) {
          if (mode !== 'lease' && !pinnedOk) {
            all.push({ mode, round, error: `${broker.version}: priority groups need 2.11+` });
            continue;
          }
          all.push(await measureSide(ctx, nats, broker.url, plan, mode, round));
        }
    } finally {
      await nats.close().catch(() => undefined);
      await broker.stop();
    }
    const figures = new Map(MODES.map((m) => [m, sideFigures(all.filter((r) => r.mode === m))]));
    const lease = figures.get('lease')!;
    const ratios: Ratio[] = MODES.filter((m) => m !== 'lease').flatMap((m) => [
      {
        name: `failover ${m} ÷ lease (median of each round’s slowest partition)`,
        value: ratio(figures.get(m)!.failoverMs, lease.failoverMs),
      },
      {
        name: `throughput ${m} ÷ lease (effects/s, median)`,
        value: ratio(figures.get(m)!.effectsPerS, lease.effectsPerS),
      },
    ]);
    const runs: RunRecord[] = MODES.map((mode) => {
      const errors = all.filter((r) => r.mode === mode && r.error).map((r) => `round ${r.round}: ${r.error}`);
      return {
        label: LABELS[mode],
        target: `ownership-${mode}`,
        metrics: { ...figures.get(mode)! },
        ...(errors.length ? { error: errors.join('; ') } : {}),
      };
    });
    const notes = [
      `broker: ${broker.version}, its own process; ${plan.partitions} partitions, 2 instances, lease TTL = priority_timeout = ${plan.ttlMs} ms, ack_wait ${plan.ackWaitMs} ms, ${plan.workUs} µs of CPU per message, pulls of ${plan.batch}`,
      ...MODES.map((m) => {
        const f = figures.get(m)!;
        return `${m}: failover ${fmt((f.failoverMs ?? Number.NaN) / 1000)} s, ${fmt(f.effectsPerS)} effects/s, most partitions on one instance ${f.maxPartitionsOnOne} of ${plan.partitions}; deposed-owner effects after the new owner's first ${f.stallDeposed} (fenced ${f.stallFenced}); duplicates kill/stall ${f.killDuplicates}/${f.stallDuplicates}, lost ${f.killLost}/${f.stallLost}`;
      }),
    ];
    const markdown = [
      '',
      markdownTable(
        [
          'side',
          'round',
          'drain effects/s',
          'partitions per instance',
          'kill -9: failover per partition (s)',
          'kill: dup / lost',
          'stall: deposed effects after new owner',
          'stall: fenced',
          'stall: dup / lost',
          'error',
        ],
        roundRows(all),
      ),
      '',
    ].join('\n');
    return {
      params: { ...plan, broker: broker.version, rounds: ctx.rounds },
      runs,
      ratios,
      charts: [],
      notes,
      markdown,
      data: { rounds: all, sides: Object.fromEntries(figures) },
    };
  },
};
