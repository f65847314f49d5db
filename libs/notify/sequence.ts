/**
 * Which notify message each lifecycle event sends, given where the service is. systemd reads READY=1 while
 * reloading as "reload finished", so READY=1 must follow only the start or a RELOADING=1; a reload that runs
 * while the host is still starting (or already stopping) says nothing.
 */
import type { NotifyFields } from './protocol';

export type NotifyPhase = 'starting' | 'ready' | 'reloading' | 'stopping';

/** Phases in which systemd's start, reload or stop timeout runs: EXTEND_TIMEOUT_USEC applies to them. */
const TIMED_PHASES: readonly NotifyPhase[] = ['starting', 'reloading', 'stopping'];

export class NotifySequence {
  private current: NotifyPhase = 'starting';

  get phase(): NotifyPhase {
    return this.current;
  }

  /** Every node is ready for the first time. */
  started(): NotifyFields | undefined {
    if (this.current !== 'starting') return undefined;
    this.current = 'ready';
    return [['READY', 1]];
  }

  /** A reload begins; `monotonicUsec` is CLOCK_MONOTONIC now (systemd ≥ 253 orders reloads by it). */
  reloading(monotonicUsec: bigint): NotifyFields | undefined {
    if (this.current !== 'ready') return undefined;
    this.current = 'reloading';
    return [
      ['RELOADING', 1],
      ['MONOTONIC_USEC', monotonicUsec],
    ];
  }

  /** The reload's barrier completed or aborted: either way the host serves again. */
  reloaded(): NotifyFields | undefined {
    if (this.current !== 'reloading') return undefined;
    this.current = 'ready';
    return [['READY', 1]];
  }

  /** SIGTERM: draining. Sent once. */
  stopping(): NotifyFields | undefined {
    if (this.current === 'stopping') return undefined;
    this.current = 'stopping';
    return [['STOPPING', 1]];
  }

  /** A long start (model loads), reload or drain is under way: systemd's timeout for it may be extended. */
  get timed(): boolean {
    return TIMED_PHASES.includes(this.current);
  }
}
