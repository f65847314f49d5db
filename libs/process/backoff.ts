/**
 * Restart backoff for a supervised child process: the server's supervisor restarts its nodes with it, the
 * pipeline's supervisor (apps/pipeline/supervise.ts) its child. Pure: the caller measures how long the child
 * served.
 */
/** A child that served this long before it crashed starts a new crash streak: its restart waits the least. */
export const STABLE_RUN_MS = 60_000;

/** Backoff before restarting a child (a node, the pipeline) that crashed `streak` times in a row: 250 ms, doubling, at most 10 s. */
export function restartDelayMs(streak: number): number {
  return Math.min(10_000, 250 * 2 ** Math.min(Math.max(0, streak), 6));
}

/**
 * The crash streak after a crash: one more, unless the child had served for a stable run since it was last
 * ready — then this crash starts a new streak (a crash a week does not wait 10 s forever).
 */
export function nextCrashStreak(streak: number, servedMs: number | undefined): number {
  return servedMs !== undefined && servedMs >= STABLE_RUN_MS ? 1 : streak + 1;
}
