/**
 * The rollout state machine, pure: every function takes a record and the time and returns the next record
 * (the input is never changed) with the transitions it made. The supervisor feeds it counter samples, makes
 * the registry match `desiredRouting(record)`, persists the record and exports it.
 *
 *   start ─► shadow? ─► step 0 ─► … ─► step k ─► promoted
 *              │  ▲        │  ▲            │
 *              ▼  │        ▼  │            └─► (any active state) ─► rolled_back (a check failed N times in a row)
 *             paused      paused                                 └─► aborted     (operator, or candidate replaced)
 *
 * - An evaluation runs every check on the window. A check's `consecutiveFailures` counts evaluations in a
 *   row whose verdict was `fail`; any other verdict sets it back to 0, so a flapping check never rolls back.
 *   When one reaches `failuresToRollback`, the rollout is rolled back at once — also while paused: pausing
 *   holds the share, it never switches the safety off.
 * - A step passes when it has lasted `dwellMs`, the candidate answered `minRequests` requests in it, and every
 *   check's verdict is `pass` in that evaluation (`insufficient` holds the step). The shadow phase passes on
 *   its own dwell, its count of compared requests and the disagreement check alone (the candidate serves
 *   nothing there, so error rate and latency have no candidate samples yet).
 * - Passing the last canary step promotes (a last step of 100 % is the promotion itself).
 * - A step or shadow phase not passed within `deadlineMs` rolls back (reason: the checks that did not pass):
 *   evidence that never settles must not hold a candidate at its share for ever. A resumed step starts its
 *   clock again.
 */
import type { CheckResult, SampleDelta, Verdict, WindowTotals } from './analysis';
import { runChecks } from './analysis';
import { RolloutError } from './errors';
import { CHECK_NAMES, type CheckName, canarySteps, type RolloutPlan, validatePlan } from './plan';

export const ROLLOUT_STATES = [
  'shadow',
  'progressing',
  'paused',
  'promoted',
  'rolled_back',
  'aborted',
] as const;
export type RolloutState = (typeof ROLLOUT_STATES)[number];
export type ActivePhase = 'shadow' | 'progressing';

/** Why a transition happened: a small fixed set (it is a metric label). */
export type TransitionReason =
  | 'started'
  | 'shadow_passed'
  | 'step_passed'
  | 'all_steps_passed'
  | `failed_${CheckName}`
  | 'deadline'
  | 'paused'
  | 'resumed'
  | 'aborted'
  | 'candidate_replaced';

export interface Transition {
  at: number;
  /** A phase: `none` (before the start), `shadow`, `step_<i>`, `paused`, `promoted`, `rolled_back`, `aborted`. */
  from: string;
  to: string;
  reason: TransitionReason;
}

export interface CheckStatus {
  name: CheckName;
  value: number | null;
  threshold: number;
  verdict: Verdict;
  candidateSamples: number;
  stableSamples: number;
  consecutiveFailures: number;
}

export interface RolloutRecord {
  model: string;
  stable: string;
  candidate: string;
  plan: RolloutPlan;
  state: RolloutState;
  /** The phase a paused rollout resumes to. */
  pausedFrom?: ActivePhase;
  /** Index into plan.steps; -1 in the shadow phase. */
  step: number;
  startedAt: number;
  stepStartedAt: number;
  updatedAt: number;
  /** Candidate-served requests in this step (compared requests in the shadow phase), summed over evaluations. */
  stepRequests: number;
  checks: CheckStatus[];
  /** Why the rollout ended (or null while it runs, and after a promotion the summary of the last step). */
  reason: string | null;
  transitions: Transition[];
}

/** Transitions kept in a record (the oldest go first); the metric counts every one. */
export const MAX_TRANSITIONS = 50;

export function isActive(record: Pick<RolloutRecord, 'state'>): boolean {
  return record.state === 'shadow' || record.state === 'progressing' || record.state === 'paused';
}

/** The phase a record is in, as transitions name it. */
export function phaseOf(record: Pick<RolloutRecord, 'state' | 'step'>): string {
  return record.state === 'progressing' ? `step_${record.step}` : record.state;
}

function initialChecks(plan: RolloutPlan): CheckStatus[] {
  const thresholds: Record<CheckName, number | undefined> = {
    error_rate: plan.checks.errorRate?.maxIncrease,
    p99_ratio: plan.checks.p99Ratio?.max,
    disagreement: plan.checks.disagreement?.max,
  };
  return CHECK_NAMES.filter((name) => thresholds[name] !== undefined).map((name) => ({
    name,
    value: null,
    threshold: thresholds[name]!,
    verdict: 'insufficient',
    candidateSamples: 0,
    stableSamples: 0,
    consecutiveFailures: 0,
  }));
}

function withTransition(
  record: RolloutRecord,
  next: Partial<RolloutRecord>,
  reason: TransitionReason,
  now: number,
): { record: RolloutRecord; transition: Transition } {
  const moved: RolloutRecord = { ...record, ...next, updatedAt: now };
  if (moved.state !== 'paused') delete moved.pausedFrom;
  const transition: Transition = { at: now, from: phaseOf(record), to: phaseOf(moved), reason };
  moved.transitions = [...record.transitions, transition].slice(-MAX_TRANSITIONS);
  return { record: moved, transition };
}

export function startRollout(input: {
  model: string;
  stable: string;
  candidate: string;
  plan: RolloutPlan;
  now: number;
}): { record: RolloutRecord; transition: Transition } {
  const { plan, now } = input;
  const shadow = plan.shadow !== undefined;
  const record: RolloutRecord = {
    model: input.model,
    stable: input.stable,
    candidate: input.candidate,
    plan,
    state: shadow ? 'shadow' : 'progressing',
    step: shadow ? -1 : 0,
    startedAt: now,
    stepStartedAt: now,
    updatedAt: now,
    stepRequests: 0,
    checks: initialChecks(plan),
    reason: null,
    transitions: [],
  };
  const transition: Transition = { at: now, from: 'none', to: phaseOf(record), reason: 'started' };
  record.transitions = [transition];
  return { record, transition };
}

export interface EvaluationInput {
  /** The window's totals (undefined until it holds two samples). */
  totals: WindowTotals | undefined;
  /** The latency histogram's upper bounds (seconds, last Infinity). */
  bounds: readonly number[];
  /** What the newest sample added (it feeds the step's request count). */
  delta: SampleDelta;
  now: number;
}

export interface Evaluation {
  record: RolloutRecord;
  transitions: Transition[];
  results: CheckResult[];
}

/**
 * One evaluation: checks, then rollback, progress or nothing. A finished rollout is returned as it is; without
 * window totals only the step's request count moves.
 */
export function evaluateRollout(record: RolloutRecord, input: EvaluationInput): Evaluation {
  if (!isActive(record)) return { record, transitions: [], results: [] };
  const { now } = input;
  const plan = record.plan;
  const phase: ActivePhase = record.state === 'paused' ? record.pausedFrom! : (record.state as ActivePhase);
  const added = phase === 'shadow' ? input.delta.comparisons : input.delta.candidateRequests;
  // No window yet (the first sample after a start, a restart or a counter reset): nothing to judge, and the
  // verdicts and failure counts so far stay as they were (a restart neither forgives nor repeats a failure).
  if (!input.totals)
    return {
      record: { ...record, stepRequests: record.stepRequests + Math.max(0, added), updatedAt: now },
      transitions: [],
      results: [],
    };
  const results = runChecks(input.totals, input.bounds, plan.checks, plan.minSamples);
  const checks = results.map((result): CheckStatus => {
    const previous = record.checks.find((check) => check.name === result.name);
    return {
      name: result.name,
      value: result.value !== null && Number.isFinite(result.value) ? result.value : null,
      threshold: result.threshold,
      verdict: result.verdict,
      candidateSamples: result.candidateSamples,
      stableSamples: result.stableSamples,
      consecutiveFailures: result.verdict === 'fail' ? (previous?.consecutiveFailures ?? 0) + 1 : 0,
    };
  });
  let next: RolloutRecord = {
    ...record,
    checks,
    stepRequests: record.stepRequests + Math.max(0, added),
    updatedAt: now,
  };
  const failed = checks.find((check) => check.consecutiveFailures >= plan.failuresToRollback);
  if (failed) {
    const detail = results.find((result) => result.name === failed.name)!.detail;
    const moved = withTransition(
      next,
      {
        state: 'rolled_back',
        reason: `${failed.name} failed ${failed.consecutiveFailures} evaluations in a row: ${detail}`,
      },
      `failed_${failed.name}`,
      now,
    );
    return { record: moved.record, transitions: [moved.transition], results };
  }
  if (next.state === 'paused') return { record: next, transitions: [], results };
  const steps = canarySteps(plan);
  const inStep = now - next.stepStartedAt;
  const deadline = pastDeadline(next, results, phase, inStep, now);
  if (deadline) return { record: deadline.record, transitions: [deadline.transition], results };
  if (phase === 'shadow') {
    const disagreement = checks.find((check) => check.name === 'disagreement');
    if (
      inStep >= plan.shadow!.dwellMs &&
      next.stepRequests >= plan.shadow!.minRequests &&
      disagreement?.verdict === 'pass'
    ) {
      const moved = withTransition(
        next,
        { state: 'progressing', step: 0, stepStartedAt: now, stepRequests: 0 },
        'shadow_passed',
        now,
      );
      return { record: moved.record, transitions: [moved.transition], results };
    }
    return { record: next, transitions: [], results };
  }
  const passed =
    inStep >= plan.dwellMs &&
    next.stepRequests >= plan.minRequests &&
    checks.every((check) => check.verdict === 'pass');
  if (!passed) return { record: next, transitions: [], results };
  if (next.step + 1 < steps.length) {
    const moved = withTransition(
      next,
      { step: next.step + 1, stepStartedAt: now, stepRequests: 0 },
      'step_passed',
      now,
    );
    return { record: moved.record, transitions: [moved.transition], results };
  }
  next = { ...next };
  const moved = withTransition(
    next,
    {
      state: 'promoted',
      step: plan.steps.length - 1,
      stepStartedAt: now,
      reason: `every step passed (${plan.steps.join(', ')} %)`,
    },
    'all_steps_passed',
    now,
  );
  return { record: moved.record, transitions: [moved.transition], results };
}

/** The step's (or shadow phase's) deadline passed without it passing: roll back, naming what did not pass. */
function pastDeadline(
  record: RolloutRecord,
  results: readonly CheckResult[],
  phase: ActivePhase,
  inStep: number,
  now: number,
): { record: RolloutRecord; transition: Transition } | undefined {
  const plan = record.plan;
  if (inStep < plan.deadlineMs) return undefined;
  const gating = phase === 'shadow' ? results.filter((r) => r.name === 'disagreement') : results;
  const open = gating.filter((r) => r.verdict !== 'pass');
  const minimum = phase === 'shadow' ? plan.shadow!.minRequests : plan.minRequests;
  const why = [
    ...open.map((r) => `${r.name} ${r.verdict} (${r.detail})`),
    ...(record.stepRequests < minimum ? [`${record.stepRequests} of ${minimum} requests`] : []),
  ];
  // Every gate passed at the deadline's evaluation: the step passes normally below.
  if (why.length === 0) return undefined;
  const where = phase === 'shadow' ? 'the shadow phase' : `step ${record.step} (${shareOf(record)} %)`;
  return withTransition(
    record,
    {
      state: 'rolled_back',
      reason: `${where} did not pass within ${plan.deadlineMs / 1000} s: ${why.join('; ')}`,
    },
    'deadline',
    now,
  );
}

function refuse(record: RolloutRecord, action: string): never {
  throw new RolloutError(
    'invalid_state',
    `cannot ${action} the rollout of "${record.model}": it is ${record.state}`,
  );
}

export function pauseRollout(
  record: RolloutRecord,
  now: number,
): { record: RolloutRecord; transition: Transition } {
  if (record.state !== 'shadow' && record.state !== 'progressing') refuse(record, 'pause');
  return withTransition(record, { state: 'paused', pausedFrom: record.state }, 'paused', now);
}

export function resumeRollout(
  record: RolloutRecord,
  now: number,
): { record: RolloutRecord; transition: Transition } {
  if (record.state !== 'paused') refuse(record, 'resume');
  // The step's clock starts again: its dwell and its deadline count from the resume.
  return withTransition(
    record,
    { state: record.pausedFrom ?? 'progressing', stepStartedAt: now },
    'resumed',
    now,
  );
}

/** The operator's abort (= rollback), or the registry's candidate changed under the rollout. */
export function abortRollout(
  record: RolloutRecord,
  now: number,
  why: { reason: 'aborted' | 'candidate_replaced'; detail: string },
): { record: RolloutRecord; transition: Transition } {
  if (!isActive(record)) refuse(record, 'abort');
  return withTransition(record, { state: 'aborted', reason: why.detail }, why.reason, now);
}

/** What the registry must hold for this record (the supervisor makes it so, and again after a failure). */
export type DesiredRouting =
  | { kind: 'canary'; candidate: string; canaryPercent: number; shadow: boolean }
  | { kind: 'promote'; candidate: string };

export function desiredRouting(record: RolloutRecord): DesiredRouting {
  const candidate = record.candidate;
  const phase = record.state === 'paused' ? record.pausedFrom : record.state;
  switch (phase) {
    case 'shadow':
      return { kind: 'canary', candidate, canaryPercent: 0, shadow: true };
    case 'progressing':
      return {
        kind: 'canary',
        candidate,
        canaryPercent: canarySteps(record.plan)[record.step]!,
        // Stable-served requests stay mirrored so the disagreement check compares both on the same inputs.
        shadow: record.plan.checks.disagreement !== undefined,
      };
    case 'promoted':
      return { kind: 'promote', candidate };
    default:
      // rolled back, aborted: no traffic, no mirroring, the candidate stays loaded for inspection.
      return { kind: 'canary', candidate, canaryPercent: 0, shadow: false };
  }
}

/** The percentage of unpinned traffic the candidate serves in this record's state. */
export function shareOf(record: RolloutRecord): number {
  const routing = desiredRouting(record);
  return routing.kind === 'promote' ? 100 : routing.canaryPercent;
}

/** A plan as the API's body (snake_case, seconds, every check explicit): validatePlan reads it back equal. */
export function planBody(plan: RolloutPlan): Record<string, unknown> {
  const checks: Record<string, unknown> = {};
  if (plan.checks.errorRate) checks.error_rate = { max_increase: plan.checks.errorRate.maxIncrease };
  if (plan.checks.p99Ratio)
    checks.p99_ratio = { max: plan.checks.p99Ratio.max, floor_ms: plan.checks.p99Ratio.floorMs };
  if (plan.checks.disagreement) checks.disagreement = { max: plan.checks.disagreement.max };
  return {
    version: plan.version,
    steps: [...plan.steps],
    dwell_s: plan.dwellMs / 1000,
    min_requests: plan.minRequests,
    interval_s: plan.intervalMs / 1000,
    failures_to_rollback: plan.failuresToRollback,
    min_samples: plan.minSamples,
    window_s: plan.windowMs / 1000,
    deadline_s: plan.deadlineMs / 1000,
    ...(plan.shadow
      ? { shadow: { dwell_s: plan.shadow.dwellMs / 1000, min_requests: plan.shadow.minRequests } }
      : {}),
    checks,
  };
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** The admin API's view of a record (the contract in docs/serving/rollouts.md). */
export function rolloutView(record: RolloutRecord): Record<string, unknown> {
  return {
    model: record.model,
    stable: record.stable,
    candidate: record.candidate,
    state: record.state,
    ...(record.pausedFrom ? { paused_from: record.pausedFrom } : {}),
    step: record.step,
    share: shareOf(record),
    steps: [...record.plan.steps],
    step_requests: record.stepRequests,
    started_at: iso(record.startedAt),
    step_started_at: iso(record.stepStartedAt),
    updated_at: iso(record.updatedAt),
    checks: record.checks.map((check) => ({
      name: check.name,
      value: check.value,
      threshold: check.threshold,
      verdict: check.verdict,
      candidate_samples: check.candidateSamples,
      stable_samples: check.stableSamples,
      consecutive_failures: check.consecutiveFailures,
    })),
    reason: record.reason,
    transitions: record.transitions.map((transition) => ({
      at: iso(transition.at),
      from: transition.from,
      to: transition.to,
      reason: transition.reason,
    })),
    plan: planBody(record.plan),
  };
}

/** The rollout record's format (fleet KV `rollout.<model>`); the registry record has its own (REGISTRY_RECORD_FORMAT). */
export const ROLLOUT_RECORD_FORMAT = 1;

/** A record as it is persisted (JSON-safe; the plan in its body form). */
export function serializeRecord(record: RolloutRecord): Record<string, unknown> {
  return { format: ROLLOUT_RECORD_FORMAT, ...record, plan: planBody(record.plan) };
}

const VERDICTS: readonly string[] = ['pass', 'fail', 'insufficient'];

/** Reads a persisted record back; anything malformed is `RolloutError('invalid_record')`. */
export function parseRecord(input: unknown): RolloutRecord {
  const bad = (why: string): never => {
    throw new RolloutError('invalid_record', `rollout record: ${why}`);
  };
  if (typeof input !== 'object' || input === null || Array.isArray(input)) bad('not an object');
  const raw = input as Record<string, unknown>;
  if (raw.format !== ROLLOUT_RECORD_FORMAT) bad(`unknown format ${String(raw.format)}`);
  for (const field of ['model', 'stable', 'candidate'] as const)
    if (typeof raw[field] !== 'string') bad(`${field} is not a string`);
  if (!(ROLLOUT_STATES as readonly unknown[]).includes(raw.state)) bad(`unknown state ${String(raw.state)}`);
  for (const field of ['step', 'startedAt', 'stepStartedAt', 'updatedAt', 'stepRequests'] as const)
    if (typeof raw[field] !== 'number' || !Number.isFinite(raw[field])) bad(`${field} is not a number`);
  let plan: RolloutPlan;
  try {
    plan = validatePlan(raw.plan, { classifier: false });
  } catch (error) {
    return bad(`plan: ${(error as Error).message}`);
  }
  const step = raw.step as number;
  if (!Number.isInteger(step) || step < -1 || step >= plan.steps.length) bad(`step ${step} out of range`);
  if (raw.state === 'paused' && raw.pausedFrom !== 'shadow' && raw.pausedFrom !== 'progressing')
    bad('a paused record needs pausedFrom');
  if (!Array.isArray(raw.checks) || !Array.isArray(raw.transitions))
    bad('checks and transitions must be arrays');
  const checks = (raw.checks as unknown[]).map((value): CheckStatus => {
    const check = value as Record<string, unknown>;
    if (
      !(CHECK_NAMES as readonly unknown[]).includes(check?.name) ||
      !VERDICTS.includes(check.verdict as string)
    )
      bad('a check has an unknown name or verdict');
    return {
      name: check.name as CheckName,
      value: typeof check.value === 'number' ? check.value : null,
      threshold: Number(check.threshold),
      verdict: check.verdict as Verdict,
      candidateSamples: Number(check.candidateSamples) || 0,
      stableSamples: Number(check.stableSamples) || 0,
      consecutiveFailures: Number(check.consecutiveFailures) || 0,
    };
  });
  const transitions = (raw.transitions as unknown[]).map((value): Transition => {
    const t = value as Record<string, unknown>;
    if (
      typeof t?.at !== 'number' ||
      typeof t.from !== 'string' ||
      typeof t.to !== 'string' ||
      typeof t.reason !== 'string'
    )
      bad('a transition is malformed');
    return {
      at: t.at as number,
      from: t.from as string,
      to: t.to as string,
      reason: t.reason as TransitionReason,
    };
  });
  const record: RolloutRecord = {
    model: raw.model as string,
    stable: raw.stable as string,
    candidate: raw.candidate as string,
    plan,
    state: raw.state as RolloutState,
    step,
    startedAt: raw.startedAt as number,
    stepStartedAt: raw.stepStartedAt as number,
    updatedAt: raw.updatedAt as number,
    stepRequests: raw.stepRequests as number,
    checks,
    reason: typeof raw.reason === 'string' ? raw.reason : null,
    transitions,
  };
  if (raw.state === 'paused') record.pausedFrom = raw.pausedFrom as ActivePhase;
  return record;
}
