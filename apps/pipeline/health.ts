/**
 * What `/health` says, as a pure function of what the pipeline sees (no I/O, the clock passed in):
 *
 * - consuming: running, connected to NATS, every owned partition with a live consumer, none failed, and —
 *   when this instance sees itself alone — every partition owned. Else 503, with `not_consuming` saying why.
 * - stale: running but behind its SLO (deploy/pipeline.json "slo"): the freshness p95 of the predictions
 *   published over the last few seconds, or the age of the oldest event not processed yet (which keeps
 *   ageing while nothing is published: a stalled pipeline publishes no freshness at all), over
 *   slo.freshnessP95Ms; or more events unprocessed — at the broker, or fetched and not done — than
 *   slo.lagMessages. Both are read now, so `stale` clears as soon as the pipeline has caught up.
 * - degraded: consuming, with something for an operator (still 200): side outputs the broker refuses, waiting
 *   in the local spool (they hold nothing), a spool that is full, or side outputs holding their partition.
 */
import type { SpoolStats } from './io/spool';

export interface HealthInput {
  state: 'starting' | 'running' | 'draining' | 'stopped' | 'failed';
  now: number;
  /** Since when (ms) a NATS connection of the pipeline is down; null while both are up. */
  natsDownSince: number | null;
  partitionsTotal: number;
  /** Instances heartbeating, this one included. */
  liveInstances: number;
  partitions: ReadonlyArray<{
    partition: number;
    consuming: boolean;
    unprocessed: number;
    oldest_unprocessed_age_s: number;
  }>;
  failed: ReadonlyArray<{ partition: number; reason: string }>;
  /** Freshness p95 (ms) of the predictions published in the short window; NaN when none was. */
  recentFreshnessP95Ms: number;
  slo: { freshnessP95Ms: number; lagMessages: number };
  /** The side-output spool; null when disabled. */
  spool: SpoolStats | null;
  /** Side outputs the broker refuses that are retried in place, holding their partition. */
  sideOutputsHeld: number;
}

export interface HealthVerdict {
  consuming: boolean;
  /** Why not consuming (empty when consuming). */
  not_consuming: string[];
  stale: boolean;
  /** Why stale (empty when not). */
  stale_reasons: string[];
  /** What is degraded without stopping consumption (empty when nothing). */
  degraded: string[];
}

export function assessHealth(input: HealthInput): HealthVerdict {
  const not: string[] = [];
  if (input.state !== 'running') not.push(`pipeline is ${input.state}`);
  if (input.natsDownSince !== null)
    not.push(
      `NATS connection down for ${((input.now - input.natsDownSince) / 1000).toFixed(1)} s (reconnecting)`,
    );
  for (const f of input.failed) not.push(`partition ${f.partition} failed: ${f.reason}`);
  const idle = input.partitions.filter((p) => !p.consuming).map((p) => p.partition);
  if (idle.length > 0)
    not.push(`no live consumer on partition${idle.length > 1 ? 's' : ''} ${idle.join(', ')}`);
  if (input.state === 'running' && input.liveInstances <= 1) {
    const worked = new Set([
      ...input.partitions.map((p) => p.partition),
      ...input.failed.map((f) => f.partition),
    ]);
    const unowned: number[] = [];
    for (let k = 0; k < input.partitionsTotal; k++) if (!worked.has(k)) unowned.push(k);
    if (unowned.length > 0)
      not.push(
        `partition${unowned.length > 1 ? 's' : ''} ${unowned.join(', ')} not owned (this instance is the only live one)`,
      );
  }

  const stale: string[] = [];
  const { slo } = input;
  if (Number.isFinite(input.recentFreshnessP95Ms) && input.recentFreshnessP95Ms > slo.freshnessP95Ms)
    stale.push(`freshness p95 ${Math.round(input.recentFreshnessP95Ms)} ms > ${slo.freshnessP95Ms} ms`);
  const oldestS = input.partitions.reduce((n, p) => Math.max(n, p.oldest_unprocessed_age_s), 0);
  if (oldestS * 1000 > slo.freshnessP95Ms)
    stale.push(`oldest unprocessed event ${oldestS.toFixed(1)} s old > ${slo.freshnessP95Ms} ms`);
  const unprocessed = input.partitions.reduce((n, p) => n + p.unprocessed, 0);
  if (unprocessed > slo.lagMessages)
    stale.push(`${unprocessed} events unprocessed > ${slo.lagMessages} (slo.lagMessages)`);
  const degraded: string[] = [];
  const spool = input.spool;
  if (spool && spool.records > 0) {
    const age = spool.oldestAt === null ? 0 : Math.max(0, input.now - spool.oldestAt) / 1000;
    degraded.push(
      `${spool.records} side output${spool.records > 1 ? 's' : ''} (${spool.bytes} bytes, oldest ${age.toFixed(0)} s) ` +
        'in the local spool: the broker refuses them' +
        (spool.lastError ? ` (${spool.lastError})` : '') +
        '; published with their Msg-Ids once it takes them',
    );
  }
  if (spool?.full)
    degraded.push(
      `side-output spool full (${spool.bytes} of ${spool.maxBytes} bytes): further ones hold their partitions`,
    );
  if (input.sideOutputsHeld > 0)
    degraded.push(
      `${input.sideOutputsHeld} side output${input.sideOutputsHeld > 1 ? 's' : ''} not stored, holding ` +
        `${input.sideOutputsHeld > 1 ? 'their partitions' : 'its partition'} (retried with backoff)`,
    );
  return {
    consuming: not.length === 0,
    not_consuming: not,
    stale: stale.length > 0,
    stale_reasons: stale,
    degraded,
  };
}
