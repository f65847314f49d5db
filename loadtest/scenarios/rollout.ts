/**
 * rollout: automatic canary analysis under steady load. Three runs, each on a fresh
 * `serve --nodes 1 --workers 2` over a scratch copy of `digits` (stable = 2) plus one candidate
 * written by scripts/models/rollout-candidates.ts, with 8 WebSocket clients (closed loop, 20 ms
 * between an answer and the next request, ~350 req/s) sending digits rows whose labels are known:
 *
 *   errs  v3 answers every 7 as a 1 (~10 % of rows)     → expect rollback on `disagreement`
 *   slow  v4 answers as v2 with ~20 ms of extra compute  → expect rollback on `p99_ratio`
 *   good  v5 is v2 retrained with another seed          → expect promotion through every step
 *
 * Each run: load starts, then `POST /api/models/digits/rollout` with every setting explicit; the
 * rollout view is sampled every 500 ms (`GET …/rollout`, from a child process so the clients'
 * stamps stay honest) until it is terminal, the load goes on a few seconds more, then stops.
 * Figures: time to the outcome, time from the first failing evaluation to the candidate serving
 * nothing, requests the candidate answered (exposed) and how many were wrong, client failures,
 * the recorded reason; one chart per run (share and each check's value over time).
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fmt, markdownTable } from '../../scripts/markdown';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';
import { predictDigits } from '../../scripts/models/evaluate';
import {
  errsOnAClass,
  MISCLASSIFIED,
  ROLLOUT_VERSIONS,
  retrained,
  slowedDown,
  writeRolloutCandidates,
} from '../../scripts/models/rollout-candidates';
import { AdminCaller } from '../harness/admin-caller';
import { callText, scratchRepository, type TimedCall } from '../harness/admin-client';
import { type MetricSample, scrapeMetrics } from '../harness/metrics';
import {
  type CheckName,
  type Exposure,
  exposure,
  exposureBound,
  failedChecks,
  finalView,
  isTerminal,
  maxShare,
  observedShareSeries,
  parseRolloutView,
  type RolloutSample,
  type RolloutSpec,
  type RolloutTimings,
  rolloutBody,
  rolloutDeadlineS,
  rolloutMetricLines,
  rolloutSeries,
  rolloutTimings,
  sharesVisited,
  transitionMarkers,
  visitedEveryStep,
} from '../harness/rollout-analysis';
import { errText, serverRecord, sleep, withServer } from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import { ClosedLoop, rowSource } from '../harness/stream-clients';
import { lineChart } from '../harness/svg-chart';
import type { AnswerRecord } from '../harness/swap-analysis';
import type { Chart, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';
import { type Check, checksMarkdown, checksNote } from '../harness/verdicts';

const MODEL = 'digits';
const STABLE = '2';
const SAMPLE_EVERY_MS = 500;

export type RolloutRunKind = 'errs' | 'slow' | 'good';

export interface RolloutRunPlan {
  kind: RolloutRunKind;
  /** e.g. "errs (v3)" */
  label: string;
  /** what the candidate is, for the report */
  what: string;
  expect: 'rolled_back' | 'promoted';
  /** the check expected to fail (rollbacks) */
  expectCheck?: CheckName;
  spec: RolloutSpec;
}

/**
 * The three runs. Full: steps 5/10/25/50/100 %, 20 s each, evaluations every 2 s, 3 consecutive
 * failures roll back; the good run starts with a 10 s shadow stage (all of it ≈ 2 min).
 * Quick: steps 5/25/100 %, 6 s each, every 1 s, 2 failures; shadow 3 s. The first step stays at 5 %
 * in both: at 10 % of ~350 req/s the slow candidate alone would keep a worker thread 70 % busy.
 * `shadowEverywhere`: the bad candidates get the shadow stage too (BENCH_ROLLOUT_SHADOW=1).
 */
export function rolloutPlans(quick: boolean, shadowEverywhere = false): RolloutRunPlan[] {
  const timing = quick
    ? {
        steps: [5, 25, 100],
        dwell_s: 6,
        deadline_s: 20,
        min_requests: 50,
        interval_s: 1,
        failures_to_rollback: 2,
      }
    : {
        steps: [5, 10, 25, 50, 100],
        dwell_s: 20,
        // a step gathers its evidence at 5 % of ~350 req/s: the p99 check needs ~270 candidate answers
        deadline_s: 120,
        min_requests: 100,
        interval_s: 2,
        failures_to_rollback: 3,
      };
  const shadow = quick ? { dwell_s: 3, min_requests: 50 } : { dwell_s: 10, min_requests: 100 };
  const checks = {
    error_rate: { max_increase: 0.01 },
    p99_ratio: { max: 1.5 },
    // v1 and v2 disagree on 2.67 % of rows, a retrain of v2 on 0.06 %: 5 % lets honest retrains through
    disagreement: { max: 0.05 },
  };
  const spec = (version: string, withShadow: boolean): RolloutSpec => ({
    version,
    ...timing,
    steps: [...timing.steps],
    ...(withShadow ? { shadow: { ...shadow } } : {}),
    checks,
  });
  return [
    {
      kind: 'errs',
      label: `errs (v${ROLLOUT_VERSIONS.errs})`,
      what: `v2 answering every ${MISCLASSIFIED.from} as ${MISCLASSIFIED.to}`,
      expect: 'rolled_back',
      expectCheck: 'disagreement',
      spec: spec(ROLLOUT_VERSIONS.errs, shadowEverywhere),
    },
    {
      kind: 'slow',
      label: `slow (v${ROLLOUT_VERSIONS.slow})`,
      what: 'v2 plus ~20 ms of redundant compute per item',
      expect: 'rolled_back',
      expectCheck: 'p99_ratio',
      spec: spec(ROLLOUT_VERSIONS.slow, shadowEverywhere),
    },
    {
      kind: 'good',
      label: `good (v${ROLLOUT_VERSIONS.good})`,
      what: 'v2 retrained with another seed',
      expect: 'promoted',
      spec: spec(ROLLOUT_VERSIONS.good, true),
    },
  ];
}

/** A `BENCH_ROLLOUT_SETTINGS` value that cannot be applied. */
export class RolloutSettingsError extends Error {
  readonly code = 'bad_rollout_settings';
  constructor(message: string) {
    super(`BENCH_ROLLOUT_SETTINGS: ${message}`);
    this.name = 'RolloutSettingsError';
  }
}

const NUMBER_SETTINGS = [
  'dwell_s',
  'deadline_s',
  'min_requests',
  'interval_s',
  'failures_to_rollback',
] as const;
const CHECK_LIMITS: Record<string, string> = {
  error_rate: 'max_increase',
  p99_ratio: 'max',
  disagreement: 'max',
};

/**
 * The plans with `json` (a JSON object of rollout settings, e.g. `{"min_requests":30,"interval_s":1}`)
 * laid over every run's body: `steps`, `dwell_s`, `min_requests`, `interval_s`, `failures_to_rollback`,
 * `shadow` (`{dwell_s, min_requests}` for the runs that have a shadow stage, or `null` for none) and
 * `checks` (per check, its limit). So the settings can follow the server without editing the scenario.
 */
export function withSettings(plans: readonly RolloutRunPlan[], json: string | undefined): RolloutRunPlan[] {
  if (json === undefined || json.trim() === '') return plans.map((p) => ({ ...p }));
  let o: unknown;
  try {
    o = JSON.parse(json);
  } catch (e) {
    throw new RolloutSettingsError(`not JSON (${errText(e)})`);
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o))
    throw new RolloutSettingsError('expected a JSON object');
  const v = o as Record<string, unknown>;
  const positive = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;
  for (const k of Object.keys(v))
    if (![...NUMBER_SETTINGS, 'steps', 'shadow', 'checks'].includes(k))
      throw new RolloutSettingsError(`unknown setting "${k}"`);
  for (const k of NUMBER_SETTINGS)
    if (k in v && !positive(v[k]))
      throw new RolloutSettingsError(`${k} must be a positive number, got ${JSON.stringify(v[k])}`);
  const steps = v['steps'];
  if (
    steps !== undefined &&
    (!Array.isArray(steps) ||
      steps.length === 0 ||
      !steps.every((x, i) => positive(x) && x <= 100 && (i === 0 || x > (steps[i - 1] as number))) ||
      steps.at(-1) !== 100)
  )
    throw new RolloutSettingsError(`steps must rise to 100 (percent), got ${JSON.stringify(steps)}`);
  const shadow = v['shadow'];
  if (
    shadow !== undefined &&
    shadow !== null &&
    (typeof shadow !== 'object' ||
      Array.isArray(shadow) ||
      !positive((shadow as Record<string, unknown>)['dwell_s']) ||
      !positive((shadow as Record<string, unknown>)['min_requests']))
  )
    throw new RolloutSettingsError(
      `shadow must be {"dwell_s": n, "min_requests": n} or null, got ${JSON.stringify(shadow)}`,
    );
  const checks = v['checks'];
  const limits: Record<string, number> = {};
  if (checks !== undefined) {
    if (typeof checks !== 'object' || checks === null || Array.isArray(checks))
      throw new RolloutSettingsError('checks must be an object');
    for (const [name, c] of Object.entries(checks as Record<string, unknown>)) {
      const key = CHECK_LIMITS[name];
      if (!key) throw new RolloutSettingsError(`unknown check "${name}"`);
      const limit = typeof c === 'object' && c !== null ? (c as Record<string, unknown>)[key] : undefined;
      if (typeof limit !== 'number' || !Number.isFinite(limit) || limit < 0)
        throw new RolloutSettingsError(
          `checks.${name}.${key} must be a number ≥ 0, got ${JSON.stringify(c)}`,
        );
      limits[name] = limit;
    }
  }
  return plans.map((p) => {
    const spec: RolloutSpec = {
      ...p.spec,
      steps: steps === undefined ? [...p.spec.steps] : [...(steps as number[])],
      checks: {
        error_rate: { max_increase: limits['error_rate'] ?? p.spec.checks.error_rate.max_increase },
        p99_ratio: { max: limits['p99_ratio'] ?? p.spec.checks.p99_ratio.max },
        disagreement: { max: limits['disagreement'] ?? p.spec.checks.disagreement.max },
      },
    };
    for (const k of NUMBER_SETTINGS) if (k in v) spec[k] = v[k] as number;
    if (shadow === null) delete spec.shadow;
    else if (shadow !== undefined && spec.shadow)
      spec.shadow = { ...(shadow as { dwell_s: number; min_requests: number }) };
    return { ...p, spec };
  });
}

/** Sizes, load and timing of the scenario. */
function rolloutSetup(ctx: ScenarioContext) {
  const quick = ctx.quick;
  const connections = ctx.sizes({ connections: 8, requests: 0 }, { connections: 8, requests: 0 }).connections;
  const gapMs = 20;
  const leadMs = quick ? 1_000 : 2_000;
  const tailMs = quick ? 2_000 : 3_000;
  const slackS = 30;
  const shadowEverywhere = process.env['BENCH_ROLLOUT_SHADOW'] === '1';
  const plans = withSettings(rolloutPlans(quick, shadowEverywhere), process.env['BENCH_ROLLOUT_SETTINGS']);
  const digits = loadDigits(digitsDataPath(ctx.repoRoot));
  const params = {
    server: `serve --nodes 1 --workers 2 --model ${MODEL} (fresh per run; scratch repository: digits 1, 2 + the run's candidate)`,
    env: 'STREAMINFER_RATE_LIMIT_RPS=0, fresh STREAMINFER_STATE_DIR',
    stable: STABLE,
    load: { connections, inFlightPerConnection: 1, gapMs, leadS: leadMs / 1000, tailS: tailMs / 1000 },
    sampleEveryMs: SAMPLE_EVERY_MS,
    shadowEverywhere,
    ...(process.env['BENCH_ROLLOUT_SETTINGS'] ? { settings: process.env['BENCH_ROLLOUT_SETTINGS'] } : {}),
    runs: plans.map((p) => ({
      run: p.label,
      candidate: p.what,
      expect: p.expect,
      body: rolloutBody(p.spec),
    })),
  };
  return { connections, gapMs, leadMs, tailMs, slackS, plans, digits, params };
}

type RolloutSetup = ReturnType<typeof rolloutSetup>;

/** Polls the rollout view every SAMPLE_EVERY_MS until stopped. */
class RolloutSampler {
  readonly samples: RolloutSample[] = [];
  private stopped = false;
  private loop: Promise<void> | undefined;

  constructor(
    private readonly admin: AdminCaller,
    private readonly url: string,
  ) {}

  start(): void {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const next = performance.now() + SAMPLE_EVERY_MS;
      this.samples.push(sampleOf(await this.admin.get(this.url)));
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait);
    }
  }

  async stop(): Promise<RolloutSample[]> {
    this.stopped = true;
    await this.loop;
    return this.samples;
  }
}

/** One GET's answer as a sample: the view when it is a 200 that parses. */
export function sampleOf(call: TimedCall): RolloutSample {
  if (call.status !== 200)
    return { atMs: call.returnedMs, status: call.status, ...(call.error ? { error: call.error } : {}) };
  try {
    return { atMs: call.returnedMs, status: 200, view: parseRolloutView(call.body) };
  } catch (e) {
    return { atMs: call.returnedMs, status: 200, error: errText(e) };
  }
}

/** What one run recorded. */
export interface RolloutRun {
  call: TimedCall;
  samples: RolloutSample[];
  answers: AnswerRecord[];
  unmatched: number;
  closes: number;
  /** bench clock: load started, rollout ended (or the deadline), load stopped */
  loadStartMs: number;
  endedMs: number;
  stopMs: number;
  timedOut: boolean;
  /** GET answered 404 after a view that was not terminal */
  vanished: boolean;
  abort?: TimedCall;
  metrics: MetricSample[];
}

async function driveRollout(
  ctx: ScenarioContext,
  s: RolloutSetup,
  plan: RolloutRunPlan,
  server: ServerHandle,
): Promise<RolloutRun> {
  const rows = rowSource(s.digits.pixels, 64);
  const loop = new ClosedLoop({
    url: server.wsUrl,
    connections: s.connections,
    model: MODEL,
    rows,
    gapMs: s.gapMs,
    warmupPerConnection: 10,
    timeoutMs: 10_000,
  });
  const api = `${server.adminUrl}/api/models/${MODEL}/rollout`;
  let admin: AdminCaller | undefined;
  let sampler: RolloutSampler | undefined;
  try {
    await loop.open();
    // admin calls from another process: a fetch here would delay the clients' receive stamps
    admin = await AdminCaller.start(`${server.adminUrl}/health`);
    const loadStartMs = performance.now();
    loop.start();
    await sleep(s.leadMs);
    sampler = new RolloutSampler(admin, api);
    sampler.start();
    const call = await admin.post(api, rolloutBody(plan.spec));
    if (call.status !== 200)
      throw new Error(
        `POST ${api}: ${callText(call)}` +
          (call.status === 404 ? ' (is the rollout API in this build?)' : ''),
      );
    ctx.log(`rollout ${plan.label}: started (${JSON.stringify(rolloutBody(plan.spec))})`);
    const deadline = call.returnedMs + rolloutDeadlineS(plan.spec, s.slackS) * 1000;
    let timedOut = true;
    let vanished = false;
    let lastLogged = '';
    while (performance.now() < deadline) {
      const view = finalView(sampler.samples);
      const now = view ? `${view.state} ${view.share}%` : '';
      if (now !== lastLogged) {
        ctx.log(`rollout ${plan.label}: ${now}`);
        lastLogged = now;
      }
      if (view && isTerminal(view.state)) {
        timedOut = false;
        break;
      }
      if (view && sampler.samples.at(-1)?.status === 404) {
        // the rollout is gone without a terminal view: say so instead of waiting for the deadline
        ctx.log(`rollout ${plan.label}: GET answered 404 after a ${view.state} view`);
        timedOut = false;
        vanished = true;
        break;
      }
      await sleep(100);
    }
    const endedMs = performance.now();
    const abort = timedOut ? await admin.post(`${api}/abort`, {}) : undefined;
    await sleep(s.tailMs);
    // the POST's own answer is the first view
    const samples = [sampleOf(call), ...(await sampler.stop())].sort((a, b) => a.atMs - b.atMs);
    const answers = await loop.stop();
    const stopMs = performance.now();
    const metrics = await scrapeMetrics(`${server.adminUrl}/metrics`).catch(() => []);
    return {
      call,
      samples,
      answers,
      unmatched: loop.unmatched,
      closes: loop.closes.length,
      loadStartMs,
      endedMs,
      stopMs,
      timedOut,
      vanished,
      ...(abort ? { abort } : {}),
      metrics,
    };
  } catch (e) {
    await loop.stop().catch(() => undefined);
    throw e;
  } finally {
    await sampler?.stop();
    admin?.close();
  }
}

/** One run on its own server: scratch repository with the candidate, start, drive, stop. */
async function runOne(
  ctx: ScenarioContext,
  s: RolloutSetup,
  plan: RolloutRunPlan,
  candidate: Uint8Array,
): Promise<{ record: RunRecord; run?: RolloutRun; started: boolean }> {
  const scratch = scratchRepository(ctx.repoRoot, [MODEL], 'streaminfer-rollout');
  try {
    writeRolloutCandidates(scratch.modelsDir, { [plan.spec.version]: candidate });
    ctx.log(`rollout ${plan.label}: starting server`);
    const session = await withServer(
      () =>
        ctx.startStreamInfer({
          label: `rollout-${plan.kind}`,
          nodes: 1,
          workers: 2,
          args: ['--host', '127.0.0.1', '--models-dir', scratch.modelsDir, '--model', MODEL],
          env: { STREAMINFER_RATE_LIMIT_RPS: '0', STREAMINFER_STATE_DIR: scratch.stateDir },
        }),
      (server) => driveRollout(ctx, s, plan, server),
    );
    const record: RunRecord = { label: plan.label, target: 'streaminfer' };
    if (session.server) record.server = serverRecord(session.server, session.exit);
    if (session.value === undefined) {
      record.error = session.error;
      ctx.log(`rollout ${plan.label}: failed: ${(session.error ?? '').split('\n')[0]}`);
      return { record, started: session.server !== undefined };
    }
    return { record, run: session.value, started: true };
  } finally {
    scratch.cleanup();
  }
}

/** Everything the report needs of one run. */
export interface RolloutFigures {
  plan: RolloutRunPlan;
  timings: RolloutTimings;
  exposure: Exposure;
  /** exposure among requests sent while the rollout was active (start → outcome) */
  activeExposure: Exposure;
  maxShare: number;
  sharesVisited: number[];
  everyStep: boolean;
  failedChecks: string[];
  state: string;
  reason: string | null;
  stableAfter: string | undefined;
  /** after a promotion: answers to requests sent 1 s after it that did not come from the new stable */
  notNewStableAfter: number;
  candidateAfterOutcome: number;
  checks: Check[];
}

const s1 = (ms: number | undefined): string => (ms === undefined ? '–' : `${(ms / 1000).toFixed(2)} s`);

/** What the done-when checks of one run are judged on (rolloutFigures' intermediate figures). */
interface CheckInputs {
  plan: RolloutRunPlan;
  timedOut: boolean;
  timings: RolloutTimings;
  final: ReturnType<typeof finalView>;
  state: string;
  reason: string | null;
  all: Exposure;
  active: Exposure;
  top: number;
  visited: number[];
  every: boolean;
  failed: string[];
  afterOutcome: number;
  notNewStable: number;
  clientCheck: Check;
}

/** A candidate that must roll back by itself: outcome, failing check, reason, window, speed, exposure. */
function rolledBackChecks(c: CheckInputs): Check[] {
  const {
    plan,
    timings,
    final,
    state,
    reason,
    all,
    active,
    top,
    visited,
    failed,
    afterOutcome,
    clientCheck,
  } = c;
  const window = plan.spec.failures_to_rollback * plan.spec.interval_s * 1000 + 1000;
  const bound = exposureBound(active.ok, top);
  return [
    {
      name: `${plan.label}: outcome`,
      target: 'rolled_back',
      measured: state,
      pass: state === 'rolled_back',
      detail: `after ${s1(timings.timeToOutcomeMs)}${c.timedOut ? '; no outcome before the deadline (aborted)' : ''}`,
    },
    {
      name: `${plan.label}: failing check`,
      target: plan.expectCheck ?? '–',
      measured: failed.length
        ? failed.join(', ')
        : reason?.includes('did not pass within')
          ? 'none failed; rolled back at the step deadline'
          : 'none failed',
      // A check that never settles rolls back at the step's deadline, its reason naming the check.
      pass: plan.expectCheck
        ? failed.includes(plan.expectCheck) ||
          (reason?.includes('did not pass within') === true && reason.includes(plan.expectCheck))
        : undefined,
    },
    {
      name: `${plan.label}: reason recorded`,
      target: 'non-empty',
      measured: reason ?? 'none',
      pass: typeof reason === 'string' && reason.trim() !== '',
      detail:
        plan.expectCheck && reason && !reason.includes(plan.expectCheck)
          ? `does not name ${plan.expectCheck}`
          : '',
    },
    {
      name: `${plan.label}: within its evaluation window`,
      target: `never past the first step (${plan.spec.steps[0]} %)`,
      measured: `max share ${top} %`,
      pass: final ? top <= (plan.spec.steps[0] ?? 0) : undefined,
      detail: `shares visited: ${visited.join(' → ') || 'none'}`,
    },
    {
      name: `${plan.label}: first failing evaluation → candidate serving 0 requests`,
      target: `≤ ${s1(window)} (${plan.spec.failures_to_rollback} × ${plan.spec.interval_s} s + 1 s)`,
      measured: s1(timings.failureToZeroMs),
      pass: timings.failureToZeroMs === undefined ? undefined : timings.failureToZeroMs <= window,
      detail:
        `first failure ${s1(timings.timeToFirstFailureMs)} after the start (${timings.firstFailure?.checks.join(', ') ?? '–'}); ` +
        `rollback ${s1(timings.failureToOutcomeMs)} after it; ${afterOutcome} candidate answers to requests sent after the rollback`,
    },
    clientCheck,
    {
      name: `${plan.label}: wrong answers only where the canary share exposed`,
      target: `0 from the stable; exposed ≤ max share + 3σ`,
      measured: `${fmt(active.exposedChanged)} changed of ${fmt(active.exposed)} exposed; ${fmt(all.stableChanged)} stable`,
      pass:
        all.requests > 0
          ? all.stableChanged === 0 && all.otherAnswers === 0 && active.exposed <= bound
          : undefined,
      detail:
        `exposed ${fmt(active.exposed)} of ${fmt(active.ok)} answers while active ` +
        `(${((active.exposedShare ?? 0) * 100).toFixed(2)} %; bound ${bound.toFixed(0)} at ${top} %); ` +
        `${fmt(active.exposedWrong)} exposed answers wrong vs the true label`,
    },
  ];
}

/** A candidate that must be promoted: outcome, every step, time to promote, the new stable serving. */
function promotedChecks(c: CheckInputs): Check[] {
  const { plan, timings, final, state, reason, visited, every, failed, notNewStable, clientCheck } = c;
  const deadline = rolloutDeadlineS(plan.spec, 0) * 1000;
  return [
    {
      name: `${plan.label}: outcome`,
      target: 'promoted',
      measured: state,
      pass: state === 'promoted',
      detail: reason ?? '',
    },
    {
      name: `${plan.label}: every step`,
      target: plan.spec.steps.join(' → '),
      measured: visited.join(' → ') || 'none',
      pass: final ? every : undefined,
      detail: failed.length
        ? `checks that failed in some evaluation: ${failed.join(', ')}`
        : 'no check ever failed',
    },
    {
      name: `${plan.label}: time to promote`,
      target: `≈ ${s1(deadline)} (shadow + steps × dwell)`,
      measured: s1(timings.timeToOutcomeMs),
      pass: timings.timeToOutcomeMs === undefined ? undefined : timings.timeToOutcomeMs <= deadline + 30_000,
    },
    clientCheck,
    {
      name: `${plan.label}: the new stable serves`,
      target: '0 answers from another version (1 s after the promotion on)',
      measured: fmt(notNewStable),
      pass: timings.terminal ? notNewStable === 0 : undefined,
      detail: `stable after: ${final?.stable ?? '–'}`,
    },
  ];
}

/** The figures and done-when checks of one run (pure). */
export function rolloutFigures(
  plan: RolloutRunPlan,
  run: Pick<RolloutRun, 'call' | 'samples' | 'answers' | 'timedOut' | 'unmatched' | 'closes'> & {
    vanished?: boolean;
  },
  truth: ArrayLike<number>,
  stableLabels: ArrayLike<number>,
  origin: number,
): RolloutFigures {
  const candidate = plan.spec.version;
  const timings = rolloutTimings(run.samples, run.answers, candidate, run.call, origin);
  const final = finalView(run.samples);
  const state =
    final && run.vanished && !isTerminal(final.state)
      ? `gone (404) while ${final.state}`
      : (final?.state ?? (run.timedOut ? 'timed out' : 'unknown'));
  const reason = timings.terminal?.reason ?? final?.reason ?? null;
  const all = exposure(run.answers, STABLE, candidate, truth, stableLabels);
  const endMs = timings.terminal?.atMs ?? Number.POSITIVE_INFINITY;
  const active = exposure(
    run.answers.filter((a) => a.sentMs >= timings.startedMs && a.sentMs < endMs),
    STABLE,
    candidate,
    truth,
    stableLabels,
  );
  const top = maxShare(run.samples);
  const visited = sharesVisited(run.samples);
  const every = visitedEveryStep(run.samples, plan.spec.steps);
  const failed = failedChecks(run.samples);
  const afterOutcome = timings.candidateAfterOutcome ?? 0;
  const notNewStable =
    timings.terminal && plan.expect === 'promoted'
      ? run.answers.filter(
          (a) =>
            a.error === undefined && a.sentMs >= timings.terminal!.atMs + 1000 && a.version !== candidate,
        ).length
      : 0;
  const failures = all.errors + run.unmatched + run.closes;
  const clientCheck: Check = {
    name: `${plan.label}: client failures`,
    target: '0',
    measured: fmt(failures),
    pass: all.requests > 0 ? failures === 0 : undefined,
    detail:
      `${fmt(all.requests)} requests` +
      (all.errors ? `; errors ${JSON.stringify(all.errorCodes)}` : '') +
      (run.unmatched ? `; ${run.unmatched} unmatched answers` : '') +
      (run.closes ? `; ${run.closes} connections closed by the server` : ''),
  };
  const checkInputs: CheckInputs = {
    plan,
    timedOut: run.timedOut,
    timings,
    final,
    state,
    reason,
    all,
    active,
    top,
    visited,
    every,
    failed,
    afterOutcome,
    notNewStable,
    clientCheck,
  };
  const checks = plan.expect === 'rolled_back' ? rolledBackChecks(checkInputs) : promotedChecks(checkInputs);
  return {
    plan,
    timings,
    exposure: all,
    activeExposure: active,
    maxShare: top,
    sharesVisited: visited,
    everyStep: every,
    failedChecks: failed,
    state,
    reason,
    stableAfter: final?.stable,
    notNewStableAfter: notNewStable,
    candidateAfterOutcome: afterOutcome,
    checks,
  };
}

/** The one-line summary of one run, for a note to quote. */
export function closingLine(f: RolloutFigures): string {
  const e = f.activeExposure;
  if (f.plan.expect === 'promoted')
    return (
      `${f.plan.label}, ${f.plan.what}: ${f.state} after ${s1(f.timings.timeToOutcomeMs)} through ` +
      `${f.sharesVisited.join(' → ') || '–'} %; ${fmt(f.exposure.requests)} requests, ${fmt(f.exposure.errors)} failed.`
    );
  return (
    `${f.plan.label}, ${f.plan.what}: ${f.state} after ${s1(f.timings.timeToOutcomeMs)} ` +
    `(first failing evaluation at ${s1(f.timings.timeToFirstFailureMs)}, candidate serving 0 requests ` +
    `${s1(f.timings.failureToZeroMs)} later); exposed ${fmt(e.exposed)} of ${fmt(e.ok)} requests while active ` +
    `(${((e.exposedShare ?? 0) * 100).toFixed(2)} %, max share ${f.maxShare} %), ${fmt(e.exposedChanged)} of them ` +
    `answered differently from the stable (${fmt(e.exposedWrong)} wrong vs the true label); ` +
    `${fmt(f.exposure.errors)} client failures; reason: ${f.reason ?? '–'}.`
  );
}

/** One chart per run: the server's share, the clients' observed share and each check (% of its threshold). */
export function rolloutChart(
  plan: RolloutRunPlan,
  run: Pick<RolloutRun, 'call' | 'samples' | 'answers' | 'stopMs'>,
  f: RolloutFigures,
  origin: number,
): Chart {
  const t0 = run.call.calledMs;
  const series = rolloutSeries(run.samples, t0);
  series.splice(1, 0, {
    name: 'candidate % of answers (clients, 1 s)',
    points: observedShareSeries(run.answers, plan.spec.version, t0, 1000, run.stopMs - t0),
  });
  const markers = transitionMarkers(run.samples, t0, origin);
  if (f.timings.firstFailure)
    markers.push({
      x: (f.timings.firstFailure.atMs - t0) / 1000,
      label: `fail: ${f.timings.firstFailure.checks.join(',')}`,
    });
  return {
    file: `rollout-${plan.kind}.svg`,
    title: `rollout ${plan.label}: share and checks over time`,
    svg: lineChart({
      title: `rollout ${plan.label} → ${f.state}: share and checks (checks as % of their threshold)`,
      xLabel: 'seconds since POST …/rollout (markers: transitions)',
      yLabel: '% (share; check value ÷ threshold)',
      series,
      markers,
      width: 1100,
      height: 360,
    }),
  };
}

function runMarkdown(plan: RolloutRunPlan, run: RolloutRun, f: RolloutFigures, origin: number): string {
  const md: string[] = [`#### ${plan.label}: ${plan.what}`, '', closingLine(f), ''];
  md.push(
    `\`POST /api/models/${MODEL}/rollout\` \`${JSON.stringify(rolloutBody(plan.spec))}\` → ${run.call.status}`,
    '',
  );
  const final = finalView(run.samples);
  if (final) {
    md.push(
      markdownTable(
        ['at s', 'from', 'to', 'reason'],
        final.transitions.map((t) => [
          Number(((Date.parse(t.at) - origin - run.call.calledMs) / 1000).toFixed(2)),
          t.from,
          t.to,
          t.reason,
        ]),
      ),
      '',
      markdownTable(
        [
          'check (final view)',
          'value',
          'threshold',
          'verdict',
          'candidate samples',
          'stable samples',
          'consecutive failures',
        ],
        final.checks.map((c) => [
          c.name,
          c.value === null ? '–' : c.value,
          c.threshold,
          c.verdict,
          c.candidate_samples,
          c.stable_samples,
          c.consecutive_failures,
        ]),
      ),
      '',
    );
  }
  const lines = rolloutMetricLines(run.metrics, MODEL);
  if (lines.length)
    md.push(
      '<details><summary>streaminfer_rollout_* after the run</summary>',
      '',
      '```',
      ...lines,
      '```',
      '',
      '</details>',
      '',
    );
  return md.join('\n');
}

/** One run's entry in report.json: the call, outcome, timings, exposure, checks and every sampled view. */
function rolloutRunData(
  plan: RolloutRunPlan,
  run: RolloutRun,
  f: RolloutFigures,
  record: RunRecord,
): Record<string, unknown> {
  const t0 = run.call.calledMs;
  return {
    run: plan.label,
    body: rolloutBody(plan.spec),
    status: run.call.status,
    timedOut: run.timedOut,
    vanished: run.vanished,
    ...(run.abort ? { abort: { status: run.abort.status, body: run.abort.body } } : {}),
    state: f.state,
    reason: f.reason,
    timings: {
      timeToOutcomeS: msToS(f.timings.timeToOutcomeMs),
      timeToFirstFailureS: msToS(f.timings.timeToFirstFailureMs),
      failureToOutcomeS: msToS(f.timings.failureToOutcomeMs),
      failureToZeroS: msToS(f.timings.failureToZeroMs),
      candidateAfterOutcome: f.candidateAfterOutcome,
    },
    exposure: f.exposure,
    activeExposure: f.activeExposure,
    maxShare: f.maxShare,
    sharesVisited: f.sharesVisited,
    failedChecks: f.failedChecks,
    checks: f.checks,
    samples: run.samples.map((x) => ({
      s: Number(((x.atMs - t0) / 1000).toFixed(3)),
      status: x.status,
      ...(x.view
        ? {
            state: x.view.state,
            step: x.view.step,
            share: x.view.share,
            checks: x.view.checks.map((c) => [c.name, c.value, c.verdict, c.candidate_samples]),
          }
        : {}),
      ...(x.error ? { error: x.error } : {}),
    })),
    transitions: finalView(run.samples)?.transitions ?? [],
    metrics: rolloutMetricLines(run.metrics, MODEL),
    server: record.server,
  };
}

/** Done-when, the runs table, the closing-note figures, then each run's own section. */
function rolloutMarkdown(
  checks: readonly Check[],
  figures: readonly RolloutFigures[],
  offline: Readonly<Record<string, number>>,
  sections: readonly string[],
): string[] {
  const md: string[] = [
    '### Done-when',
    '',
    checks.length ? checksMarkdown(checks) : 'No run completed.',
    '',
  ];
  if (figures.length) {
    md.push(
      '### Runs',
      '',
      markdownTable(
        [
          'run',
          'outcome',
          'time to outcome',
          'first fail → candidate at 0',
          'max share %',
          'requests',
          'exposed',
          'exposed changed',
          'exposed wrong',
          'client failures',
          'offline disagreement',
          'reason',
        ],
        figures.map((f) => [
          f.plan.label,
          f.state,
          s1(f.timings.timeToOutcomeMs),
          s1(f.timings.failureToZeroMs),
          f.maxShare,
          f.exposure.requests,
          f.activeExposure.exposed,
          f.activeExposure.exposedChanged,
          f.activeExposure.exposedWrong,
          f.exposure.errors,
          offline[f.plan.label] === undefined
            ? 'same as v2'
            : `${(offline[f.plan.label]! * 100).toFixed(2)} %`,
          f.reason ?? '–',
        ]),
      ),
      '',
      '"Exposed" = answers from the candidate to requests sent while the rollout was active; "changed" = ' +
        'their label differs from what the stable (v2, computed offline) answers for that row; "wrong" = ' +
        'differs from the true label. "First fail" = the first sampled view with a check whose verdict is ' +
        '`fail`, timed by its `updated_at`; "candidate at 0" = the arrival of its last answer. Views are ' +
        `sampled every ${SAMPLE_EVERY_MS} ms.`,
      '',
      '### Closing-note figures',
      '',
      ...figures.map((f) => `- ${closingLine(f)}`),
      '',
      ...sections,
    );
  }
  return md;
}

export const rollout: Scenario = {
  name: 'rollout',
  description:
    'Automatic canary analysis under 8 WebSocket clients (~350 req/s of digits rows with known labels), ' +
    'stable = digits 2, one fresh `serve --workers 2` per run: a candidate that answers every 7 as 1 (expect ' +
    'rollback on disagreement), one with ~20 ms extra compute per item (expect rollback on p99_ratio), and a ' +
    'retrain of v2 (expect promotion through 5/10/25/50/100 %). Time to rollback / promotion, first failing ' +
    'evaluation → candidate serving 0 requests, exposed and wrong answers, client failures, reason; share and ' +
    'checks charted per run. `--quick`: steps 5/25/100 %, 6 s each.',
  async run(ctx): Promise<ScenarioResult> {
    const s = rolloutSetup(ctx);
    const v2File = path.join(ctx.repoRoot, 'models', MODEL, STABLE, 'model.onnx');
    const stableLabels = await predictDigits(v2File, s.digits);
    // each candidate is built just before its run (v5 is a training run of a few seconds)
    const v2 = readFileSync(v2File);
    const build: Record<RolloutRunKind, () => Uint8Array> = {
      errs: () => errsOnAClass(v2),
      slow: () => slowedDown(v2),
      good: () => retrained(s.digits),
    };
    // offline disagreement with the stable (not v4: identical by construction, and 20 ms a row)
    const offline: Record<string, number> = {};
    const origin = performance.timeOrigin;
    const runs: RunRecord[] = [];
    const figures: RolloutFigures[] = [];
    const charts: Chart[] = [];
    const sections: string[] = [];
    const data: Record<string, unknown>[] = [];
    let notStarted: string | undefined;
    for (const plan of s.plans) {
      if (notStarted) {
        // the next server would fail the same way
        runs.push({ label: plan.label, target: 'streaminfer', error: `not run: ${notStarted}` });
        continue;
      }
      const t = performance.now();
      const candidate = build[plan.kind]();
      ctx.log(`rollout ${plan.label}: candidate built in ${((performance.now() - t) / 1000).toFixed(1)} s`);
      if (plan.kind !== 'slow') {
        const labels = await predictDigits(candidate, s.digits);
        let differ = 0;
        for (let i = 0; i < labels.length; i++) if (labels[i] !== stableLabels[i]) differ++;
        offline[plan.label] = differ / labels.length;
      }
      const { record, run, started } = await runOne(ctx, s, plan, candidate);
      if (!started) notStarted = `the server did not start for ${plan.label}`;
      runs.push(record);
      if (!run) continue;
      const f = rolloutFigures(plan, run, s.digits.labels, stableLabels, origin);
      figures.push(f);
      charts.push(rolloutChart(plan, run, f, origin));
      sections.push(runMarkdown(plan, run, f, origin));
      ctx.log(`rollout ${closingLine(f)}`);
      data.push(rolloutRunData(plan, run, f, record));
    }
    const checks = figures.flatMap((f) => f.checks);
    const md = rolloutMarkdown(checks, figures, offline, sections);
    return {
      params: s.params,
      // a measured run is reported in the sections above; the runs table (load figures) would be empty
      runs: runs.filter((r) => r.error !== undefined),
      ratios: [],
      charts,
      notes: [checksNote('rollout done-when', checks), ...figures.map(closingLine)],
      markdown: md.join('\n'),
      data: { offlineDisagreement: offline, runs: data },
    };
  },
};

function msToS(ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : Number((ms / 1000).toFixed(3));
}
