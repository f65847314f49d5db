/**
 * One instance of the delivery pipeline: JetStream source → DeliveryDecider → inference with the epoch's
 * pinned model version → predictions, alerts, late side output and dead letters (Msg-Id = decision id) → ack.
 * Events are partitioned by key (`<events>.<partition>.<delivery_id>`); the instance works the partitions it
 * holds a lease on (apps/pipeline/leases/leases.ts, kept on a thread of its own by lease-keeper.ts), each a
 * Partition with its own consumer, state and checkpoints, and hands them over when instances come and go
 * (pipeline-partitions.ts). What is shared here: the NATS connection, the sink, the inference backend
 * (pipeline-start.ts), the epoch (the pinned version, recorded in the epoch log that every instance follows:
 * pipeline-epochs.ts) and the admin view (pipeline-status.ts).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { NatsAuth } from '../../libs/nats-auth';
import type { PipelineConfig } from './config';
import { pipelineNatsAuth } from './connection';
import type { RecoverFrom, RecoverOutcome } from './failed-partitions';
import type { InferenceBackend, ModelPin } from './inference/inference';
import { EpochLog } from './io/epochs';
import { type StreamLayout, streamLayout } from './io/layout';
import { LeaseKeeper } from './leases/lease-keeper';
import type { PipelineMetrics } from './metrics';
import { emptyCounts, type PartitionContext, type PipelineCounts } from './partition-context';
import { InstanceEpoch, type ReloadOutcome } from './pipeline-epochs';
import { OwnedPartitions } from './pipeline-partitions';
import { type InstanceIo, openInstanceIo } from './pipeline-start';
import { type PipelineStatus, pipelineStatus, setInstanceGauges } from './pipeline-status';

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
   * The config's model pin was given by the operator on the command line (`streaminfer pipeline --version`):
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
  private readonly onFatal: ((err: Error) => void) | undefined;
  /** Servers, identity and TLS of every connection (the lease thread's too); files read at construction. */
  private readonly natsAuth: NatsAuth;
  /** Connections, spool and sink, each once open. */
  private readonly io: Partial<InstanceIo> = {};
  private leases: LeaseKeeper | undefined;
  private ctx: PartitionContext | undefined;
  private readonly partitions: OwnedPartitions;
  private readonly epochs: InstanceEpoch;
  private state: PipelineStatus['state'] = 'starting';
  /** Paused by the operator (POST /api/pause); a barrier resumes only what it paused. */
  private paused = false;
  private error: string | undefined;
  private timers: NodeJS.Timeout[] = [];
  private readonly counts: PipelineCounts = emptyCounts();

  constructor(deps: PipelineDeps) {
    this.config = deps.config;
    this.natsAuth = deps.nats ?? pipelineNatsAuth(deps.config.nats);
    this.backend = deps.backend;
    this.metrics = deps.metrics;
    this.logger = deps.logger;
    this.clock = deps.clock ?? Date.now;
    this.onFatal = deps.onFatal;
    this.instanceId = deps.config.instance.id || defaultInstanceId();
    this.layout = streamLayout({
      eventsStream: this.config.streams.events,
      predictionsStream: this.config.streams.predictions,
      sideStream: this.config.streams.side,
      subjectRoot: this.config.subjectRoot,
      duplicateWindowMs: this.config.streams.duplicateWindowMs,
    });
    this.partitions = new OwnedPartitions({
      config: this.config,
      layout: this.layout,
      metrics: this.metrics,
      logger: this.logger,
      clock: this.clock,
      ctx: () => this.ctx,
      leases: () => this.leases,
      state: () => this.state,
      paused: () => this.paused,
    });
    this.epochs = new InstanceEpoch(
      {
        backend: this.backend,
        metrics: this.metrics,
        logger: this.logger,
        clock: this.clock,
        instanceId: this.instanceId,
        pinFromOperator: deps.pinFromOperator ?? false,
        onEpoch: deps.onEpoch,
        state: () => this.state,
        switchPartitions: () => this.switchPartitions(),
        inFlight: () => this.partitions.list().reduce((n, w) => n + w.inFlight, 0),
        setError: (error) => {
          this.error = error;
        },
      },
      { model: deps.config.model.name, version: deps.config.model.version },
    );
  }

  get currentEpoch(): number {
    return this.epochs.epoch;
  }

  /** Partitions this instance works now. */
  ownedPartitions(): number[] {
    return this.partitions.numbers();
  }

  async start(): Promise<void> {
    const auth = this.natsAuth;
    const replicas = this.config.replicas;
    const { nats, checkpointNats, sink } = await openInstanceIo({
      into: this.io,
      config: this.config,
      auth,
      instanceId: this.instanceId,
      layout: this.layout,
      metrics: this.metrics,
      logger: this.logger,
      clock: this.clock,
      counts: this.counts,
    });
    const log = new EpochLog(nats.jsm, sink, this.layout, this.clock);
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
      await this.epochs.resume(log, await leases.peers());
      await this.backend.prepare(this.epochs.pin);
    } catch (err) {
      // The lease thread would keep the process up (and its heartbeat would count this instance live).
      await leases.stop();
      await this.io.spool?.close();
      throw err;
    }
    this.ctx = {
      config: this.config,
      layout: this.layout,
      nats,
      checkpointNats: checkpointNats ?? nats,
      sink,
      backend: this.backend,
      metrics: this.metrics,
      logger: this.logger,
      clock: this.clock,
      counts: this.counts,
      current: () => ({ pin: { ...this.epochs.pin }, epoch: this.epochs.epoch }),
      operatorPaused: () => this.paused,
      holds: (partition, token) => leases.holds(partition, token),
    };
    this.metrics.partitions.total.set(this.config.partitions);
    this.state = 'running';
    this.metrics.health.up.set(1);
    leases.onChange = () => {
      this.metrics.partitions.ownedCount.set(leases.owned().length);
      this.metrics.partitions.liveInstances.set(leases.liveInstances().length);
    };
    leases.start({
      acquire: (partition, token) => this.partitions.take(partition, token),
      release: (partition, reason, token) => this.partitions.giveUp(partition, reason, token),
    });
    this.timers.push(setInterval(() => this.tick(), 1000).unref());
    this.timers.push(setInterval(() => void this.epochs.follow(), EPOCH_POLL_MS).unref());
    this.io.spool?.start();
    this.logger.info(
      {
        instance: this.instanceId,
        partitions: this.config.partitions,
        epoch: this.epochs.epoch,
        model: this.epochs.pin.model,
        version: this.epochs.pin.version,
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
    this.metrics.health.up.set(0);
    this.logger.fatal({ err: err.message, instance: this.instanceId }, 'pipeline failed: lease thread died');
    this.onFatal?.(err);
  }

  /**
   * Operator pause: no new message is processed (what is in flight completes); the broker holds the rest
   * and keyed state stays. Resume picks up where it stopped, as a backlog.
   */
  async pause(): Promise<{ paused: boolean; drained: number }> {
    if (this.state !== 'running') return { paused: false, drained: 0 };
    const workers = this.partitions.list();
    const drained = workers.reduce((n, w) => n + w.inFlight, 0);
    this.paused = true;
    await Promise.all(workers.map((w) => w.pause()));
    return { paused: true, drained };
  }

  async resume(): Promise<{ resumed: boolean }> {
    if (!this.paused) return { resumed: false };
    // Never inside a barrier (a reload, a checkpoint): messages would start while it reads the state.
    await this.epochs.idle();
    this.paused = false;
    await Promise.all(this.partitions.list().map((w) => w.withBarrier(async () => w.resumeAlways())));
    return { resumed: true };
  }

  /** Stops every partition's consumer and opens it again (keyed state stays: redeliveries are duplicates). */
  async restartConsumer(): Promise<void> {
    await Promise.all(this.partitions.list().map((w) => w.restartConsumer()));
  }

  /**
   * The operator's way out for a failed partition (its checkpoint does not read): the bad pointer is kept
   * aside, the restore point becomes the previous checkpoint or an empty one at the broker's ack floor, and
   * the partition starts at once. Only on the instance holding the failed partition's lease.
   */
  recoverPartition(partition: number, from: RecoverFrom): Promise<RecoverOutcome> {
    return this.partitions.recover(partition, from);
  }

  /** Drains: gives every partition up (published, acked, checkpointed), closes the backend and the connection. */
  async stop(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'draining') return;
    this.state = 'draining';
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.partitions.failed.clearAll();
    await this.epochs.idle();
    // Releases each partition through giveUp(…, 'stop') and deletes its lease: survivors take it at once.
    await this.leases
      ?.stop()
      .catch((err: unknown) => this.logger.warn({ err: String(err) }, 'lease release failed'));
    await this.partitions.drainAll();
    await this.backend.close().catch(() => undefined);
    await this.io.spool?.close().catch(() => undefined);
    await this.io.nats?.close().catch(() => undefined);
    await this.io.checkpointNats?.close().catch(() => undefined);
    this.metrics.health.up.set(0);
    this.state = 'stopped';
  }

  /**
   * The epoch barrier: prepare the new version, record the transition in the epoch log (every instance
   * follows it), then each partition closes its barrier (every message in flight published), checkpoints as
   * of the new epoch and switches. No partition mixes two versions in one epoch.
   */
  reload(request: { model?: string; version?: string }, reason: string): Promise<ReloadOutcome> {
    return this.epochs.reload(request, reason);
  }

  lastReloadOutcome(): ReloadOutcome | undefined {
    return this.epochs.lastReloadOutcome();
  }

  status(): Promise<PipelineStatus> {
    return pipelineStatus(this.metrics, () => ({
      state: this.state,
      paused: this.paused,
      epoch: this.epochs.epoch,
      pin: this.epochs.pin,
      mode: this.backend.mode,
      counts: this.counts,
      config: this.config,
      natsAuth: this.natsAuth,
      error: this.error,
      clock: this.clock,
      instanceId: this.instanceId,
      liveInstances: this.leases?.liveInstances() ?? [],
      owned: this.ownedPartitions(),
      partitions: this.partitions.list(),
      failed: this.partitions.failed.list(),
      spool: this.io.spool,
      connections: [this.io.nats, this.io.checkpointNats],
    }));
  }

  /** Each second: the instance-wide gauges, and up and stale as /health says them. */
  private tick(): void {
    const m = this.metrics;
    setInstanceGauges({
      metrics: m,
      clock: this.clock,
      partitions: this.partitions.list(),
      owned: this.partitions.size,
      spool: this.io.spool,
      liveInstances: this.leases?.liveInstances().length ?? 0,
    });
    // A broker down or a failed partition is not "up".
    void this.status().then(
      (s) => {
        m.health.up.set(s.consuming ? 1 : 0);
        m.health.stale.set(s.stale ? 1 : 0);
      },
      () => undefined,
    );
  }

  /** Each partition's barrier to the instance's epoch; the partitions that could not, by number. */
  private async switchPartitions(): Promise<number[]> {
    const failed: number[] = [];
    await Promise.all(
      this.partitions.list().map(async (w) => {
        if (!(await w.catchUp())) failed.push(w.partition);
      }),
    );
    return failed.sort((a, b) => a - b);
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
