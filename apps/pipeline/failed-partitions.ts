/**
 * Partitions this instance holds the lease of but cannot work: their checkpoint does not read
 * (checkpoint_invalid). Giving the lease back would only hand the same checkpoint to the next taker, at
 * once and for ever (a hot loop of ~150 error lines a second was seen), so the lease is kept, the partition
 * is reported `failed` (/health 503, streaminfer_stream_partition_failed), and its start is tried again
 * with a backoff doubling from 1 s up to 60 s — one log line per attempt — until an operator recovers it
 * (POST /api/partitions/<k>/recover, `streaminfer pipeline recover`).
 */
import type { Logger } from 'pino';
import type { PartitionMetrics } from './metrics';

export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 60_000;

export interface FailedPartitionStatus {
  partition: number;
  state: 'failed';
  reason: string;
  since: string;
  attempts: number;
  /** Seconds until the next try; null while one runs. */
  next_attempt_s: number | null;
}

interface Entry {
  reason: string;
  since: number;
  attempts: number;
  nextAt: number | null;
  timer: NodeJS.Timeout | undefined;
}

/** The delay before attempt n + 1 (n >= 1 failed so far): 1 s, 2 s, 4 s … 60 s. */
export function retryDelayMs(failures: number): number {
  return Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.max(0, failures - 1));
}

export class FailedPartitions {
  private readonly entries = new Map<number, Entry>();

  constructor(
    private readonly metrics: PartitionMetrics,
    private readonly logger: Logger,
    private readonly clock: () => number,
    /** Tries the partition's start again (it calls fail() or clear() with the result). */
    private readonly retry: (partition: number) => void,
  ) {}

  /** The start failed (again): record it, report it, schedule the next try. */
  fail(partition: number, reason: string): void {
    const now = this.clock();
    const before = this.entries.get(partition);
    if (before?.timer) clearTimeout(before.timer);
    const attempts = (before?.attempts ?? 0) + 1;
    const delay = retryDelayMs(attempts);
    const entry: Entry = {
      reason,
      since: before?.since ?? now,
      attempts,
      nextAt: now + delay,
      timer: undefined,
    };
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      entry.nextAt = null;
      this.retry(partition);
    }, delay);
    entry.timer.unref();
    this.entries.set(partition, entry);
    this.metrics.failed.set({ partition: String(partition) }, 1);
    this.logger.error(
      { partition, attempts, retryInMs: delay, err: reason },
      'partition failed: its checkpoint does not read (lease kept; recover it: streaminfer pipeline recover)',
    );
  }

  /** Working again, or no longer this instance's. */
  clear(partition: number): void {
    const entry = this.entries.get(partition);
    if (!entry) return;
    if (entry.timer) clearTimeout(entry.timer);
    this.entries.delete(partition);
    this.metrics.failed.remove({ partition: String(partition) });
  }

  has(partition: number): boolean {
    return this.entries.has(partition);
  }

  /** An operator's recovery tries at once: no retry timer may race it. */
  hold(partition: number): void {
    const entry = this.entries.get(partition);
    if (entry?.timer) clearTimeout(entry.timer);
    if (entry) {
      entry.timer = undefined;
      entry.nextAt = null;
    }
  }

  clearAll(): void {
    for (const partition of [...this.entries.keys()]) this.clear(partition);
  }

  list(): FailedPartitionStatus[] {
    const now = this.clock();
    return [...this.entries.entries()]
      .sort(([a], [b]) => a - b)
      .map(([partition, e]) => ({
        partition,
        state: 'failed' as const,
        reason: e.reason,
        since: new Date(e.since).toISOString(),
        attempts: e.attempts,
        next_attempt_s: e.nextAt === null ? null : Math.max(0, e.nextAt - now) / 1000,
      }));
  }
}

export type RecoverFrom = 'previous' | 'ack-floor';

export interface RecoverOutcome {
  partition: number;
  from: RecoverFrom;
  /** The KV key the bad pointer was kept under (null: there was none). */
  quarantined: string | null;
  /** The restore point now. */
  restored: { id: number; position: number; object: string };
  /** After the restart: running, or failed again (error says why). */
  state: 'running' | 'failed';
  error?: string;
}
