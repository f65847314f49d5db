/**
 * One instance of the delivery pipeline: JetStream source → DeliveryDecider → inference with the epoch's
 * pinned model version → predictions, alerts, late side output and dead letters (Msg-Id = decision id) → ack.
 * Events are partitioned by key (`<events>.<partition>.<delivery_id>`); the instance works the partitions it
 * holds a lease on (apps/pipeline/leases/leases.ts, kept on a thread of its own by lease-keeper.ts), each a PartitionWorker with its own consumer, state and
 * checkpoints, and hands them over when instances come and go. What is shared here: the NATS connection, the
 * sink, the inference backend, the epoch (the pinned version, recorded in the epoch log that every instance
 * follows) and the admin view.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { NatsAuth, NatsAuthMode } from '../../libs/nats-auth';
import { type PipelineConfig, spoolDir } from './config';
import { connectNats, type NatsHandle, pipelineNatsAuth } from './connection';
import { StreamIoError } from './errors';
import {
  type FailedPartitionStatus,
  FailedPartitions,
  type RecoverFrom,
  type RecoverOutcome,
  RecoverRefused,
} from './failed-partitions';
import { assessHealth } from './health';
import type { InferenceBackend, ModelPin } from './inference/inference';
import { type UnservedPinCode, unservedPinCode } from './inference/pin-errors';
import { CHECKPOINT_VERSION, type Checkpoint, CheckpointStore } from './io/checkpoints';
import { EpochLog, type EpochRecord } from './io/epochs';
import { brokerPlacesEvents, inputStreamSpec } from './io/input-stream';
import { type StreamLayout, streamLayout } from './io/layout';
import { provisionStreams } from './io/provision';
import { JetStreamSink } from './io/sink';
import { SideOutputSpool } from './io/spool';
import { LeaseKeeper } from './leases/lease-keeper';
import type { ReleaseReason } from './leases/leases';
import type { PipelineMetrics } from './metrics';
import {
  type PartitionContext,
  type PartitionStatus,
  PartitionWorker,
  type PipelineCounts,
} from './partition';

export type { EpochRecord } from './io/epochs';
export { RetryableError } from './partition';

export interface ReloadOutcome {
  id: number;
  result: 'committed' | 'unchanged' | 'failed';
  strategy: 'atomic';
  epoch_before: number;
  epoch: number;
  changes: Array<{ model: string; from: string | null; to: string | null }>;
  /** Messages the barrier waited for (in flight when it closed). */
  drained: number;
  duration_ms: number;
  error?: string;
  /** Failed because the requested model or version does not exist (the admin API answers 404). */
  code?: UnservedPinCode;
}

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

export interface PipelineDeps {
  config: PipelineConfig;
  /** The NATS settings loaded; default: loaded (files read) from config.nats and the environment. */
  nats?: NatsAuth;
  backend: InferenceBackend;
  metrics: PipelineMetrics;
  logger: Logger;
  clock?: () => number;
  /** Called whenever an epoch starts (at start, at each committed reload, when following another's). */
  onEpoch?: (pin: ModelPin, epoch: number) => void;
  /**
   * The config's model pin was given by the operator on the command line (`streaminfer stream --version`):
   * it wins over the epoch log at start, recorded as a transition. Otherwise the log wins.
   */
  pinFromOperator?: boolean;
  /**
   * The pipeline failed while running (its lease thread died: every partition was dropped as lost) and must
   * be restarted; the process exits non-zero and its supervisor restarts it.
   */
  onFatal?: (err: Error) => void;
}

/** How often an instance reads the epoch log for a transition another instance recorded. */
const EPOCH_POLL_MS = 2000;

export class DeliveryPipeline {
  readonly layout: StreamLayout;
  readonly instanceId: string;
  private readonly config: PipelineConfig;
  private readonly backend: InferenceBackend;
  private readonly metrics: PipelineMetrics;
  private readonly logger: Logger;
  private readonly clock: () => number;
  private readonly onEpoch: ((pin: ModelPin, epoch: number) => void) | undefined;
  private readonly onFatal: ((err: Error) => void) | undefined;
  private readonly pinFromOperator: boolean;
  /** Servers, identity and TLS of every connection (the lease thread's too); files read at construction. */
  private readonly natsAuth: NatsAuth;
  private nats: NatsHandle | undefined;
  private checkpointNats: NatsHandle | undefined;
  private spool: SideOutputSpool | undefined;
  private epochs: EpochLog | undefined;
  private leases: LeaseKeeper | undefined;
  private ctx: PartitionContext | undefined;
  private readonly workers = new Map<number, PartitionWorker>();
  private readonly failed: FailedPartitions;
  /** Partitions being taken or given up (a status or a barrier waits for neither). */
  private readonly moving = new Map<number, Promise<void>>();
  private pin: ModelPin;
  private epoch = 0;
  private state: PipelineStatus['state'] = 'starting';
  /** Paused by the operator (POST /api/pause); a barrier resumes only what it paused. */
  private paused = false;
  private error: string | undefined;
  private timers: NodeJS.Timeout[] = [];
  private reloadChain: Promise<unknown> = Promise.resolve();
  private reloads = 0;
  private lastReload: ReloadOutcome | undefined;
  private readonly counts: PipelineCounts = {
    received: 0,
    redelivered: 0,
    predictions: 0,
    revisions: 0,
    alerts: 0,
    invalid: 0,
    duplicates: 0,
    late: 0,
    dead_letters: 0,
  };

  constructor(deps: PipelineDeps) {
    this.config = deps.config;
    this.natsAuth = deps.nats ?? pipelineNatsAuth(deps.config.nats);
    this.backend = deps.backend;
    this.metrics = deps.metrics;
    this.logger = deps.logger;
    this.clock = deps.clock ?? Date.now;
    this.onEpoch = deps.onEpoch;
    this.onFatal = deps.onFatal;
    this.pinFromOperator = deps.pinFromOperator ?? false;
    this.pin = { model: deps.config.model.name, version: deps.config.model.version };
    this.failed = new FailedPartitions(this.metrics, this.logger, this.clock, (partition) => {
      const token = this.leases?.heldToken(partition);
      if (this.state === 'running' && token !== undefined && !this.workers.has(partition))
        void this.track(partition, this.startWorker(partition, token)).catch(() => undefined);
    });
    this.instanceId = deps.config.instance.id || defaultInstanceId();
    this.layout = streamLayout({
      eventsStream: this.config.streams.events,
      predictionsStream: this.config.streams.predictions,
      sideStream: this.config.streams.side,
      subjectRoot: this.config.subjectRoot,
      duplicateWindowMs: this.config.streams.duplicateWindowMs,
    });
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  /** Partitions this instance works now. */
  ownedPartitions(): number[] {
    return [...this.workers.keys()].sort((a, b) => a - b);
  }

  async start(): Promise<void> {
    const auth = this.natsAuth;
    const onProblem = (message: string) => this.logger.error({ servers: auth.shown }, message);
    const replicas = this.config.replicas;
    const nats = await connectNats({
      auth,
      onProblem,
      replicas,
      name: `streaminfer-stream-${this.instanceId}`,
    });
    this.nats = nats;
    if (this.config.checkpoint.enabled)
      this.checkpointNats = await connectNats({
        auth,
        onProblem,
        replicas,
        name: `streaminfer-stream-${this.instanceId}-checkpoints`,
      });
    const places = brokerPlacesEvents(nats.nc.info?.version);
    const provisioned = await provisionStreams(
      nats.jsm,
      [
        inputStreamSpec(this.layout, this.config.partitions, places),
        this.layout.predictions,
        this.layout.side,
      ],
      replicas,
    );
    for (const change of provisioned.updated) this.logger.warn({ change }, 'input stream updated');
    if (!places)
      this.logger.warn(
        { server: nats.nc.info?.version, subject: `${this.layout.subjects.eventsPrefix}.<k>.<delivery_id>` },
        'this broker cannot place events (stream subject transforms need nats-server 2.10+): producers publish ' +
          'to the partition subject; a publish to <events>.<delivery_id> is refused',
      );
    if (this.config.spool.enabled) {
      const spool = await SideOutputSpool.open({
        dir: path.join(spoolDir(this.config), this.config.consumer.durable),
        maxBytes: this.config.spool.maxBytes,
        logger: this.logger,
        clock: this.clock,
        publish: async (r) => {
          await nats.js.publish(r.subject, r.data, { msgID: r.msgId, timeout: 5000 });
        },
        onReplayed: (r) => {
          if (r.kind === 'late') return;
          this.counts.dead_letters++;
          this.metrics.deadLetters.inc({ reason: r.kind });
        },
      });
      this.spool = spool;
    }
    const sink = new JetStreamSink(nats.js, {
      ...(this.spool ? { spool: this.spool } : {}),
      onPublishFailure: (effect, attempt, err) => {
        this.metrics.sinkFailures.inc();
        this.logger.warn({ subject: effect.subject, attempt, err: String(err) }, 'publish failed; retrying');
      },
      maxPayload: () => nats.nc.info?.max_payload,
      onFitted: (effect, bytes) => {
        this.metrics.truncatedSideOutputs.inc();
        this.logger.warn(
          { subject: effect.subject, msgId: effect.msgId, bytes, maxPayload: nats.nc.info?.max_payload },
          'side output over the broker max_payload: published with its payload truncated',
        );
      },
    });
    this.epochs = new EpochLog(nats.jsm, sink, this.layout, this.clock);
    const leases = await LeaseKeeper.open({
      auth,
      bucket: this.config.instance.leaseBucket,
      group: this.config.consumer.durable,
      instanceId: this.instanceId,
      partitions: this.config.partitions,
      ttlMs: this.config.instance.leaseTtlMs,
      maxStallMs: this.config.instance.maxStallMs,
      replicas,
      // A configured id (the supervisor passes its own across restarts) is this process's alone.
      reclaim: this.config.instance.id !== '',
      logger: this.logger,
    });
    this.leases = leases;
    leases.onFatal = (err) => this.fail(err);
    try {
      await this.resumeEpoch(await leases.peers());
      await this.backend.prepare(this.pin);
    } catch (err) {
      // The lease thread would keep the process up (and its heartbeat would count this instance live).
      await leases.stop();
      await this.spool?.close();
      throw err;
    }
    this.ctx = {
      config: this.config,
      layout: this.layout,
      nats,
      checkpointNats: this.checkpointNats ?? nats,
      sink,
      backend: this.backend,
      metrics: this.metrics,
      logger: this.logger,
      clock: this.clock,
      counts: this.counts,
      current: () => ({ pin: { ...this.pin }, epoch: this.epoch }),
      operatorPaused: () => this.paused,
      holds: (partition, token) => leases.holds(partition, token),
    };
    this.metrics.partitionsTotal.set(this.config.partitions);
    this.state = 'running';
    this.metrics.up.set(1);
    leases.onChange = () => {
      this.metrics.partitionsOwned.set(leases.owned().length);
      this.metrics.liveInstances.set(leases.liveInstances().length);
    };
    leases.start({
      acquire: (partition, token) => this.take(partition, token),
      release: (partition, reason, token) => this.giveUp(partition, reason, token),
    });
    this.timers.push(setInterval(() => this.tick(), 1000).unref());
    this.timers.push(setInterval(() => void this.followEpochLog(), EPOCH_POLL_MS).unref());
    this.spool?.start();
    this.logger.info(
      {
        instance: this.instanceId,
        partitions: this.config.partitions,
        epoch: this.epoch,
        model: this.pin.model,
        version: this.pin.version,
        mode: this.backend.mode,
      },
      'pipeline running',
    );
  }

  /** The lease thread died: its partitions were already dropped as lost; nothing more can be owned. */
  private fail(err: Error): void {
    if (this.state !== 'running' && this.state !== 'starting') return;
    this.state = 'failed';
    this.error = `lease thread died: ${err.message}`;
    this.metrics.up.set(0);
    this.logger.fatal({ err: err.message, instance: this.instanceId }, 'pipeline failed: lease thread died');
    this.onFatal?.(err);
  }

  /** Lease acquired: restore the partition (checkpoint mode) and work it. */
  private take(partition: number, token: number): Promise<void> {
    const run = (async () => {
      // A release of an earlier acquisition still stopping its worker finishes first.
      await this.moving.get(partition)?.catch(() => undefined);
      await this.startWorker(partition, token);
    })();
    return this.track(partition, run);
  }

  /**
   * A checkpoint that does not read keeps the lease and marks the partition failed (retried with a backoff,
   * recovered by the operator); any other failure gives the lease back.
   */
  private async startWorker(partition: number, token: number): Promise<void> {
    if (this.state !== 'running') throw new Error(`pipeline is ${this.state}`);
    const worker = new PartitionWorker(this.ctx!, partition, token);
    this.workers.set(partition, worker);
    try {
      await worker.start();
    } catch (err) {
      this.workers.delete(partition);
      await worker.stop('abandon').catch(() => undefined);
      if (err instanceof StreamIoError && err.code === 'checkpoint_invalid') {
        this.failed.fail(partition, err.message);
        return;
      }
      this.failed.clear(partition);
      this.logger.error({ partition, err: String(err) }, 'could not start the partition; lease given back');
      throw err;
    }
    if (this.failed.has(partition)) {
      this.failed.clear(partition);
      this.logger.info({ partition }, 'failed partition working again');
    }
    if (this.paused) await worker.pause();
    this.metrics.partitionMoves.inc({ direction: 'in', reason: 'acquired' });
  }

  /** Lease given up ('rebalance', 'stop': drained and checkpointed) or lost (stop at once, write nothing). */
  private giveUp(partition: number, reason: ReleaseReason, token: number): Promise<void> {
    const run = (async () => {
      await this.moving.get(partition)?.catch(() => undefined);
      this.failed.clear(partition);
      const worker = this.workers.get(partition);
      // Only the released acquisition's worker: a later acquisition's stays.
      if (!worker || worker.token !== token) return;
      this.workers.delete(partition);
      await worker.stop(reason === 'lost' ? 'abandon' : 'drain');
      this.metrics.partitionMoves.inc({ direction: 'out', reason });
      if (reason === 'lost') this.logger.warn({ partition }, 'partition lease lost; stopped working it');
    })();
    return this.track(partition, run);
  }

  private track(partition: number, run: Promise<void>): Promise<void> {
    const tracked = run.finally(() => {
      if (this.moving.get(partition) === tracked) this.moving.delete(partition);
    });
    this.moving.set(partition, tracked);
    return tracked;
  }

  /**
   * Operator pause: no new message is processed (what is in flight completes); the broker holds the rest
   * and keyed state stays. Resume picks up where it stopped, as a backlog.
   */
  async pause(): Promise<{ paused: boolean; drained: number }> {
    if (this.state !== 'running') return { paused: false, drained: 0 };
    const workers = [...this.workers.values()];
    const drained = workers.reduce((n, w) => n + w.inFlight, 0);
    this.paused = true;
    await Promise.all(workers.map((w) => w.pause()));
    return { paused: true, drained };
  }

  async resume(): Promise<{ resumed: boolean }> {
    if (!this.paused) return { resumed: false };
    // Never inside a barrier (a reload, a checkpoint): messages would start while it reads the state.
    await this.reloadChain;
    this.paused = false;
    await Promise.all([...this.workers.values()].map((w) => w.withBarrier(async () => w.resumeAlways())));
    return { resumed: true };
  }

  /** Stops every partition's consumer and opens it again (keyed state stays: redeliveries are duplicates). */
  async restartConsumer(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.restartConsumer()));
  }

  /**
   * The operator's way out for a failed partition (its checkpoint does not read): the bad pointer is kept
   * aside, the restore point becomes the previous checkpoint or an empty one at the broker's ack floor, and
   * the partition starts at once. Only on the instance holding the failed partition's lease.
   */
  async recoverPartition(partition: number, from: RecoverFrom): Promise<RecoverOutcome> {
    if (!Number.isInteger(partition) || partition < 0 || partition >= this.config.partitions)
      throw new RecoverRefused(
        404,
        'not_found',
        `no partition ${partition} (partitions 0-${this.config.partitions - 1})`,
      );
    if (!this.config.checkpoint.enabled)
      throw new RecoverRefused(
        409,
        'conflict',
        'checkpoints are off (checkpoint.enabled): nothing to recover',
      );
    await this.moving.get(partition)?.catch(() => undefined);
    const token = this.leases?.heldToken(partition);
    if (this.state !== 'running' || !this.failed.has(partition) || token === undefined)
      throw new RecoverRefused(
        409,
        'conflict',
        `partition ${partition} is ${this.workers.has(partition) ? 'running' : 'not failed on this instance'} ` +
          '(recover a failed partition on the instance that holds it: see partitions_failed in /health)',
      );
    this.failed.hold(partition);
    const run = (async (): Promise<RecoverOutcome> => {
      const nats = this.checkpointNats ?? this.nats!;
      const store = await CheckpointStore.open(
        nats.js,
        this.config.checkpoint.bucket,
        this.config.consumer.durable,
        `p${partition}`,
        nats.replicas,
      );
      const restored = await store.recover(from, () => this.emptyCheckpoint(partition));
      this.logger.warn(
        {
          partition,
          from,
          quarantined: restored.quarantined,
          checkpoint: restored.id,
          position: restored.position,
        },
        'failed partition recovered by the operator: restore point replaced',
      );
      await this.startWorker(partition, token);
      const again = this.failed.list().find((f) => f.partition === partition);
      return {
        partition,
        from,
        quarantined: restored.quarantined,
        restored: { id: restored.id, position: restored.position, object: restored.object },
        state: again ? 'failed' : 'running',
        ...(again ? { error: again.reason } : {}),
      };
    })();
    const settled = run.then(
      () => undefined,
      (err: unknown) => {
        // The recovery itself failed (e.g. no earlier checkpoint reads): still failed, retried as before.
        if (this.failed.has(partition)) this.failed.fail(partition, (err as Error).message);
      },
    );
    void this.track(partition, settled);
    return run;
  }

  /** An empty checkpoint at the partition consumer's ack floor, on the instance's epoch. */
  private async emptyCheckpoint(partition: number): Promise<Omit<Checkpoint, 'id' | 'createdAt'>> {
    const nats = this.nats!;
    const durable = `${this.config.consumer.durable}-p${partition}`;
    const info = await nats.jsm.consumers.info(this.layout.events.name, durable).catch(() => null);
    const [predictions, side] = await Promise.all(
      [this.layout.predictions.name, this.layout.side.name].map(
        async (stream) => (await nats.jsm.streams.info(stream)).state.last_seq,
      ),
    );
    return {
      version: CHECKPOINT_VERSION,
      position: info?.ack_floor.stream_seq ?? 0,
      outputs: { predictions: predictions ?? 0, side: side ?? 0 },
      pin: { ...this.pin },
      epoch: this.epoch,
      state: new PartitionWorker(this.ctx!, partition, 0).emptySnapshot(), // token 0: never started, never holds,
    };
  }

  /** Drains: gives every partition up (published, acked, checkpointed), closes the backend and the connection. */
  async stop(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'draining') return;
    this.state = 'draining';
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.failed.clearAll();
    await this.reloadChain;
    // Releases each partition through giveUp(…, 'stop') and deletes its lease: survivors take it at once.
    await this.leases
      ?.stop()
      .catch((err: unknown) => this.logger.warn({ err: String(err) }, 'lease release failed'));
    for (const [partition, worker] of this.workers) {
      this.workers.delete(partition);
      await worker.stop('drain').catch(() => undefined);
    }
    await this.backend.close().catch(() => undefined);
    await this.spool?.close().catch(() => undefined);
    await this.nats?.close().catch(() => undefined);
    await this.checkpointNats?.close().catch(() => undefined);
    this.metrics.up.set(0);
    this.state = 'stopped';
  }

  /**
   * The epoch barrier: prepare the new version, record the transition in the epoch log (every instance
   * follows it), then each partition closes its barrier (every message in flight published), checkpoints as
   * of the new epoch and switches. No partition mixes two versions in one epoch.
   */
  reload(request: { model?: string; version?: string }, reason: string): Promise<ReloadOutcome> {
    const run = this.reloadChain.then(() => this.reloadNow(request, reason));
    this.reloadChain = run.catch(() => undefined);
    return run;
  }

  lastReloadOutcome(): ReloadOutcome | undefined {
    return this.lastReload;
  }

  async status(): Promise<PipelineStatus> {
    const q = await this.metrics.freshnessQuantiles();
    const recentP95 = await this.metrics.freshnessNowP95();
    const partitions = [...this.workers.values()]
      .map((w) => w.status())
      .sort((a, b) => a.partition - b.partition);
    const p95Ms = q.p95 * 1000;
    const pending = partitions.reduce((n, p) => n + p.pending, 0);
    const failed = this.failed.list();
    const spool = this.spool?.stats();
    const held = [...this.workers.values()].reduce((n, w) => n + w.sideOutputsHeld, 0);
    const downs = [this.nats, this.checkpointNats]
      .map((n) => n?.disconnectedSince() ?? null)
      .filter((d): d is number => d !== null);
    const health = assessHealth({
      state: this.state,
      now: this.clock(),
      natsDownSince: downs.length === 0 ? null : Math.min(...downs),
      partitionsTotal: this.config.partitions,
      liveInstances: this.leases?.liveInstances().length ?? 0,
      partitions,
      failed,
      recentFreshnessP95Ms: recentP95 * 1000,
      slo: this.config.slo,
      spool: spool ?? null,
      sideOutputsHeld: held,
    });
    const gauges = [...this.workers.values()].map((w) => w.gauges());
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
      state: this.state,
      consuming: health.consuming,
      paused: this.paused,
      epoch: this.epoch,
      model: this.pin.model,
      version: this.pin.version,
      mode: this.backend.mode,
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
              oldest_age_s: spool.oldestAt === null ? 0 : Math.max(0, this.clock() - spool.oldestAt) / 1000,
              last_error: spool.lastError,
            },
          }
        : {}),
      side_outputs_held: held,
      counts: { ...this.counts },
      ...(this.config.checkpoint.enabled
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
        id: this.instanceId,
        live: this.leases?.liveInstances() ?? [],
        partitions_total: this.config.partitions,
        owned: this.ownedPartitions(),
      },
      partitions,
      partitions_failed: failed,
      nats: { servers: this.natsAuth.shown, auth: this.natsAuth.mode, tls: this.natsAuth.tls !== undefined },
      ...(this.error ? { error: this.error } : {}),
    };
  }

  /** Instance-wide gauges from the partitions' own. */
  private tick(): void {
    const now = this.clock();
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
    for (const w of this.workers.values()) {
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
      unprocessed += w.unprocessed;
    }
    const m = this.metrics;
    m.consumerPending.set(pending);
    m.consumerAckPending.set(ackPending);
    m.oldestUnprocessedAge.set(oldest);
    m.stateKeys.set(keys);
    m.stateBytes.set(bytes);
    m.inflight.set(inFlight);
    m.unprocessed.set(unprocessed);
    const spool = this.spool?.stats();
    if (spool) {
      m.spoolRecords.set(spool.records);
      m.spoolBytes.set(spool.bytes);
      m.spoolFull.set(spool.full ? 1 : 0);
      m.spoolOldestAge.set(spool.oldestAt === null ? 0 : Math.max(0, now - spool.oldestAt) / 1000);
    }
    // up and stale as /health says them (a broker down or a failed partition is not "up").
    void this.status().then(
      (s) => {
        m.up.set(s.consuming ? 1 : 0);
        m.stale.set(s.stale ? 1 : 0);
      },
      () => undefined,
    );
    if (watermark !== null) m.watermarkLag.set(Math.max(0, now - watermark) / 1000);
    if (highest !== null) m.watermarkAhead.set((highest - now) / 1000);
    if (checkpointAt !== null) m.checkpointAge.set(Math.max(0, now - checkpointAt) / 1000);
    m.partitionsOwned.set(this.workers.size);
    m.liveInstances.set(this.leases?.liveInstances().length ?? 0);
  }

  /**
   * At start the epoch log wins: the last recorded epoch continues, on its version, whatever the config
   * pins (a reload by API or SIGHUP is recorded there, and a restart or a routine deploy with the unchanged
   * config must not roll it back). Only an operator's `--version` on the command line (pinFromOperator)
   * moves it, as a transition recorded like a reload. With no log yet, the config's pin is epoch 1.
   */
  private async resumeEpoch(peers: string[]): Promise<void> {
    const last = await this.epochs!.last();
    const others = peers.filter((id) => id !== this.instanceId);
    const same = last !== null && last.model === this.pin.model && last.version === this.pin.version;
    if (last && same) {
      this.epoch = last.epoch;
    } else if (last && !this.pinFromOperator) {
      this.logger.warn(
        {
          config: this.pin,
          log: { epoch: last.epoch, model: last.model, version: last.version, reason: last.reason },
          instances: others,
        },
        'the config pins another version than the epoch log; following the log (reload, or start with --version, to change it)',
      );
      this.pin = { model: last.model, version: last.version };
      this.epoch = last.epoch;
    } else {
      const epoch = (last?.epoch ?? 0) + 1;
      await this.epochs!.record(epoch, this.pin, last, last ? 'start --version' : 'start');
      this.epoch = epoch;
      if (last)
        this.logger.warn(
          {
            epoch,
            from: { epoch: last.epoch, model: last.model, version: last.version },
            to: this.pin,
            instances: others,
          },
          'epoch transition at start: --version on the command line overrides the epoch log',
        );
    }
    this.metrics.setPin(this.pin.model, this.pin.version, this.epoch);
    this.onEpoch?.({ ...this.pin }, this.epoch);
  }

  /** Another instance recorded a transition: this one adopts it; its partitions switch at their barriers. */
  private followEpochLog(): Promise<void> {
    if (this.state !== 'running') return Promise.resolve();
    const run = this.reloadChain.then(async () => {
      const last = await this.epochs!.last();
      if (!last || this.state !== 'running') return;
      const same = last.model === this.pin.model && last.version === this.pin.version;
      if (last.epoch < this.epoch || (last.epoch === this.epoch && same)) return;
      const next = { model: last.model, version: last.version };
      try {
        await this.backend.prepare(next);
      } catch (err) {
        this.error = `cannot follow epoch ${last.epoch} (${next.model}@${next.version}): ${(err as Error).message}`;
        this.logger.error({ epoch: last.epoch, pin: next, err: String(err) }, 'cannot follow the epoch log');
        return;
      }
      this.error = undefined;
      this.adopt(next, last.epoch);
      this.logger.info({ epoch: last.epoch, pin: next, reason: last.reason }, 'following the epoch log');
      await this.switchPartitions();
    });
    this.reloadChain = run.catch(() => undefined);
    return run.catch((err: unknown) =>
      this.logger.warn({ err: String(err) }, 'reading the epoch log failed'),
    );
  }

  private adopt(pin: ModelPin, epoch: number): void {
    this.pin = { ...pin };
    this.epoch = epoch;
    this.metrics.setPin(pin.model, pin.version, epoch);
    this.onEpoch?.({ ...pin }, epoch);
  }

  /** Each partition's barrier to the instance's epoch; the partitions that could not, by number. */
  private async switchPartitions(): Promise<number[]> {
    const failed: number[] = [];
    await Promise.all(
      [...this.workers.values()].map(async (w) => {
        if (!(await w.catchUp())) failed.push(w.partition);
      }),
    );
    return failed.sort((a, b) => a - b);
  }

  private async reloadNow(
    request: { model?: string; version?: string },
    reason: string,
  ): Promise<ReloadOutcome> {
    const started = this.clock();
    const id = ++this.reloads;
    const before = { ...this.pin };
    const epochBefore = this.epoch;
    const next: ModelPin = {
      model: request.model ?? before.model,
      version: request.version ?? before.version,
    };
    const outcome = (
      result: ReloadOutcome['result'],
      drained: number,
      error?: string,
      code?: UnservedPinCode,
    ): ReloadOutcome => {
      const o: ReloadOutcome = {
        id,
        result,
        strategy: 'atomic',
        epoch_before: epochBefore,
        epoch: this.epoch,
        changes:
          result === 'committed'
            ? [
                {
                  model: next.model,
                  from: `${before.model}@${before.version}`,
                  to: `${next.model}@${next.version}`,
                },
              ]
            : [],
        drained,
        duration_ms: this.clock() - started,
        ...(error ? { error } : {}),
        ...(code ? { code } : {}),
      };
      this.lastReload = o;
      return o;
    };
    if (next.model === before.model && next.version === before.version) return outcome('unchanged', 0);
    if (this.state !== 'running') return outcome('failed', 0, `pipeline is ${this.state}`);
    try {
      await this.backend.prepare(next);
    } catch (err) {
      return outcome(
        'failed',
        0,
        `cannot pin ${next.model}@${next.version}: ${(err as Error).message}`,
        unservedPinCode(err),
      );
    }
    const drained = [...this.workers.values()].reduce((n, w) => n + w.inFlight, 0);
    let previous: EpochRecord | null;
    try {
      previous = await this.epochs!.last();
      await this.epochs!.record(this.epoch + 1, next, previous, reason);
    } catch (err) {
      return outcome('failed', 0, `transition not recorded: ${(err as Error).message}`);
    }
    this.adopt(next, this.epoch + 1);
    const lagging = await this.switchPartitions();
    this.logger.info({ epoch: this.epoch, from: before, to: next, drained, reason }, 'epoch committed');
    return outcome(
      'committed',
      drained,
      lagging.length > 0
        ? `partitions ${lagging.join(', ')} switch at their next barrier (checkpoint failed)`
        : undefined,
    );
  }
}

/** A key-safe default, unique even for two pipelines in one process: host name, pid and a random tag. */
function defaultInstanceId(): string {
  return `${instanceHost()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

export function instanceHost(): string {
  return hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .slice(0, 40);
}
