/**
 * The delivery pipeline: JetStream source → DeliveryDecider (validate, dedupe, event-time state, decisions)
 * → inference with the epoch's pinned model version → predictions, alerts, late side output and dead
 * letters through the sink (Msg-Id = decision id) → ack. The I/O and the epoch barrier live here; every
 * decision is the pure decider's.
 *
 * Exactly one effect per decision: a message is acked only after its effects' PubAcks; a message that comes
 * back (nak, ack_wait) finds the engine already past it (a duplicate), so its effects are kept per stream
 * sequence until its ack and published again under the same Msg-Ids; a duplicate with a new sequence
 * publishes nothing.
 */
import type { Logger } from 'pino';
import {
  type DecideResult,
  type DeciderSnapshot,
  type Decision,
  DeliveryDecider,
  type WindowFiring,
} from '../../libs/stream';
import { Checkpointer, type CheckpointState } from './checkpointer';
import type { PipelineConfig } from './config';
import { connectNats, type NatsHandle } from './connection';
import { decisionEffects } from './effects';
import { EpochLog, type EpochRecord } from './epochs';
import type { InferenceBackend, ModelPin } from './inference';
import { type StreamLayout, streamLayout } from './layout';
import type { PipelineMetrics } from './metrics';
import { provisionStreams } from './provision';
import { type RunningPipeline, runPipeline } from './runner';
import { deadLetterEffect, lateEffect } from './side-outputs';
import { type Effect, JetStreamSink } from './sink';
import { hashPartitioner, JetStreamSource, type SourceMessage } from './source';

/** The backend could not answer: the message goes back to the broker, never to the dead letters. */
export class RetryableError extends Error {
  readonly retryable = true;
}

export type { EpochRecord } from './epochs';

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
  consumer: { pending: number; ack_pending: number; oldest_unprocessed_age_s: number };
  freshness: { p50_ms: number; p95_ms: number; p99_ms: number };
  stale: boolean;
  counts: Record<string, number>;
  /** Checkpoint mode: the last completed checkpoint and the acks waiting for the next. */
  checkpoint?: { last_id: number | null; position: number | null; age_s: number | null; held_acks: number };
  state_keys: number;
  state_bytes: number;
  error?: string;
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
}

export interface PipelineDeps {
  config: PipelineConfig;
  backend: InferenceBackend;
  metrics: PipelineMetrics;
  logger: Logger;
  clock?: () => number;
  /** Called whenever an epoch starts (at start and at each committed reload). */
  onEpoch?: (pin: ModelPin, epoch: number) => void;
}

export class DeliveryPipeline {
  readonly layout: StreamLayout;
  private readonly config: PipelineConfig;
  private readonly backend: InferenceBackend;
  private readonly metrics: PipelineMetrics;
  private readonly logger: Logger;
  private readonly clock: () => number;
  private readonly onEpoch: ((pin: ModelPin, epoch: number) => void) | undefined;
  private decider: DeliveryDecider;
  /** Checkpoints (config checkpoint.enabled): acks held until a checkpoint covers them. */
  private checkpointer: Checkpointer | undefined;
  /** Highest input stream sequence ingested: everything up to it is in the decider's state. */
  private position = 0;
  /** After a restore: the input stream's last sequence then (what is being replayed), and when we started. */
  private replayUntil = 0;
  private readonly startedAt = Date.now();
  private recovered = false;
  private nats: NatsHandle | undefined;
  private source: JetStreamSource | undefined;
  private sink: JetStreamSink | undefined;
  /** The epoch transitions on `<root>.delivery.epochs` (made at start, with the sink). */
  private epochs: EpochLog | undefined;
  private running: RunningPipeline | undefined;
  private pin: ModelPin;
  private epoch = 0;
  private state: PipelineStatus['state'] = 'starting';
  /** Paused by the operator (POST /api/pause); a reload's barrier resumes only what it paused. */
  private paused = false;
  private error: string | undefined;
  private readonly unsettled = new Map<number, Unsettled>();
  /** Per delivery: the previous message's post-inference step (alerts follow arrival order per delivery). */
  private readonly tails = new Map<string, Promise<unknown>>();
  private timers: NodeJS.Timeout[] = [];
  private reloadChain: Promise<unknown> = Promise.resolve();
  private reloads = 0;
  private lastReload: ReloadOutcome | undefined;
  private readonly counts = {
    /** Messages received, redeliveries included. */
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
  private lastLag = { pending: 0, ackPending: 0, oldestAgeS: 0 };

  constructor(deps: PipelineDeps) {
    this.config = deps.config;
    this.backend = deps.backend;
    this.metrics = deps.metrics;
    this.logger = deps.logger;
    this.clock = deps.clock ?? Date.now;
    this.onEpoch = deps.onEpoch;
    this.pin = { model: deps.config.model.name, version: deps.config.model.version };
    this.layout = streamLayout({
      eventsStream: this.config.streams.events,
      predictionsStream: this.config.streams.predictions,
      sideStream: this.config.streams.side,
      subjectRoot: this.config.subjectRoot,
      duplicateWindowMs: this.config.streams.duplicateWindowMs,
    });
    this.decider = this.makeDecider();
  }

  private makeDecider(snapshot?: DeciderSnapshot): DeliveryDecider {
    const et = this.config.eventTime;
    return new DeliveryDecider(
      {
        clock: this.clock,
        outOfOrdernessMs: et.outOfOrdernessMs,
        allowedLatenessMs: et.allowedLatenessMs,
        idleTimeoutMs: et.idleTimeoutMs,
        stateTtlMs: et.stateTtlMs,
        dedupeTtlMs: et.dedupeTtlMs,
        alertThreshold: this.config.alertThreshold,
      },
      snapshot,
    );
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  get currentPin(): ModelPin {
    return { ...this.pin };
  }

  async start(): Promise<void> {
    const nats = await connectNats({ servers: this.config.nats, name: 'streaminfer-stream' });
    this.nats = nats;
    await provisionStreams(nats.jsm, [this.layout.events, this.layout.predictions, this.layout.side]);
    const sink = new JetStreamSink(nats.js, {
      onPublishFailure: (effect, attempt, err) => {
        this.metrics.sinkFailures.inc();
        this.logger.warn({ subject: effect.subject, attempt, err: String(err) }, 'publish failed; retrying');
      },
    });
    this.sink = sink;
    this.epochs = new EpochLog(nats.jsm, sink, this.layout, this.clock);
    if (this.config.checkpoint.enabled) await this.restore(nats);
    else {
      await this.backend.prepare(this.pin);
      await this.resumeEpoch();
    }
    await this.openConsumer();
    this.timers.push(setInterval(() => this.tick(), 1000).unref());
    if (this.checkpointer) this.scheduleCheckpoint();
    this.timers.push(setInterval(() => void this.refreshLag(), 1000).unref());
    this.state = 'running';
    this.metrics.up.set(1);
    await this.refreshLag();
    this.logger.info(
      { epoch: this.epoch, model: this.pin.model, version: this.pin.version, mode: this.backend.mode },
      'pipeline running',
    );
  }

  /**
   * Checkpoint mode at start: restore the latest completed checkpoint (state, pin, epoch, position) and replay
   * from the position after it; without one, start from the stream's first message.
   */
  private async restore(nats: NatsHandle): Promise<void> {
    const began = this.clock();
    const checkpointer = await Checkpointer.open(
      nats,
      this.config.checkpoint.bucket,
      this.config.consumer.durable,
      this.layout,
      this.metrics,
      this.logger,
      this.clock,
    );
    this.checkpointer = checkpointer;
    const checkpoint = await checkpointer.restore();
    if (checkpoint) {
      this.decider = this.makeDecider(checkpoint.state);
      this.pin = { ...checkpoint.pin };
      this.position = checkpoint.position;
      await this.backend.prepare(this.pin);
      const last = await this.lastEpochRecord();
      this.epoch = checkpoint.epoch;
      if (!last || last.epoch < checkpoint.epoch) await this.recordEpoch(checkpoint.epoch, last, 'restore');
      this.metrics.setPin(this.pin.model, this.pin.version, this.epoch);
      this.onEpoch?.({ ...this.pin }, this.epoch);
      this.replayUntil = (await nats.jsm.streams.info(this.layout.events.name)).state.last_seq;
      this.logger.info(
        {
          checkpoint: checkpoint.id,
          position: checkpoint.position,
          replayUntil: this.replayUntil,
          epoch: this.epoch,
        },
        'restored from checkpoint',
      );
    } else {
      await this.backend.prepare(this.pin);
      await this.resumeEpoch();
    }
    this.metrics.restoreDuration.set((this.clock() - began) / 1000);
  }

  /** The next checkpoint an interval after the last one ended: a slow one never starts the next at once. */
  private scheduleCheckpoint(): void {
    const timer = setTimeout(() => {
      this.timers = this.timers.filter((t) => t !== timer);
      void this.checkpoint().finally(() => {
        if (this.state === 'running') this.scheduleCheckpoint();
      });
    }, this.config.checkpoint.intervalMs);
    timer.unref();
    this.timers.push(timer);
  }

  /** One checkpoint, in line with reloads (one barrier at a time). */
  private checkpoint(): Promise<void> {
    const checkpointer = this.checkpointer;
    if (!checkpointer || this.state !== 'running') return Promise.resolve();
    const run = this.reloadChain.then(() =>
      checkpointer.run(
        {
          pause: async () => {
            await this.running?.pause();
          },
          resume: () => {
            if (!this.paused) this.running?.resume();
          },
        },
        () => this.checkpointState(),
      ),
    );
    this.reloadChain = run.catch(() => undefined);
    return run;
  }

  private checkpointState(): CheckpointState {
    return {
      state: this.decider.snapshot(),
      position: this.position,
      pin: { ...this.pin },
      epoch: this.epoch,
    };
  }

  /**
   * Operator pause: no new message is processed (what is in flight completes); the broker holds the rest
   * and keyed state stays. Resume picks up where it stopped, as a backlog.
   */
  async pause(): Promise<{ paused: boolean; drained: number }> {
    const running = this.running;
    if (!running || this.state !== 'running') return { paused: false, drained: 0 };
    const drained = running.inFlight;
    this.paused = true;
    await running.pause();
    return { paused: true, drained };
  }

  async resume(): Promise<{ resumed: boolean }> {
    if (!this.paused) return { resumed: false };
    // Never inside a reload's barrier: messages would start while the pin changes.
    await this.reloadChain;
    this.paused = false;
    this.running?.resume();
    return { resumed: true };
  }

  /**
   * Stops the consumer (its messages in flight are published and acked; those pulled ahead come back after
   * ack_wait) and opens it again on the same durable. Keyed state stays: the redeliveries are duplicates.
   */
  async restartConsumer(): Promise<void> {
    const before = this.running;
    this.running = undefined;
    await before?.stop().catch(() => undefined);
    await this.openConsumer();
  }

  private async openConsumer(): Promise<void> {
    const nats = this.nats!;
    this.source = await JetStreamSource.open(nats.js, nats.jsm, {
      stream: this.layout.events.name,
      durable: this.config.consumer.durable,
      maxAckPending: this.config.consumer.maxAckPending,
      ackWaitMs: this.config.consumer.ackWaitMs,
      maxDeliver: this.config.consumer.maxDeliver,
      batchSize: this.config.consumer.batchSize,
      partitionOf: hashPartitioner(this.config.partitions),
      // Checkpoint mode: the broker delivers from just after what the state holds (a restore, a reopen).
      ...(this.checkpointer ? { startSequence: this.position + 1 } : {}),
    });
    const running = runPipeline({
      source: this.source,
      sink: this.sink!,
      subjects: this.layout.subjects,
      concurrency: this.config.concurrency,
      process: (message) => this.processAndFilter(message),
      onError: (err, message) => this.onError(err, message),
      onPublished: (message) => this.onPublished(message),
      ...(this.checkpointer ? { ack: this.checkpointer.hold, retryInPlace: true } : {}),
      onSettled: (message, outcome) => {
        if (outcome === 'naked') this.metrics.redeliveryNaks.inc();
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
    this.metrics.up.set(0);
    this.error = `consumer ended: ${String(err ?? 'no more messages')}`;
    this.logger.error({ err: String(err) }, 'consumer ended; reopening');
    const retry = (delayMs: number) => {
      const t = setTimeout(() => {
        if (this.state !== 'running') return;
        this.openConsumer().then(
          () => {
            this.error = undefined;
            this.metrics.up.set(1);
            this.logger.info('consumer reopened');
          },
          (e: unknown) => {
            this.logger.error({ err: String(e), retryInMs: delayMs }, 'reopening the consumer failed');
            retry(Math.min(30_000, delayMs * 2));
          },
        );
      }, delayMs);
      t.unref();
    };
    retry(1000);
  }

  /** Drains: stops pulling, publishes and acks what is in flight, closes the backend and the connection. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'draining';
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    await this.running?.stop().catch(() => undefined);
    // Drained: a last checkpoint acks everything, so the next start replays nothing.
    if (this.checkpointer) {
      await this.reloadChain;
      await this.checkpointer
        .persist(await this.checkpointer.takeWhilePaused(() => this.checkpointState()))
        .catch(() => undefined);
    }
    await this.backend.close().catch(() => undefined);
    await this.nats?.close().catch(() => undefined);
    this.metrics.up.set(0);
    this.state = 'stopped';
  }

  /**
   * The epoch barrier: prepare the new version, stop starting messages, wait for every message in flight to
   * be published and acked, switch the pin, record the transition, resume. No epoch mixes two versions.
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
    const wm = this.decider.watermark();
    const s = this.decider.stats();
    const p95Ms = q.p95 * 1000;
    return {
      state: this.state,
      consuming: this.state === 'running' && this.running !== undefined,
      paused: this.paused,
      epoch: this.epoch,
      model: this.pin.model,
      version: this.pin.version,
      mode: this.backend.mode,
      watermark: wm === null ? null : new Date(wm).toISOString(),
      consumer: {
        pending: this.lastLag.pending,
        ack_pending: this.lastLag.ackPending,
        oldest_unprocessed_age_s: this.lastLag.oldestAgeS,
      },
      freshness: { p50_ms: q.p50 * 1000, p95_ms: p95Ms, p99_ms: q.p99 * 1000 },
      stale:
        (Number.isFinite(p95Ms) && p95Ms > this.config.slo.freshnessP95Ms) ||
        this.lastLag.pending > this.config.slo.lagMessages,
      counts: { ...this.counts },
      ...(this.checkpointer
        ? {
            checkpoint: {
              last_id: this.checkpointer.lastCompleted?.id ?? null,
              position: this.checkpointer.lastCompleted?.position ?? null,
              age_s: this.checkpointer.lastCompleted
                ? Math.max(0, this.clock() - this.checkpointer.lastCompleted.at) / 1000
                : null,
              held_acks: this.checkpointer.heldMessages,
            },
          }
        : {}),
      state_keys: s.deliveries,
      state_bytes: s.approxBytes,
      ...(this.error ? { error: this.error } : {}),
    };
  }

  private async processAndFilter(message: SourceMessage): Promise<Effect[]> {
    const effects = await this.process(message);
    return this.checkpointer ? this.checkpointer.filter(effects) : effects;
  }

  private async process(message: SourceMessage): Promise<Effect[]> {
    if (message.streamSeq > this.position) this.position = message.streamSeq;
    if (message.streamSeq <= this.replayUntil && message.deliveryCount === 1)
      this.metrics.replayedEvents.inc();
    this.counts.received++;
    if (message.deliveryCount > 1) this.counts.redelivered++;
    const fresh = this.decider.ingest(message.data, message.partition);
    let entry: Unsettled | undefined;
    switch (fresh.disposition) {
      case 'invalid': {
        this.counts.invalid++;
        this.counts.dead_letters++;
        this.metrics.events.inc({ type: 'invalid' });
        this.metrics.invalid.inc({ field: fieldOf(fresh.reason ?? '') });
        this.metrics.deadLetters.inc({ reason: 'invalid' });
        return [
          deadLetterEffect(this.layout.subjects, this.layout.events.name, message, fresh.reason ?? 'invalid'),
        ];
      }
      case 'duplicate':
        // A redelivery of a message whose effects are not acked yet publishes them again (same Msg-Ids).
        entry = this.unsettled.get(message.streamSeq);
        if (!entry) {
          this.counts.duplicates++;
          this.metrics.duplicates.inc();
          return [];
        }
        if (entry.effects) return entry.effects;
        break;
      default:
        this.metrics.events.inc({ type: fresh.event!.type });
        entry = { result: fresh, firstTimes: [], revisions: 0, alerts: 0 };
        this.unsettled.set(message.streamSeq, entry);
    }
    const result = entry.result;
    if (result === fresh) this.countWindows(result.windowResults);
    if (result.disposition === 'late') {
      this.counts.late++;
      this.metrics.late.inc();
      const event = result.event!;
      entry.effects = [
        lateEffect(this.layout.subjects, event.event_id, {
          event: JSON.parse(new TextDecoder().decode(message.data)),
          delivery_id: event.delivery_id,
          event_time: event.event_time,
          watermark: new Date(result.watermark ?? 0).toISOString(),
          allowed_lateness_ms: this.config.eventTime.allowedLatenessMs,
          source_stream_seq: message.streamSeq,
        }),
      ];
      return entry.effects;
    }
    if (result.behindWatermark && result === fresh) this.metrics.behindWatermark.inc();
    if (result.notReady && result === fresh) this.metrics.notReady.inc({ missing: result.notReady });
    if (result.decisions.length === 0) {
      entry.effects = [];
      return entry.effects;
    }
    entry.effects = await this.predict(result.event!.delivery_id, result.decisions, entry);
    return entry.effects;
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
    const end = this.metrics.inference.startTimer({ mode: this.backend.mode });
    try {
      return await this.backend.predict(pin, row);
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
    const publishedAt = new Date(this.clock()).toISOString();
    const effects = decisionEffects(
      decisions,
      risks,
      pin,
      epoch,
      this.decider,
      this.layout.subjects,
      publishedAt,
    );
    // One prediction per decision; the others are alerts.
    entry.alerts = effects.length - decisions.length;
    return effects;
  }

  private countWindows(firings: readonly WindowFiring[]): void {
    for (const f of firings)
      this.metrics.windowResults.inc({ window: f.window, kind: f.revision === 0 ? 'first' : 'revision' });
  }

  private onPublished(message: SourceMessage): void {
    const entry = this.unsettled.get(message.streamSeq);
    // Counted once: a redelivery (its first copy still unsettled) publishing the same effects again under
    // the same Msg-Ids is not a second prediction.
    if (!entry?.effects || entry.counted) return;
    entry.counted = true;
    const now = this.clock();
    for (const t of entry.firstTimes) this.metrics.observeFreshness(Math.max(0, now - t) / 1000);
    const firsts = entry.firstTimes.length;
    this.counts.predictions += firsts;
    this.counts.revisions += entry.revisions;
    this.counts.alerts += entry.alerts;
    if (firsts > 0) this.metrics.predictions.inc({ kind: 'first' }, firsts);
    if (entry.revisions > 0) this.metrics.predictions.inc({ kind: 'revision' }, entry.revisions);
    if (entry.alerts > 0) this.metrics.alerts.inc(entry.alerts);
  }

  private onError(err: unknown, message: SourceMessage): void {
    if (err instanceof RetryableError) {
      this.logger.warn({ seq: message.streamSeq, err: err.message }, 'inference unavailable; message naked');
      return;
    }
    this.logger.warn({ seq: message.streamSeq, err: String(err) }, 'message not completed');
  }

  private tick(): void {
    const r = this.decider.tick();
    this.countWindows(r.windowResults);
    const s = this.decider.stats();
    this.metrics.stateKeys.set(s.deliveries);
    this.metrics.stateBytes.set(s.approxBytes);
    const wm = this.decider.watermark();
    if (wm !== null) this.metrics.watermarkLag.set(Math.max(0, this.clock() - wm) / 1000);
    this.metrics.inflight.set(this.running?.inFlight ?? 0);
    const last = this.checkpointer?.lastCompleted;
    if (last) this.metrics.checkpointAge.set(Math.max(0, this.clock() - last.at) / 1000);
    if (
      this.replayUntil > 0 &&
      !this.recovered &&
      this.position >= this.replayUntil &&
      this.lastLag.pending === 0
    ) {
      this.recovered = true;
      const seconds = (Date.now() - this.startedAt) / 1000;
      this.metrics.recoverySeconds.set(seconds);
      this.logger.info({ seconds, replayed: this.replayUntil }, 'caught up after restore');
    }
  }

  private async refreshLag(): Promise<void> {
    const source = this.source;
    const nats = this.nats;
    if (!source || !nats || this.state !== 'running') return;
    try {
      const info = await nats.jsm.consumers.info(this.layout.events.name, this.config.consumer.durable);
      let oldestAgeS = 0;
      const firstUnacked = info.ack_floor.stream_seq + 1;
      if (info.num_pending + info.num_ack_pending > 0) {
        const stored = await nats.jsm.streams
          .getMessage(this.layout.events.name, { seq: firstUnacked })
          .catch(() => null);
        if (stored) oldestAgeS = Math.max(0, this.clock() - stored.time.getTime()) / 1000;
      }
      this.lastLag = { pending: info.num_pending, ackPending: info.num_ack_pending, oldestAgeS };
      this.metrics.consumerPending.set(info.num_pending);
      this.metrics.consumerAckPending.set(info.num_ack_pending);
      this.metrics.oldestUnprocessedAge.set(oldestAgeS);
    } catch (err) {
      this.logger.debug({ err: String(err) }, 'consumer info failed');
    }
  }

  /** The last recorded epoch continues if it pinned the same version; otherwise a new epoch is recorded. */
  private async resumeEpoch(): Promise<void> {
    const last = await this.lastEpochRecord();
    if (last && last.model === this.pin.model && last.version === this.pin.version) {
      this.epoch = last.epoch;
    } else {
      await this.recordEpoch((last?.epoch ?? 0) + 1, last, 'start');
    }
    this.metrics.setPin(this.pin.model, this.pin.version, this.epoch);
    this.onEpoch?.({ ...this.pin }, this.epoch);
  }

  private lastEpochRecord(): Promise<EpochRecord | null> {
    return this.epochs!.last();
  }

  private async recordEpoch(epoch: number, previous: EpochRecord | null, reason: string): Promise<void> {
    await this.epochs!.record(epoch, this.pin, previous, reason);
    this.epoch = epoch;
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
    const outcome = (result: ReloadOutcome['result'], drained: number, error?: string): ReloadOutcome => {
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
      };
      this.lastReload = o;
      return o;
    };
    if (next.model === before.model && next.version === before.version) return outcome('unchanged', 0);
    if (this.state !== 'running') return outcome('failed', 0, `pipeline is ${this.state}`);
    try {
      await this.backend.prepare(next);
    } catch (err) {
      return outcome('failed', 0, `cannot pin ${next.model}@${next.version}: ${(err as Error).message}`);
    }
    const running = this.running;
    if (!running) return outcome('failed', 0, 'the consumer is reopening; try again');
    const drained = running.inFlight;
    await running.pause();
    try {
      const previous: EpochRecord = {
        epoch: this.epoch,
        model: before.model,
        version: before.version,
        previous: null,
        reason: '',
        at: '',
      };
      this.pin = next;
      try {
        if (this.checkpointer) {
          // The new epoch is checkpointed before anything is predicted in it: a restore never replays a
          // span of the new epoch under the old version.
          const epochBefore = this.epoch;
          this.epoch = epochBefore + 1;
          const saved = await this.checkpointer.persist(
            await this.checkpointer.takeWhilePaused(() => this.checkpointState()),
          );
          this.epoch = epochBefore;
          if (!saved) throw new Error('the checkpoint at the barrier failed');
        }
        await this.recordEpoch(this.epoch + 1, previous, reason);
      } catch (err) {
        this.pin = before;
        return outcome('failed', drained, `transition not recorded: ${(err as Error).message}`);
      }
      this.metrics.setPin(next.model, next.version, this.epoch);
      this.onEpoch?.({ ...next }, this.epoch);
      this.logger.info({ epoch: this.epoch, from: before, to: next, drained, reason }, 'epoch committed');
      return outcome('committed', drained);
    } finally {
      if (!this.paused) running.resume();
    }
  }
}

/** `<field>: <problem>` → the field, for a bounded metric label. */
function fieldOf(reason: string): string {
  const field = reason.split(':')[0] ?? '';
  return /^[a-z_]{1,32}$/.test(field) ? field : 'payload';
}
