/**
 * stream-scale: how `streaminfer pipeline` scales out over key partitions on this host. One instance's capacity
 * C at the freshness SLO (slo.freshnessP95Ms: the highest offered rate whose freshness p95 stays within it and
 * whose lag stays bounded, stepping the rate up), the planning table for a target rate at a utilisation
 * (instances = ceil(target / (u·C))), then 1, 2 and 3 instances sharing the same partitions at the same
 * offered rates: throughput, freshness p95 and CPU per process (each instance, the broker, the producer) —
 * which says why adding instances on one small host does not add capacity linearly.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fmt, markdownTable } from '../../scripts/markdown';
import { errText } from '../harness/scenario-kit';
import { processTreeCpuMs } from '../harness/server-process';
import { lineChart } from '../harness/svg-chart';
import type { Chart, Ratio, RunRecord, Scenario, ScenarioContext } from '../harness/types';
import { freshnessOf } from '../pipeline/analysis';
import {
  connectNats,
  lastSeq,
  type NatsHandle,
  natsUrl,
  type RunNames,
  readPredictions,
  runNames,
  writeRunConfig,
} from '../pipeline/broker';
import { leftovers } from '../pipeline/chaos-broker';
import { startChaosFeed } from '../pipeline/chaos-feed';
import {
  cleanupRun,
  instanceHealth,
  partitionConsumers,
  type StreamInstance,
  startInstance,
} from '../pipeline/instances';
import { brokerPid, killAllStreamProcs } from '../pipeline/procs';
import { capacityAtSlo, cpuPct, instancesFor, lagVerdict, withinSlo } from '../pipeline/scale-analysis';

interface Plan {
  rates: number[];
  stepS: number;
  /** the first seconds of a step are not measured (the previous step's tail, the rate change) */
  settleS: number;
  drainMaxS: number;
  instances: number[];
  partitions: number;
}

// Each step is a new simulation whose deliveries all open at its start (a burst of order events): the first
// settleS seconds are not measured.
const FULL: Plan = {
  rates: [300, 500, 700, 900, 1200, 1500, 1800, 2400],
  stepS: 16,
  settleS: 5,
  drainMaxS: 10,
  instances: [1, 2, 3],
  partitions: 6,
};

const QUICK: Plan = {
  rates: [300, 900],
  stepS: 7,
  settleS: 3,
  drainMaxS: 3,
  instances: [1, 2],
  partitions: 6,
};

const TARGET = { rate: 3000, utilisation: 0.75 };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

function sloOf(repoRoot: string): number {
  const shipped = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy', 'pipeline.json'), 'utf8')) as {
    slo?: { freshnessP95Ms?: number };
  };
  return shipped.slo?.freshnessP95Ms ?? 2000;
}

interface Step {
  instances: number;
  rate: number;
  rateActual: number;
  /** events the instances processed per second while the feed ran (Σ _partition_events_total) */
  throughput: number;
  p50Ms: number;
  p95Ms: number;
  predictions: number;
  lagEnd: number;
  lagGrowthPerS: number | undefined;
  lagMax: number;
  bounded: boolean;
  ok: boolean;
  /** CPU % of one core over the step: each instance (supervisor + pipeline process), broker, producer */
  cpuInstances: (number | undefined)[];
  cpuBroker: number | undefined;
  cpuProducer: number | undefined;
  drainS: number | undefined;
}

/**
 * Σ over the partition durables of messages stored and not yet handed to an instance. Not ack pending: with
 * checkpoints (as shipped) acks wait for the next checkpoint, so a keeping-up pipeline holds about an
 * interval's worth of them.
 */
async function backlog(nats: NatsHandle, names: RunNames, partitions: number): Promise<number> {
  const cs = await partitionConsumers(nats, names, partitions);
  return cs.reduce((a, c) => a + (c ? c.pending : 0), 0);
}

/**
 * Messages handed to the instances, from the broker (an instance busy at full speed may not answer /metrics in
 * time). Used as a difference over a window: what the clients hold pulled ahead (a batch per partition) is
 * about the same at both ends, so the difference is what was processed.
 */
async function processedTotal(nats: NatsHandle, names: RunNames, partitions: number): Promise<number> {
  const cs = await partitionConsumers(nats, names, partitions);
  return cs.reduce((a, c) => a + (c ? c.deliveredCount : 0), 0);
}

const producerCpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

async function runConfig(
  ctx: ScenarioContext,
  nats: NatsHandle,
  plan: Plan,
  n: number,
  rates: readonly number[],
  slo: number,
  cleanup: (() => Promise<void>)[],
  /** the feed's own connection: the samplers' requests must not queue behind its publishes */
  feedNats: NatsHandle,
): Promise<{ steps: Step[]; command: string[] }> {
  const names = runNames(`sc${n}`);
  const leaseBucket = `${names.tag}_leases`;
  cleanup.push(async () => {
    await cleanupRun(nats, names, { lease: leaseBucket });
  });
  const insts: StreamInstance[] = [];
  const steps: Step[] = [];
  try {
    ctx.log(`${n} instance${n > 1 ? 's' : ''}: starting (${names.tag}, ${plan.partitions} partitions)`);
    const started = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        startInstance(
          ctx.repoRoot,
          `scale${n}-s${i + 1}`,
          `s${i + 1}`,
          writeRunConfig(ctx.repoRoot, names, {
            partitions: plan.partitions,
            instance: { id: `s${i + 1}`, leaseBucket, leaseTtlMs: 10_000 },
          }),
        ),
      ),
    );
    insts.push(...started);
    const share = plan.partitions / n;
    const t0 = Date.now();
    for (;;) {
      const hs = await Promise.all(insts.map((i) => instanceHealth(i.current().admin)));
      if (hs.every((h) => h?.instance.owned.length === share)) break;
      if (Date.now() - t0 > 60_000)
        throw new Error(`${n} instances: partitions not shared ${share} each within 60 s`);
      await sleep(250);
    }
    const broker = brokerPid();
    for (const [si, rate] of rates.entries()) {
      const predFrom = await lastSeq(nats, names.predictions);
      const lag: [number, number][] = [];
      const feed = startChaosFeed(feedNats, {
        rate,
        durationMs: plan.stepS * 1000,
        rampMs: 0,
        seed: 500 + n * 31 + si,
        prefixes: [`${names.tag}.delivery.events`],
        partitions: plan.partitions,
        disorderMs: 0,
        duplicateFraction: 0,
      });
      const start = Date.now();
      // the measured window: from settleS into the step to its end
      const window = (async () => {
        await sleep(plan.settleS * 1000);
        const atMs = Date.now();
        const published = feed.published();
        const cpu = {
          insts: insts.map((i) => processTreeCpuMs(i.handle.pid)),
          broker: broker === undefined ? undefined : processTreeCpuMs(broker),
          producer: producerCpuMs(),
        };
        return { atMs, published, cpu, ev: await processedTotal(nats, names, plan.partitions) };
      })();
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const b = await backlog(nats, names, plan.partitions);
          lag.push([(Date.now() - start) / 1000, b]);
          await sleep(1000);
        }
      })();
      const fed = await feed.done;
      const end = Date.now();
      const cpu1 = {
        insts: insts.map((i) => processTreeCpuMs(i.handle.pid)),
        broker: broker === undefined ? undefined : processTreeCpuMs(broker),
        producer: producerCpuMs(),
      };
      sampling = false;
      await sampler;
      const w0 = await window;
      const cpu0 = w0.cpu;
      const ev0 = w0.ev;
      const wallMs = end - w0.atMs;
      const ev1 = await processedTotal(nats, names, plan.partitions);
      const measured = lag.filter(([s]) => s >= plan.settleS);
      const verdict = lagVerdict(measured, rate);
      // drain before the next step (and before reading back this one's predictions)
      const d0 = Date.now();
      let drainS: number | undefined;
      while (Date.now() - d0 < plan.drainMaxS * 1000) {
        if ((await backlog(nats, names, plan.partitions)) < Math.max(50, rate * 0.1)) {
          drainS = (Date.now() - d0) / 1000;
          break;
        }
        await sleep(250);
      }
      const back = await readPredictions(nats, names, predFrom);
      const f = freshnessOf(
        back.first.filter((p) => p.eventMs >= start + plan.settleS * 1000 && p.eventMs < end),
      );
      const diff = (a: number | undefined, b: number | undefined) =>
        a === undefined || b === undefined ? undefined : a - b;
      const step: Step = {
        instances: n,
        rate,
        rateActual: ((fed.records - w0.published) / wallMs) * 1000,
        throughput: ((ev1 - ev0) / wallMs) * 1000,
        p50Ms: f.p50,
        p95Ms: f.p95,
        predictions: f.count,
        lagEnd: verdict.end,
        lagGrowthPerS: verdict.growthPerS,
        lagMax: measured.reduce((m, [, v]) => Math.max(m, v), 0),
        bounded: verdict.bounded,
        ok: false,
        cpuInstances: insts.map((_, i) => cpuPct(diff(cpu1.insts[i], cpu0.insts[i]), wallMs)),
        cpuBroker: cpuPct(diff(cpu1.broker, cpu0.broker), wallMs),
        cpuProducer: cpuPct(cpu1.producer - cpu0.producer, wallMs),
        drainS,
      };
      step.ok = withinSlo({ rate, p95Ms: step.p95Ms, bounded: step.bounded }, slo);
      steps.push(step);
      ctx.log(
        `${n} inst @ ${rate} ev/s: ${fmt(Math.round(step.throughput))} ev/s processed, fresh p95 ${fmt(Math.round(step.p95Ms))} ms, ` +
          `lag end ${fmt(step.lagEnd)} (${step.bounded ? 'bounded' : 'growing'}), CPU inst ${step.cpuInstances
            .map((c) => fmt(c && Math.round(c)))
            .join('+')} % broker ${fmt(step.cpuBroker && Math.round(step.cpuBroker))} % producer ${fmt(
            step.cpuProducer && Math.round(step.cpuProducer),
          )} % → ${step.ok ? 'within the SLO' : 'MISSED the SLO'}`,
      );
      if (!step.ok) break;
    }
    return { steps, command: insts[0]!.handle.command };
  } finally {
    for (const i of insts) await i.handle.stop(10_000).catch(() => undefined);
  }
}

const pct = (v: number | undefined): string => (v === undefined ? '–' : `${Math.round(v)} %`);

/** What the configurations measured, by instance count, and the command line of their instances. */
interface ScaleRun {
  byN: Map<number, Step[]>;
  command: string[];
}

/**
 * Every configuration in turn, the others at one instance's rates up to one step past its capacity; always
 * stops the instances and deletes what the run left on the broker.
 */
async function driveScale(
  ctx: ScenarioContext,
  nats: NatsHandle,
  plan: Plan,
  slo: number,
  notes: string[],
): Promise<ScaleRun> {
  const cleanup: (() => Promise<void>)[] = [];
  const byN = new Map<number, Step[]>();
  let command: string[] = [];
  let feedNats: NatsHandle | undefined;
  try {
    for (const n of plan.instances) {
      // The others at the same offered rates as one instance, up to one step past its capacity.
      const one = byN.get(1);
      const failedAt = one?.findIndex((s) => !s.ok) ?? -1;
      const rates = one && failedAt >= 0 ? plan.rates.slice(0, failedAt + 2) : plan.rates;
      feedNats ??= await connectNats({ servers: natsUrl(), name: 'streaminfer-bench-scale-feed' });
      const r = await runConfig(ctx, nats, plan, n, rates, slo, cleanup, feedNats);
      byN.set(n, r.steps);
      command = r.command;
    }
  } finally {
    killAllStreamProcs();
    for (const c of cleanup) await c().catch(() => undefined);
    const left = await leftovers(nats, 'benchsc').catch(() => []);
    const mine = left.filter((s) => s.includes(`benchsc`) && s.includes(String(process.pid)));
    if (mine.length) notes.push(`left on the broker: ${mine.join(', ')}`);
    await feedNats?.close().catch(() => undefined);
    await nats.close().catch(() => undefined);
  }

  return { byN, command };
}

/** Each configuration's capacity: the highest rate step within the SLO. */
function scaleCapacity(byN: ReadonlyMap<number, Step[]>, slo: number): Map<number, number | undefined> {
  const capacity = new Map<number, number | undefined>();
  for (const [n, ss] of byN)
    capacity.set(
      n,
      capacityAtSlo(
        ss.map((s) => ({ rate: s.rate, p95Ms: s.p95Ms, bounded: s.bounded })),
        slo,
      ),
    );
  return capacity;
}

/** The steps table. */
function stepsSection(
  md: string[],
  ctx: ScenarioContext,
  plan: Plan,
  slo: number,
  steps: readonly Step[],
): void {
  md.push(
    '### Steps',
    '',
    `Each configuration runs ${plan.partitions} key partitions (shipped deploy/pipeline.json, own names, admin port 0; ` +
      `checkpoints every 10 s as shipped) shared by its instances through KV leases; the in-process feed (the bench ` +
      `process: the producer) publishes the reference workload at each rate for ${plan.stepS} s (no disorder, no ` +
      `duplicates), measured from ${plan.settleS} s into the step; the ladder stops at the first step that misses ` +
      `the SLO (freshness p95 ≤ ${fmt(slo)} ms and lag bounded: grew by less than 0.5 s of input over the step and ` +
      'ends below 2 s of input). Freshness = first prediction stored − event time (read back from the broker). ' +
      'CPU = % of one core over the step (this host has ' +
      `${ctx.cores} cores = ${ctx.cores * 100} %): each instance is its supervisor + pipeline process tree.`,
    '',
    markdownTable(
      [
        'instances',
        'offered ev/s',
        'fed ev/s (window)',
        'processed ev/s',
        'fresh p50 / p95 ms',
        'lag end / max',
        'lag growth ev/s',
        'within SLO',
        'CPU per instance',
        'CPU broker',
        'CPU producer',
        'CPU total',
      ],
      steps.map((s) => {
        const total = [...s.cpuInstances, s.cpuBroker, s.cpuProducer].reduce<number>(
          (a, b) => a + (b ?? 0),
          0,
        );
        return [
          s.instances,
          fmt(s.rate),
          fmt(s.rateActual),
          fmt(Math.round(s.throughput)),
          `${fmt(Math.round(s.p50Ms))} / ${fmt(Math.round(s.p95Ms))}`,
          `${fmt(s.lagEnd)} / ${fmt(s.lagMax)}`,
          s.lagGrowthPerS === undefined ? '–' : fmt(Math.round(s.lagGrowthPerS)),
          s.ok ? 'yes' : 'NO',
          s.cpuInstances.map(pct).join(' + '),
          pct(s.cpuBroker),
          pct(s.cpuProducer),
          `${pct(total)} of ${ctx.cores * 100} %`,
        ];
      }),
    ),
    '',
  );
}

/** Capacity per configuration, the planning table from one instance's capacity, and their ratios. */
function capacitySection(
  md: string[],
  ratios: Ratio[],
  plan: Plan,
  slo: number,
  capacity: ReadonlyMap<number, number | undefined>,
): void {
  const c1 = capacity.get(1);
  md.push(
    '### Capacity and the planning table',
    '',
    markdownTable(
      ['instances on this host', `capacity at p95 ≤ ${fmt(slo)} ms (highest step passed)`, 'per instance'],
      [...capacity.entries()].map(([n, c]) => [
        n,
        c === undefined ? 'none passed' : `${fmt(c)} ev/s`,
        c === undefined ? '–' : `${fmt(Math.round(c / n))} ev/s`,
      ]),
    ),
    '',
  );
  if (c1 !== undefined) {
    const need = instancesFor(TARGET.rate, TARGET.utilisation, c1);
    md.push(
      markdownTable(
        [
          'target',
          'utilisation',
          'C (one instance)',
          'per instance at u',
          'instances = ceil(target / (u·C))',
        ],
        [
          [
            `${fmt(TARGET.rate)} ev/s`,
            `${TARGET.utilisation * 100} %`,
            `${fmt(c1)} ev/s`,
            `${fmt(TARGET.utilisation * c1)} ev/s`,
            `ceil(${fmt(TARGET.rate)} / ${fmt(TARGET.utilisation * c1)}) = ${need}`,
          ],
        ],
      ),
      '',
      `Plan ${need} instances, each on its own cores (and the broker and the producers elsewhere), with at least ` +
        `${need} partitions — more (e.g. ${Math.max(plan.partitions, need * 2)}) so a failed instance's share spreads ` +
        `over the survivors; C is the rate step that passed, so the true capacity lies between it and the next step.`,
      '',
    );
    ratios.push({
      name: `instances for ${TARGET.rate} ev/s at ${TARGET.utilisation * 100} % (from C of one)`,
      value: need,
    });
  }
  for (const [n, c] of capacity)
    ratios.push({
      name: `capacity of ${n} instance${n > 1 ? 's' : ''} / one (this host)`,
      value: c !== undefined && c1 ? c / c1 : undefined,
    });
}

/** Freshness p95 and processed rate against the offered rate, one line per configuration. */
function scaleCharts(byN: ReadonlyMap<number, Step[]>, slo: number): Chart[] {
  const charts: Chart[] = [];
  const series = (f: (s: Step) => number) =>
    [...byN.entries()].map(([n, ss]) => ({
      name: `${n} instance${n > 1 ? 's' : ''}`,
      points: ss.map((s) => [s.rate, f(s)] as [number, number]),
    }));
  charts.push({
    file: 'stream-scale-freshness.svg',
    title: 'stream-scale: freshness p95 vs offered rate',
    svg: lineChart({
      title: `stream-scale: freshness p95 (ms) vs offered rate; SLO ${fmt(slo)} ms`,
      xLabel: 'offered ev/s',
      yLabel: 'ms',
      series: series((s) => s.p95Ms),
    }),
  });
  charts.push({
    file: 'stream-scale-throughput.svg',
    title: 'stream-scale: processed vs offered rate',
    svg: lineChart({
      title: 'stream-scale: processed ev/s vs offered ev/s',
      xLabel: 'offered ev/s',
      yLabel: 'processed ev/s',
      series: series((s) => s.throughput),
    }),
  });
  return charts;
}

/** One run record per step. */
function scaleRuns(steps: readonly Step[], command: string[]): RunRecord[] {
  const runs: RunRecord[] = [];
  for (const s of steps)
    runs.push({
      label: `${s.instances} inst @ ${s.rate}`,
      target: `stream ${s.instances} instance${s.instances > 1 ? 's' : ''}`,
      server: { command, env: {} },
      metrics: {
        rate_target: s.rate,
        rate_actual: s.rateActual,
        processed_per_s: Math.round(s.throughput),
        fresh_p95_ms: s.p95Ms,
        lag_end: s.lagEnd,
        cpu_instances_pct: s.cpuInstances.reduce<number>((a, b) => a + (b ?? 0), 0),
        cpu_broker_pct: s.cpuBroker,
        cpu_producer_pct: s.cpuProducer,
      },
    });
  return runs;
}

export const streamScale: Scenario = {
  name: 'stream-scale',
  description:
    '`streaminfer pipeline` scale-out over key partitions: one instance’s capacity at the freshness SLO (stepped ' +
    'rate), the planning table for 3,000 ev/s at 75 % utilisation, and 1, 2 and 3 instances sharing the same ' +
    'partitions at the same offered rates — throughput, freshness p95 and CPU per process (instances, broker, ' +
    'producer) on this host’s shared cores.',
  async run(ctx) {
    const plan = ctx.quick ? QUICK : FULL;
    const slo = sloOf(ctx.repoRoot);
    const notes: string[] = [];
    const ratios: Ratio[] = [];
    const md: string[] = [];
    let nats: NatsHandle;
    try {
      nats = await connectNats({ servers: natsUrl(), name: 'streaminfer-bench-scale' });
    } catch (e) {
      throw new Error(`the stream-scale scenario needs NATS JetStream at ${natsUrl()}: ${errText(e)}`);
    }
    const { byN, command } = await driveScale(ctx, nats, plan, slo, notes);
    const steps = [...byN.values()].flat();
    const capacity = scaleCapacity(byN, slo);
    stepsSection(md, ctx, plan, slo, steps);
    capacitySection(md, ratios, plan, slo, capacity);
    const why = explain(byN, capacity, ctx.cores);
    md.push('### Why it does not scale linearly here', '', why, '');
    notes.push(why);

    const charts = scaleCharts(byN, slo);
    const runs = scaleRuns(steps, command);
    return {
      params: {
        rates: plan.rates,
        stepS: plan.stepS,
        instances: plan.instances,
        partitions: plan.partitions,
        sloFreshnessP95Ms: slo,
        target: TARGET,
        nats: natsUrl(),
      },
      runs,
      ratios,
      charts,
      notes,
      markdown: md.join('\n'),
      data: { steps, capacity: Object.fromEntries(capacity) },
    };
  },
};

/** The numbers' own explanation: where the host's CPU went at the highest rate each configuration passed. */
function explain(
  byN: ReadonlyMap<number, Step[]>,
  capacity: ReadonlyMap<number, number | undefined>,
  cores: number,
): string {
  const parts: string[] = [];
  const total = (s: Step) =>
    [...s.cpuInstances, s.cpuBroker, s.cpuProducer].reduce<number>((a, b) => a + (b ?? 0), 0);
  const inst = (s: Step) => s.cpuInstances.reduce<number>((a, b) => a + (b ?? 0), 0);
  for (const [n, ss] of byN) {
    const c = capacity.get(n);
    const top = ss.find((s) => s.rate === c) ?? ss[0];
    const miss = ss.find((s) => !s.ok);
    if (!top) continue;
    const per1k = (v: number | undefined) =>
      v === undefined || top.throughput <= 0 ? '–' : `${fmt(Math.round((v / top.throughput) * 1000))} %`;
    parts.push(
      `${n} instance${n > 1 ? 's' : ''} at ${fmt(top.rate)} ev/s${c === undefined ? ' (missed the SLO already)' : ' (highest passed)'}: ` +
        `instances ${pct(inst(top))}, broker ${pct(top.cpuBroker)}, producer ${pct(top.cpuProducer)} — ${pct(total(top))} of ` +
        `${cores * 100} %; per 1,000 ev/s the instances took ${per1k(inst(top))} and the broker ${per1k(top.cpuBroker)} of a core` +
        (miss
          ? `; at ${fmt(miss.rate)} ev/s it missed (p95 ${fmt(Math.round(miss.p95Ms))} ms, ${pct(total(miss))} CPU in all)`
          : '') +
        '.',
    );
  }
  const load = os.loadavg().map((l) => l.toFixed(1));
  parts.push(
    `This host's load average at the end was ${load.join(' / ')} (1 / 5 / 15 min) on ${cores} cores: what these ` +
      'processes did not get went to other work on it.',
  );
  parts.push(
    'Every added instance here runs on the same two cores as the broker and the producer: partitions move work ' +
      'between processes but add no CPU, while the broker’s and the producer’s share grows with the rate whatever ' +
      'the instance count, and each instance adds its own fixed costs (event loop, NATS connection, pull requests per ' +
      'partition, lease renewals, health and metrics ticks). Once the processes together need the host’s cores, ' +
      'capacity is the host’s, not the instances’: scale-out pays when each instance brings its own cores.',
  );
  return parts.join(' ');
}
