/**
 * A rollout plan: the canary shares to step through, how long and how much traffic each step needs, and the
 * checks that must pass. `validatePlan` reads the admin API's JSON body (snake_case, seconds) into a frozen
 * `RolloutPlan` (camelCase, milliseconds) or throws `RolloutError('invalid_plan')` naming the field. Unknown
 * fields are refused: a typo must not silently drop a check.
 */
import { RolloutError } from './errors';

export const CHECK_NAMES = ['error_rate', 'p99_ratio', 'disagreement'] as const;
export type CheckName = (typeof CHECK_NAMES)[number];

export interface ChecksPlan {
  /** Candidate error rate may exceed stable's by at most this much (absolute, 0..1). */
  errorRate?: { maxIncrease: number };
  /** Candidate p99 / stable p99 at most `max`; both p99s are raised to `floorMs` first (sub-ms noise). */
  p99Ratio?: { max: number; floorMs: number };
  /** Share of mirrored requests whose answers differ (top-1 for classifiers) at most `max`. */
  disagreement?: { max: number };
}

export interface RolloutPlan {
  version: string;
  /** Canary shares in percent, strictly increasing, each in (0, 100]; a last 100 means "promote". */
  steps: readonly number[];
  dwellMs: number;
  /** Candidate-served requests a step needs before it may pass. */
  minRequests: number;
  intervalMs: number;
  /** Consecutive failing evaluations of one check that roll back. */
  failuresToRollback: number;
  /** Samples each side needs before a check gives any verdict but `insufficient`. */
  minSamples: number;
  /** The sliding window the checks look at. */
  windowMs: number;
  /**
   * A step (or the shadow phase) that has not passed within this long rolls back: checks that stay
   * `insufficient` (evidence that never settles, e.g. a latency ratio near its limit) must not hold a
   * candidate at its share for ever (Flagger's progress deadline). Time paused does not count.
   */
  deadlineMs: number;
  /** A shadow phase first (0 % served, every stable-served request mirrored), gated by disagreement. */
  shadow?: { dwellMs: number; minRequests: number };
  checks: ChecksPlan;
}

export const DEFAULT_STEPS = [5, 10, 25, 50, 100] as const;
export const PLAN_DEFAULTS = {
  dwellS: 60,
  minRequests: 100,
  intervalS: 5,
  failuresToRollback: 3,
  minSamples: 50,
  windowS: 60,
  deadlineS: 600,
  shadowDwellS: 30,
  shadowMinRequests: 100,
  maxErrorIncrease: 0.01,
  maxP99Ratio: 1.5,
  p99FloorMs: 1,
  maxDisagreement: 0.05,
} as const;

/** Bounds, stated once (docs/serving/rollouts.md lists them too). */
export const PLAN_BOUNDS = {
  steps: { maxCount: 20 },
  dwellS: [0, 86400],
  minRequests: [0, 1e9],
  intervalS: [0.1, 300],
  failuresToRollback: [1, 100],
  minSamples: [10, 1e6],
  windowS: [1, 86400],
  deadlineS: [1, 86400],
  maxErrorIncrease: [0, 1],
  maxP99Ratio: [1, 1000],
  p99FloorMs: [0, 60000],
  maxDisagreement: [0, 1],
} as const;

const TOP_FIELDS = [
  'version',
  'steps',
  'dwell_s',
  'deadline_s',
  'min_requests',
  'interval_s',
  'failures_to_rollback',
  'min_samples',
  'window_s',
  'shadow',
  'checks',
];

function fail(field: string, message: string): never {
  throw new RolloutError('invalid_plan', `${field}: ${message}`, field);
}

function objectOf(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(field, 'must be an object');
  return value as Record<string, unknown>;
}

function onlyKnown(body: Record<string, unknown>, known: readonly string[], prefix: string): void {
  for (const key of Object.keys(body))
    if (!known.includes(key)) fail(`${prefix}${key}`, `unknown field; known: ${known.join(', ')}`);
}

function numberIn(
  value: unknown,
  field: string,
  [min, max]: readonly [number, number],
  fallback: number,
  integer = false,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(field, 'must be a number');
  if (integer && !Number.isInteger(value)) fail(field, 'must be an integer');
  if (value < min || value > max) fail(field, `must be from ${min} to ${max}, got ${value}`);
  return value;
}

/**
 * Reads a plan. `classifier`: whether the model has labels — the disagreement check is on by default only
 * for classifiers (top-1 agreement is well defined there). Without `checks` every default check is on;
 * with `checks`, exactly those named (`{}` or `true` as a value takes that check's defaults).
 */
export function validatePlan(input: unknown, options: { classifier: boolean }): RolloutPlan {
  const body = objectOf(input, 'body');
  onlyKnown(body, TOP_FIELDS, '');
  const rawVersion = typeof body.version === 'number' ? String(body.version) : body.version;
  if (typeof rawVersion !== 'string' || rawVersion.length === 0 || rawVersion.length > 128)
    fail('version', 'must name a version (a non-empty string)');
  const version = rawVersion;
  let steps: number[] = [...DEFAULT_STEPS];
  if (body.steps !== undefined) {
    if (!Array.isArray(body.steps) || body.steps.length === 0)
      fail('steps', 'must be a non-empty array of percentages');
    if (body.steps.length > PLAN_BOUNDS.steps.maxCount)
      fail('steps', `at most ${PLAN_BOUNDS.steps.maxCount} steps`);
    steps = body.steps.map((step: unknown, index: number) => {
      const field = `steps[${index}]`;
      if (typeof step !== 'number' || !Number.isFinite(step) || step <= 0 || step > 100)
        fail(field, 'must be a percentage in (0, 100]');
      return step;
    });
    for (let i = 1; i < steps.length; i++)
      if (steps[i]! <= steps[i - 1]!) fail(`steps[${i}]`, 'steps must be strictly increasing');
    // A last 100 is the promotion; a plan needs at least one real canary share before it.
    if (steps[0] === 100) fail('steps', 'needs at least one share below 100 (a last 100 means promote)');
  }
  const dwellS = numberIn(body.dwell_s, 'dwell_s', PLAN_BOUNDS.dwellS, PLAN_DEFAULTS.dwellS);
  const minRequests = numberIn(
    body.min_requests,
    'min_requests',
    PLAN_BOUNDS.minRequests,
    PLAN_DEFAULTS.minRequests,
    true,
  );
  const intervalS = numberIn(body.interval_s, 'interval_s', PLAN_BOUNDS.intervalS, PLAN_DEFAULTS.intervalS);
  const failuresToRollback = numberIn(
    body.failures_to_rollback,
    'failures_to_rollback',
    PLAN_BOUNDS.failuresToRollback,
    PLAN_DEFAULTS.failuresToRollback,
    true,
  );
  const minSamples = numberIn(
    body.min_samples,
    'min_samples',
    PLAN_BOUNDS.minSamples,
    PLAN_DEFAULTS.minSamples,
    true,
  );
  const windowS = numberIn(body.window_s, 'window_s', PLAN_BOUNDS.windowS, PLAN_DEFAULTS.windowS);
  if (windowS < intervalS) fail('window_s', `must be at least interval_s (${intervalS})`);
  const deadlineS = numberIn(body.deadline_s, 'deadline_s', PLAN_BOUNDS.deadlineS, PLAN_DEFAULTS.deadlineS);
  if (deadlineS <= dwellS) fail('deadline_s', `must be longer than dwell_s (${dwellS}): no step could pass`);

  const checks: ChecksPlan = {};
  if (body.checks === undefined) {
    checks.errorRate = { maxIncrease: PLAN_DEFAULTS.maxErrorIncrease };
    checks.p99Ratio = { max: PLAN_DEFAULTS.maxP99Ratio, floorMs: PLAN_DEFAULTS.p99FloorMs };
    if (options.classifier) checks.disagreement = { max: PLAN_DEFAULTS.maxDisagreement };
  } else {
    const given = objectOf(body.checks, 'checks');
    onlyKnown(given, CHECK_NAMES, 'checks.');
    const each = (name: CheckName): Record<string, unknown> | undefined => {
      const value = given[name];
      if (value === undefined || value === false) return undefined;
      return value === true ? {} : objectOf(value, `checks.${name}`);
    };
    const errorRate = each('error_rate');
    if (errorRate) {
      onlyKnown(errorRate, ['max_increase'], 'checks.error_rate.');
      checks.errorRate = {
        maxIncrease: numberIn(
          errorRate.max_increase,
          'checks.error_rate.max_increase',
          PLAN_BOUNDS.maxErrorIncrease,
          PLAN_DEFAULTS.maxErrorIncrease,
        ),
      };
    }
    const p99 = each('p99_ratio');
    if (p99) {
      onlyKnown(p99, ['max', 'floor_ms'], 'checks.p99_ratio.');
      checks.p99Ratio = {
        max: numberIn(p99.max, 'checks.p99_ratio.max', PLAN_BOUNDS.maxP99Ratio, PLAN_DEFAULTS.maxP99Ratio),
        floorMs: numberIn(
          p99.floor_ms,
          'checks.p99_ratio.floor_ms',
          PLAN_BOUNDS.p99FloorMs,
          PLAN_DEFAULTS.p99FloorMs,
        ),
      };
    }
    const disagreement = each('disagreement');
    if (disagreement) {
      onlyKnown(disagreement, ['max'], 'checks.disagreement.');
      checks.disagreement = {
        max: numberIn(
          disagreement.max,
          'checks.disagreement.max',
          PLAN_BOUNDS.maxDisagreement,
          PLAN_DEFAULTS.maxDisagreement,
        ),
      };
    }
    if (!checks.errorRate && !checks.p99Ratio && !checks.disagreement)
      fail('checks', 'at least one check must be on');
  }

  let shadow: RolloutPlan['shadow'];
  if (body.shadow !== undefined && body.shadow !== false) {
    const given = body.shadow === true ? {} : objectOf(body.shadow, 'shadow');
    onlyKnown(given, ['dwell_s', 'min_requests'], 'shadow.');
    if (!checks.disagreement)
      fail('shadow', 'a shadow phase is gated by the disagreement check: turn it on (checks.disagreement)');
    shadow = {
      dwellMs:
        numberIn(given.dwell_s, 'shadow.dwell_s', PLAN_BOUNDS.dwellS, PLAN_DEFAULTS.shadowDwellS) * 1000,
      minRequests: numberIn(
        given.min_requests,
        'shadow.min_requests',
        PLAN_BOUNDS.minRequests,
        PLAN_DEFAULTS.shadowMinRequests,
        true,
      ),
    };
    if (deadlineS * 1000 <= shadow.dwellMs)
      fail(
        'deadline_s',
        `must be longer than shadow.dwell_s (${shadow.dwellMs / 1000}): the shadow phase could not pass`,
      );
  }

  const plan: RolloutPlan = {
    version,
    steps,
    dwellMs: dwellS * 1000,
    minRequests,
    intervalMs: intervalS * 1000,
    failuresToRollback,
    minSamples,
    windowMs: windowS * 1000,
    deadlineMs: deadlineS * 1000,
    checks,
    ...(shadow ? { shadow } : {}),
  };
  return plan;
}

/** The canary shares actually served: the steps without a last 100, which is the promotion itself. */
export function canarySteps(plan: Pick<RolloutPlan, 'steps'>): readonly number[] {
  return plan.steps[plan.steps.length - 1] === 100 ? plan.steps.slice(0, -1) : plan.steps;
}
