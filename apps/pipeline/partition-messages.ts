/**
 * One partition's per-message path: decide (the DeliveryDecider: keyed state, watermark, dedupe) → predict
 * (the pinned model version) → effects → hold until ack. It also holds what the decisions depend on — the
 * decider, the position, the pin and epoch — which the partition's lifecycle (partition.ts) restores,
 * checkpoints and switches at its barriers.
 *
 * Exactly one effect per decision: a message is acked only after its effects' PubAcks (with checkpoints: at
 * the checkpoint that covers it); a message that comes back finds the decider already past it (a duplicate),
 * so its effects are kept per stream sequence until its ack and published again under the same Msg-Ids.
 */
import {
  type DecideResult,
  type DeciderSnapshot,
  type Decision,
  DeliveryDecider,
  type WindowFiring,
} from '../../libs/delivery';
import type { Checkpointer, CheckpointState } from './checkpointer';
import { decisionEffects } from './effects';
import { RetryableError } from './errors';
import type { ModelPin } from './inference/inference';
import { partitionOfKey } from './io/layout';
import { deadLetterEffect, isDeadLetter, lateEffect } from './io/side-outputs';
import type { Effect, Published } from './io/sink';
import type { SourceMessage } from './io/source';
import type { PartitionContext } from './partition-context';

interface Unsettled {
  result: DecideResult;
  effects?: Effect[];
  /**
   * Its effects being built (inference in flight): a redelivery meanwhile waits for them. Deciding is done
   * once; predicting and building again would ask the decider's alert state a second time, out of order.
   */
  building?: Promise<Effect[]>;
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
export class KeyCounter {
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

export class PartitionMessages {
  readonly label: string;
  decider: DeliveryDecider;
  /** Set by a restore (checkpoint mode): holds acks and filters what the checkpoint already covers. */
  checkpointer: Checkpointer | undefined;
  /** Highest input stream sequence ingested: everything up to it is in the decider's state. */
  position = 0;
  /** After a restore: the last message the previous owner was handed (the replay ends there). */
  replayUntil = 0;
  pin: ModelPin;
  epoch = 0;
  readonly keys = new KeyCounter();
  private readonly unsettled = new Map<number, Unsettled>();
  /** Per delivery: the previous message's post-inference step (alerts follow arrival order per delivery). */
  private readonly tails = new Map<string, Promise<unknown>>();
  /**
   * Messages whose dead letter or late record failed to publish and to spool and is being retried
   * (streaminfer_stream_dead_letters_failing).
   */
  private readonly failingDeadLetters = new Set<number>();

  constructor(
    private readonly ctx: PartitionContext,
    readonly partition: number,
    /** The lease acquisition this partition runs under (its fencing token). */
    readonly token: number,
  ) {
    this.label = String(partition);
    const { pin, epoch } = ctx.current();
    this.pin = { ...pin };
    this.epoch = epoch;
    this.decider = this.makeDecider();
  }

  /** Side outputs the broker refuses and no spool took, retried in place: they hold the partition. */
  get sideOutputsHeld(): number {
    return this.failingDeadLetters.size;
  }

  makeDecider(snapshot?: DeciderSnapshot): DeliveryDecider {
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

  /** What a checkpoint records (the state's copy-on-write snapshot begins here). */
  checkpointState(): CheckpointState {
    return {
      state: this.decider.beginSnapshot(),
      position: this.position,
      pin: { ...this.pin },
      epoch: this.epoch,
    };
  }

  onEpoch(target: { pin: ModelPin; epoch: number }): boolean {
    return (
      target.epoch === this.epoch &&
      target.pin.model === this.pin.model &&
      target.pin.version === this.pin.version
    );
  }

  /** The runner is done with the message: acked, naked (to come back) or abandoned. */
  onSettled(message: SourceMessage, outcome: 'acked' | 'naked' | 'abandoned'): void {
    if (outcome !== 'acked') this.deadLetterLanded(message);
    if (outcome === 'naked') this.ctx.metrics.consumer.naks.inc();
    else this.unsettled.delete(message.streamSeq);
  }

  async processAndFilter(message: SourceMessage): Promise<Effect[]> {
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
   * instance may hold the partition again under a new one, worked by another Partition; this one stays fenced
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
      if (known?.building) return known.building;
      if (!known) {
        counts.duplicates++;
        metrics.events.duplicates.inc();
        return [];
      }
    } else if (message.streamSeq > this.position) this.position = message.streamSeq;
    if (message.streamSeq <= this.replayUntil && message.deliveryCount === 1)
      metrics.checkpoints.replayedEvents.inc();
    metrics.partitions.events.inc({ partition: this.label });
    const key = message.subject.slice(message.subject.lastIndexOf('.') + 1);
    const home = partitionOfKey(key, ctx.config.partitions);
    if (home !== this.partition) {
      // Its keyed state lives in another partition: deciding here would split a delivery's state.
      counts.invalid++;
      metrics.events.invalid.inc({ field: 'subject' });
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
        metrics.events.received.inc({ type: 'invalid' });
        metrics.events.invalid.inc({ field: fieldOf(fresh.reason ?? '') });
        return this.keep(message, [
          deadLetterEffect(ctx.layout.subjects, ctx.layout.events.name, message, fresh.reason ?? 'invalid'),
        ]);
      }
      case 'duplicate':
        // A redelivery of a message whose effects are not acked yet publishes them again (same Msg-Ids).
        entry = this.unsettled.get(message.streamSeq);
        if (!entry) {
          counts.duplicates++;
          metrics.events.duplicates.inc();
          return [];
        }
        if (entry.effects) return entry.effects;
        if (entry.building) return entry.building;
        break;
      default:
        metrics.events.received.inc({ type: fresh.event!.type });
        entry = { result: fresh, firstTimes: [], revisions: 0, alerts: 0 };
        this.unsettled.set(message.streamSeq, entry);
    }
    const result = entry.result;
    if (result === fresh) this.countWindows(result.windowResults);
    if (result.disposition === 'late') {
      counts.late++;
      metrics.events.late.inc();
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
    if (result.behindWatermark && result === fresh) metrics.events.behindWatermark.inc();
    if (result.notReady && result === fresh) metrics.events.notReady.inc({ missing: result.notReady });
    if (result.decisions.length === 0) {
      entry.effects = [];
      return entry.effects;
    }
    const building = this.predict(result.event!.delivery_id, result.decisions, entry);
    entry.building = building;
    try {
      entry.effects = await building;
    } finally {
      entry.building = undefined;
    }
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
    const end = metrics.latency.inference.startTimer({ mode: backend.mode });
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
      this.ctx.metrics.outputs.windowResults.inc({
        window: f.window,
        kind: f.revision === 0 ? 'first' : 'revision',
      });
  }

  onPublished(message: SourceMessage, published: readonly Effect[], results: readonly Published[]): void {
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
      metrics.outputs.deadLetters.inc({ reason: e.deadLetter });
    }
    // Counted once: a redelivery (its first copy still unsettled) publishing the same effects again under
    // the same Msg-Ids is not a second prediction.
    if (entry?.counted) return;
    if (entry && (entry.effects || letters > 0)) entry.counted = true;
    if (!entry?.effects) return;
    const now = this.ctx.clock();
    for (const t of entry.firstTimes) metrics.latency.observeFreshness(Math.max(0, now - t) / 1000);
    const firsts = entry.firstTimes.length;
    counts.predictions += firsts;
    counts.revisions += entry.revisions;
    counts.alerts += entry.alerts;
    if (firsts > 0) metrics.outputs.predictions.inc({ kind: 'first' }, firsts);
    if (entry.revisions > 0) metrics.outputs.predictions.inc({ kind: 'revision' }, entry.revisions);
    if (entry.alerts > 0) metrics.outputs.alerts.inc(entry.alerts);
  }

  onError(err: unknown, message: SourceMessage): void {
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
      this.ctx.metrics.outputs.deadLettersFailing.inc();
      this.ctx.logger.error(
        { ...log, err: String(err) },
        'side output not published nor spooled; retrying with backoff (the partition holds its position until it lands)',
      );
      return;
    }
    this.ctx.logger.warn({ ...log, err: String(err) }, 'message not completed');
  }

  /** A dead letter reported failing has landed (or its message was given up): no longer degraded. */
  deadLetterLanded(message: SourceMessage): void {
    if (!this.failingDeadLetters.delete(message.streamSeq)) return;
    this.ctx.metrics.outputs.deadLettersFailing.dec();
    this.ctx.logger.info({ partition: this.partition, seq: message.streamSeq }, 'dead letter published');
  }
}

/** `<field>: <problem>` → the field, for a bounded metric label. */
function fieldOf(reason: string): string {
  const field = reason.split(':')[0] ?? '';
  return /^[a-z_]{1,32}$/.test(field) ? field : 'payload';
}
