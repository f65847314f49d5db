/**
 * Pure analysis for the `rollout` scenario (automatic canary analysis): the admin API's
 * rollout view parsed and checked, the request body of a rollout, and the figures of one run from
 * the sampled views and the clients' answers — time to rollback or promotion, time from the first
 * failing evaluation to the candidate serving nothing, requests the candidate answered (exposed)
 * and how many of those were wrong, the chart series. No I/O.
 *
 * Clocks: answers and samples are stamped on the bench's `performance.now()`; the server's ISO
 * times (`started_at`, `transitions[].at`, …) are wall clock, moved onto the bench clock with
 * `wallToBenchMs(iso, performance.timeOrigin)` (same host, same wall clock).
 */
import type { MetricSample } from '../../libs/metrics';
import { CHECK_NAMES, type CheckName, ROLLOUT_STATES, type RolloutState } from '../../libs/rollout';
import type { LineSeries } from './svg-chart';
import type { AnswerRecord } from './swap-analysis';

// The server's own names (the API's contract), not a copy of them.
export { CHECK_NAMES, type CheckName, ROLLOUT_STATES, type RolloutState };
export const TERMINAL_STATES: readonly RolloutState[] = ['promoted', 'rolled_back', 'aborted'];
export type CheckVerdict = 'pass' | 'fail' | 'insufficient';

export interface RolloutCheck {
  name: string;
  value: number | null;
  threshold: number;
  verdict: CheckVerdict;
  candidate_samples: number;
  stable_samples: number;
  consecutive_failures: number;
}

export interface RolloutTransition {
  at: string;
  from: string;
  to: string;
  reason: string;
}

/** `GET /api/models/{model}/rollout` → `{"rollout": RolloutView}`. */
export interface RolloutView {
  model: string;
  stable: string;
  candidate: string;
  state: RolloutState;
  /** index into `steps`; -1 in shadow */
  step: number;
  /** percent 0–100 of unpinned traffic sent to the candidate */
  share: number;
  steps: number[];
  started_at: string;
  step_started_at: string;
  updated_at: string;
  checks: RolloutCheck[];
  reason: string | null;
  transitions: RolloutTransition[];
}

/** A view that does not have the documented shape. */
export class RolloutViewError extends Error {
  readonly code = 'bad_rollout_view';
  constructor(message: string) {
    super(message);
    this.name = 'RolloutViewError';
  }
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function field<T>(o: Obj, key: string, where: string, ok: (v: unknown) => v is T, what: string): T {
  const v = o[key];
  if (!ok(v)) throw new RolloutViewError(`${where}.${key}: expected ${what}, got ${JSON.stringify(v)}`);
  return v;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isNumberOrNull = (v: unknown): v is number | null => v === null || isNumber(v);
const isStringOrNull = (v: unknown): v is string | null => v === null || isString(v);
const isArray = (v: unknown): v is unknown[] => Array.isArray(v);
const isState = (v: unknown): v is RolloutState => ROLLOUT_STATES.includes(v as RolloutState);
const isVerdict = (v: unknown): v is CheckVerdict => v === 'pass' || v === 'fail' || v === 'insufficient';
/** Versions are strings in the API; a number is accepted and turned into its text. */
const isVersion = (v: unknown): v is string | number => isString(v) || isNumber(v);

/** The rollout view of an answer body (`{"rollout": View}`, or the view itself); throws RolloutViewError. */
export function parseRolloutView(body: unknown): RolloutView {
  const raw = isObj(body) && isObj(body['rollout']) ? body['rollout'] : body;
  if (!isObj(raw)) throw new RolloutViewError(`rollout: expected an object, got ${JSON.stringify(body)}`);
  const w = 'rollout';
  const checks = field(raw, 'checks', w, isArray, 'an array').map((c, i): RolloutCheck => {
    const where = `rollout.checks[${i}]`;
    if (!isObj(c)) throw new RolloutViewError(`${where}: expected an object`);
    return {
      name: field(c, 'name', where, isString, 'a string'),
      value: field(c, 'value', where, isNumberOrNull, 'a number or null'),
      threshold: field(c, 'threshold', where, isNumber, 'a number'),
      verdict: field(c, 'verdict', where, isVerdict, '"pass" | "fail" | "insufficient"'),
      candidate_samples: field(c, 'candidate_samples', where, isNumber, 'a number'),
      stable_samples: field(c, 'stable_samples', where, isNumber, 'a number'),
      consecutive_failures: field(c, 'consecutive_failures', where, isNumber, 'a number'),
    };
  });
  const transitions = field(raw, 'transitions', w, isArray, 'an array').map((t, i): RolloutTransition => {
    const where = `rollout.transitions[${i}]`;
    if (!isObj(t)) throw new RolloutViewError(`${where}: expected an object`);
    return {
      at: field(t, 'at', where, isString, 'a string'),
      from: field(t, 'from', where, isString, 'a string'),
      to: field(t, 'to', where, isString, 'a string'),
      reason: field(t, 'reason', where, isString, 'a string'),
    };
  });
  const steps = field(raw, 'steps', w, isArray, 'an array');
  if (!steps.every(isNumber))
    throw new RolloutViewError(`rollout.steps: expected numbers, got ${JSON.stringify(steps)}`);
  return {
    model: field(raw, 'model', w, isString, 'a string'),
    stable: String(field(raw, 'stable', w, isVersion, 'a version')),
    candidate: String(field(raw, 'candidate', w, isVersion, 'a version')),
    state: field(raw, 'state', w, isState, ROLLOUT_STATES.join(' | ')),
    step: field(raw, 'step', w, isNumber, 'a number'),
    share: field(raw, 'share', w, isNumber, 'a number'),
    steps,
    started_at: field(raw, 'started_at', w, isString, 'a string'),
    step_started_at: field(raw, 'step_started_at', w, isString, 'a string'),
    updated_at: field(raw, 'updated_at', w, isString, 'a string'),
    checks,
    reason: field(raw, 'reason', w, isStringOrNull, 'a string or null'),
    transitions,
  };
}

export function isTerminal(state: RolloutState): boolean {
  return TERMINAL_STATES.includes(state);
}

/** What the scenario asks of one rollout (the documented POST body, every field explicit). */
export interface RolloutSpec {
  version: string;
  steps: number[];
  dwell_s: number;
  /** A step not passed within this rolls back (the server's default when absent). */
  deadline_s?: number;
  min_requests: number;
  interval_s: number;
  failures_to_rollback: number;
  /** absent: no shadow stage */
  shadow?: { dwell_s: number; min_requests: number };
  checks: {
    error_rate: { max_increase: number };
    p99_ratio: { max: number };
    disagreement: { max: number };
  };
}

/** The JSON body of `POST /api/models/{model}/rollout`. */
export function rolloutBody(spec: RolloutSpec): Record<string, unknown> {
  return {
    version: spec.version,
    steps: [...spec.steps],
    dwell_s: spec.dwell_s,
    ...(spec.deadline_s !== undefined ? { deadline_s: spec.deadline_s } : {}),
    min_requests: spec.min_requests,
    interval_s: spec.interval_s,
    failures_to_rollback: spec.failures_to_rollback,
    ...(spec.shadow ? { shadow: { ...spec.shadow } } : {}),
    checks: {
      error_rate: { ...spec.checks.error_rate },
      p99_ratio: { ...spec.checks.p99_ratio },
      disagreement: { ...spec.checks.disagreement },
    },
  };
}

/**
 * Longest a rollout can legitimately take: shadow + every step's dwell, plus one step deadline (a step whose
 * evidence is slow to settle, or one rolled back at it), plus `slackS`.
 */
export function rolloutDeadlineS(spec: RolloutSpec, slackS: number): number {
  return (spec.shadow?.dwell_s ?? 0) + spec.steps.length * spec.dwell_s + (spec.deadline_s ?? 0) + slackS;
}

/** One `GET …/rollout` as the sampler saw it. */
export interface RolloutSample {
  /** when the answer arrived (bench clock) */
  atMs: number;
  status: number;
  view?: RolloutView;
  /** transport failure, or a 200 whose body did not parse */
  error?: string;
}

/** Wall-clock ISO time → bench clock ms (`origin` = the bench's `performance.timeOrigin`); NaN if unparsable. */
export function wallToBenchMs(iso: string, origin: number): number {
  const t = Date.parse(iso);
  return Number.isFinite(t) ? t - origin : Number.NaN;
}

/** The views sampled, in order (404s and failures skipped). */
export function viewsOf(samples: readonly RolloutSample[]): { atMs: number; view: RolloutView }[] {
  return samples
    .filter((s): s is RolloutSample & { view: RolloutView } => s.view !== undefined)
    .sort((a, b) => a.atMs - b.atMs)
    .map((s) => ({ atMs: s.atMs, view: s.view }));
}

/** The last view sampled (the rollout's outcome when it is terminal). */
export function finalView(samples: readonly RolloutSample[]): RolloutView | undefined {
  return viewsOf(samples).at(-1)?.view;
}

/** Step shares the rollout visited, in order, from the samples and the final view's transitions. */
export function sharesVisited(samples: readonly RolloutSample[]): number[] {
  const out: number[] = [];
  for (const { view } of viewsOf(samples)) {
    if (view.state === 'shadow' || isTerminal(view.state)) continue;
    if (out.at(-1) !== view.share) out.push(view.share);
  }
  return out;
}

/** Whether every step of `steps` was reached, in order (a sample at 100 % or the promotion counts for the last). */
export function visitedEveryStep(samples: readonly RolloutSample[], steps: readonly number[]): boolean {
  const seen = sharesVisited(samples);
  const promoted = finalView(samples)?.state === 'promoted';
  let i = 0;
  for (const s of seen) if (s === steps[i]) i++;
  // the last step may last less than one sampling period before the promotion
  if (promoted && i === steps.length - 1) i++;
  return i === steps.length;
}

export function maxShare(samples: readonly RolloutSample[]): number {
  let m = 0;
  for (const { view } of viewsOf(samples))
    if (!isTerminal(view.state) || view.state === 'promoted') m = Math.max(m, view.share);
  return m;
}

/** Names of the checks that failed in any sampled evaluation (in order of first failure). */
export function failedChecks(samples: readonly RolloutSample[]): string[] {
  const out: string[] = [];
  for (const { view } of viewsOf(samples))
    for (const c of view.checks) if (c.verdict === 'fail' && !out.includes(c.name)) out.push(c.name);
  return out;
}

/**
 * The first failing evaluation: the first sample with a check whose verdict is `fail`. Its time is the
 * view's `updated_at` (when the server evaluated) when that is on the bench clock before the sample
 * arrived, else the sample's arrival.
 */
export function firstFailure(
  samples: readonly RolloutSample[],
  origin: number,
): { atMs: number; checks: string[]; sampleAtMs: number } | undefined {
  for (const { atMs, view } of viewsOf(samples)) {
    const failing = view.checks.filter((c) => c.verdict === 'fail').map((c) => c.name);
    if (failing.length === 0) continue;
    const updated = wallToBenchMs(view.updated_at, origin);
    const at = Number.isFinite(updated) && updated <= atMs ? updated : atMs;
    return { atMs: at, checks: failing, sampleAtMs: atMs };
  }
  return undefined;
}

/**
 * When the rollout ended (bench clock): the `at` of the final view's transition into its terminal
 * state, else the arrival of the first terminal sample; undefined while not terminal.
 */
export function terminalAt(
  samples: readonly RolloutSample[],
  origin: number,
): { atMs: number; state: RolloutState; reason: string | null } | undefined {
  const views = viewsOf(samples);
  const first = views.find((v) => isTerminal(v.view.state));
  if (!first) return undefined;
  const last = views.at(-1)!.view;
  const t = [...last.transitions].reverse().find((x) => x.to === first.view.state);
  const at = t ? wallToBenchMs(t.at, origin) : Number.NaN;
  return {
    atMs: Number.isFinite(at) ? at : first.atMs,
    state: first.view.state,
    reason: last.reason ?? t?.reason ?? null,
  };
}

/** What the clients saw during one rollout. */
export interface Exposure {
  /** requests answered or failed */
  requests: number;
  ok: number;
  /** failed requests (any error code, client timeouts and closed connections included) */
  errors: number;
  errorCodes: Record<string, number>;
  /** ok answers from the candidate */
  exposed: number;
  /** … whose label is not the row's true label */
  exposedWrong: number;
  /** … whose label differs from the stable's for the same row (what the candidate changed) */
  exposedChanged: number;
  /** ok answers from the stable */
  stableAnswers: number;
  stableWrong: number;
  /** stable answers that differ from the stable's offline label (0 unless something else went wrong) */
  stableChanged: number;
  /** ok answers from any other version */
  otherAnswers: number;
  /** exposed ÷ ok */
  exposedShare: number | undefined;
}

/**
 * Counts exposure among `answers`: `truth[row]` is the row's label, `stableLabels[row]` the stable
 * version's top-1 for it (computed offline); answer labels are the class names "0".."9".
 */
export function exposure(
  answers: readonly AnswerRecord[],
  stable: string,
  candidate: string,
  truth: ArrayLike<number>,
  stableLabels: ArrayLike<number>,
): Exposure {
  const out: Exposure = {
    requests: answers.length,
    ok: 0,
    errors: 0,
    errorCodes: {},
    exposed: 0,
    exposedWrong: 0,
    exposedChanged: 0,
    stableAnswers: 0,
    stableWrong: 0,
    stableChanged: 0,
    otherAnswers: 0,
    exposedShare: undefined,
  };
  for (const a of answers) {
    if (a.error !== undefined) {
      out.errors++;
      out.errorCodes[a.error] = (out.errorCodes[a.error] ?? 0) + 1;
      continue;
    }
    out.ok++;
    const label = a.label === undefined ? Number.NaN : Number(a.label);
    const wrong = label !== truth[a.row];
    const changed = label !== stableLabels[a.row];
    if (a.version === candidate) {
      out.exposed++;
      if (wrong) out.exposedWrong++;
      if (changed) out.exposedChanged++;
    } else if (a.version === stable) {
      out.stableAnswers++;
      if (wrong) out.stableWrong++;
      if (changed) out.stableChanged++;
    } else out.otherAnswers++;
  }
  out.exposedShare = out.ok ? out.exposed / out.ok : undefined;
  return out;
}

/** The candidate's last answer: when its request was sent and when it arrived (bench clock). */
export function lastServedBy(
  answers: readonly AnswerRecord[],
  version: string,
): { sentMs: number; recvMs: number } | undefined {
  let last: AnswerRecord | undefined;
  for (const a of answers)
    if (a.error === undefined && a.version === version && (!last || a.recvMs > last.recvMs)) last = a;
  return last ? { sentMs: last.sentMs, recvMs: last.recvMs } : undefined;
}

/** Ok answers from `version` to requests sent at or after `fromMs`. */
export function servedAfter(answers: readonly AnswerRecord[], version: string, fromMs: number): number {
  let n = 0;
  for (const a of answers) if (a.error === undefined && a.version === version && a.sentMs >= fromMs) n++;
  return n;
}

/** The timing figures of one rollout (ms on the bench clock; undefined when not reached). */
export interface RolloutTimings {
  /** POST call started */
  calledMs: number;
  /** the server's `started_at`, else the POST's return */
  startedMs: number;
  terminal?: { atMs: number; state: RolloutState; reason: string | null };
  /** started → terminal */
  timeToOutcomeMs?: number;
  firstFailure?: { atMs: number; checks: string[]; sampleAtMs: number };
  /** started → first failing evaluation */
  timeToFirstFailureMs?: number;
  /** first failing evaluation → terminal transition */
  failureToOutcomeMs?: number;
  /** the candidate's last answer (request sent / answer received) */
  lastCandidate?: { sentMs: number; recvMs: number };
  /**
   * first failing evaluation → the candidate's last answer arrived: from then on it served 0 requests
   * (0 when its last answer came before the failing evaluation)
   */
  failureToZeroMs?: number;
  /** candidate answers to requests sent after the terminal transition */
  candidateAfterOutcome?: number;
}

export function rolloutTimings(
  samples: readonly RolloutSample[],
  answers: readonly AnswerRecord[],
  candidate: string,
  call: { calledMs: number; returnedMs: number },
  origin: number,
): RolloutTimings {
  const views = viewsOf(samples);
  const started = views.length ? wallToBenchMs(views[0]!.view.started_at, origin) : Number.NaN;
  const startedMs = Number.isFinite(started) ? started : call.returnedMs;
  const out: RolloutTimings = { calledMs: call.calledMs, startedMs };
  const terminal = terminalAt(samples, origin);
  const fail = firstFailure(samples, origin);
  const last = lastServedBy(answers, candidate);
  if (terminal) {
    out.terminal = terminal;
    out.timeToOutcomeMs = terminal.atMs - startedMs;
    out.candidateAfterOutcome = servedAfter(answers, candidate, terminal.atMs);
  }
  if (fail) {
    out.firstFailure = fail;
    out.timeToFirstFailureMs = fail.atMs - startedMs;
    if (terminal) out.failureToOutcomeMs = terminal.atMs - fail.atMs;
    if (last) out.failureToZeroMs = Math.max(0, last.recvMs - fail.atMs);
    else out.failureToZeroMs = 0;
  }
  if (last) out.lastCandidate = last;
  return out;
}

/** A check's value as a percentage of its threshold (100 = at the threshold); undefined when it has no value. */
export function percentOfThreshold(c: Pick<RolloutCheck, 'value' | 'threshold'>): number | undefined {
  if (c.value === null || !Number.isFinite(c.value)) return undefined;
  if (c.threshold === 0) return c.value === 0 ? 0 : undefined;
  return (c.value / c.threshold) * 100;
}

/** Chart series of one rollout over seconds since `t0`: the share (%) and each check's value (% of its threshold). */
export function rolloutSeries(samples: readonly RolloutSample[], t0: number): LineSeries[] {
  const views = viewsOf(samples);
  const s = (atMs: number): number => (atMs - t0) / 1000;
  const share: LineSeries = { name: 'share % (server)', points: views.map((v) => [s(v.atMs), v.view.share]) };
  const names: string[] = [];
  for (const { view } of views) for (const c of view.checks) if (!names.includes(c.name)) names.push(c.name);
  const checks = names.map(
    (name): LineSeries => ({
      name: `${name} (% of max)`,
      points: views.map(({ atMs, view }): [number, number] => {
        const c = view.checks.find((x) => x.name === name);
        return [s(atMs), c ? (percentOfThreshold(c) ?? Number.NaN) : Number.NaN];
      }),
    }),
  );
  return [share, ...checks];
}

/** The candidate's share of ok answers per bucket (%, by arrival), over seconds since `t0`; empty buckets skipped. */
export function observedShareSeries(
  answers: readonly AnswerRecord[],
  candidate: string,
  t0: number,
  bucketMs: number,
  endMs?: number,
): [number, number][] {
  let last = endMs ?? 0;
  for (const a of answers) if (a.recvMs - t0 > last) last = a.recvMs - t0;
  const n = Math.max(0, Math.floor(last / bucketMs) + 1);
  const ok = new Array<number>(n).fill(0);
  const cand = new Array<number>(n).fill(0);
  for (const a of answers) {
    if (a.error !== undefined) continue;
    const i = Math.floor((a.recvMs - t0) / bucketMs);
    if (i < 0 || i >= n) continue;
    ok[i]!++;
    if (a.version === candidate) cand[i]!++;
  }
  const out: [number, number][] = [];
  for (let i = 0; i < n; i++)
    if (ok[i]! > 0) out.push([((i + 0.5) * bucketMs) / 1000, (cand[i]! / ok[i]!) * 100]);
  return out;
}

/** Vertical markers for the chart: every transition of the final view, at seconds since `t0`. */
export function transitionMarkers(
  samples: readonly RolloutSample[],
  t0: number,
  origin: number,
): { x: number; label: string }[] {
  const last = finalView(samples);
  if (!last) return [];
  return last.transitions
    .map((t) => ({ x: (wallToBenchMs(t.at, origin) - t0) / 1000, label: t.to }))
    .filter((m) => Number.isFinite(m.x));
}

/** Share of `share` percent over `n` answers plus `sigmas` binomial standard deviations, as a count. */
export function exposureBound(n: number, sharePercent: number, sigmas = 3): number {
  const p = Math.min(1, Math.max(0, sharePercent / 100));
  return n * p + sigmas * Math.sqrt(n * p * (1 - p));
}

/** The `streaminfer_rollout_*` samples of `model` from one scrape, as "name{labels} value" lines. */
export function rolloutMetricLines(samples: readonly MetricSample[], model: string): string[] {
  return samples
    .filter((s) => s.name.startsWith('streaminfer_rollout_') && s.labels['model'] === model)
    .map((s) => {
      const labels = Object.entries(s.labels)
        .map(([k, v]) => `${k}="${v}"`)
        .join(',');
      return `${s.name}{${labels}} ${s.value}`;
    })
    .sort();
}
