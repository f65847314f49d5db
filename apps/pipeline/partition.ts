/**
 * One partition of the delivery pipeline, as one instance works it while it holds the partition's lease: its
 * consumer (`<durable>-p<k>`, filter `<events>.<k>.*`), its DeliveryDecider (keyed state, watermark, dedupe),
 * its checkpoints (`<durable>.p<k>`) and its pinned model version. A partition's decisions depend only on its
 * own events, so whichever instance works it — and however often it moves — decides the same.
 *
 * Exactly one effect per decision: a message is acked only after its effects' PubAcks (with checkpoints: at
 * the checkpoint that covers it); a message that comes back finds the decider already past it (a duplicate),
 * so its effects are kept per stream sequence until its ack and published again under the same Msg-Ids.
 */
import type { Logger } from 'pino';
import {
  type DecideResult,
  type DeciderSnapshot,
  type Decision,
  DeliveryDecider,
  type WindowFiring,
} from '../../libs/delivery';
import { Checkpointer, type CheckpointState } from './checkpointer';
import type { PipelineConfig } from './config';
import type { NatsHandle } from './connection';
import { decisionEffects } from './effects';
import { StreamIoError } from './errors';
import type { InferenceBackend, ModelPin } from './inference/inference';
import { partitionFilter, partitionOfKey, type StreamLayout } from './io/layout';
import { deadLetterEffect, isDeadLetter, lateEffect } from './io/side-outputs';
import type { Effect, JetStreamSink, Published } from './io/sink';
import { JetStreamSource, type SourceMessage } from './io/source';
import type { PipelineMetrics } from './metrics';
import { type RunningPipeline, runPipeline } from './runner';

/** The backend could not answer: the message is retried, never dead-lettered. */
export class RetryableError extends Error {
  readonly retryable = true;
}

/** Instance-wide counters (/api/pipeline), summed over the partitions it works. */
export interface PipelineCounts {
  /** Messages received, redeliveries included. */
  received: number;
  redelivered: number;
  predictions: number;
  revisions: number;
  alerts: number;
  invalid: number;
  duplicates: number;
  late: number;
  dead_letters: number;
}

/** What every partition of an instance shares. */
export interface PartitionContext {
  config: PipelineConfig;
  layout: StreamLayout;
  nats: NatsHandle;
  /**
   * Checkpoints' own connection: megabytes of state must not queue behind the pipeline's thousands of
   * in-flight publishes and acks on the shared one (there, at 2,000 events/s, a 3 MB put timed out).
   */
  checkpointNats: NatsHandle;
  sink: JetStreamSink;
  backend: InferenceBackend;
  metrics: PipelineMetrics;
  logger: Logger;
  clock: () => number;
  counts: PipelineCounts;
  /** The instance's epoch: a partition without a checkpoint starts on it; a restored one catches up to it. */
  current(): { pin: ModelPin; epoch: number };
  /** Paused by the operator: a barrier must not resume what the operator paused. */
  operatorPaused(): boolean;
  /**
   * This instance holds the partition's lease under the acquisition `token` names, renewed within its TTL:
   * the fence for effects and checkpoints. Per acquisition: a worker of an earlier one fails it even once
   * the partition is held again.
   */
  holds(partition: number, token: number): boolean;
}

export interface PartitionStatus {
  partition: number;
  epoch: number;
  version: string;
  consuming: boolean;
  position: number;
  /** Replaying the span after its restored checkpoint. */
  replaying: boolean;
  watermark: string | null;
  pending: number;
  ack_pending: number;
  /** Pending, and delivered but not processed (unacked minus the acks held for the checkpoint). */
  unprocessed: number;
  /** Now − store time of the oldest message not processed (0: none). */
  oldest_unprocessed_age_s: number;
  checkpoint?: { last_id: number | null; position: number | null; age_s: number | null; held_acks: number };
  state_keys: number;
  state_bytes: number;
  busiest_key: { key: string; events: number } | null;
}

interface Unsettled {
  result: DecideResult;
  effects?: Effect[];
  /** Event times of the first predictions in `effects` (freshness is observed at their PubAck). */
  firstTimes: number[];
  /** Of its effects: corrections and alerts (the rest are first predictions, one per firstTimes). */
  revisions: number;
  alerts: number;
  /** Its effects were counted in the metrics (at their first PubAck). */
  counted?: boolean;
  /** Msg-Ids of its dead letters in the spool, not counted yet (the spool counts them if it lands them). */
  spooled?: Set<string>;
}

/** Events per key over the current minute: the partition's busiest key (key skew, as a metric). */
class KeyCounter {
  private counts = new Map<string, number>();
  private since = 0;
  busiest: { key: string; events: number } | null = null;
  private top: { key: string; events: number } = { key: '', events: 0 };

  add(key: string, now: number): void {
    this.rollIfDue(now);
    const n = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, n);
    if (n > this.top.events) this.top = { key, events: n };
  }

  /** Each minute, the minute's busiest key becomes the reported one. */
  rollIfDue(now: number): void {
    if (now - this.since < 60_000) return;
    this.busiest = this.top.events > 0 ? this.top : null;
    this.top = { key: '', events: 0 };
    this.counts = new Map();
    this.since = now;
  }
}

export class PartitionWorker {
  readonly label: string;
  private decider: DeliveryDecider;
  private checkpointer: Checkpointer | undefined;
  /** Highest input stream sequence ingested: everything up to it is in the decider's state. */
  private position = 0;
  /** After a restore: the last message the previous owner was handed (the replay ends there). */
  private replayUntil = 0;
  private startedAt = 0;
  private recovered = false;
  private source: JetStreamSource | undefined;
  private running: RunningPipeline | undefined;
  private pin: ModelPin;
  private epoch = 0;
  private state: 'starting' | 'running' | 'stopping' | 'stopped' = 'starting';
  private readonly unsettled = new Map<number, Unsettled>();
  /** Per delivery: the previous message's post-inference step (alerts follow arrival order per delivery). */
  private readonly tails = new Map<string, Promise<unknown>>();
  private timers: NodeJS.Timeout[] = [];
  /** Barriers (checkpoints, epoch switches) one at a time. */
  private barrierChain: Promise<unknown> = Promise.resolve();
  private lag: { pending: number; ackPending: number; held: number; nextAt: number | null } = {
    pending: 0,
    ackPending: 0,
    held: 0,
    nextAt: null,
  };
  /** When `lag` was last read from the broker (ms since epoch; 0: not yet). */
  private lagSince = 0;
  private readonly keys = new KeyCounter();
  private reportedKey: string | undefined;
  private catching = false;
  /**
   * Messages whose dead letter or late record failed to publish and to spool and is being retried
   * (streaminfer_stream_dead_letters_failing).
   */
  private readonly failingDeadLetters = new Set<number>();

  constructor(
    private readonly ctx: PartitionContext,
    readonly partition: number,
    /** The lease acquisition this worker runs under (its fencing token). */
    readonly token: number,
  ) {
    this.label = String(partition);
    const { pin, epoch } = ctx.current();
    this.pin = { ...pin };
    this.epoch = epoch;
    this.decider = this.makeDecider();
  }

  get durable(): string {
    return `${this.ctx.config.consumer.durable}-p${this.partition}`;
  }

  get inFlight(): number {
    return this.running?.inFlight ?? 0;
  }

  /** Side outputs the broker refuses and no spool took, retried in place: they hold the partition. */
  get sideOutputsHeld(): number {
    return this.failingDeadLetters.size;
  }

  private makeDecider(snapshot?: DeciderSnapshot): DeliveryDecider {
    const et = this.ctx.config.eventTime;
    return new DeliveryDecider(
      {
        outOfOrdernessMs: et.outOfOrdernessMs,
        allowedLatenessMs: et.allowedLatenessMs,
        idleTimeoutMs: et.idleTimeoutMs,
        stateTtlMs: et.stateTtlMs,
        dedupeTtlMs: et.dedupeTtlMs,
        maxClockSkewMs: et.maxClockSkewMs,
        maxEventAgeMs: et.maxEventAgeMs,
        alertThreshold: this.ctx.config.alertThreshold,
        maxEventBytes: this.ctx.config.maxEventBytes,
      },
      snapshot,
    );
  }

  /** A not yet started worker's keyed state: empty (an operator's recovery from the ack floor starts on it). */
  emptySnapshot(): DeciderSnapshot {
    return this.decider.snapshot();
  }

  /** Restores the partition's latest checkpoint (checkpoint mode), opens its consumer and starts working. */
  async start(): Promise<void> {
    const { ctx } = this;
    this.startedAt = Date.now();
    if (ctx.config.checkpoint.enabled) await this.restore();
    else await ctx.backend.prepare(this.pin);
    await this.openConsumer();
    this.timers.push(setInterval(() => this.tick(), 1000).unref());
    this.timers.push(setInterval(() => void this.refreshLag(), 1000).unref());
    if (this.checkpointer) {
      // Partitions' checkpoints spread over the interval instead of all pausing at once.
      const interval = ctx.config.checkpoint.intervalMs;
      const offset = Math.round(
        (interval * (this.partition % ctx.config.partitions)) / ctx.config.partitions,
      );
      this.scheduleCheckpoint(interval + offset);
    }
    this.state = 'running';
    ctx.metrics.partitionOwned.set({ partition: this.label }, 1);
    ctx.logger.info(
      { partition: this.partition, epoch: this.epoch, version: this.pin.version, position: this.position },
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
      ctx.metrics,
      ctx.logger,
      ctx.clock,
      () => ctx.holds(this.partition, this.token),
      (stream) => ctx.sink.lastAcked(stream),
    );
    this.checkpointer = checkpointer;
    const checkpoint = await checkpointer.restore();
    if (checkpoint) {
      try {
        this.decider = this.makeDecider(checkpoint.state);
      } catch (err) {
        throw new StreamIoError(
          'checkpoint_invalid',
          `checkpoint ${checkpoint.id} of partition ${this.partition}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      // The checkpoint's version replays what came after it (the artifact must still load): the same
      // decision ids as before the crash. The partition moves to the instance's epoch once caught up.
      this.pin = { ...checkpoint.pin };
      this.epoch = checkpoint.epoch;
      this.position = checkpoint.position;
      // What the previous owner was handed beyond the checkpoint is the replay; later messages are new.
      const previous = await ctx.nats.jsm.consumers
        .info(ctx.layout.events.name, this.durable)
        .catch(() => null);
      this.replayUntil = Math.max(checkpoint.position, previous?.delivered.stream_seq ?? 0);
      checkpointer.setReplayUntil(this.replayUntil);
      ctx.logger.info(
        {
          partition: this.partition,
          checkpoint: checkpoint.id,
          position: checkpoint.position,
          replayUntil: this.replayUntil,
          epoch: this.epoch,
        },
        'restored from checkpoint',
      );
    } else {
      // None yet: record the empty one before consuming. A crash before the first interval then restores it
      // and reads back what this partition published since, instead of replaying from the stream's start
      // with nothing to read back (every effect the dead owner had published would be published again).
      await checkpointer.persist(await checkpointer.takeWhilePaused(() => this.checkpointState()));
    }
    await ctx.backend.prepare(this.pin);
    ctx.metrics.restoreDuration.set((ctx.clock() - began) / 1000);
  }

  private async openConsumer(): Promise<void> {
    const { ctx } = this;
    const c = ctx.config.consumer;
    this.source = await JetStreamSource.open(ctx.nats.js, ctx.nats.jsm, {
      stream: ctx.layout.events.name,
      durable: this.durable,
      filterSubject: partitionFilter(ctx.layout.subjects.eventsPrefix, this.partition),
      maxAckPending: c.maxAckPending,
      ackWaitMs: c.ackWaitMs,
      maxDeliver: c.maxDeliver,
      batchSize: c.batchSize,
      partitionOf: () => this.label,
      // Checkpoint mode: the broker delivers from just after what the state holds (a restore, a reopen).
      // The durable is recreated, so an instance that lost this partition's lease stops being fed.
      ...(this.checkpointer ? { startSequence: this.position + 1 } : {}),
    });
    const running = runPipeline({
      source: this.source,
      sink: ctx.sink,
      subjects: ctx.layout.subjects,
      concurrency: ctx.config.concurrency,
      process: (message) => this.processAndFilter(message),
      onError: (err, message) => this.onError(err, message),
      onPublished: (message, effects, published) => this.onPublished(message, effects, published),
      ...(this.checkpointer ? { ack: this.checkpointer.hold, retryInPlace: true } : {}),
      onSettled: (message, outcome) => {
        if (outcome !== 'acked') this.deadLetterLanded(message);
        if (outcome === 'naked') ctx.metrics.redeliveryNaks.inc();
        else this.unsettled.delete(message.streamSeq);
      },
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
    if (drained && this.checkpointer) {
      await this.barrierChain;
      await this.checkpointer
        .persist(await this.checkpointer.takeWhilePaused(() => this.checkpointState()))
        .catch(() => undefined);
    }
    this.state = 'stopped';
    this.ctx.metrics.partitionOwned.remove({ partition: this.label });
    this.ctx.metrics.partitionPending.remove({ partition: this.label });
    this.reportBusiest(null);
    this.ctx.logger.info({ partition: this.partition, mode, position: this.position }, 'partition stopped');
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
        { partition: this.partition, deadlineMs, inFlight: running.inFlight, position: this.position },
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
    if (!this.checkpointer) return true;
    const taken = await this.checkpointer.takeWhilePaused(() => ({ ...this.checkpointState(), pin, epoch }));
    return this.checkpointer.persist(taken);
  }

  /** Inside a paused barrier, after checkpointAt: the partition predicts with `pin` from now on. */
  private switchTo(pin: ModelPin, epoch: number): void {
    this.pin = { ...pin };
    this.epoch = epoch;
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
    const checkpointer = this.checkpointer;
    if (!checkpointer || this.state !== 'running') return Promise.resolve();
    return this.withBarrier(() =>
      checkpointer.run(
        {
          pause: () => this.pause(),
          resume: () => this.resume(),
        },
        () => this.checkpointState(),
      ),
    );
  }

  private checkpointState(): CheckpointState {
    return {
      state: this.decider.beginSnapshot(),
      position: this.position,
      pin: { ...this.pin },
      epoch: this.epoch,
    };
  }

  status(): PartitionStatus {
    const wm = this.decider.watermark();
    const s = this.decider.stats();
    const last = this.checkpointer?.lastCompleted;
    return {
      partition: this.partition,
      epoch: this.epoch,
      version: this.pin.version,
      consuming: this.state === 'running' && this.running !== undefined,
      position: this.position,
      replaying: this.replayUntil > 0 && !this.recovered,
      watermark: wm === null ? null : new Date(wm).toISOString(),
      pending: this.lag.pending,
      ack_pending: this.lag.ackPending,
      unprocessed: this.unprocessed,
      oldest_unprocessed_age_s: this.oldestUnprocessedAgeS(),
      ...(this.checkpointer
        ? {
            checkpoint: {
              last_id: last?.id ?? null,
              position: last?.position ?? null,
              age_s: last ? Math.max(0, this.ctx.clock() - last.at) / 1000 : null,
              held_acks: this.checkpointer.heldMessages,
            },
          }
        : {}),
      state_keys: s.deliveries,
      state_bytes: s.approxBytes,
      busiest_key: this.keys.busiest,
    };
  }

  /** For the instance's gauges: lag, watermark, checkpoint age. */
  gauges(): {
    pending: number;
    ackPending: number;
    oldestAgeS: number;
    watermark: number | null;
    checkpointAt: number | null;
  } {
    return {
      pending: this.lag.pending,
      ackPending: this.lag.ackPending,
      oldestAgeS: this.oldestUnprocessedAgeS(),
      watermark: this.decider.watermark(),
      checkpointAt: this.checkpointer?.lastCompleted?.at ?? null,
    };
  }

  private oldestUnprocessedAgeS(): number {
    const at = this.oldestUnprocessedAt();
    return at === null ? 0 : Math.max(0, this.ctx.clock() - at) / 1000;
  }

  private async processAndFilter(message: SourceMessage): Promise<Effect[]> {
    this.fence();
    const effects = await this.process(message);
    this.fence();
    return this.checkpointer ? this.checkpointer.filter(effects) : effects;
  }

  /**
   * A zombie (stalled past its lease's TTL; another instance may own the partition and have read back what
   * was published before its restore) must not publish: the same decision ids would come after that read-back.
   * Not acked either: with checkpoints its ack is held and never released (its checkpoints are fenced too);
   * without, the retryable error naks it back to the owner. Fenced on its own acquisition: after a loss this
   * instance may hold the partition again under a new one, worked by another worker; this one stays fenced
   * until its release stops it.
   */
  private fence(): void {
    if (this.ctx.holds(this.partition, this.token)) return;
    throw new RetryableError(`partition ${this.partition}: lease not held`);
  }

  private async process(message: SourceMessage): Promise<Effect[]> {
    const { ctx } = this;
    const { counts, metrics } = ctx;
    counts.received++;
    if (message.deliveryCount > 1) counts.redelivered++;
    // Checkpoint mode: the consumer is (re)opened at position + 1 and first deliveries come in stream order, so
    // everything up to the position was ingested: a message at or below it is a redelivery, whatever the
    // decider still remembers of its event id (an id can be forgotten before a held ack runs out, when event
    // time runs fast). Without checkpoints a reopened durable goes on past messages pulled ahead and never
    // started, which come back later below the position: there the decider's ids decide.
    if (this.checkpointer && message.streamSeq <= this.position) {
      const known = this.unsettled.get(message.streamSeq);
      if (known?.effects) return known.effects; // not acked yet: the same effects again, same Msg-Ids
      if (!known) {
        counts.duplicates++;
        metrics.duplicates.inc();
        return [];
      }
    } else if (message.streamSeq > this.position) this.position = message.streamSeq;
    if (message.streamSeq <= this.replayUntil && message.deliveryCount === 1) metrics.replayedEvents.inc();
    metrics.partitionEvents.inc({ partition: this.label });
    const key = message.subject.slice(message.subject.lastIndexOf('.') + 1);
    const home = partitionOfKey(key, ctx.config.partitions);
    if (home !== this.partition) {
      // Its keyed state lives in another partition: deciding here would split a delivery's state.
      counts.invalid++;
      metrics.invalid.inc({ field: 'subject' });
      return this.keep(message, [
        deadLetterEffect(
          ctx.layout.subjects,
          ctx.layout.events.name,
          message,
          `subject: delivery ${key} belongs to partition ${home} (published to ${this.partition})`,
        ),
      ]);
    }
    this.keys.add(key, ctx.clock());
    // Admitted when the broker stored it: a fixed fact of the message, so a replay decides the same.
    const fresh = this.decider.ingest(message.data, this.label, key, message.storedAtMs);
    let entry: Unsettled | undefined;
    switch (fresh.disposition) {
      case 'invalid': {
        counts.invalid++;
        metrics.events.inc({ type: 'invalid' });
        metrics.invalid.inc({ field: fieldOf(fresh.reason ?? '') });
        return this.keep(message, [
          deadLetterEffect(ctx.layout.subjects, ctx.layout.events.name, message, fresh.reason ?? 'invalid'),
        ]);
      }
      case 'duplicate':
        // A redelivery of a message whose effects are not acked yet publishes them again (same Msg-Ids).
        entry = this.unsettled.get(message.streamSeq);
        if (!entry) {
          counts.duplicates++;
          metrics.duplicates.inc();
          return [];
        }
        if (entry.effects) return entry.effects;
        break;
      default:
        metrics.events.inc({ type: fresh.event!.type });
        entry = { result: fresh, firstTimes: [], revisions: 0, alerts: 0 };
        this.unsettled.set(message.streamSeq, entry);
    }
    const result = entry.result;
    if (result === fresh) this.countWindows(result.windowResults);
    if (result.disposition === 'late') {
      counts.late++;
      metrics.late.inc();
      const event = result.event!;
      entry.effects = [
        lateEffect(
          ctx.layout.subjects,
          event.event_id,
          {
            event: JSON.parse(new TextDecoder().decode(message.data)),
            delivery_id: event.delivery_id,
            event_time: event.event_time,
            watermark: new Date(result.watermark ?? 0).toISOString(),
            allowed_lateness_ms: ctx.config.eventTime.allowedLatenessMs,
            source_stream_seq: message.streamSeq,
          },
          message.data,
        ),
      ];
      return entry.effects;
    }
    if (result.behindWatermark && result === fresh) metrics.behindWatermark.inc();
    if (result.notReady && result === fresh) metrics.notReady.inc({ missing: result.notReady });
    if (result.decisions.length === 0) {
      entry.effects = [];
      return entry.effects;
    }
    entry.effects = await this.predict(result.event!.delivery_id, result.decisions, entry);
    return entry.effects;
  }

  /** Effects kept until the message settles: a redelivery before then publishes them again. */
  private keep(message: SourceMessage, effects: Effect[]): Effect[] {
    this.unsettled.set(message.streamSeq, {
      result: {
        disposition: 'invalid',
        behindWatermark: false,
        decisions: [],
        windowResults: [],
        watermark: null,
      },
      effects,
      firstTimes: [],
      revisions: 0,
      alerts: 0,
    });
    return effects;
  }

  /** Runs the decisions through the model (concurrently), then builds the effects in arrival order per delivery. */
  private async predict(deliveryId: string, decisions: Decision[], entry: Unsettled): Promise<Effect[]> {
    const pin = this.pin;
    const epoch = this.epoch;
    const risks = Promise.all(decisions.map((d) => this.timedPredict(pin, d.row)));
    const previous = this.tails.get(deliveryId) ?? Promise.resolve();
    const built = previous.then(async () => this.build(decisions, await risks, pin, epoch, entry));
    const tail = built.catch(() => undefined);
    this.tails.set(deliveryId, tail);
    void tail.then(() => {
      if (this.tails.get(deliveryId) === tail) this.tails.delete(deliveryId);
    });
    return built;
  }

  private async timedPredict(pin: ModelPin, row: Float32Array): Promise<number> {
    const { backend, metrics } = this.ctx;
    const end = metrics.inference.startTimer({ mode: backend.mode });
    try {
      return await backend.predict(pin, row);
    } catch (err) {
      throw new RetryableError(`inference failed: ${err instanceof Error ? err.message : String(err)}`, {
        cause: err,
      });
    } finally {
      end();
    }
  }

  private build(
    decisions: Decision[],
    risks: number[],
    pin: ModelPin,
    epoch: number,
    entry: Unsettled,
  ): Effect[] {
    for (const d of decisions) {
      if (d.revision === 0) entry.firstTimes.push(d.eventTimeMs);
      else entry.revisions++;
    }
    const publishedAt = new Date(this.ctx.clock()).toISOString();
    const effects = decisionEffects(
      decisions,
      risks,
      pin,
      epoch,
      this.decider,
      this.ctx.layout.subjects,
      publishedAt,
    );
    // One prediction per decision; the others are alerts.
    entry.alerts = effects.length - decisions.length;
    return effects;
  }

  private countWindows(firings: readonly WindowFiring[]): void {
    for (const f of firings)
      this.ctx.metrics.windowResults.inc({ window: f.window, kind: f.revision === 0 ? 'first' : 'revision' });
  }

  private onPublished(
    message: SourceMessage,
    published: readonly Effect[],
    results: readonly Published[],
  ): void {
    const entry = this.unsettled.get(message.streamSeq);
    this.deadLetterLanded(message);
    const { counts, metrics } = this.ctx;
    // Dead letters count once stored (the runner's own, for a processor error, come without effects kept).
    // A spooled one is counted by the spool when its replay lands; if a redelivery publishes it first, here.
    let letters = 0;
    for (const [i, e] of published.entries()) {
      if (!isDeadLetter(e)) continue;
      letters++;
      if (results[i]?.spooled) {
        if (entry && !entry.counted) (entry.spooled ??= new Set()).add(e.msgId);
        continue;
      }
      // Already counted, unless it was spooled and this publish (not a duplicate of the replay's) landed it.
      if (entry?.counted && !(entry.spooled?.delete(e.msgId) && !results[i]?.duplicate)) continue;
      counts.dead_letters++;
      metrics.deadLetters.inc({ reason: e.deadLetter });
    }
    // Counted once: a redelivery (its first copy still unsettled) publishing the same effects again under
    // the same Msg-Ids is not a second prediction.
    if (entry?.counted) return;
    if (entry && (entry.effects || letters > 0)) entry.counted = true;
    if (!entry?.effects) return;
    const now = this.ctx.clock();
    for (const t of entry.firstTimes) metrics.observeFreshness(Math.max(0, now - t) / 1000);
    const firsts = entry.firstTimes.length;
    counts.predictions += firsts;
    counts.revisions += entry.revisions;
    counts.alerts += entry.alerts;
    if (firsts > 0) metrics.predictions.inc({ kind: 'first' }, firsts);
    if (entry.revisions > 0) metrics.predictions.inc({ kind: 'revision' }, entry.revisions);
    if (entry.alerts > 0) metrics.alerts.inc(entry.alerts);
  }

  private onError(err: unknown, message: SourceMessage): void {
    const log = { partition: this.partition, seq: message.streamSeq };
    if (err instanceof RetryableError) {
      this.ctx.logger.warn({ ...log, err: err.message }, 'inference unavailable; retrying');
      return;
    }
    const effects = this.unsettled.get(message.streamSeq)?.effects;
    if (effects?.some((e) => e.spool !== undefined)) {
      // A dead letter or late record the broker refuses and no spool took (full, or disabled): not dropped
      // (that would lose the event) and not silent: reported once, and counted until it lands.
      if (this.failingDeadLetters.has(message.streamSeq)) {
        this.ctx.logger.debug({ ...log, err: String(err) }, 'side output still not published; retrying');
        return;
      }
      this.failingDeadLetters.add(message.streamSeq);
      this.ctx.metrics.deadLettersFailing.inc();
      this.ctx.logger.error(
        { ...log, err: String(err) },
        'side output not published nor spooled; retrying with backoff (the partition holds its position until it lands)',
      );
      return;
    }
    this.ctx.logger.warn({ ...log, err: String(err) }, 'message not completed');
  }

  /** A dead letter reported failing has landed (or its message was given up): no longer degraded. */
  private deadLetterLanded(message: SourceMessage): void {
    if (!this.failingDeadLetters.delete(message.streamSeq)) return;
    this.ctx.metrics.deadLettersFailing.dec();
    this.ctx.logger.info({ partition: this.partition, seq: message.streamSeq }, 'dead letter published');
  }

  private tick(): void {
    const { metrics } = this.ctx;
    const now = this.ctx.clock();
    this.keys.rollIfDue(now);
    this.reportBusiest(this.keys.busiest);
    // Caught up: the replay passed, or (a filtered durable's delivered sequence runs on over other partitions'
    // messages, so replayUntil may name none of ours) the broker has nothing left for us and nothing is open.
    if (
      this.replayUntil > 0 &&
      !this.recovered &&
      this.lagSince > this.startedAt &&
      this.lag.pending === 0 &&
      (this.position >= this.replayUntil || this.inFlight === 0)
    ) {
      this.recovered = true;
      const seconds = (Date.now() - this.startedAt) / 1000;
      metrics.recoverySeconds.set(seconds);
      this.ctx.logger.info(
        { partition: this.partition, seconds, replayed: this.replayUntil },
        'caught up after restore',
      );
    }
    this.catchUpIfBehind();
  }

  /** One series per partition: the previous key's goes when another key becomes the busiest. */
  private reportBusiest(busiest: { key: string; events: number } | null): void {
    const { metrics } = this.ctx;
    if (this.reportedKey !== undefined && this.reportedKey !== busiest?.key)
      metrics.busiestKey.remove({ partition: this.label, key: this.reportedKey });
    this.reportedKey = busiest?.key;
    if (busiest) metrics.busiestKey.set({ partition: this.label, key: busiest.key }, busiest.events);
  }

  /**
   * Moves the partition to the instance's epoch through its barrier: every message in flight published, a
   * checkpoint as of the new epoch, then the switch. A restored partition still replaying defers it (its
   * replay must decide under the checkpoint's version). False when the checkpoint failed (tried again).
   */
  catchUp(): Promise<boolean> {
    if (this.state !== 'running' || (this.replayUntil > 0 && !this.recovered)) return Promise.resolve(true);
    return this.withBarrier(async () => {
      const target = this.ctx.current();
      if (this.onEpoch(target)) return true;
      await this.ctx.backend.prepare(target.pin);
      await this.pause();
      try {
        if (!(await this.checkpointAt(target.pin, target.epoch))) return false;
        this.switchTo(target.pin, target.epoch);
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

  private onEpoch(target: { pin: ModelPin; epoch: number }): boolean {
    return (
      target.epoch === this.epoch &&
      target.pin.model === this.pin.model &&
      target.pin.version === this.pin.version
    );
  }

  private catchUpIfBehind(): void {
    if (this.catching || this.onEpoch(this.ctx.current())) return;
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

  private async refreshLag(): Promise<void> {
    const { nats, layout, metrics } = this.ctx;
    if (!this.source || this.state !== 'running') return;
    try {
      const info = await nats.jsm.consumers.info(layout.events.name, this.durable);
      // Acks held for the checkpoint, counted with the broker's figures: those events are processed.
      const held = this.checkpointer?.heldMessages ?? 0;
      const unprocessed = info.num_pending + Math.max(0, info.num_ack_pending - held);
      // The partition's first message past the last one started: nothing after the position was processed
      // (delivered and buffered, held at a barrier, or still at the broker). Its store time ages while
      // nothing is published, which freshness measured at PubAcks cannot show.
      let nextAt: number | null = null;
      if (unprocessed > 0) {
        const next = await nats.jsm.streams
          .getMessage(layout.events.name, {
            // Above the ack floor too: without checkpoints a new owner's position starts below what is acked.
            seq: Math.max(this.position, info.ack_floor.stream_seq) + 1,
            next_by_subj: partitionFilter(layout.subjects.eventsPrefix, this.partition),
          } as unknown as { seq: number })
          .catch(() => null);
        if (next) nextAt = next.time.getTime();
      }
      this.lag = { pending: info.num_pending, ackPending: info.num_ack_pending, held, nextAt };
      this.lagSince = Date.now();
      metrics.partitionPending.set({ partition: this.label }, info.num_pending);
    } catch (err) {
      this.ctx.logger.debug({ partition: this.partition, err: String(err) }, 'consumer info failed');
    }
  }

  /**
   * Store time (ms) of the oldest message not processed yet: started or waiting in this process, or the
   * next one at the broker (as last read; it keeps ageing while the broker cannot be asked). null: none.
   */
  oldestUnprocessedAt(): number | null {
    const local = this.running?.oldestUnsettled?.storedAtMs;
    const next = this.lag.nextAt;
    if (local === undefined) return next;
    return next === null ? local : Math.min(local, next);
  }

  /** Messages of the partition not processed: at the broker, or delivered and not done (held acks are done). */
  get unprocessed(): number {
    return this.lag.pending + Math.max(0, this.lag.ackPending - this.lag.held);
  }
}

/** `<field>: <problem>` → the field, for a bounded metric label. */
function fieldOf(reason: string): string {
  const field = reason.split(':')[0] ?? '';
  return /^[a-z_]{1,32}$/.test(field) ? field : 'payload';
}
