import { BatchingError } from './errors';
import type { BatchPolicyName, BatchPolicyOptions, CostPrior } from './types';

export const BATCH_POLICY_NAMES: readonly BatchPolicyName[] = Object.freeze(['fixed', 'greedy', 'adaptive']);

/** Adaptive default objective when sloP99Ms is not given: this factor × maxQueueDelayMs. */
export const DEFAULT_SLO_FACTOR = 2;

export const DEFAULT_COST_PRIOR: Readonly<CostPrior> = Object.freeze({ interceptMs: 1, perItemMs: 0.1 });

const KNOWN_OPTIONS = new Set([
  'policy',
  'maxBatchSize',
  'maxQueueDelayMs',
  'preferredBatchSizes',
  'minBatchSize',
  'sloP99Ms',
  'costPrior',
]);

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === undefined || value === null) {
    return String(value);
  }
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function fail(option: string, expected: string, value: unknown): never {
  throw new BatchingError(
    option,
    `invalid batch policy option ${option}: expected ${expected}, got ${describe(value)}`,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function requireInteger(option: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    fail(
      option,
      max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer between ${min} and ${max}`,
      value,
    );
  }
  return value;
}

function requireNumber(option: string, value: unknown, min: number, exclusiveMin: boolean): number {
  if (
    typeof value !== 'number' ||
    !Number.isFinite(value) ||
    value < min ||
    (exclusiveMin && value === min)
  ) {
    fail(option, `a finite number ${exclusiveMin ? '>' : '>='} ${min}`, value);
  }
  return value;
}

function onlyFor(option: string, policy: BatchPolicyName, allowed: BatchPolicyName): void {
  if (policy !== allowed) {
    throw new BatchingError(
      option,
      `invalid batch policy option ${option}: it applies only to policy "${allowed}" (policy is "${policy}")`,
    );
  }
}

function validatePreferred(value: unknown, maxBatchSize: number): number[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) fail('preferredBatchSizes', 'an array of integers', value);
  const sizes = value.map((size, i) => requireInteger(`preferredBatchSizes[${i}]`, size, 1, maxBatchSize));
  if (sizes.length === 0) return undefined;
  return Object.freeze([...new Set(sizes)].sort((x, y) => x - y)) as number[];
}

function validateCostPrior(value: unknown): CostPrior {
  if (!isRecord(value)) fail('costPrior', 'an object { interceptMs, perItemMs }', value);
  for (const key of Object.keys(value)) {
    if (key !== 'interceptMs' && key !== 'perItemMs') {
      throw new BatchingError(
        `costPrior.${key}`,
        `invalid batch policy option costPrior: unknown key "${key}"`,
      );
    }
  }
  return Object.freeze({
    interceptMs: requireNumber('costPrior.interceptMs', value.interceptMs, 0, false),
    perItemMs: requireNumber('costPrior.perItemMs', value.perItemMs, 0, false),
  });
}

/**
 * Checks untrusted options (e.g. from a model's config.json) and returns a normalized, frozen copy:
 * preferred sizes sorted and deduplicated (an empty list means none), policy-specific defaults filled in
 * (greedy: minBatchSize 1; adaptive: sloP99Ms = 2 × maxQueueDelayMs). Unknown options and options that do
 * not apply to the chosen policy are rejected, so a typo never silently changes behaviour.
 * Throws BatchingError whose `option` names the bad option.
 */
export function validateBatchPolicyOptions(options: unknown): BatchPolicyOptions {
  if (!isRecord(options)) fail('options', 'an object', options);
  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.has(key)) {
      throw new BatchingError(key, `unknown batch policy option "${key}"`);
    }
  }
  const policy = options.policy;
  if (typeof policy !== 'string' || !BATCH_POLICY_NAMES.includes(policy as BatchPolicyName)) {
    fail('policy', `one of ${BATCH_POLICY_NAMES.map((n) => `"${n}"`).join(', ')}`, policy);
  }
  const name = policy as BatchPolicyName;
  const maxBatchSize = requireInteger('maxBatchSize', options.maxBatchSize, 1, Number.MAX_SAFE_INTEGER);
  const maxQueueDelayMs = requireNumber('maxQueueDelayMs', options.maxQueueDelayMs, 0, false);
  const result: BatchPolicyOptions = { policy: name, maxBatchSize, maxQueueDelayMs };

  const preferred = validatePreferred(options.preferredBatchSizes, maxBatchSize);
  if (preferred !== undefined) result.preferredBatchSizes = preferred;

  if (options.minBatchSize !== undefined) {
    onlyFor('minBatchSize', name, 'greedy');
    result.minBatchSize = requireInteger('minBatchSize', options.minBatchSize, 1, maxBatchSize);
  } else if (name === 'greedy') {
    result.minBatchSize = 1;
  }

  if (options.sloP99Ms !== undefined) {
    onlyFor('sloP99Ms', name, 'adaptive');
    result.sloP99Ms = requireNumber('sloP99Ms', options.sloP99Ms, 0, true);
  } else if (name === 'adaptive') {
    result.sloP99Ms = DEFAULT_SLO_FACTOR * maxQueueDelayMs;
  }

  if (options.costPrior !== undefined) {
    onlyFor('costPrior', name, 'adaptive');
    result.costPrior = validateCostPrior(options.costPrior);
  }
  return Object.freeze(result);
}
