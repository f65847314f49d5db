/**
 * Absolute deadline (same clock as `now`) of a request:
 *   now + max(0, min(requestDeadlineMs ?? defaultMs, maxMs))
 * A request without `deadline_ms` (undefined or NaN) gets the server default; every budget, the default
 * included, is capped at `maxMs` (Infinity = no cap); a negative budget counts as 0 (already due).
 */
export function resolveDeadline(
  requestDeadlineMs: number | undefined,
  defaultMs: number,
  maxMs: number,
  now: number,
): number {
  const budget =
    requestDeadlineMs === undefined || Number.isNaN(requestDeadlineMs) ? defaultMs : requestDeadlineMs;
  const capped = Math.min(budget, maxMs);
  return now + Math.max(capped, 0);
}

/** A deadline is reached when `now >= deadlineAt` (exactly at the deadline counts as past it). */
export function isPastDeadline(deadlineAt: number, now: number): boolean {
  return now >= deadlineAt;
}

/** Milliseconds left before the deadline, never negative. */
export function remainingMs(deadlineAt: number, now: number): number {
  const left = deadlineAt - now;
  return Math.max(left, 0);
}
