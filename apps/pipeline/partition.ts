/**
 * One partition of the delivery pipeline, as one instance works it while it holds the partition's lease: its
 * consumer (`<durable>-p<k>`, filter `<events>.<k>.*`), its checkpoints (`<durable>.p<k>`), its barriers
 * (checkpoints, epoch switches) and its lifecycle. The per-message path is partition-messages.ts, what it
 * reports partition-status.ts. A partition's decisions depend only on its own events, so whichever instance
 * works it — and however often it moves — decides the same.
 */
import type { DeciderSnapshot } from '../../libs/delivery';
import { Checkpointer } from './checkpointer';
import { PipelineIoError } from './errors';
import type { ModelPin } from './inference/inference';
import { partitionFilter } from './io/layout';
import { JetStreamSource } from './io/source';
import type { PartitionContext } from './partition-context';
import { PartitionMessages } from './partition-messages';
import { type PartitionGauges, PartitionReport, type PartitionStatus } from './partition-status';
import { type RunningPipeline, runPipeline } from './runner';

export class Partition {
  /** The per-message path and the state its decisions depend on. */
  private readonly messages: PartitionMessages;
  private readonly report: PartitionReport;
  private source: JetStreamSource | undefined;
  private running: RunningPipeline | undefined;
  private state: 'starting' | 'running' | 'stopping' | 'stopped' = 'starting';
  private timers: NodeJS.Timeout[] = [];
  /** Barriers (checkpoints, epoch switches) one at a time. */
  private barrierChain: Promise<unknown> = Promise.resolve();
  private catching = false;

  constructor(
    private readonly ctx: PartitionContext,
    readonly partition: number,
    /** The lease acquisition this partition runs under (its fencing token). */
    readonly token: number,
  ) {
    this.messages = new PartitionMessages(ctx, partition, token);
    this.report = new PartitionReport(ctx, this.messages, this.durable);
  }

  get durable(): string {
    return `${this.ctx.config.consumer.durable}-p${this.partition}`;
  }

  get inFlight(): number {
    return this.running?.inFlight ?? 0;
  }

  /** Side outputs the broker refuses and no spool took, retried in place: they hold the partition. */
  get sideOutputsHeld(): number {
    return this.messages.sideOutputsHeld;
  }

  /** A not yet started partition's keyed state: empty (an operator's recovery from the ack floor starts on it). */
  emptySnapshot(): DeciderSnapshot {
    return this.messages.decider.snapshot();
  }

  /** Restores the partition's latest checkpoint (checkpoint mode), opens its consumer and starts working. */
  async start(): Promise<void> {
    const { ctx } = this;
    this.report.started();
    if (ctx.config.checkpoint.enabled) await this.restore();
    else await ctx.backend.prepare(this.messages.pin);
    await this.openConsumer();
    this.timers.push(setInterval(() => this.tick(), 1000).unref());
    this.timers.push(
      setInterval(() => {
        if (this.source && this.state === 'running') void this.report.refreshLag();
      }, 1000).unref(),
    );
    if (this.messages.checkpointer) {
      // Partitions' checkpoints spread over the interval instead of all pausing at once.
      const interval = ctx.config.checkpoint.intervalMs;
      const offset = Math.round(
        (interval * (this.partition % ctx.config.partitions)) / ctx.config.partitions,
      );
      this.scheduleCheckpoint(interval + offset);
    }
    this.state = 'running';
    ctx.metrics.partitions.owned.set({ partition: this.messages.label }, 1);
    ctx.logger.info(
      {
        partition: this.partition,
        epoch: this.messages.epoch,
        version: this.messages.pin.version,
        position: this.messages.position,
      },
      'partition started',
    );
  }

  private async restore(): Promise<void> {
    const { ctx } = this;
    const began = ctx.clock();
    const checkpointer = await Checkpointer.open(
      ctx.checkpointNats,
      ctx.config.checkpoint.bucket,
      ctx.config.consumer.durable,
      `p${this.partition}`,
      ctx.layout,
      ctx.metrics.checkpoints,
      ctx.logger,
      ctx.clock,
      () => ctx.holds(this.partition, this.token),
      (stream) => ctx.sink.lastAcked(stream),
    );
    this.messages.checkpointer = checkpointer;
    const checkpoint = await checkpointer.restore();
    if (checkpoint) {
      try {
        this.messages.decider = this.messages.makeDecider(checkpoint.state);
      } catch (err) {
        throw new PipelineIoError(
          'checkpoint_invalid',
          `checkpoint ${checkpoint.id} of partition ${this.partition}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      // The checkpoint's version replays what came after it (the artifact must still load): the same
      // decision ids as before the crash. The partition moves to the instance's epoch once caught up.
      this.messages.pin = { ...checkpoint.pin };
      this.messages.epoch = checkpoint.epoch;
      this.messages.position = checkpoint.position;
      // What the previous owner was handed beyond the checkpoint is the replay; later messages are new.
      const previous = await ctx.nats.jsm.consumers
        .info(ctx.layout.events.name, this.durable)
        .catch(() => null);
      this.messages.replayUntil = Math.max(checkpoint.position, previous?.delivered.stream_seq ?? 0);
      checkpointer.setReplayUntil(this.messages.replayUntil);
      ctx.logger.info(
        {
          partition: this.partition,
          checkpoint: checkpoint.id,
          position: checkpoint.position,
          replayUntil: this.messages.replayUntil,
          epoch: this.messages.epoch,
        },
        'restored from checkpoint',
      );
    } else {
      // None yet: record the empty one before consuming. A crash before the first interval then restores it
      // and reads back what this partition published since, instead of replaying from the stream's start
      // with nothing to read back (every effect the dead owner had published would be published again).
      await checkpointer.persist(await checkpointer.takeWhilePaused(() => this.messages.checkpointState()));
    }
    await ctx.backend.prepare(this.messages.pin);
    ctx.metrics.checkpoints.restoreDuration.set((ctx.clock() - began) / 1000);
  }

  private async openConsumer(): Promise<void> {
    const { ctx, messages } = this;
    const c = ctx.config.consumer;
    this.source = await JetStreamSource.open(ctx.nats.js, ctx.nats.jsm, {
      stream: ctx.layout.events.name,
      durable: this.durable,
      filterSubject: partitionFilter(ctx.layout.subjects.eventsPrefix, this.partition),
      maxAckPending: c.maxAckPending,
      ackWaitMs: c.ackWaitMs,
      maxDeliver: c.maxDeliver,
      batchSize: c.batchSize,
      partitionOf: () => this.messages.label,
      // Checkpoint mode: the broker delivers from just after what the state holds (a restore, a reopen).
      // The durable is recreated, so an instance that lost this partition's lease stops being fed.
      ...(this.messages.checkpointer ? { startSequence: this.messages.position + 1 } : {}),
    });
    const running = runPipeline({
      source: this.source,
      sink: ctx.sink,
      subjects: ctx.layout.subjects,
      concurrency: ctx.config.concurrency,
      process: (message) => messages.processAndFilter(message),
      onError: (err, message) => messages.onError(err, message),
      onPublished: (message, effects, published) => messages.onPublished(message, effects, published),
      ...(messages.checkpointer ? { ack: messages.checkpointer.hold, retryInPlace: true } : {}),
      onSettled: (message, outcome) => messages.onSettled(message, outcome),
    });
    this.running = running;
    running.done.then(
      () => this.consumerEnded(running, undefined),
      (err: unknown) => this.consumerEnded(running, err),
    );
  }

  /** The consumer loop ended without stop(): the broker went away or the consumer was deleted. Reopen it. */
  private consumerEnded(running: RunningPipeline, err: unknown): void {
    if (this.running !== running || this.state !== 'running') return;
    this.running = undefined;
    this.ctx.logger.error({ partition: this.partition, err: String(err) }, 'consumer ended; reopening');
    const retry = (delayMs: number) => {
      const t = setTimeout(() => {
        if (this.state !== 'running') return;
        this.openConsumer().then(
          () => this.ctx.logger.info({ partition: this.partition }, 'consumer reopened'),
          (e: unknown) => {
            this.ctx.logger.error(
              { partition: this.partition, err: String(e), retryInMs: delayMs },
              'reopening the consumer failed',
            );
            retry(Math.min(30_000, delayMs * 2));
          },
        );
      }, delayMs);
      t.unref();
    };
    retry(1000);
  }

  /** Stops the consumer and opens it again on the same durable (keyed state stays). */
  async restartConsumer(): Promise<void> {
    const before = this.running;
    this.running = undefined;
    await before?.stop().catch(() => undefined);
    await this.openConsumer();
  }

  /**
   * 'drain': what is in flight is published, a last checkpoint acks everything (the next owner replays
   * nothing). 'abandon': the lease is gone — stop at once, no checkpoint, held acks dropped: the new owner
   * restores the last checkpoint and replays the rest under the same decision ids.
   */
  async stop(mode: 'drain' | 'abandon'): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    this.state = 'stopping';
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    const drained = await this.stopRunner(mode);
    if (drained && this.messages.checkpointer) {
      await this.barrierChain;
      await this.messages.checkpointer
        .persist(await this.messages.checkpointer.takeWhilePaused(() => this.messages.checkpointState()))
        .catch(() => undefined);
    }
    this.state = 'stopped';
    this.ctx.metrics.partitions.owned.remove({ partition: this.messages.label });
    this.ctx.metrics.partitions.pending.remove({ partition: this.messages.label });
    this.report.reportBusiest(null);
    this.ctx.logger.info(
      { partition: this.partition, mode, position: this.messages.position },
      'partition stopped',
    );
  }

  /**
   * Stops the consumer loop within a deadline. A drain that does not finish (a message retried in place
   * because the lease lapsed meanwhile, a broker that stopped answering) turns into an abandon: nothing more
   * is acked or checkpointed, and the next owner replays from the last checkpoint — as after a crash. The
   * lease thread waits on this handler: it must never hang. True when drained.
   */
  private async stopRunner(mode: 'drain' | 'abandon'): Promise<boolean> {
    const running = this.running;
    if (!running) return mode === 'drain';
    const deadlineMs = Math.max(5_000, this.ctx.config.instance.leaseTtlMs);
    const within = (p: Promise<void>) =>
      new Promise<boolean>((resolve) => {
        const t = setTimeout(() => resolve(false), deadlineMs);
        p.then(
          () => resolve(true),
          () => resolve(true),
        ).finally(() => clearTimeout(t));
      });
    if (mode === 'drain') {
      if (await within(running.stop())) return true;
      this.ctx.logger.warn(
        {
          partition: this.partition,
          deadlineMs,
          inFlight: running.inFlight,
          position: this.messages.position,
        },
        'partition drain did not finish in time: abandoned instead (the next owner replays from the last checkpoint)',
      );
    }
    // Sets the loop's abort flag at once (a retry in place gives up) even if the source never closes.
    if (!(await within(running.abort())))
      this.ctx.logger.warn(
        { partition: this.partition, deadlineMs, inFlight: running.inFlight },
        'partition consumer did not stop in time: left behind (its messages stay unacked)',
      );
    return false;
  }

  /** The barrier: no new message starts; resolves once every started one is published (and acked or held). */
  async pause(): Promise<void> {
    await this.running?.pause();
  }

  resume(): void {
    if (!this.ctx.operatorPaused()) this.running?.resume();
  }

  /** Operator resume: opens the gate a barrier would leave closed. */
  resumeAlways(): void {
    this.running?.resume();
  }

  /**
   * Inside a paused barrier: checkpoint the partition as of the new epoch, before anything is predicted in
   * it (a restore never replays a span of the new epoch under the old version). False when it failed.
   */
  async checkpointAt(pin: ModelPin, epoch: number): Promise<boolean> {
    if (!this.messages.checkpointer) return true;
    const taken = await this.messages.checkpointer.takeWhilePaused(() => ({
      ...this.messages.checkpointState(),
      pin,
      epoch,
    }));
    return this.messages.checkpointer.persist(taken);
  }

  /** Runs `fn` as this partition's barrier, one at a time with its checkpoints. */
  withBarrier<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.barrierChain.then(fn);
    this.barrierChain = run.catch(() => undefined);
    return run;
  }

  private scheduleCheckpoint(delayMs: number): void {
    const timer = setTimeout(() => {
      this.timers = this.timers.filter((t) => t !== timer);
      // The next one an interval after this one ended: a slow checkpoint never starts the next at once.
      void this.checkpoint().finally(() => {
        if (this.state === 'running') this.scheduleCheckpoint(this.ctx.config.checkpoint.intervalMs);
      });
    }, delayMs);
    timer.unref();
    this.timers.push(timer);
  }

  private checkpoint(): Promise<void> {
    const checkpointer = this.messages.checkpointer;
    if (!checkpointer || this.state !== 'running') return Promise.resolve();
    return this.withBarrier(() =>
      checkpointer.run(
        {
          pause: () => this.pause(),
          resume: () => this.resume(),
        },
        () => this.messages.checkpointState(),
      ),
    );
  }

  status(): PartitionStatus {
    return this.report.status(this.running, this.state === 'running' && this.running !== undefined);
  }

  gauges(): PartitionGauges {
    return this.report.gauges(this.running);
  }

  private tick(): void {
    this.report.tick(this.inFlight);
    this.catchUpIfBehind();
  }

  /**
   * Moves the partition to the instance's epoch through its barrier: every message in flight published, a
   * checkpoint as of the new epoch, then the switch. A restored partition still replaying defers it (its
   * replay must decide under the checkpoint's version). False when the checkpoint failed (tried again).
   */
  catchUp(): Promise<boolean> {
    if (this.state !== 'running' || this.report.replaying) return Promise.resolve(true);
    return this.withBarrier(async () => {
      const target = this.ctx.current();
      if (this.messages.onEpoch(target)) return true;
      await this.ctx.backend.prepare(target.pin);
      await this.pause();
      try {
        if (!(await this.checkpointAt(target.pin, target.epoch))) return false;
        // From now on the partition predicts with the new pin.
        this.messages.pin = { ...target.pin };
        this.messages.epoch = target.epoch;
        this.ctx.logger.info(
          { partition: this.partition, epoch: target.epoch, version: target.pin.version },
          'partition switched epoch',
        );
        return true;
      } finally {
        this.resume();
      }
    });
  }

  private catchUpIfBehind(): void {
    if (this.catching || this.messages.onEpoch(this.ctx.current())) return;
    this.catching = true;
    this.catchUp()
      .catch((err: unknown) =>
        this.ctx.logger.warn(
          { partition: this.partition, err: String(err) },
          'epoch switch failed; retrying',
        ),
      )
      .finally(() => {
        this.catching = false;
      });
  }
}
