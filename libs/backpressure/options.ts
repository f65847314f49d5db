import { BackpressureError } from './errors';

export const KIB = 1024;
export const MIB = 1024 * KIB;

export interface BackpressureOptions {
  /** Per-client token refill rate (requests per second, may be fractional); 0 = unlimited. */
  rateLimitRps: number;
  /** Bucket size (tokens); >= 1 when rateLimitRps > 0. Default max(1, rateLimitRps). */
  rateLimitBurst?: number;
  /** Per-client cap on requests in flight (integer >= 1). */
  maxInflightPerClient: number;
  /** The falling-behind warning is sent when in-flight reaches ceil(fraction × max). (0, 1], default 0.8. */
  warnInflightFraction?: number;
  /**
   * A warning episode ends when in-flight drops to floor(fraction × max) or below.
   * [0, warnInflightFraction), default 0.5 (or warnInflightFraction / 2 when that is 0.5 or less).
   */
  inflightResetFraction?: number;
  /** Per-model queue bound for `normal` priority (integer >= 1). */
  maxModelQueue: number;
  /** `low` is admitted while the queue is below ceil(fraction × maxModelQueue). (0, 1], default 0.5. */
  lowPriorityQueueFraction?: number;
  /** `shadow` likewise. (0, lowPriorityQueueFraction], default lowPriorityQueueFraction / 2. */
  shadowPriorityQueueFraction?: number;
  /** `high` may go ceil(fraction × maxModelQueue) above maxModelQueue. [0, 1], default 0.1. */
  highPriorityHeadroomFraction?: number;
  /** Time constant of the drain-rate EWMA (ms, > 0). Default 1000. */
  drainRateWindowMs?: number;
  /** Lower clamp of a computed Retry-After (integer ms >= 0). Default 10. */
  minRetryAfterMs?: number;
  /**
   * Upper clamp of a computed Retry-After, also the answer for a measured drain rate of 0 (integer >=
   * minRetryAfterMs). Default max(30000, minRetryAfterMs).
   */
  maxRetryAfterMs?: number;
  /** Retry-After while no drain rate has been measured. Default 1000 (clamped into [min, max] when not given). */
  defaultRetryAfterMs?: number;
  /** Unsent bytes above which a WS client is warned once per episode (integer >= 1). Default 1 MiB. */
  slowConsumerWarnBytes?: number;
  /** Unsent bytes above which a WS client is closed with 1013 (integer > warn). Default 8 MiB. */
  slowConsumerCloseBytes?: number;
  /** A slow-consumer episode ends at or below this many unsent bytes (integer in [0, warn)). Default warn / 2. */
  slowConsumerResetBytes?: number;
  /**
   * Tokens a `model_error` answer takes from its client's rate-limit bucket, on top of the request's own
   * (finite >= 0; 0 = none). Default 9: a client whose every request fails the model gets 1/10 of the rate.
   */
  modelErrorPenalty?: number;
}

/** Options after validation: every default filled in, frozen. */
export type ResolvedBackpressureOptions = Readonly<Required<BackpressureOptions>>;

export const DEFAULT_WARN_INFLIGHT_FRACTION = 0.8;
export const DEFAULT_INFLIGHT_RESET_FRACTION = 0.5;
export const DEFAULT_LOW_PRIORITY_QUEUE_FRACTION = 0.5;
export const DEFAULT_HIGH_PRIORITY_HEADROOM_FRACTION = 0.1;
export const DEFAULT_DRAIN_RATE_WINDOW_MS = 1000;
export const DEFAULT_MIN_RETRY_AFTER_MS = 10;
export const DEFAULT_MAX_RETRY_AFTER_MS = 30_000;
export const DEFAULT_RETRY_AFTER_MS = 1000;
export const DEFAULT_SLOW_CONSUMER_WARN_BYTES = MIB;
export const DEFAULT_SLOW_CONSUMER_CLOSE_BYTES = 8 * MIB;
export const DEFAULT_MODEL_ERROR_PENALTY = 9;

const KNOWN_OPTIONS: ReadonlySet<string> = new Set<keyof BackpressureOptions>([
  'rateLimitRps',
  'rateLimitBurst',
  'maxInflightPerClient',
  'warnInflightFraction',
  'inflightResetFraction',
  'maxModelQueue',
  'lowPriorityQueueFraction',
  'shadowPriorityQueueFraction',
  'highPriorityHeadroomFraction',
  'drainRateWindowMs',
  'minRetryAfterMs',
  'maxRetryAfterMs',
  'defaultRetryAfterMs',
  'slowConsumerWarnBytes',
  'slowConsumerCloseBytes',
  'slowConsumerResetBytes',
  'modelErrorPenalty',
]);

/** Objects returned by validateBackpressureOptions(): constructors skip re-validating these. */
const validated = new WeakSet<object>();

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === undefined || value === null) {
    return String(value);
  }
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function fail(option: string, expected: string, value: unknown): never {
  throw new BackpressureError(
    option,
    `invalid backpressure option ${option}: expected ${expected}, got ${describe(value)}`,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function integer(option: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    fail(
      option,
      max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer between ${min} and ${max}`,
      value,
    );
  }
  return value;
}

/** A finite number in [min, max], or (min, max] / [min, max) when the bound is exclusive. */
function number(
  option: string,
  value: unknown,
  min: number,
  max: number,
  exclusive: { min?: boolean; max?: boolean } = {},
): number {
  if (
    typeof value !== 'number' ||
    !Number.isFinite(value) ||
    value < min ||
    value > max ||
    (exclusive.min === true && value === min) ||
    (exclusive.max === true && value === max)
  ) {
    const low = `${exclusive.min ? '>' : '>='} ${min}`;
    const high = `${exclusive.max ? '<' : '<='} ${max}`;
    fail(option, max === Number.MAX_VALUE ? `a finite number ${low}` : `a number ${low} and ${high}`, value);
  }
  return value;
}

/**
 * Checks untrusted options and returns a frozen copy with every default filled in. Unknown options are
 * rejected (a typo must not silently change behaviour). Throws BackpressureError whose `option` names the
 * culprit; for a rule between two options it names the one that must change (given or defaulted).
 */
export function validateBackpressureOptions(raw: unknown): ResolvedBackpressureOptions {
  if (isRecord(raw) && validated.has(raw)) return raw as unknown as ResolvedBackpressureOptions;
  if (!isRecord(raw)) fail('options', 'an object', raw);
  for (const key of Object.keys(raw)) {
    if (!KNOWN_OPTIONS.has(key)) throw new BackpressureError(key, `unknown backpressure option "${key}"`);
  }
  const given = (key: keyof BackpressureOptions): boolean => raw[key] !== undefined;

  const rateLimitRps = number('rateLimitRps', raw.rateLimitRps, 0, Number.MAX_VALUE);
  const rateLimitBurst = given('rateLimitBurst')
    ? number('rateLimitBurst', raw.rateLimitBurst, rateLimitRps > 0 ? 1 : 0, Number.MAX_VALUE)
    : Math.max(1, rateLimitRps);

  const maxInflightPerClient = integer('maxInflightPerClient', raw.maxInflightPerClient, 1);
  const warnInflightFraction = given('warnInflightFraction')
    ? number('warnInflightFraction', raw.warnInflightFraction, 0, 1, { min: true })
    : DEFAULT_WARN_INFLIGHT_FRACTION;
  const inflightResetFraction = given('inflightResetFraction')
    ? number('inflightResetFraction', raw.inflightResetFraction, 0, warnInflightFraction, { max: true })
    : warnInflightFraction > DEFAULT_INFLIGHT_RESET_FRACTION
      ? DEFAULT_INFLIGHT_RESET_FRACTION
      : warnInflightFraction / 2;

  const maxModelQueue = integer('maxModelQueue', raw.maxModelQueue, 1);
  const lowPriorityQueueFraction = given('lowPriorityQueueFraction')
    ? number('lowPriorityQueueFraction', raw.lowPriorityQueueFraction, 0, 1, { min: true })
    : DEFAULT_LOW_PRIORITY_QUEUE_FRACTION;
  const shadowPriorityQueueFraction = given('shadowPriorityQueueFraction')
    ? number('shadowPriorityQueueFraction', raw.shadowPriorityQueueFraction, 0, lowPriorityQueueFraction, {
        min: true,
      })
    : lowPriorityQueueFraction / 2;
  const highPriorityHeadroomFraction = given('highPriorityHeadroomFraction')
    ? number('highPriorityHeadroomFraction', raw.highPriorityHeadroomFraction, 0, 1)
    : DEFAULT_HIGH_PRIORITY_HEADROOM_FRACTION;

  const drainRateWindowMs = given('drainRateWindowMs')
    ? number('drainRateWindowMs', raw.drainRateWindowMs, 0, Number.MAX_VALUE, { min: true })
    : DEFAULT_DRAIN_RATE_WINDOW_MS;
  const minRetryAfterMs = given('minRetryAfterMs')
    ? integer('minRetryAfterMs', raw.minRetryAfterMs, 0)
    : DEFAULT_MIN_RETRY_AFTER_MS;
  const maxRetryAfterMs = given('maxRetryAfterMs')
    ? integer('maxRetryAfterMs', raw.maxRetryAfterMs, minRetryAfterMs)
    : Math.max(DEFAULT_MAX_RETRY_AFTER_MS, minRetryAfterMs);
  const defaultRetryAfterMs = given('defaultRetryAfterMs')
    ? integer('defaultRetryAfterMs', raw.defaultRetryAfterMs, minRetryAfterMs, maxRetryAfterMs)
    : Math.min(maxRetryAfterMs, Math.max(minRetryAfterMs, DEFAULT_RETRY_AFTER_MS));

  const slowConsumerWarnBytes = given('slowConsumerWarnBytes')
    ? integer('slowConsumerWarnBytes', raw.slowConsumerWarnBytes, 1)
    : DEFAULT_SLOW_CONSUMER_WARN_BYTES;
  const slowConsumerCloseBytes = given('slowConsumerCloseBytes')
    ? integer('slowConsumerCloseBytes', raw.slowConsumerCloseBytes, slowConsumerWarnBytes + 1)
    : DEFAULT_SLOW_CONSUMER_CLOSE_BYTES;
  if (slowConsumerCloseBytes <= slowConsumerWarnBytes) {
    throw new BackpressureError(
      'slowConsumerCloseBytes',
      `invalid backpressure option slowConsumerCloseBytes: it must be greater than slowConsumerWarnBytes ` +
        `(${slowConsumerWarnBytes}); the default ${DEFAULT_SLOW_CONSUMER_CLOSE_BYTES} is not`,
    );
  }
  const slowConsumerResetBytes = given('slowConsumerResetBytes')
    ? integer('slowConsumerResetBytes', raw.slowConsumerResetBytes, 0, slowConsumerWarnBytes - 1)
    : Math.floor(slowConsumerWarnBytes / 2);
  const modelErrorPenalty = given('modelErrorPenalty')
    ? number('modelErrorPenalty', raw.modelErrorPenalty, 0, Number.MAX_VALUE)
    : DEFAULT_MODEL_ERROR_PENALTY;

  const options: ResolvedBackpressureOptions = Object.freeze({
    rateLimitRps,
    rateLimitBurst,
    maxInflightPerClient,
    warnInflightFraction,
    inflightResetFraction,
    maxModelQueue,
    lowPriorityQueueFraction,
    shadowPriorityQueueFraction,
    highPriorityHeadroomFraction,
    drainRateWindowMs,
    minRetryAfterMs,
    maxRetryAfterMs,
    defaultRetryAfterMs,
    slowConsumerWarnBytes,
    slowConsumerCloseBytes,
    slowConsumerResetBytes,
    modelErrorPenalty,
  });
  validated.add(options);
  return options;
}

/** ceil(fraction × total), immune to float noise such as 0.1 × 30 = 3.0000000000000004. */
export function ceilShare(fraction: number, total: number): number {
  return Math.ceil(fraction * total - 1e-9);
}

/** floor(fraction × total), immune to float noise such as 0.7 × 10 = 6.999999999999999. */
export function floorShare(fraction: number, total: number): number {
  return Math.floor(fraction * total + 1e-9);
}
