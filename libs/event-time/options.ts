import { EngineOptionError } from './errors';
import type { EventTimeEngineOptions, LatestSpec, ResolvedEngineOptions, ResolvedWindowSpec } from './types';

/** More windows per event than this is almost certainly a unit mistake (ms vs s) and would cost per event. */
export const MAX_WINDOWS_PER_EVENT = 1000;

const KNOWN_OPTIONS = new Set([
  'outOfOrdernessMs',
  'allowedLatenessMs',
  'idleTimeoutMs',
  'stateTtlMs',
  'dedupeTtlMs',
  'windows',
  'latest',
  'onKeyChange',
]);
const KNOWN_WINDOW = new Set(['name', 'sizeMs', 'stepMs', 'accepts', 'result']);
const KNOWN_LATEST = new Set(['name', 'accepts']);

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === undefined || value === null) {
    return String(value);
  }
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function fail(option: string, expected: string, value: unknown): never {
  throw new EngineOptionError(
    option,
    `invalid stream option ${option}: expected ${expected}, got ${describe(value)}`,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function rejectUnknown(path: string, record: Record<string, unknown>, known: Set<string>): void {
  for (const name of Object.keys(record)) {
    if (!known.has(name)) fail(path ? `${path}.${name}` : name, 'no such option', record[name]);
  }
}

function integer(option: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    fail(option, `an integer >= ${min}`, value);
  }
  return value;
}

function name(option: string, value: unknown, seen: Set<string>): string {
  if (typeof value !== 'string' || value.length === 0) fail(option, 'a non-empty string', value);
  if (seen.has(value)) fail(option, 'a unique name', value);
  seen.add(value);
  return value;
}

function optionalFunction(option: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') fail(option, 'a function', value);
}

/**
 * Checks everything up front and returns a frozen copy with window steps filled in. The TTLs must cover the
 * longest window plus allowed lateness, so that neither key cleanup nor a forgotten event id can ever let an
 * event change a window that is still open.
 */
export function validateEngineOptions<P, R>(
  input: EventTimeEngineOptions<P, R>,
): ResolvedEngineOptions<P, R> {
  if (!isRecord(input)) fail('options', 'an object', input);
  const raw = input as unknown as Record<string, unknown>;
  rejectUnknown('', raw, KNOWN_OPTIONS);
  const outOfOrdernessMs = integer('outOfOrdernessMs', raw.outOfOrdernessMs, 0);
  const allowedLatenessMs = integer('allowedLatenessMs', raw.allowedLatenessMs, 0);
  const idleTimeoutMs = integer('idleTimeoutMs', raw.idleTimeoutMs, 1);
  const stateTtlMs = integer('stateTtlMs', raw.stateTtlMs, 1);
  const dedupeTtlMs = integer('dedupeTtlMs', raw.dedupeTtlMs, 0);
  optionalFunction('onKeyChange', raw.onKeyChange);

  if (!Array.isArray(raw.windows)) fail('windows', 'an array', raw.windows);
  const names = new Set<string>();
  const windows: ResolvedWindowSpec<P, R>[] = raw.windows.map((spec: unknown, i: number) => {
    const path = `windows[${i}]`;
    if (!isRecord(spec)) fail(path, 'an object', spec);
    rejectUnknown(path, spec, KNOWN_WINDOW);
    const windowName = name(`${path}.name`, spec.name, names);
    const sizeMs = integer(`${path}.sizeMs`, spec.sizeMs, 1);
    const stepMs = spec.stepMs === undefined ? sizeMs : integer(`${path}.stepMs`, spec.stepMs, 1);
    if (stepMs > sizeMs) fail(`${path}.stepMs`, `at most sizeMs (${sizeMs}); gaps between windows`, stepMs);
    if (Math.ceil(sizeMs / stepMs) > MAX_WINDOWS_PER_EVENT) {
      fail(`${path}.stepMs`, `at least sizeMs / ${MAX_WINDOWS_PER_EVENT}`, stepMs);
    }
    optionalFunction(`${path}.accepts`, spec.accepts);
    if (typeof spec.result !== 'function') fail(`${path}.result`, 'a function', spec.result);
    return Object.freeze({
      ...(spec as unknown as ResolvedWindowSpec<P, R>),
      name: windowName,
      sizeMs,
      stepMs,
    });
  });

  const rawLatest = raw.latest ?? [];
  if (!Array.isArray(rawLatest)) fail('latest', 'an array', rawLatest);
  const latestNames = new Set<string>();
  const latest: LatestSpec<P>[] = rawLatest.map((spec: unknown, i: number) => {
    const path = `latest[${i}]`;
    if (!isRecord(spec)) fail(path, 'an object', spec);
    rejectUnknown(path, spec, KNOWN_LATEST);
    const latestName = name(`${path}.name`, spec.name, latestNames);
    optionalFunction(`${path}.accepts`, spec.accepts);
    return Object.freeze({ ...(spec as unknown as LatestSpec<P>), name: latestName });
  });

  const longest = windows.reduce((max, w) => Math.max(max, w.sizeMs), 1);
  const cover = longest + allowedLatenessMs;
  if (stateTtlMs < cover) {
    fail('stateTtlMs', `>= longest window + allowedLatenessMs (${cover})`, stateTtlMs);
  }
  if (dedupeTtlMs < cover) {
    fail('dedupeTtlMs', `>= longest window + allowedLatenessMs (${cover})`, dedupeTtlMs);
  }

  return Object.freeze({
    outOfOrdernessMs,
    allowedLatenessMs,
    idleTimeoutMs,
    stateTtlMs,
    dedupeTtlMs,
    windows: Object.freeze(windows),
    latest: Object.freeze(latest),
    ...(raw.onKeyChange === undefined ? {} : { onKeyChange: raw.onKeyChange as (key: string) => void }),
  });
}
