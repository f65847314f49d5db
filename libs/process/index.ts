/**
 * What every supervising process shares: the restart backoff (backoff.ts, pure). Admin auth, the other thing
 * the supervisor and the pipeline share, lives in libs/admin with the admin listener it guards.
 */
export { nextCrashStreak, restartDelayMs, STABLE_RUN_MS } from './backoff';
