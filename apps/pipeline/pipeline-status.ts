/**
 * What an instance reports: its status (/api/pipeline, /health) from its partitions', and each second the
 * instance-wide gauges summed over the partitions it works.
 */
import type { NatsAuth, NatsAuthMode } from '../../libs/nats-auth';
import type { PipelineConfig } from './config';
import type { NatsHandle } from './connection';
import type { FailedPartitionStatus } from './failed-partitions';
import { assessHealth } from './health';
import type { ModelPin } from './inference/inference';
import type { SideOutputSpool } from './io/spool';
import type { PipelineMetrics } from './metrics';
import type { Partition } from './partition';
import type { PipelineCounts } from './partition-context';
import type { PartitionStatus } from './partition-status';

export interface PipelineStatus {
  state: 'starting' | 'running' | 'draining' | 'stopped' | 'failed';
  /** Running with a live consumer (false while it is being reopened). */
  consuming: boolean;
  /** Paused by the operator: consuming, but starting no message. */
  paused: boolean;
  epoch: number;
  model: string;
  version: string;
  mode: string;
  watermark: string | null;
  consumer: { pending: number; ack_pending: number; unprocessed: number; oldest_unprocessed_age_s: number };
  freshness: { p50_ms: number; p95_ms: number; p99_ms: number };
  stale: boolean;
  /** Why stale (empty when not): which SLO is past, by how much. */
  stale_reasons: string[];
  /** Why not consuming (empty when consuming): /health answers 503 with these. */
  not_consuming: string[];
  /** Consuming, but something to see to (side outputs spooled or held): /health still answers 200. */
  degraded: string[];
  /** The side-output spool (absent when spool.enabled is false). */
  spool?: {
    records: number;
    bytes: number;
    max_bytes: number;
    full: boolean;
    oldest_age_s: number;
    last_error: string | null;
  };
  /** Side outputs the broker refuses that hold their partition (spool full or disabled). */
  side_outputs_held: number;
  counts: Record<string, number>;
  /** Checkpoint mode: the oldest of the owned partitions' last checkpoints, and the acks waiting (all). */
  checkpoint?: { last_id: number | null; position: number | null; age_s: number | null; held_acks: number };
  state_keys: number;
  state_bytes: number;
  /** This instance among the pipeline's: its id, the live ones, the partitions it works. */
  instance: { id: string; live: string[]; partitions_total: number; owned: number[] };
  partitions: PartitionStatus[];
  /** Partitions whose lease this instance holds but whose checkpoint does not read (recover them). */
  partitions_failed: FailedPartitionStatus[];
  /** Where it connects and how (never a secret: userinfo in the URLs redacted). */
  nats: { servers: string; auth: NatsAuthMode; tls: boolean };
  error?: string;
}

/** What an instance's status is made of. */
export interface StatusInput {
  state: PipelineStatus['state'];
  paused: boolean;
  epoch: number;
  pin: ModelPin;
  mode: string;
  counts: PipelineCounts;
  config: PipelineConfig;
  natsAuth: NatsAuth;
  error: string | undefined;
  clock: () => number;
  instanceId: string;
  liveInstances: string[];
  owned: number[];
  partitions: Iterable<Partition>;
  failed: FailedPartitionStatus[];
  spool: SideOutputSpool | undefined;
  /** The instance's connections (the checkpoints' own too, when it has one). */
  connections: (NatsHandle | undefined)[];
}

/** `read` is called once the freshness quantiles are in: the rest is as of then. */
export async function pipelineStatus(
  metrics: PipelineMetrics,
  read: () => StatusInput,
): Promise<PipelineStatus> {
  const q = await metrics.latency.freshnessQuantiles();
  const recentP95 = await metrics.latency.freshnessNowP95();
  const i = read();
  const partitions = [...i.partitions].map((w) => w.status()).sort((a, b) => a.partition - b.partition);
  const p95Ms = q.p95 * 1000;
  const pending = partitions.reduce((n, p) => n + p.pending, 0);
  const failed = i.failed;
  const spool = i.spool?.stats();
  const held = [...i.partitions].reduce((n, w) => n + w.sideOutputsHeld, 0);
  const downs = i.connections
    .map((n) => n?.disconnectedSince() ?? null)
    .filter((d): d is number => d !== null);
  const health = assessHealth({
    state: i.state,
    now: i.clock(),
    natsDownSince: downs.length === 0 ? null : Math.min(...downs),
    partitionsTotal: i.config.partitions,
    liveInstances: i.liveInstances.length,
    partitions,
    failed,
    recentFreshnessP95Ms: recentP95 * 1000,
    slo: i.config.slo,
    spool: spool ?? null,
    sideOutputsHeld: held,
  });
  const gauges = [...i.partitions].map((w) => w.gauges());
  const watermarks = partitions.map((p) => p.watermark).filter((w): w is string => w !== null);
  const checkpoints = partitions.map((p) => p.checkpoint).filter((c) => c !== undefined);
  // The oldest owned checkpoint is what a crash would replay from.
  const oldest = checkpoints.reduce<(typeof checkpoints)[number] | undefined>(
    (a, c) =>
      a === undefined || (c.age_s ?? Number.POSITIVE_INFINITY) > (a.age_s ?? Number.POSITIVE_INFINITY)
        ? c
        : a,
    undefined,
  );
  return {
    state: i.state,
    consuming: health.consuming,
    paused: i.paused,
    epoch: i.epoch,
    model: i.pin.model,
    version: i.pin.version,
    mode: i.mode,
    watermark: watermarks.length === 0 ? null : watermarks.sort()[0]!,
    consumer: {
      pending,
      ack_pending: partitions.reduce((n, p) => n + p.ack_pending, 0),
      unprocessed: partitions.reduce((n, p) => n + p.unprocessed, 0),
      oldest_unprocessed_age_s: gauges.reduce((n, g) => Math.max(n, g.oldestAgeS), 0),
    },
    freshness: { p50_ms: q.p50 * 1000, p95_ms: p95Ms, p99_ms: q.p99 * 1000 },
    stale: health.stale,
    stale_reasons: health.stale_reasons,
    not_consuming: health.not_consuming,
    degraded: health.degraded,
    ...(spool
      ? {
          spool: {
            records: spool.records,
            bytes: spool.bytes,
            max_bytes: spool.maxBytes,
            full: spool.full,
            oldest_age_s: spool.oldestAt === null ? 0 : Math.max(0, i.clock() - spool.oldestAt) / 1000,
            last_error: spool.lastError,
          },
        }
      : {}),
    side_outputs_held: held,
    counts: { ...i.counts },
    ...(i.config.checkpoint.enabled
      ? {
          checkpoint: {
            last_id: oldest?.last_id ?? null,
            position: checkpoints.some((c) => c.position === null) ? null : (oldest?.position ?? null),
            age_s: oldest?.age_s ?? null,
            held_acks: checkpoints.reduce((n, c) => n + c.held_acks, 0),
          },
        }
      : {}),
    state_keys: partitions.reduce((n, p) => n + p.state_keys, 0),
    state_bytes: partitions.reduce((n, p) => n + p.state_bytes, 0),
    instance: {
      id: i.instanceId,
      live: i.liveInstances,
      partitions_total: i.config.partitions,
      owned: i.owned,
    },
    partitions,
    partitions_failed: failed,
    nats: { servers: i.natsAuth.shown, auth: i.natsAuth.mode, tls: i.natsAuth.tls !== undefined },
    ...(i.error ? { error: i.error } : {}),
  };
}

/** Instance-wide gauges from the partitions' own (up and stale are /health's, set by the caller). */
export function setInstanceGauges(i: {
  metrics: PipelineMetrics;
  clock: () => number;
  partitions: Iterable<Partition>;
  owned: number;
  spool: SideOutputSpool | undefined;
  liveInstances: number;
}): void {
  const now = i.clock();
  let pending = 0;
  let ackPending = 0;
  let oldest = 0;
  let watermark: number | null = null;
  let highest: number | null = null;
  let checkpointAt: number | null = null;
  let keys = 0;
  let bytes = 0;
  let inFlight = 0;
  let unprocessed = 0;
  for (const w of i.partitions) {
    const g = w.gauges();
    pending += g.pending;
    ackPending += g.ackPending;
    oldest = Math.max(oldest, g.oldestAgeS);
    if (g.watermark !== null) {
      watermark = watermark === null ? g.watermark : Math.min(watermark, g.watermark);
      highest = highest === null ? g.watermark : Math.max(highest, g.watermark);
    }
    if (g.checkpointAt !== null)
      checkpointAt = checkpointAt === null ? g.checkpointAt : Math.min(checkpointAt, g.checkpointAt);
    const s = w.status();
    keys += s.state_keys;
    bytes += s.state_bytes;
    inFlight += w.inFlight;
    unprocessed += s.unprocessed;
  }
  const m = i.metrics;
  m.consumer.pending.set(pending);
  m.consumer.ackPending.set(ackPending);
  m.consumer.oldestUnprocessedAge.set(oldest);
  m.eventTime.stateKeys.set(keys);
  m.eventTime.stateBytes.set(bytes);
  m.consumer.inflight.set(inFlight);
  m.consumer.unprocessed.set(unprocessed);
  const spool = i.spool?.stats();
  if (spool) {
    m.outputs.spoolRecords.set(spool.records);
    m.outputs.spoolBytes.set(spool.bytes);
    m.outputs.spoolFull.set(spool.full ? 1 : 0);
    m.outputs.spoolOldestAge.set(spool.oldestAt === null ? 0 : Math.max(0, now - spool.oldestAt) / 1000);
  }
  if (watermark !== null) m.eventTime.watermarkLag.set(Math.max(0, now - watermark) / 1000);
  if (highest !== null) m.eventTime.watermarkAhead.set((highest - now) / 1000);
  if (checkpointAt !== null) m.checkpoints.age.set(Math.max(0, now - checkpointAt) / 1000);
  m.partitions.ownedCount.set(i.owned);
  m.partitions.liveInstances.set(i.liveInstances);
}
