/**
 * sweep: the three batch policies (fixed, greedy, adaptive) under open-loop Poisson load from 10% to
 * 120% of the `bench` model's batched capacity, side by side in one run, then a step change (20% → 90%
 * → 20%) on adaptive. Capacity C (the 100% mark) = in-process items/s at the model's max batch size
 * (`streaminfer bench model bench --max-batch 64 --workers 1`), measured alone at the start of the run:
 * a property of the model on this machine, independent of any policy. One server per policy
 * (`serve --nodes 1 --workers 1 --batch-policy P --batch-size 64 --batch-timeout-ms 50`, the model's
 * own size and timeout given explicitly so all three share them), all three up for the whole sweep;
 * the load levels are interleaved (every policy at level k before any at k + 1, the order rotated per
 * level) so the host's drift spreads over the policies instead of falling on one.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import { fmt, markdownTable } from '../../scripts/markdown';
import { findSamples, histogramMeanDelta, type MetricSample, scrapeMetrics } from '../harness/metrics';
import { type PhaseResult, type PoissonPhase, runPoisson } from '../harness/poisson';
import { errText, modelsDirWith, type Verdict, verdictNote, verdictTable } from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import { lineChart, PALETTE } from '../harness/svg-chart';
import type { Chart, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';
import { inProcessAt, runInProcessBench } from './batching';

const MODEL = 'bench';
const POLICIES = ['fixed', 'greedy', 'adaptive'] as const;
type Policy = (typeof POLICIES)[number];

/** models/bench/config.json: max_batch_size, max_queue_delay_ms, slo_p99_ms */
const MAX_BATCH = 64;
const TIMEOUT_MS = 50;
const SLO_MS = 150;
/** overloaded points (seconds of queue) would flatten the chart around the objective */
const P99_CHART_CAP_MS = 4 * SLO_MS;

interface Point {
  policy: Policy;
  /** offered load as a fraction of C */
  level: number;
  result?: PhaseResult;
  /** mean batch size from /metrics over the measured phase (and the drain after it) */
  meanBatch?: number;
  /** the policy's gauges at the end of the point (adaptive: its cost model, rate and target) */
  gauges?: PolicyGauges;
  error?: string;
}

interface PolicyGauges {
  targetSize?: number;
  interceptMs?: number;
  perItemMs?: number;
  arrivalRate?: number;
}

interface StepSample extends PolicyGauges {
  t: number;
  waitMs?: number;
}

/** BENCH_SWEEP_LEVELS=80,90 (percent of C): a subset of the levels, e.g. to look at the high end only. */
export function sweepLevelsFromEnv(value: string | undefined): number[] | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const levels = value.split(',').map((x) => Number(x.trim()) / 100);
  if (levels.some((l) => !Number.isFinite(l) || l <= 0 || l > 5))
    throw new Error(`BENCH_SWEEP_LEVELS: expected percentages of C such as 80,90, got "${value}"`);
  return levels;
}

function sweepSetup(ctx: ScenarioContext) {
  const levels =
    sweepLevelsFromEnv(process.env['BENCH_SWEEP_LEVELS']) ??
    (ctx.quick ? [0.3, 0.6, 0.9, 1.2] : Array.from({ length: 12 }, (_, i) => (i + 1) / 10));
  return {
    levels,
    step: process.env['BENCH_SWEEP_STEP'] !== '0',
    pointMs: ctx.quick ? 4000 : 15_000,
    warmMs: ctx.quick ? 1000 : 3000,
    stepMs: ctx.quick ? [6000, 8000, 6000] : [15_000, 15_000, 15_000],
    connections: 16,
    modelsDir: modelsDirWith(ctx.repoRoot, [MODEL], 'streaminfer-sweep-'),
    inProcessArgs: [
      'bench',
      'model',
      MODEL,
      '--json',
      '--max-batch',
      String(MAX_BATCH),
      '--min-ms',
      ctx.quick ? '200' : '500',
      '--workers',
      '1',
    ],
  };
}
type Setup = ReturnType<typeof sweepSetup>;

/** C: in-process items/s at the max batch size, measured alone (no server running yet). */
async function measureCapacity(ctx: ScenarioContext, setup: Setup): Promise<number> {
  const args = [...setup.inProcessArgs, '--models-dir', setup.modelsDir];
  ctx.log(`capacity: node dist/apps/cli/main.js ${args.join(' ')}`);
  const r = await runInProcessBench(ctx.repoRoot, args, 180_000);
  const c = inProcessAt(r, MAX_BATCH);
  if (c === undefined) throw new Error('the in-process bench gave no items/s at the max batch size');
  ctx.log(`capacity C = ${Math.round(c)} items/s (in-process, batch ${MAX_BATCH})`);
  return c;
}

function startPolicy(ctx: ScenarioContext, setup: Setup, policy: Policy): Promise<ServerHandle> {
  return ctx.startStreamInfer({
    label: policy,
    nodes: 1,
    workers: 1,
    args: [
      '--models-dir',
      setup.modelsDir,
      '--model',
      MODEL,
      '--batch-policy',
      policy,
      '--batch-size',
      String(MAX_BATCH),
      '--batch-timeout-ms',
      String(TIMEOUT_MS),
    ],
    env: { STREAMINFER_RATE_LIMIT_RPS: '0' },
  });
}

function poissonAt(setup: Setup, server: ServerHandle, phases: PoissonPhase[], seed: number) {
  return {
    url: server.wsUrl,
    connections: setup.connections,
    body: 'bench-model',
    bodyOptions: { model: MODEL },
    phases,
    seed,
  };
}

/** The sweep: levels in order, every policy per level (order rotated), each point warmed then measured. */
async function measureSweep(
  ctx: ScenarioContext,
  setup: Setup,
  servers: Map<Policy, ServerHandle>,
  capacity: number,
): Promise<Point[]> {
  const points: Point[] = [];
  for (const [k, level] of setup.levels.entries()) {
    const order = POLICIES.map((_, i) => POLICIES[(i + k) % POLICIES.length]!);
    for (const policy of order) {
      const rate = level * capacity;
      const phases: PoissonPhase[] = [
        { label: 'warm', rate, durationMs: setup.warmMs, measured: false },
        { label: `${Math.round(level * 100)}%`, rate, durationMs: setup.pointMs },
      ];
      const metricsUrl = `${servers.get(policy)!.adminUrl}/metrics`;
      let before: Promise<MetricSample[] | undefined> = Promise.resolve(undefined);
      const atMeasured = (): void => {
        setTimeout(() => {
          before = scrapeMetrics(metricsUrl).catch(() => undefined);
        }, setup.warmMs);
      };
      try {
        const r = await runPoisson(poissonAt(setup, servers.get(policy)!, phases, 1000 + k), atMeasured);
        const p = r.phases[0]!;
        const [b, a] = await Promise.all([before, scrapeMetrics(metricsUrl).catch(() => undefined)]);
        const meanBatch =
          b && a ? histogramMeanDelta(b, a, 'streaminfer_batch_size', { model: MODEL }) : undefined;
        const gauges = a ? policyGauges(a) : undefined;
        points.push({ policy, level, result: p, meanBatch, gauges });
        ctx.log(
          `${policy} @ ${Math.round(level * 100)}% (${Math.round(rate)}/s): ${Math.round(p.achievedRps)}/s, ` +
            `p50 ${fmt(p.p50)} ms, p99 ${fmt(p.p99)} ms, mean batch ${fmt(meanBatch, 3)}, errors ${JSON.stringify(p.errors)}` +
            (policy === 'adaptive' && gauges ? `, gauges ${JSON.stringify(gauges)}` : ''),
        );
      } catch (e) {
        points.push({ policy, level, error: errText(e) });
        ctx.log(`${policy} @ ${Math.round(level * 100)}%: ${errText(e).split('\n')[0]}`);
      }
    }
  }
  return points;
}

function gauge(samples: Awaited<ReturnType<typeof scrapeMetrics>>, name: string): number | undefined {
  return findSamples(samples, name, { model: MODEL })[0]?.value;
}

function policyGauges(samples: MetricSample[]): PolicyGauges {
  const ms = (x: number | undefined) => (x === undefined ? undefined : x * 1000);
  return {
    targetSize: gauge(samples, 'streaminfer_batch_target_size'),
    interceptMs: ms(gauge(samples, 'streaminfer_batch_cost_intercept_seconds')),
    perItemMs: ms(gauge(samples, 'streaminfer_batch_cost_per_item_seconds')),
    arrivalRate: gauge(samples, 'streaminfer_batch_arrival_rate'),
  };
}

/** Step change on adaptive: 20% → 90% → 20%, /metrics sampled each second on the generator's clock. */
async function measureStep(ctx: ScenarioContext, setup: Setup, server: ServerHandle, capacity: number) {
  const [a, b, c] = setup.stepMs as [number, number, number];
  const phases: PoissonPhase[] = [
    { label: 'warm', rate: 0.2 * capacity, durationMs: setup.warmMs, measured: false },
    { label: '20%', rate: 0.2 * capacity, durationMs: a },
    { label: '90%', rate: 0.9 * capacity, durationMs: b },
    { label: '20% again', rate: 0.2 * capacity, durationMs: c },
  ];
  const samples: StepSample[] = [];
  let timer: NodeJS.Timeout | undefined;
  const onStart = (startEpochMs: number): void => {
    const origin = startEpochMs + setup.warmMs;
    timer = setInterval(() => {
      const t = (Date.now() - origin) / 1000;
      scrapeMetrics(`${server.adminUrl}/metrics`, 900)
        .then((s) => {
          const wait = gauge(s, 'streaminfer_batch_wait_seconds');
          samples.push({ t, ...policyGauges(s), waitMs: wait === undefined ? undefined : wait * 1000 });
        })
        .catch(() => {});
    }, 1000);
  };
  ctx.log(`step: adaptive, 20% → 90% → 20% of C (${(a + b + c) / 1000} s)`);
  try {
    const r = await runPoisson(poissonAt(setup, server, phases, 7), onStart);
    return { phases: r.phases, samples };
  } finally {
    clearInterval(timer);
  }
}

/** Seconds after a step until every later second's p99 is under the objective; undefined if never. */
export function recoverySeconds(perSecond: readonly { p99: number }[], slo: number): number | undefined {
  for (let s = 0; s < perSecond.length; s++) {
    if (perSecond.slice(s).every((x) => Number.isNaN(x.p99) || x.p99 < slo)) {
      return perSecond.slice(s).some((x) => !Number.isNaN(x.p99)) || s === 0 ? s : undefined;
    }
  }
  return undefined;
}

function errorsOf(p: PhaseResult): number {
  return Object.values(p.errors).reduce((a, b) => a + b, 0);
}

function sweepVerdicts(points: readonly Point[]): Verdict[] {
  const at = (policy: Policy) =>
    points.filter((p) => p.policy === policy && p.result).map((p) => ({ level: p.level, r: p.result! }));
  const within = (policy: Policy) => at(policy).filter((p) => p.level <= 0.9 + 1e-9);
  const misses = (policy: Policy) => within(policy).filter((p) => !(p.r.p99 < SLO_MS) || errorsOf(p.r) > 0);
  const pct = (l: number): string => `${Math.round(l * 100)}%`;
  const adaptiveMiss = misses('adaptive');
  const others = (['fixed', 'greedy'] as const).map((p) => ({ p, m: misses(p) }));
  const maxTput = (policy: Policy): number => Math.max(0, ...at(policy).map((p) => p.r.achievedRps));
  const best = Math.max(...POLICIES.map(maxTput));
  const share = best > 0 ? maxTput('adaptive') / best : Number.NaN;
  return [
    {
      name: 'adaptive p99 < objective at every load ≤ 90% of C (no errors)',
      target: `< ${SLO_MS} ms`,
      measured: `worst ${fmt(Math.max(...within('adaptive').map((p) => p.r.p99)))} ms`,
      pass: within('adaptive').length ? adaptiveMiss.length === 0 : undefined,
      detail: adaptiveMiss
        .map((p) => `${pct(p.level)}: p99 ${fmt(p.r.p99)} ms, errors ${errorsOf(p.r)}`)
        .join('; '),
    },
    {
      name: 'fixed or greedy miss the objective at some load ≤ 90% of C',
      target: 'at least one miss',
      measured: others.map((o) => `${o.p}: ${o.m.map((p) => pct(p.level)).join(', ') || 'none'}`).join('; '),
      pass: others.some((o) => o.m.length > 0),
    },
    {
      name: 'adaptive max throughput ÷ best policy’s',
      target: '≥ 95%',
      measured: `${fmt(share * 100, 1)}% (${fmt(maxTput('adaptive'))} of ${fmt(best)}/s)`,
      pass: Number.isFinite(share) ? share >= 0.95 : undefined,
    },
  ];
}

function sweepCharts(
  points: readonly Point[],
  step: Awaited<ReturnType<typeof measureStep>> | undefined,
): Chart[] {
  const levels = [...new Set(points.map((p) => p.level))].sort((a, b) => a - b);
  const series = (pick: (r: PhaseResult) => number) =>
    POLICIES.map((policy, i) => ({
      name: policy,
      color: PALETTE[i % PALETTE.length],
      points: points
        .filter((p) => p.policy === policy && p.result)
        .map((p): [number, number] => [p.level * 100, pick(p.result!)]),
    }));
  const x0 = (levels[0] ?? 0.1) * 100;
  const x1 = (levels.at(-1) ?? 1.2) * 100;
  const charts: Chart[] = [
    {
      file: 'sweep-p99.svg',
      title: 'p99 latency vs offered load',
      svg: lineChart({
        title: `p99 (ms) vs offered load (% of C); objective in black; above ${P99_CHART_CAP_MS} ms drawn at ${P99_CHART_CAP_MS}`,
        xLabel: 'offered load, % of C',
        yLabel: 'p99 ms',
        series: [
          ...series((r) => Math.min(r.p99, P99_CHART_CAP_MS)),
          {
            name: `objective ${SLO_MS} ms`,
            color: '#333333',
            points: [
              [x0, SLO_MS],
              [x1, SLO_MS],
            ],
          },
        ],
      }),
    },
    {
      file: 'sweep-throughput.svg',
      title: 'achieved throughput vs offered load',
      svg: lineChart({
        title: 'achieved throughput (ok answers/s) vs offered load (% of C)',
        xLabel: 'offered load, % of C',
        yLabel: 'answers/s',
        series: series((r) => r.achievedRps),
      }),
    },
  ];
  if (step) {
    let t0 = 0;
    const p99: [number, number][] = [];
    for (const ph of step.phases) {
      ph.perSecond.forEach((s, i) => p99.push([t0 + i + 0.5, s.p99]));
      t0 += ph.durationMs / 1000;
    }
    // the step instants: the end of every phase but the last
    const edges: number[] = [];
    for (const ph of step.phases.slice(0, -1)) edges.push((edges.at(-1) ?? 0) + ph.durationMs / 1000);
    const markers = edges.map((x, i) => ({ x, label: i === 0 ? '→ 90%' : '→ 20%' }));
    charts.push(
      {
        file: 'sweep-step-p99.svg',
        title: 'step change (adaptive): p99 per second',
        svg: lineChart({
          title: 'adaptive, 20% → 90% → 20% of C: p99 per second (ms)',
          xLabel: 'seconds',
          yLabel: 'p99 ms',
          series: [
            { name: 'p99', color: PALETTE[2], points: p99 },
            {
              name: `objective`,
              color: '#333333',
              points: [
                [0, SLO_MS],
                [t0, SLO_MS],
              ],
            },
          ],
          markers,
        }),
      },
      {
        file: 'sweep-step-gauges.svg',
        title: 'step change (adaptive): target size and wait',
        svg: lineChart({
          title: 'adaptive state from /metrics: target batch size, wait (ms)',
          xLabel: 'seconds',
          yLabel: 'items / ms',
          series: [
            {
              name: 'target size',
              points: step.samples
                .filter((s) => s.targetSize !== undefined)
                .map((s): [number, number] => [s.t, s.targetSize!]),
            },
            {
              name: 'wait ms',
              points: step.samples
                .filter((s) => s.waitMs !== undefined)
                .map((s): [number, number] => [s.t, s.waitMs!]),
            },
          ],
          markers,
        }),
      },
    );
  }
  return charts;
}

function sweepTable(points: readonly Point[], capacity: number): string {
  const levels = [...new Set(points.map((p) => p.level))].sort((a, b) => a - b);
  const rows = levels.map((level) => {
    const cells: (string | number)[] = [`${Math.round(level * 100)}%`, fmt(Math.round(level * capacity))];
    for (const policy of POLICIES) {
      const p = points.find((x) => x.policy === policy && x.level === level);
      const r = p?.result;
      if (!r) {
        cells.push(p?.error ? 'failed' : '–', '–', '–', '–', '–');
        continue;
      }
      const errs = Object.entries(r.errors)
        .map(([c, n]) => `${c} ${n}`)
        .join(', ');
      cells.push(
        fmt(Math.round(r.achievedRps)),
        fmt(r.p50, 3),
        `${fmt(r.p99, 3)}${r.p99 < SLO_MS ? '' : ' ✗'}`,
        fmt(p.meanBatch, 3),
        errs || '0',
      );
    }
    return cells;
  });
  const headers = ['offered', 'req/s'];
  for (const p of POLICIES) headers.push(`${p} ok/s`, `${p} p50`, `${p} p99`, `${p} batch`, `${p} errors`);
  return markdownTable(headers, rows);
}

function stepMarkdown(
  step: Awaited<ReturnType<typeof measureStep>>,
  recovery: (number | undefined)[],
): string {
  const rows = step.phases.map((ph, i) => [
    ph.label,
    fmt(Math.round(ph.rate)),
    fmt(Math.round(ph.achievedRps)),
    fmt(ph.p50, 3),
    fmt(ph.p99, 3),
    String(Object.values(ph.errors).reduce((a, b) => a + b, 0)),
    ph.perSecond.map((s) => (Number.isNaN(s.p99) ? '–' : Math.round(s.p99))).join(' '),
    i === 0 ? '' : recovery[i - 1] === undefined ? 'not within the phase' : `${recovery[i - 1]} s`,
  ]);
  const gauges = step.samples.map((s) => [
    fmt(s.t, 3),
    fmt(s.targetSize),
    fmt(s.waitMs, 3),
    fmt(s.arrivalRate === undefined ? undefined : Math.round(s.arrivalRate)),
    fmt(s.interceptMs, 3),
    fmt(s.perItemMs, 3),
  ]);
  return (
    '\n\n#### Step change (adaptive)\n\n' +
    markdownTable(
      [
        'phase',
        'offered/s',
        'ok/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'p99 per second (ms)',
        'back under objective',
      ],
      rows,
    ) +
    '\n\n/metrics each second (t from the end of the warm-up):\n\n' +
    markdownTable(['t s', 'target size', 'wait ms', 'arrival rate /s', 'cost a ms', 'cost b ms/item'], gauges)
  );
}

async function runSweep(ctx: ScenarioContext): Promise<ScenarioResult> {
  const setup = sweepSetup(ctx);
  const loadBefore = os.loadavg();
  const params: Record<string, unknown> = {
    model: MODEL,
    policies: POLICIES,
    batchSize: MAX_BATCH,
    batchTimeoutMs: TIMEOUT_MS,
    sloP99Ms: SLO_MS,
    levels: setup.levels,
    pointSeconds: setup.pointMs / 1000,
    warmSeconds: setup.warmMs / 1000,
    connections: setup.connections,
    arrivals: 'open loop, Poisson, no in-flight cap; latency from the scheduled send time',
    stepSeconds: setup.stepMs.map((x) => x / 1000),
  };
  const runs: RunRecord[] = [];
  const servers = new Map<Policy, ServerHandle>();
  try {
    const capacity = await measureCapacity(ctx, setup);
    params['capacityItemsPerSecond'] = Math.round(capacity);
    for (const policy of POLICIES) servers.set(policy, await startPolicy(ctx, setup, policy));
    const points = await measureSweep(ctx, setup, servers, capacity);
    let step: Awaited<ReturnType<typeof measureStep>> | undefined;
    let stepError: string | undefined;
    if (setup.step) {
      try {
        step = await measureStep(ctx, setup, servers.get('adaptive')!, capacity);
      } catch (e) {
        stepError = errText(e);
      }
    } else stepError = 'skipped (BENCH_SWEEP_STEP=0)';
    for (const [policy, server] of servers) {
      if (server.exited())
        runs.push({
          label: policy,
          target: policy,
          error: `server exited\n${server.stderrTail().slice(-4000)}`,
        });
    }
    const recovery = step ? step.phases.slice(1).map((ph) => recoverySeconds(ph.perSecond, SLO_MS)) : [];
    const verdicts = sweepVerdicts(points);
    const notes = [verdictNote('Done-when', verdicts)];
    if (step) {
      notes.push(
        `Step change (adaptive): p99 back under ${SLO_MS} ms ${recovery[0] === undefined ? 'not within the 90% phase' : `${recovery[0]} s`} after 20% → 90%, ` +
          `${recovery[1] === undefined ? 'not within the last phase' : `${recovery[1]} s`} after 90% → 20%.`,
      );
    } else notes.push(`Step change failed: ${stepError}`);
    const lag = points.filter((p) => p.result && p.result.sendLagP99Ms > 20);
    if (lag.length) {
      notes.push(
        `The generator sent late (send lag p99 > 20 ms) at: ${lag.map((p) => `${p.policy} ${Math.round(p.level * 100)}% (${fmt(p.result!.sendLagP99Ms, 3)} ms)`).join(', ')} — counted in latency (scheduled time), but the client shares the cores.`,
      );
    }
    notes.push(
      `Load average before ${loadBefore.map((x) => x.toFixed(2)).join(' ')}, after ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}.`,
    );
    const markdown =
      `\n\nCapacity C = **${fmt(Math.round(capacity))} items/s** (in-process, batch ${MAX_BATCH}, measured alone at the start).\n\n` +
      sweepTable(points, capacity) +
      '\n\n' +
      verdictTable(verdicts) +
      (step ? stepMarkdown(step, recovery) : '');
    return {
      params,
      runs,
      ratios: [],
      charts: sweepCharts(points, step),
      notes,
      markdown,
      data: { capacity, points, step, recovery, verdicts },
    };
  } finally {
    await Promise.all([...servers.values()].map((s) => s.stop().catch(() => undefined)));
    fs.rmSync(setup.modelsDir, { recursive: true, force: true });
  }
}

export const sweep: Scenario = {
  name: 'sweep',
  description:
    'fixed vs greedy vs adaptive batching on the `bench` model under open-loop Poisson load from 10% to 120% of its ' +
    'in-process batched capacity (interleaved per level): achieved throughput, p50/p99 (from the scheduled send time), ' +
    'errors; p99 vs load charted with the 150 ms objective; then a 20% → 90% → 20% step on adaptive with its gauges',
  run: runSweep,
};
