/**
 * runaway: one client far above its rate limit must not hurt the others. 50 well-behaved
 * WebSocket clients send `echo` requests at a steady 20 req/s each (open loop); in the
 * "with runaway" runs one more client sends 10× its rate limit (open loop, as fast as its
 * schedule allows, many requests in flight but below the server's in-flight cap, so it is the
 * token bucket that answers). The same server measures the well-behaved clients with and without
 * the runaway, alternating, so their p99 can be compared in one run. The runaway's
 * `rate_limited` answers are checked against the bucket: `retry_after_ms` within
 * (0, 1000·burst/rate] — (0, ⌈1000/rate⌉] for a one-token wait — and the requests it got
 * through ≈ burst + rate × time.
 */
import * as fs from 'node:fs';
import { sharedClock } from '../../libs/ring';
import { fmt, markdownTable } from '../../scripts/markdown';
import { runLoad } from '../harness/run-load';
import {
  errText,
  measureSafe,
  median,
  medianOf,
  modelsDirWith,
  ratio,
  sleep,
  stampSharedServer,
  standardNotes,
  type Verdict,
  verdictNote,
  verdictTable,
  withServer,
} from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import type { LoadResult } from '../harness/stats';
import { barChart, lineChart, PALETTE } from '../harness/svg-chart';
import type {
  Chart,
  LoadSpec,
  Ratio,
  RunRecord,
  Scenario,
  ScenarioContext,
  ScenarioResult,
} from '../harness/types';

/** Rate limit the server runs with in this scenario. */
export const RATE_LIMIT_RPS = 100;
export const RATE_LIMIT_BURST = 100;
/** Done-when figures. */
export const RUNAWAY_TARGETS = {
  /** well-behaved p99 with the runaway ÷ without, at most */
  p99Factor: 1.5,
  /** the runaway sends this many times its rate limit */
  runawayFactor: 10,
  /** admitted runaway requests within this fraction of burst + rate × time */
  bucketTolerance: 0.05,
} as const;

const BASELINE = 'baseline';
const WITH_RUNAWAY = 'with-runaway';
const RUNAWAY = 'runaway';
const WELL_RATE = 20;
/** requests the runaway may have outstanding: far below the server's in-flight cap (1000) */
const RUNAWAY_IN_FLIGHT = 256;

export interface RunawayCheck {
  rateLimited: number;
  admitted: number;
  durationMs: number;
  /** burst + rate × duration: what the bucket lets through at most (connection opened at the start) */
  bucketAllows: number;
  retryAfter?: { count: number; min: number; p50: number; p90: number; max: number; mean: number };
  /** the brief's bound: (0, 1000 · burst / rate] */
  retryAfterBoundMs: number;
  /** the one-token bound: (0, ceil(1000 / rate)] */
  oneTokenBoundMs: number;
}

/** What the runaway client's own result says about the token bucket. */
export function checkRunaway(load: LoadResult, rps: number, burst: number): RunawayCheck {
  const durationMs = load.durationMs;
  return {
    rateLimited: load.errors['rate_limited'] ?? 0,
    admitted: load.ok,
    durationMs,
    bucketAllows: burst + (rps * durationMs) / 1000,
    ...(load.retryAfterMs?.['rate_limited'] ? { retryAfter: load.retryAfterMs['rate_limited'] } : {}),
    retryAfterBoundMs: (1000 * burst) / rps,
    oneTokenBoundMs: Math.ceil(1000 / rps),
  };
}

/** Judge the medians and the runaway checks against the done-when figures. */
export function judgeRunaway(
  baselineP99: number | undefined,
  withP99: number | undefined,
  wellErrors: number | undefined,
  checks: readonly RunawayCheck[],
): Verdict[] {
  const factor = ratio(withP99, baselineP99);
  const p99Pass = factor === undefined ? undefined : factor <= RUNAWAY_TARGETS.p99Factor;
  const limited = checks.map((c) => c.rateLimited);
  const limitedPass = checks.length ? limited.every((n) => n > 0) : undefined;
  const ra = checks.map((c) => c.retryAfter).filter((r) => r !== undefined);
  const raMin = ra.length ? Math.min(...ra.map((r) => r.min)) : undefined;
  const raMax = ra.length ? Math.max(...ra.map((r) => r.max)) : undefined;
  const bound = checks[0]?.retryAfterBoundMs;
  const oneToken = checks[0]?.oneTokenBoundMs;
  const raPass =
    raMin === undefined || raMax === undefined || bound === undefined
      ? undefined
      : raMin > 0 && raMax <= bound;
  const oneTokenPass =
    raMin === undefined || raMax === undefined || oneToken === undefined
      ? undefined
      : raMin > 0 && raMax <= oneToken;
  const bucketDev = checks.map((c) => (c.admitted - c.bucketAllows) / c.bucketAllows);
  const bucketPass = checks.length
    ? bucketDev.every((d) => Math.abs(d) <= RUNAWAY_TARGETS.bucketTolerance)
    : undefined;
  const pct = (d: number): string => `${d >= 0 ? '+' : ''}${(d * 100).toFixed(1)}%`;
  return [
    {
      name: 'well-behaved errors with the runaway',
      target: '0',
      measured: wellErrors === undefined ? '–' : fmt(wellErrors),
      pass: wellErrors === undefined ? undefined : wellErrors === 0,
      detail: 'all rounds, every code (rate_limited included)',
    },
    {
      name: 'well-behaved p99 with ÷ without the runaway',
      target: `≤ ${RUNAWAY_TARGETS.p99Factor}×`,
      measured: factor === undefined ? '–' : `${factor.toFixed(2)}×`,
      pass: p99Pass,
      detail:
        `medians over rounds: ${fmt(withP99)} ms vs ${fmt(baselineP99)} ms` +
        (p99Pass === false
          ? `; over by ${(((factor! - RUNAWAY_TARGETS.p99Factor) / RUNAWAY_TARGETS.p99Factor) * 100).toFixed(0)}%`
          : ''),
    },
    {
      name: 'runaway answered rate_limited',
      target: '> 0 in every run',
      measured: limited.length ? limited.map((n) => fmt(n)).join(' / ') : '–',
      pass: limitedPass,
    },
    {
      name: 'runaway retry_after_ms',
      target: bound === undefined ? '–' : `in (0, ${fmt(bound)}] (1000·burst/rate)`,
      measured: raMin === undefined ? '–' : `${fmt(raMin)}–${fmt(raMax)} ms`,
      pass: raPass,
      detail:
        oneToken === undefined
          ? undefined
          : `one-token wait bound (0, ${oneToken}] ms: ${oneTokenPass === undefined ? 'n/a' : oneTokenPass ? 'within' : 'NOT within'}`,
    },
    {
      name: 'runaway admitted vs burst + rate × time',
      target: `within ±${RUNAWAY_TARGETS.bucketTolerance * 100}%`,
      measured: bucketDev.length ? bucketDev.map(pct).join(' / ') : '–',
      pass: bucketPass,
      detail: checks
        .map((c) => `${fmt(c.admitted)} admitted vs ${fmt(Math.round(c.bucketAllows))}`)
        .join('; '),
    },
  ];
}

/** Sizes, the well-behaved load, the runaway's rate and the server's environment. */
function runawaySetup(ctx: ScenarioContext) {
  const size = ctx.sizes({ connections: 50, requests: 200 }, { connections: 50, requests: 100 });
  const wellSeconds = size.requests / WELL_RATE;
  const runawayRate = RUNAWAY_TARGETS.runawayFactor * RATE_LIMIT_RPS;
  const wellLoad: LoadSpec = {
    connections: size.connections,
    requestsPerConnection: size.requests,
    ratePerConnection: WELL_RATE,
    inFlightPerConnection: 16,
    body: 'echo-floats',
    bodyOptions: { model: 'echo' },
    warmupPerConnection: 5,
    timeLimitMs: wellSeconds * 1000 + 30_000,
  };
  const env = {
    STREAMINFER_RATE_LIMIT_RPS: String(RATE_LIMIT_RPS),
    STREAMINFER_RATE_LIMIT_BURST: String(RATE_LIMIT_BURST),
  };
  return { wellSeconds, runawayRate, wellLoad, env };
}

type RunawaySetup = ReturnType<typeof runawaySetup>;

interface RunawayResult {
  round: number;
  load: LoadResult;
  offsetMs: number;
  well: RunRecord;
}

/** The runaway client: one connection, open loop at 10× the limit, until `stop()`. */
function startRunawayClient(ctx: ScenarioContext, setup: RunawaySetup, srv: ServerHandle) {
  const { runawayRate, wellSeconds } = setup;
  let goResolve!: () => void;
  const runawayGo = new Promise<void>((r) => {
    goResolve = r;
  });
  let stop!: () => void;
  const stopWhen = new Promise<void>((r) => {
    stop = r;
  });
  let runawayStart = 0;
  const run = runLoad({
    url: srv.wsUrl,
    connections: 1,
    // bounded: the stop request normally ends it long before
    requestsPerConnection: Math.ceil(runawayRate * (wellSeconds + 60)),
    ratePerConnection: runawayRate,
    inFlightPerConnection: RUNAWAY_IN_FLIGHT,
    body: 'echo-floats',
    bodyOptions: { repoRoot: ctx.repoRoot, model: 'echo' },
    warmupPerConnection: 0,
    timeLimitMs: (wellSeconds + 60) * 1000,
    processes: 1,
    connOffset: 1000,
    onGo: () => {
      runawayStart = sharedClock();
      goResolve();
    },
    stopWhen,
  });
  run.catch(() => {});
  return {
    run,
    /** true once its clock started; false when it ended (or failed) before */
    started: Promise.race([
      runawayGo.then(() => true),
      run.then(
        () => false,
        () => false,
      ),
    ]),
    /** epoch ms when its clock started */
    startMs: (): number => runawayStart,
    stop: (): void => stop(),
  };
}

/**
 * One round: the well-behaved clients alone, then again with the runaway in full swing. False when
 * the server is gone (no point in another round).
 */
async function measureRound(
  ctx: ScenarioContext,
  setup: RunawaySetup,
  srv: ServerHandle,
  round: number,
  runs: RunRecord[],
  runawayResults: RunawayResult[],
): Promise<boolean> {
  const { wellLoad } = setup;
  const suffix = ctx.rounds > 1 ? ` #${round}` : '';
  runs.push(await measureSafe(ctx, `well-behaved, no runaway${suffix}`, BASELINE, srv, wellLoad));
  // the runaway starts first and is stopped when the well-behaved load is over
  const runaway = startRunawayClient(ctx, setup, srv);
  const runawayRun = runaway.run;
  const stop = runaway.stop;
  if (!(await runaway.started)) {
    const why = await runawayRun.then(
      () => 'ended before the well-behaved load started',
      (e: unknown) => errText(e),
    );
    runs.push({
      label: `runaway client${suffix}`,
      target: RUNAWAY,
      error: `the runaway client failed: ${why}`,
    });
    return true;
  }
  await sleep(500); // the runaway is in full swing before the well-behaved clock starts
  let well: RunRecord;
  try {
    well = await measureSafe(ctx, `well-behaved, with runaway${suffix}`, WITH_RUNAWAY, srv, wellLoad);
  } finally {
    stop();
  }
  runs.push(well);
  try {
    const load = await runawayRun;
    const wellStart = well.load?.startEpochMs;
    runawayResults.push({
      round,
      load,
      offsetMs: wellStart !== undefined ? wellStart - (load.startEpochMs ?? runaway.startMs()) : 0,
      well,
    });
    runs.push({ label: `runaway client${suffix}`, target: RUNAWAY, load });
    const ra = load.retryAfterMs?.['rate_limited'];
    ctx.log(
      `runaway client${suffix}: ${load.ok} admitted, ${load.errors['rate_limited'] ?? 0} rate_limited` +
        (ra ? ` (retry_after_ms ${ra.min}/${ra.p50}/${ra.max})` : '') +
        ` in ${(load.durationMs / 1000).toFixed(1)} s`,
    );
  } catch (e) {
    runs.push({ label: `runaway client${suffix}`, target: RUNAWAY, error: errText(e) });
  }
  if (srv.exited()) {
    runs.push({
      label: 'server',
      target: BASELINE,
      error: `server exited during the scenario\n${srv.stderrTail().slice(-4000)}`,
    });
    return false;
  }
  return true;
}

/** Measured phase on one server: a warm-up, then the rounds. */
async function driveRunaway(
  ctx: ScenarioContext,
  setup: RunawaySetup,
  srv: ServerHandle,
  runs: RunRecord[],
  runawayResults: RunawayResult[],
): Promise<void> {
  const { wellLoad } = setup;
  // warm the server (JIT, buffers) with the well-behaved load's shape; not recorded
  await ctx
    .measure('warm-up (not recorded)', srv, {
      ...wellLoad,
      requestsPerConnection: Math.min(40, wellLoad.requestsPerConnection),
    })
    .catch((e: unknown) => ctx.log(`runaway: warm-up failed: ${errText(e).split('\n')[0]}`));
  for (let round = 1; round <= ctx.rounds; round++)
    if (!(await measureRound(ctx, setup, srv, round, runs, runawayResults))) break;
}

/** Analysis: medians of the well-behaved runs, the runaway's bucket checks, verdicts, notes, ratios. */
function runawayAnalysis(
  ctx: ScenarioContext,
  runs: readonly RunRecord[],
  runawayResults: readonly RunawayResult[],
) {
  const notes: string[] = [];
  const wellRuns = runs.filter((r) => r.target === BASELINE || r.target === WITH_RUNAWAY);
  const p99 = (r: RunRecord): number | undefined => r.load?.latencyMs.p99;
  const baselineP99 = medianOf(wellRuns, BASELINE, p99);
  const withP99 = medianOf(wellRuns, WITH_RUNAWAY, p99);
  const withRuns = wellRuns.filter((r) => r.target === WITH_RUNAWAY && r.load);
  const wellErrors = withRuns.length ? withRuns.reduce((a, r) => a + r.load!.errorCount, 0) : undefined;
  const checks = runawayResults.map((r) => checkRunaway(r.load, RATE_LIMIT_RPS, RATE_LIMIT_BURST));
  const verdicts = judgeRunaway(baselineP99, withP99, wellErrors, checks);
  const baselineErrors = wellRuns
    .filter((r) => r.target === BASELINE && r.load)
    .reduce((a, r) => a + r.load!.errorCount, 0);
  if (baselineErrors > 0) {
    notes.push(
      `The well-behaved clients got ${baselineErrors} error(s) even without the runaway: see the runs table.`,
    );
  }
  notes.push(verdictNote('Done-when (medians over rounds)', verdicts));
  notes.push(...standardNotes(runs, ctx.cores));
  if (ctx.cores <= 4) {
    notes.push(
      `This host has ${ctx.cores} cores: the runaway's own load generator (a second process, ~${fmt(
        median(runawayResults.map((r) => r.load.loadgenCpuPct[0] ?? Number.NaN)),
      )}% of a core) shares them with the server and the well-behaved clients' load generator, so part of any ` +
        'p99 difference is the client machine, not the server.',
    );
  }

  const ratios: Ratio[] = [
    {
      name: 'well-behaved p99 with/without runaway',
      value: ratio(withP99, baselineP99),
      note: `medians over rounds; target ≤ ${RUNAWAY_TARGETS.p99Factor}`,
    },
    {
      name: 'well-behaved p50 with/without runaway',
      value: ratio(
        medianOf(wellRuns, WITH_RUNAWAY, (r) => r.load?.latencyMs.p50),
        medianOf(wellRuns, BASELINE, (r) => r.load?.latencyMs.p50),
      ),
      note: 'medians over rounds',
    },
    {
      name: 'well-behaved throughput with/without runaway',
      value: ratio(
        medianOf(wellRuns, WITH_RUNAWAY, (r) => r.load?.throughputRps),
        medianOf(wellRuns, BASELINE, (r) => r.load?.throughputRps),
      ),
      note: `open loop at ${WELL_RATE} req/s per client: 1.0 = every scheduled request answered in time`,
    },
  ];

  return { wellRuns, baselineP99, withP99, wellErrors, checks, verdicts, notes, ratios };
}

type RunawayAnalysis = ReturnType<typeof runawayAnalysis>;

/** The report's Markdown section. */
function runawayMarkdown(
  setup: RunawaySetup,
  a: RunawayAnalysis,
  runawayResults: readonly RunawayResult[],
): string {
  const { runawayRate } = setup;
  const { wellRuns, baselineP99, checks, verdicts } = a;
  const md: string[] = ['### Well-behaved clients', ''];
  md.push(
    markdownTable(
      ['run', 'ok', 'errors', 'req/s', 'p50 ms', 'p99 ms', 'max ms', 'p99 ÷ baseline median'],
      wellRuns
        .filter((r) => r.load)
        .map((r) => [
          r.label,
          fmt(r.load!.ok),
          fmt(r.load!.errorCount),
          fmt(r.load!.throughputRps),
          fmt(r.load!.latencyMs.p50),
          fmt(r.load!.latencyMs.p99),
          fmt(r.load!.latencyMs.max),
          fmt(ratio(r.load!.latencyMs.p99, baselineP99)),
        ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    '### Runaway client',
    '',
    `One connection, open loop at ${fmt(runawayRate)} req/s (${RUNAWAY_TARGETS.runawayFactor}× the limit), at most ` +
      `${RUNAWAY_IN_FLIGHT} in flight (the server's in-flight cap is 1000, so it is the token bucket that refuses). ` +
      'It starts 0.5 s before the well-behaved clock and is stopped when the well-behaved load is over. ' +
      `"Bucket allows" = burst + rate × its measured time (${RATE_LIMIT_BURST} + ${RATE_LIMIT_RPS}/s × t); ` +
      `every retry_after_ms should lie in (0, ⌈1000/rate⌉] = (0, ${Math.ceil(1000 / RATE_LIMIT_RPS)}] ms ` +
      '(the wait for one token), within the looser (0, 1000·burst/rate] bound.',
    '',
    markdownTable(
      [
        'round',
        'sent',
        'admitted',
        'rate_limited',
        'other',
        'seconds',
        'admitted/s',
        'bucket allows',
        'retry_after_ms min / p50 / p90 / max (mean)',
        'rate_limited answer p99 ms',
      ],
      runawayResults.map((r, i) => {
        const c = checks[i]!;
        const other = r.load.errorCount - c.rateLimited;
        const ra = c.retryAfter;
        return [
          String(r.round),
          fmt(r.load.sent),
          fmt(c.admitted),
          fmt(c.rateLimited),
          fmt(other),
          fmt(c.durationMs / 1000),
          fmt(c.durationMs > 0 ? (c.admitted * 1000) / c.durationMs : undefined),
          fmt(Math.round(c.bucketAllows)),
          ra ? `${ra.min} / ${ra.p50} / ${ra.p90} / ${ra.max} (${fmt(ra.mean)})` : '–',
          fmt(r.load.errorLatencyMs?.['rate_limited']?.p99),
        ];
      }),
      ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'left', 'right'],
    ),
    '',
    '### Done-when',
    '',
    verdictTable(verdicts),
  );

  return md.join('\n');
}

/** Charts: p99 bars, and the runaway's answers over time next to the well-behaved throughput. */
function runawayCharts(a: RunawayAnalysis, runawayResults: readonly RunawayResult[]): Chart[] {
  const { wellRuns } = a;
  const charts: Chart[] = [];
  const barColor = (r: RunRecord): string => (r.target === BASELINE ? PALETTE[0]! : PALETTE[1]!);
  charts.push({
    file: 'runaway-p99.svg',
    title: 'runaway: well-behaved p99 latency with and without the runaway',
    svg: barChart({
      title: `well-behaved p99 (ms), without / with the runaway; target ≤ ${RUNAWAY_TARGETS.p99Factor}× baseline`,
      unit: 'ms',
      bars: wellRuns.map((r) => ({
        label: r.label.replace('well-behaved, ', ''),
        value: r.load && r.load.ok > 0 ? r.load.latencyMs.p99 : Number.NaN,
        color: barColor(r),
      })),
    }),
  });
  const first = runawayResults[0];
  const firstWell = first?.well;
  if (first) {
    const perSec = 1000 / first.load.timeline.bucketMs;
    const t = (ms: number): number => ms / 1000;
    const series = [
      {
        name: 'runaway: admitted/s',
        color: PALETTE[4]!,
        points: first.load.timeline.points.map((p): [number, number] => [t(p.tMs), p.ok * perSec]),
      },
      {
        name: 'runaway: rate_limited/s',
        color: PALETTE[2]!,
        points: first.load.timeline.points.map((p): [number, number] => [t(p.tMs), p.errors * perSec]),
      },
    ];
    if (firstWell?.load) {
      const wl = firstWell.load;
      const wPerSec = 1000 / wl.timeline.bucketMs;
      series.push({
        name: `well-behaved (${wl.connections} clients): ok/s`,
        color: PALETTE[0]!,
        points: wl.timeline.points.map((p): [number, number] => [t(p.tMs + first.offsetMs), p.ok * wPerSec]),
      });
    }
    charts.push({
      file: 'runaway-timeline.svg',
      title: 'runaway: answers per second over time (first round)',
      svg: lineChart({
        title: 'answers per second, runaway vs well-behaved (first round)',
        xLabel: 'seconds since the runaway started',
        yLabel: 'answers/s',
        series,
      }),
    });
  }

  return charts;
}

/** The scenario's result. */
function runawayReport(
  ctx: ScenarioContext,
  setup: RunawaySetup,
  runs: RunRecord[],
  runawayResults: RunawayResult[],
): ScenarioResult {
  const { wellSeconds, runawayRate, wellLoad, env } = setup;
  const a = runawayAnalysis(ctx, runs, runawayResults);
  const { baselineP99, withP99, wellErrors, checks, verdicts, notes, ratios } = a;
  const markdown = runawayMarkdown(setup, a, runawayResults);
  const charts = runawayCharts(a, runawayResults);
  return {
    params: {
      wellBehaved: `${wellLoad.connections} conns × ${WELL_RATE} req/s × ${wellSeconds} s (open loop, echo-floats)`,
      runaway: `1 conn, ${runawayRate} req/s open loop, ≤ ${RUNAWAY_IN_FLIGHT} in flight`,
      env,
      server: 'serve --nodes 1 --workers 1 --models-dir <dir with only echo> --model echo',
      rounds: ctx.rounds,
    },
    runs,
    ratios,
    charts,
    notes,
    markdown,
    data: {
      targets: RUNAWAY_TARGETS,
      rateLimit: { rps: RATE_LIMIT_RPS, burst: RATE_LIMIT_BURST },
      wellBehaved: { baselineP99Ms: baselineP99, withRunawayP99Ms: withP99, errorsWithRunaway: wellErrors },
      runaway: runawayResults.map((r, i) => ({ round: r.round, ...checks[i]! })),
      verdicts,
    },
  };
}

export const runaway: Scenario = {
  name: 'runaway',
  description:
    `Runaway client: 50 well-behaved WebSocket clients at a steady ${WELL_RATE} req/s each (echo model, open loop) ` +
    `with and without one client sending ${RUNAWAY_TARGETS.runawayFactor}× its rate limit ` +
    `(STREAMINFER_RATE_LIMIT_RPS=${RATE_LIMIT_RPS}, burst ${RATE_LIMIT_BURST}); same server, alternating. ` +
    'Well-behaved: zero errors, p99 within 1.5× of the run without the runaway. Runaway: `rate_limited` ' +
    'with retry_after_ms consistent with the bucket.',
  async run(ctx) {
    const setup = runawaySetup(ctx);
    const modelsDir = modelsDirWith(ctx.repoRoot, ['echo'], 'streaminfer-runaway-');
    const runs: RunRecord[] = [];
    const runawayResults: RunawayResult[] = [];
    try {
      ctx.log('runaway: starting server');
      const session = await withServer(
        () =>
          ctx.startStreamInfer({
            label: 'runaway',
            nodes: 1,
            workers: 1,
            args: ['--models-dir', modelsDir, '--model', 'echo'],
            env: setup.env,
          }),
        (server) => driveRunaway(ctx, setup, server, runs, runawayResults),
      );
      stampSharedServer(
        runs,
        session,
        setup.env,
        BASELINE,
        (r) => r.load !== undefined && r.target !== RUNAWAY,
      );
    } finally {
      fs.rmSync(modelsDir, { recursive: true, force: true });
    }
    return runawayReport(ctx, setup, runs, runawayResults);
  },
};
