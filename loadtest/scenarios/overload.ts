/**
 * overload: the heavy `bench` model far past what it can serve, with its queue capped. 64
 * WebSocket connections, one request in flight each (closed loop), send 800 requests in total
 * to `serve --nodes 1 --workers 1` serving only `bench` with `STREAMINFER_MAX_MODEL_QUEUE=8`
 * (and no rate limit, so only the queue bound acts). What the queue cannot take must be shed at
 * once: the scenario reports admitted vs shed, the p99 of the admitted answers and of the shed
 * ones (client-measured; they must be fast, under 5 ms), the `retry_after_ms` the shed answers
 * carried, and `streaminfer_shed_total{reason="model_queue_full"}` from /metrics.
 *
 * Two client behaviours after a shed answer, both counting every attempt towards the 800:
 * `honours retry_after` waits the `retry_after_ms` the answer carried (at most 1 s) before its
 * next request — the primary figure; `resends at once` sends its next request immediately.
 * Requests go out as binary tensor frames, as in the `batching` scenario.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fmt, leftThenRight, markdownTable } from '../../scripts/markdown';
import { type MetricSample, scrapeMetrics, sumSamples } from '../harness/metrics';
import { runLoad } from '../harness/run-load';
import {
  errText,
  measureSafe,
  median,
  modelsDirWith,
  stampSharedServer,
  standardNotes,
  type Verdict,
  verdictNote,
  verdictTable,
  withServer,
} from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import { barChart, type LineSeries, lineChart, PALETTE } from '../harness/svg-chart';
import type {
  Chart,
  LoadSpec,
  Ratio,
  RunRecord,
  Scenario,
  ScenarioContext,
  ScenarioResult,
} from '../harness/types';

const MODEL = 'bench';
/** The published figures for this setup (same concurrency, total and queue cap). */
export const PUBLISHED = { admitted: 238, admittedP99Ms: 296, shed: 562 } as const;
export const OVERLOAD_TARGETS = {
  /** client-measured p99 of the shed answers, below */
  shedP99Ms: 5,
} as const;
export const MAX_MODEL_QUEUE = 8;
/** the longest pause a client takes on a retry_after_ms */
const MAX_RETRY_PAUSE_MS = 1000;

const HONOUR = 'honours-retry-after';
const AT_ONCE = 'resends-at-once';

interface Variant {
  target: string;
  name: string;
  honorRetryAfter: boolean;
  what: string;
}

const VARIANTS: Variant[] = [
  {
    target: HONOUR,
    name: 'honours retry_after',
    honorRetryAfter: true,
    what: `after a shed answer the connection waits its retry_after_ms (≤ ${MAX_RETRY_PAUSE_MS} ms), then sends its next request`,
  },
  {
    target: AT_ONCE,
    name: 'resends at once',
    honorRetryAfter: false,
    what: 'after any answer, shed or not, the connection sends its next request at once',
  },
];

/** Per-run figures of an overload run. */
export interface OverloadFigures {
  attempts: number;
  admitted: number;
  shed: number;
  /** answers with another error code, plus requests never answered */
  other: number;
  admittedP50Ms?: number;
  admittedP99Ms?: number;
  shedP50Ms?: number;
  shedP99Ms?: number;
  shedMaxMs?: number;
  retryAfterMinMs?: number;
  retryAfterP50Ms?: number;
  retryAfterMaxMs?: number;
  /** Δ streaminfer_shed_total{reason="model_queue_full"} over the run */
  shedMetric?: number;
  /** Δ streaminfer_shed_total{reason="ring_full"} over the run */
  ringFullMetric?: number;
  /**
   * server side (streaminfer_request_duration_seconds: frame read → answer sent), share of the answers
   * faster than 25 ms — the shed ones: every admitted answer waits for its batch — sent within 0.5 / 1 ms
   */
  serverShedWithin05ms?: number;
  serverShedWithin1ms?: number;
  durationMs: number;
}

export function overloadFigures(run: RunRecord): OverloadFigures | undefined {
  const l = run.load;
  if (!l) return undefined;
  const shed = l.errors['overloaded'] ?? 0;
  const shedLat = l.errorLatencyMs?.['overloaded'];
  const ra = l.retryAfterMs?.['overloaded'];
  const m = run.metrics ?? {};
  return {
    attempts: l.sent,
    admitted: l.ok,
    shed,
    other: l.errorCount - shed,
    ...(l.ok > 0 ? { admittedP50Ms: l.latencyMs.p50, admittedP99Ms: l.latencyMs.p99 } : {}),
    ...(shedLat ? { shedP50Ms: shedLat.p50, shedP99Ms: shedLat.p99, shedMaxMs: shedLat.max } : {}),
    ...(ra ? { retryAfterMinMs: ra.min, retryAfterP50Ms: ra.p50, retryAfterMaxMs: ra.max } : {}),
    ...(m['shedModelQueueFull'] !== undefined ? { shedMetric: m['shedModelQueueFull'] } : {}),
    ...(m['shedRingFull'] !== undefined ? { ringFullMetric: m['shedRingFull'] } : {}),
    ...(m['serverUnder25ms']
      ? {
          serverShedWithin05ms: (m['serverUnder05ms'] ?? 0) / m['serverUnder25ms'],
          serverShedWithin1ms: (m['serverUnder1ms'] ?? 0) / m['serverUnder25ms'],
        }
      : {}),
    durationMs: l.durationMs,
  };
}

export function judgeOverload(total: number, perVariant: Record<string, OverloadFigures[]>): Verdict[] {
  const verdicts: Verdict[] = [];
  for (const v of VARIANTS) {
    const figs = perVariant[v.target] ?? [];
    const shedP99 = median(figs.map((f) => f.shedP99Ms ?? Number.NaN));
    const worst = figs.length ? Math.max(...figs.map((f) => f.shedP99Ms ?? Number.NaN)) : undefined;
    verdicts.push({
      name: `shed answers p99, ${v.name}`,
      target: `< ${OVERLOAD_TARGETS.shedP99Ms} ms`,
      measured: shedP99 === undefined ? '–' : `${fmt(shedP99)} ms`,
      pass: shedP99 === undefined ? undefined : shedP99 < OVERLOAD_TARGETS.shedP99Ms,
      detail:
        `median over rounds; per run ${figs.map((f) => fmt(f.shedP99Ms)).join(' / ')} ms` +
        (worst !== undefined && Number.isFinite(worst) && worst >= OVERLOAD_TARGETS.shedP99Ms
          ? `; worst run ${fmt(worst)} ms`
          : ''),
    });
    const complete = figs.map((f) => f.admitted + f.shed === total && f.other === 0);
    verdicts.push({
      name: `every attempt answered ok or overloaded, ${v.name}`,
      target: `${total} = admitted + shed`,
      measured:
        figs
          .map((f) => `${fmt(f.admitted)} + ${fmt(f.shed)}${f.other ? ` (+${f.other} other)` : ''}`)
          .join(' / ') || '–',
      pass: figs.length ? complete.every(Boolean) : undefined,
    });
    const consistent = figs.map((f) => f.shedMetric === undefined || f.shedMetric === f.shed);
    verdicts.push({
      name: `shed_total{reason="model_queue_full"} = shed answers, ${v.name}`,
      target: 'equal',
      measured: figs.map((f) => `${fmt(f.shedMetric)} vs ${fmt(f.shed)}`).join(' / ') || '–',
      pass:
        figs.length && figs.some((f) => f.shedMetric !== undefined) ? consistent.every(Boolean) : undefined,
    });
  }
  return verdicts;
}

/**
 * Whether every admitted request of `bench` waits at least 25 ms for its batch with the queue capped:
 * the model's own policy is `fixed` with a delay of 25 ms or more and a max batch the queue cap
 * cannot fill. Then the server's answers under 25 ms are exactly the shed ones.
 */
function admittedWaitAtLeast25ms(repoRoot: string): { yes: boolean; policy: string } {
  try {
    const cfg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'models', MODEL, 'config.json'), 'utf8')) as {
      batching?: { policy?: unknown; max_batch_size?: unknown; max_queue_delay_ms?: unknown };
    };
    const b = cfg.batching ?? {};
    const policy = `${String(b.policy)}, max ${String(b.max_batch_size)}, ${String(b.max_queue_delay_ms)} ms`;
    const yes =
      b.policy === 'fixed' &&
      Number(b.max_queue_delay_ms) >= 25 &&
      Number(b.max_batch_size) > MAX_MODEL_QUEUE &&
      process.env['STREAMINFER_BATCH_SIZE'] === undefined &&
      process.env['STREAMINFER_BATCH_POLICY'] === undefined &&
      process.env['STREAMINFER_BATCH_TIMEOUT_MS'] === undefined;
    return { yes, policy };
  } catch {
    return { yes: false, policy: 'unknown' };
  }
}

/** Sizes, the server's environment, and the load every measured run sends. */
function overloadSetup(ctx: ScenarioContext) {
  const size = ctx.sizes({ connections: 64, requests: 800 }, { connections: 64, requests: 800 });
  const total = size.requests; // BENCH_REQUESTS overrides the total here
  const env = {
    STREAMINFER_MAX_MODEL_QUEUE: String(MAX_MODEL_QUEUE),
    STREAMINFER_RATE_LIMIT_RPS: '0',
  };
  const notes: string[] = [];
  const batchWait = admittedWaitAtLeast25ms(ctx.repoRoot);
  const leaked = ['STREAMINFER_BATCH_SIZE', 'STREAMINFER_BATCH_POLICY', 'STREAMINFER_BATCH_TIMEOUT_MS']
    .filter((k) => process.env[k] !== undefined)
    .map((k) => `${k}=${process.env[k]}`);
  if (leaked.length) {
    notes.push(
      `The bench's environment sets ${leaked.join(', ')}: it reaches the server and overrides the model’s batching.`,
    );
  }
  const baseLoad: LoadSpec = {
    connections: size.connections,
    requestsPerConnection: Math.ceil(total / size.connections),
    totalRequests: total,
    inFlightPerConnection: 1,
    body: 'bench-model',
    bodyOptions: { model: MODEL },
    binary: true,
    // each load-generator process is fresh: 2 requests per connection first, so its code is warm when
    // the 64 first requests go out at once (their answers are not counted)
    warmupPerConnection: 2,
    timeLimitMs: 120_000,
    bucketMs: 250,
    // two processes: 56 retries firing in the same timer tick of one process would put that process's
    // serial send loop into the measured latency of the shed answers
    processes: Math.max(2, ctx.loadgenProcesses),
  };
  return { size, total, env, notes, batchWait, baseLoad };
}

type OverloadSetup = ReturnType<typeof overloadSetup>;

/**
 * Warm-up, never more than the queue bound in flight (so nothing is shed): the first runs of a
 * session are slow and would otherwise land in the first measured run.
 */
async function warmUpOverload(ctx: ScenarioContext, srv: ServerHandle): Promise<void> {
  try {
    const warm = await runLoad({
      url: srv.wsUrl,
      connections: MAX_MODEL_QUEUE,
      requestsPerConnection: 4,
      inFlightPerConnection: 1,
      body: 'bench-model',
      bodyOptions: { repoRoot: ctx.repoRoot, model: MODEL },
      binary: true,
      timeLimitMs: 60_000,
      processes: 1,
    });
    if (warm.ok === 0) throw new Error(`no ok answers (errors: ${JSON.stringify(warm.errors)})`);
  } catch (e) {
    ctx.log(`overload: warm-up failed: ${errText(e).split('\n')[0]}`);
  }
}

/** One measured run of one client behaviour, with the shed counters and server-side times from /metrics. */
async function measureVariant(
  ctx: ScenarioContext,
  setup: OverloadSetup,
  srv: ServerHandle,
  v: Variant,
  label: string,
): Promise<RunRecord> {
  const { baseLoad, batchWait } = setup;
  let before: MetricSample[] | undefined;
  try {
    before = await scrapeMetrics(`${srv.adminUrl}/metrics`);
  } catch (e) {
    ctx.log(`${label}: /metrics failed: ${errText(e).split('\n')[0]}`);
  }
  const run = await measureSafe(ctx, label, v.target, srv, {
    ...baseLoad,
    honorRetryAfter: v.honorRetryAfter,
    maxRetryPauseMs: MAX_RETRY_PAUSE_MS,
  });
  if (before) {
    try {
      const after = await scrapeMetrics(`${srv.adminUrl}/metrics`);
      const d = (reason: string): number =>
        sumSamples(after, 'streaminfer_shed_total', { model: MODEL, reason }) -
        sumSamples(before!, 'streaminfer_shed_total', { model: MODEL, reason });
      const bucket = (le: string): number =>
        sumSamples(after, 'streaminfer_request_duration_seconds_bucket', { model: MODEL, le }) -
        sumSamples(before!, 'streaminfer_request_duration_seconds_bucket', { model: MODEL, le });
      // the scrapes bracket the warm-up too: its error answers (all shed) are taken off
      const warmShed = run.load?.warmupErrors ?? 0;
      run.metrics = {
        shedModelQueueFull: d('model_queue_full') - warmShed,
        shedRingFull: d('ring_full'),
        warmupShed: warmShed,
        ...(batchWait.yes
          ? {
              serverUnder05ms: bucket('0.0005'),
              serverUnder1ms: bucket('0.001'),
              serverUnder5ms: bucket('0.005'),
              serverUnder25ms: bucket('0.025'),
            }
          : {}),
      };
    } catch (e) {
      ctx.log(`${label}: /metrics failed: ${errText(e).split('\n')[0]}`);
    }
  }
  const f = overloadFigures(run);
  if (f) {
    ctx.log(
      `${label}: ${f.admitted} admitted (p99 ${fmt(f.admittedP99Ms)} ms), ${f.shed} shed ` +
        `(p99 ${fmt(f.shedP99Ms)} ms), shed_total Δ ${fmt(f.shedMetric)}`,
    );
  }
  return run;
}

/** Measured phase on one server: warm-up, then each round runs both behaviours, alternating which goes first. */
async function driveOverload(
  ctx: ScenarioContext,
  setup: OverloadSetup,
  srv: ServerHandle,
  runs: RunRecord[],
): Promise<void> {
  await warmUpOverload(ctx, srv);
  for (let round = 1; round <= ctx.rounds && !srv.exited(); round++) {
    const suffix = ctx.rounds > 1 ? ` #${round}` : '';
    // alternate which behaviour goes first
    const order = round % 2 ? VARIANTS : [...VARIANTS].reverse();
    for (const v of order) runs.push(await measureVariant(ctx, setup, srv, v, `${v.name}${suffix}`));
  }
  if (srv.exited()) {
    runs.push({
      label: 'server',
      target: HONOUR,
      error: `server exited during the scenario\n${srv.stderrTail().slice(-4000)}`,
    });
  }
}

/** Analysis: per-run figures by behaviour, their medians, the verdicts and the notes that go with them. */
function overloadAnalysis(ctx: ScenarioContext, setup: OverloadSetup, runs: readonly RunRecord[]) {
  const { total, notes } = setup;
  const measured = runs.filter((r) => r.load);
  const perVariant: Record<string, OverloadFigures[]> = {};
  for (const v of VARIANTS) {
    perVariant[v.target] = measured
      .filter((r) => r.target === v.target)
      .map(overloadFigures)
      .filter((f): f is OverloadFigures => f !== undefined);
  }
  const verdicts = judgeOverload(total, perVariant);
  const med = (target: string, pick: (f: OverloadFigures) => number | undefined): number | undefined =>
    median((perVariant[target] ?? []).map((f) => pick(f) ?? Number.NaN));
  const medians = Object.fromEntries(
    VARIANTS.map((v) => [
      v.target,
      {
        admitted: med(v.target, (f) => f.admitted),
        shed: med(v.target, (f) => f.shed),
        admittedP99Ms: med(v.target, (f) => f.admittedP99Ms),
        shedP99Ms: med(v.target, (f) => f.shedP99Ms),
        shedMetric: med(v.target, (f) => f.shedMetric),
        retryAfterP50Ms: med(v.target, (f) => f.retryAfterP50Ms),
        durationMs: med(v.target, (f) => f.durationMs),
      },
    ]),
  ) as Record<string, Record<string, number | undefined>>;
  const primary = medians[HONOUR]!;
  notes.push(verdictNote('Done-when (medians over rounds)', verdicts));
  notes.push(
    `Against the published figures (${PUBLISHED.admitted} admitted at p99 ${PUBLISHED.admittedP99Ms} ms, ` +
      `${PUBLISHED.shed} shed), clients honouring retry_after: ${fmt(primary['admitted'])} admitted at p99 ` +
      `${fmt(primary['admittedP99Ms'])} ms, ${fmt(primary['shed'])} shed (medians). The split depends on how ` +
      'clients behave after a shed answer (see both behaviours below) and on how fast this host serves the model.',
  );
  notes.push(...standardNotes(measured, ctx.cores));
  return { measured, perVariant, verdicts, medians };
}

type OverloadAnalysis = ReturnType<typeof overloadAnalysis>;

/** The report's Markdown section. */
function overloadMarkdown(setup: OverloadSetup, a: OverloadAnalysis): string {
  const { total, baseLoad, batchWait } = setup;
  const { measured, verdicts } = a;
  const md: string[] = [
    '### Admitted vs shed',
    '',
    VARIANTS.map((v) => `- **${v.name}**: ${v.what}.`).join('\n'),
    `- Every attempt counts towards the ${total}; a connection stops once the total has been sent. ` +
      `Latency is client-side send → answer, with the 64 connections split over ${baseLoad.processes} ` +
      'load-generator processes (in one process, the 56 retries that fire in the same timer tick are sent one ' +
      'after the other, and that send loop lands in the measured latency of the answers read after it). Each ' +
      'process warms up with 2 requests per connection before its clock starts (not counted; the shed_total Δ ' +
      `has the warm-up’s shed answers taken off). The server was warmed with ${MAX_MODEL_QUEUE} connections × 4 ` +
      'requests (never over the queue bound) before the first run.',
    batchWait.yes
      ? '- Server-side shed time: `streaminfer_request_duration_seconds` (model bench, frame read → answer sent) ' +
        `between the scrapes around each run; with the model’s batching (${batchWait.policy}) every admitted ` +
        'answer waits ≥ 25 ms for its batch, so the answers under 25 ms are the shed ones (warm-up included); ' +
        'the column gives the share of them sent within 0.5 ms and 1 ms.'
      : `- Server-side shed time: not derived (the model’s batching, ${batchWait.policy}, does not make every ` +
        'admitted answer slower than 25 ms).',
    '',
    markdownTable(
      [
        'run',
        'attempts',
        'admitted',
        'shed',
        'other',
        'admitted p50 / p99 ms',
        'shed p50 / p99 / max ms',
        'retry_after_ms min / p50 / max',
        'shed_total{model_queue_full} Δ',
        'ring_full Δ',
        'server-side shed ≤ 0.5 / ≤ 1 ms',
        'seconds',
      ],
      [
        ...measured.map((r) => {
          const f = overloadFigures(r)!;
          return [
            r.label,
            fmt(f.attempts),
            fmt(f.admitted),
            fmt(f.shed),
            fmt(f.other),
            `${fmt(f.admittedP50Ms)} / ${fmt(f.admittedP99Ms)}`,
            `${fmt(f.shedP50Ms)} / ${fmt(f.shedP99Ms)} / ${fmt(f.shedMaxMs)}`,
            `${fmt(f.retryAfterMinMs)} / ${fmt(f.retryAfterP50Ms)} / ${fmt(f.retryAfterMaxMs)}`,
            fmt(f.shedMetric),
            fmt(f.ringFullMetric),
            f.serverShedWithin05ms === undefined
              ? '–'
              : `${(f.serverShedWithin05ms * 100).toFixed(1)}% / ${((f.serverShedWithin1ms ?? 0) * 100).toFixed(1)}%`,
            fmt(f.durationMs / 1000),
          ];
        }),
        [
          '**published**',
          '800',
          String(PUBLISHED.admitted),
          String(PUBLISHED.shed),
          '',
          `– / ${PUBLISHED.admittedP99Ms}`,
          '',
          '',
          '',
          '',
          '',
          '',
        ],
      ],
      leftThenRight(1, 11),
    ),
    '',
    '### Done-when',
    '',
    verdictTable(verdicts),
  ];

  return md.join('\n');
}

/** Charts: outcome per run, shed-answer latency per run, timeline of the first run of each behaviour. */
function overloadCharts(setup: OverloadSetup, a: OverloadAnalysis): Chart[] {
  const { total } = setup;
  const { measured } = a;
  const charts: Chart[] = [
    {
      file: 'overload-outcome.svg',
      title: 'overload: admitted vs shed per run',
      svg: barChart({
        title: `admitted (blue) vs shed (red) of ${total} attempts; published ${PUBLISHED.admitted} / ${PUBLISHED.shed}`,
        unit: 'requests',
        bars: [
          ...measured.flatMap((r) => {
            const f = overloadFigures(r)!;
            return [
              { label: `${r.label}: admitted`, value: f.admitted, color: PALETTE[0]! },
              { label: `${r.label}: shed`, value: f.shed, color: PALETTE[2]! },
            ];
          }),
          { label: 'published: admitted', value: PUBLISHED.admitted, color: '#a0cbe8' },
          { label: 'published: shed', value: PUBLISHED.shed, color: '#ff9d9a' },
        ],
      }),
    },
    {
      file: 'overload-shed-latency.svg',
      title: 'overload: latency of the shed answers',
      svg: barChart({
        title: `shed answers: p99 latency per run (ms, target < ${OVERLOAD_TARGETS.shedP99Ms} ms)`,
        unit: 'ms',
        bars: measured.map((r) => ({
          label: r.label,
          value: overloadFigures(r)!.shedP99Ms ?? Number.NaN,
          color: r.target === HONOUR ? PALETTE[0]! : PALETTE[1]!,
        })),
      }),
    },
  ];
  const series: LineSeries[] = [];
  for (const [i, v] of VARIANTS.entries()) {
    const r = measured.find((x) => x.target === v.target);
    if (!r?.load) continue;
    const perSec = 1000 / r.load.timeline.bucketMs;
    series.push(
      {
        name: `${v.name}: admitted/s`,
        color: PALETTE[i === 0 ? 0 : 4]!,
        points: r.load.timeline.points.map((p): [number, number] => [p.tMs / 1000, p.ok * perSec]),
      },
      {
        name: `${v.name}: shed/s`,
        color: PALETTE[i === 0 ? 2 : 1]!,
        points: r.load.timeline.points.map((p): [number, number] => [p.tMs / 1000, p.errors * perSec]),
      },
    );
  }
  if (series.length) {
    charts.push({
      file: 'overload-timeline.svg',
      title: 'overload: admitted and shed answers over time (first run of each behaviour)',
      svg: lineChart({
        title: 'answers per second (250 ms buckets), first run of each behaviour',
        xLabel: 'seconds since start',
        yLabel: 'answers/s',
        series,
      }),
    });
  }

  return charts;
}

/** The scenario's result. */
function overloadReport(ctx: ScenarioContext, setup: OverloadSetup, runs: RunRecord[]): ScenarioResult {
  const { size, total, env, notes } = setup;
  const a = overloadAnalysis(ctx, setup, runs);
  const { perVariant, verdicts, medians } = a;
  const ratios: Ratio[] = VARIANTS.map((v) => ({
    name: `admitted fraction, ${v.name}`,
    value: medians[v.target]!['admitted'] === undefined ? undefined : medians[v.target]!['admitted']! / total,
    note: `admitted ÷ ${total} attempts; published ${(PUBLISHED.admitted / 800).toFixed(3)}`,
  }));
  const markdown = overloadMarkdown(setup, a);
  const charts = overloadCharts(setup, a);
  return {
    params: {
      model: MODEL,
      connections: size.connections,
      totalRequests: total,
      inFlightPerConnection: 1,
      frames: 'binary tensor frames',
      env,
      server: `serve --nodes 1 --workers 1 --models-dir <dir with only bench> --model bench`,
      rounds: ctx.rounds,
      maxRetryPauseMs: MAX_RETRY_PAUSE_MS,
    },
    runs,
    ratios,
    charts,
    notes,
    markdown,
    data: { published: PUBLISHED, targets: OVERLOAD_TARGETS, perVariant, medians, verdicts },
  };
}

export const overload: Scenario = {
  name: 'overload',
  description:
    `Overload: the heavy \`bench\` model at concurrency 64 (64 WebSocket connections × 1 in flight), 800 requests in ` +
    `total, model queue capped at ${MAX_MODEL_QUEUE} (STREAMINFER_MAX_MODEL_QUEUE=${MAX_MODEL_QUEUE}, no rate limit), ` +
    '`serve --nodes 1 --workers 1` serving only `bench`, binary tensor frames. Admitted vs shed (`overloaded`), ' +
    'p99 of admitted and of shed answers (shed must be < 5 ms), retry_after_ms, shed_total from /metrics; ' +
    `published figures for this setup: ${PUBLISHED.admitted} admitted at p99 ${PUBLISHED.admittedP99Ms} ms, ${PUBLISHED.shed} shed.`,
  async run(ctx) {
    const setup = overloadSetup(ctx);
    const modelsDir = modelsDirWith(ctx.repoRoot, [MODEL], 'streaminfer-overload-');
    const runs: RunRecord[] = [];
    try {
      ctx.log('overload: starting server');
      const session = await withServer(
        () =>
          ctx.startStreamInfer({
            label: 'overload',
            nodes: 1,
            workers: 1,
            args: ['--models-dir', modelsDir, '--model', MODEL],
            env: setup.env,
          }),
        (server) => driveOverload(ctx, setup, server, runs),
      );
      stampSharedServer(runs, session, setup.env, HONOUR);
    } finally {
      fs.rmSync(modelsDir, { recursive: true, force: true });
    }
    return overloadReport(ctx, setup, runs);
  },
};
