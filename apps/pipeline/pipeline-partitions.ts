/**
 * The partitions an instance works: taken when their lease is acquired (restored, then consumed), given up
 * when it is released (drained and checkpointed) or lost (stopped at once), marked failed when their
 * checkpoint does not read, and recovered from there by the operator.
 */
import type { Logger } from 'pino';
import type { PipelineConfig } from './config';
import { PipelineIoError, RecoverRefused } from './errors';
import { FailedPartitions, type RecoverFrom, type RecoverOutcome } from './failed-partitions';
import { CHECKPOINT_VERSION, type Checkpoint, CheckpointStore } from './io/checkpoints';
import type { StreamLayout } from './io/layout';
import type { LeaseKeeper } from './leases/lease-keeper';
import type { ReleaseReason } from './leases/leases';
import type { PipelineMetrics } from './metrics';
import { Partition } from './partition';
import type { PartitionContext } from './partition-context';

export interface OwnershipDeps {
  config: PipelineConfig;
  layout: StreamLayout;
  metrics: PipelineMetrics;
  logger: Logger;
  clock: () => number;
  /** What the partitions share (set once the instance runs). */
  ctx(): PartitionContext | undefined;
  leases(): LeaseKeeper | undefined;
  /** The instance's state: partitions start only while it runs. */
  state(): string;
  /** Paused by the operator: a partition taken meanwhile starts paused. */
  paused(): boolean;
}

export class OwnedPartitions {
  private readonly partitions = new Map<number, Partition>();
  readonly failed: FailedPartitions;
  /** Partitions being taken or given up (a status or a barrier waits for neither). */
  private readonly moving = new Map<number, Promise<void>>();

  constructor(private readonly deps: OwnershipDeps) {
    this.failed = new FailedPartitions(deps.metrics.partitions, deps.logger, deps.clock, (partition) => {
      const token = deps.leases()?.heldToken(partition);
      if (deps.state() === 'running' && token !== undefined && !this.partitions.has(partition))
        void this.track(partition, this.start(partition, token)).catch(() => undefined);
    });
  }

  get size(): number {
    return this.partitions.size;
  }

  /** The partitions worked now. */
  list(): Partition[] {
    return [...this.partitions.values()];
  }

  /** Their numbers, in order. */
  numbers(): number[] {
    return [...this.partitions.keys()].sort((a, b) => a - b);
  }

  /** Lease acquired: restore the partition (checkpoint mode) and work it. */
  take(partition: number, token: number): Promise<void> {
    const run = (async () => {
      // A release of an earlier acquisition still stopping its Partition finishes first.
      await this.moving.get(partition)?.catch(() => undefined);
      await this.start(partition, token);
    })();
    return this.track(partition, run);
  }

  /**
   * A checkpoint that does not read keeps the lease and marks the partition failed (retried with a backoff,
   * recovered by the operator); any other failure gives the lease back.
   */
  private async start(partition: number, token: number): Promise<void> {
    if (this.deps.state() !== 'running') throw new Error(`pipeline is ${this.deps.state()}`);
    const owned = new Partition(this.deps.ctx()!, partition, token);
    this.partitions.set(partition, owned);
    try {
      await owned.start();
    } catch (err) {
      this.partitions.delete(partition);
      await owned.stop('abandon').catch(() => undefined);
      if (err instanceof PipelineIoError && err.code === 'checkpoint_invalid') {
        this.failed.fail(partition, err.message);
        return;
      }
      this.failed.clear(partition);
      this.deps.logger.error(
        { partition, err: String(err) },
        'could not start the partition; lease given back',
      );
      throw err;
    }
    if (this.failed.has(partition)) {
      this.failed.clear(partition);
      this.deps.logger.info({ partition }, 'failed partition working again');
    }
    if (this.deps.paused()) await owned.pause();
    this.deps.metrics.partitions.moves.inc({ direction: 'in', reason: 'acquired' });
  }

  /** Lease given up ('rebalance', 'stop': drained and checkpointed) or lost (stop at once, write nothing). */
  giveUp(partition: number, reason: ReleaseReason, token: number): Promise<void> {
    const run = (async () => {
      await this.moving.get(partition)?.catch(() => undefined);
      this.failed.clear(partition);
      const owned = this.partitions.get(partition);
      // Only the released acquisition's Partition: a later acquisition's stays.
      if (!owned || owned.token !== token) return;
      this.partitions.delete(partition);
      await owned.stop(reason === 'lost' ? 'abandon' : 'drain');
      this.deps.metrics.partitions.moves.inc({ direction: 'out', reason });
      if (reason === 'lost') this.deps.logger.warn({ partition }, 'partition lease lost; stopped working it');
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
   * The operator's way out for a failed partition (its checkpoint does not read): the bad pointer is kept
   * aside, the restore point becomes the previous checkpoint or an empty one at the broker's ack floor, and
   * the partition starts at once. Only on the instance holding the failed partition's lease.
   */
  async recover(partition: number, from: RecoverFrom): Promise<RecoverOutcome> {
    if (!Number.isInteger(partition) || partition < 0 || partition >= this.deps.config.partitions)
      throw new RecoverRefused(
        404,
        'not_found',
        `no partition ${partition} (partitions 0-${this.deps.config.partitions - 1})`,
      );
    if (!this.deps.config.checkpoint.enabled)
      throw new RecoverRefused(
        409,
        'conflict',
        'checkpoints are off (checkpoint.enabled): nothing to recover',
      );
    await this.moving.get(partition)?.catch(() => undefined);
    const token = this.deps.leases()?.heldToken(partition);
    if (this.deps.state() !== 'running' || !this.failed.has(partition) || token === undefined)
      throw new RecoverRefused(
        409,
        'conflict',
        `partition ${partition} is ${this.partitions.has(partition) ? 'running' : 'not failed on this instance'} ` +
          '(recover a failed partition on the instance that holds it: see partitions_failed in /health)',
      );
    this.failed.hold(partition);
    const run = (async (): Promise<RecoverOutcome> => {
      const nats = this.deps.ctx()!.checkpointNats;
      const store = await CheckpointStore.open(
        nats.js,
        this.deps.config.checkpoint.bucket,
        this.deps.config.consumer.durable,
        `p${partition}`,
        nats.replicas,
      );
      const restored = await store.recover(from, () => this.emptyCheckpoint(partition));
      this.deps.logger.warn(
        {
          partition,
          from,
          quarantined: restored.quarantined,
          checkpoint: restored.id,
          position: restored.position,
        },
        'failed partition recovered by the operator: restore point replaced',
      );
      await this.start(partition, token);
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
    const ctx = this.deps.ctx()!;
    const { nats } = ctx;
    const { pin, epoch } = ctx.current();
    const durable = `${this.deps.config.consumer.durable}-p${partition}`;
    const info = await nats.jsm.consumers.info(this.deps.layout.events.name, durable).catch(() => null);
    const [predictions, side] = await Promise.all(
      [this.deps.layout.predictions.name, this.deps.layout.side.name].map(
        async (stream) => (await nats.jsm.streams.info(stream)).state.last_seq,
      ),
    );
    return {
      version: CHECKPOINT_VERSION,
      position: info?.ack_floor.stream_seq ?? 0,
      outputs: { predictions: predictions ?? 0, side: side ?? 0 },
      pin,
      epoch,
      state: new Partition(ctx, partition, 0).emptySnapshot(), // token 0: never started, never holds,
    };
  }

  /** The instance stops: every partition still worked is drained (published, acked, checkpointed). */
  async drainAll(): Promise<void> {
    for (const [partition, owned] of this.partitions) {
      this.partitions.delete(partition);
      await owned.stop('drain').catch(() => undefined);
    }
  }
}
