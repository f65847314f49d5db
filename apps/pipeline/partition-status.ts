/**
 * What a partition reports: its status (/api/pipeline, /health), its gauges for the instance's, the broker's
 * view of its consumer (lag, the next message waiting), its busiest key, and when a restore has caught up.
 */
import { partitionFilter } from './io/layout';
import type { PartitionContext } from './partition-context';
import type { PartitionMessages } from './partition-messages';
import type { RunningPipeline } from './runner';

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

/** For the instance's gauges: lag, watermark, checkpoint age. */
export interface PartitionGauges {
  pending: number;
  ackPending: number;
  oldestAgeS: number;
  watermark: number | null;
  checkpointAt: number | null;
}

export class PartitionReport {
  private startedAt = 0;
  private recovered = false;
  private lag: { pending: number; ackPending: number; held: number; nextAt: number | null } = {
    pending: 0,
    ackPending: 0,
    held: 0,
    nextAt: null,
  };
  /** When `lag` was last read from the broker (ms since epoch; 0: not yet). */
  private lagSince = 0;
  private reportedKey: string | undefined;

  constructor(
    private readonly ctx: PartitionContext,
    private readonly messages: PartitionMessages,
    private readonly durable: string,
  ) {}

  /** Replaying the span after its restored checkpoint. */
  get replaying(): boolean {
    return this.messages.replayUntil > 0 && !this.recovered;
  }

  /** The partition starts (a restore's recovery time counts from here). */
  started(): void {
    this.startedAt = Date.now();
  }

  /** Each second: the busiest key's series, and whether a restore has caught up. */
  tick(inFlight: number): void {
    const { metrics } = this.ctx;
    const m = this.messages;
    const now = this.ctx.clock();
    m.keys.rollIfDue(now);
    this.reportBusiest(m.keys.busiest);
    // Caught up: the replay passed, or (a filtered durable's delivered sequence runs on over other partitions'
    // messages, so replayUntil may name none of ours) the broker has nothing left for us and nothing is open.
    if (
      m.replayUntil > 0 &&
      !this.recovered &&
      this.lagSince > this.startedAt &&
      this.lag.pending === 0 &&
      (m.position >= m.replayUntil || inFlight === 0)
    ) {
      this.recovered = true;
      const seconds = (Date.now() - this.startedAt) / 1000;
      metrics.checkpoints.recoverySeconds.set(seconds);
      this.ctx.logger.info(
        { partition: m.partition, seconds, replayed: m.replayUntil },
        'caught up after restore',
      );
    }
  }

  /** One series per partition: the previous key's goes when another key becomes the busiest. */
  reportBusiest(busiest: { key: string; events: number } | null): void {
    const { metrics } = this.ctx;
    if (this.reportedKey !== undefined && this.reportedKey !== busiest?.key)
      metrics.partitions.busiestKey.remove({ partition: this.messages.label, key: this.reportedKey });
    this.reportedKey = busiest?.key;
    if (busiest)
      metrics.partitions.busiestKey.set({ partition: this.messages.label, key: busiest.key }, busiest.events);
  }

  status(running: RunningPipeline | undefined, consuming: boolean): PartitionStatus {
    const wm = this.messages.decider.watermark();
    const s = this.messages.decider.stats();
    const last = this.messages.checkpointer?.lastCompleted;
    return {
      partition: this.messages.partition,
      epoch: this.messages.epoch,
      version: this.messages.pin.version,
      consuming,
      position: this.messages.position,
      replaying: this.replaying,
      watermark: wm === null ? null : new Date(wm).toISOString(),
      pending: this.lag.pending,
      ack_pending: this.lag.ackPending,
      unprocessed: this.unprocessed,
      oldest_unprocessed_age_s: this.oldestUnprocessedAgeS(running),
      ...(this.messages.checkpointer
        ? {
            checkpoint: {
              last_id: last?.id ?? null,
              position: last?.position ?? null,
              age_s: last ? Math.max(0, this.ctx.clock() - last.at) / 1000 : null,
              held_acks: this.messages.checkpointer.heldMessages,
            },
          }
        : {}),
      state_keys: s.deliveries,
      state_bytes: s.approxBytes,
      busiest_key: this.messages.keys.busiest,
    };
  }

  /** For the instance's gauges: lag, watermark, checkpoint age. */
  gauges(running: RunningPipeline | undefined): PartitionGauges {
    return {
      pending: this.lag.pending,
      ackPending: this.lag.ackPending,
      oldestAgeS: this.oldestUnprocessedAgeS(running),
      watermark: this.messages.decider.watermark(),
      checkpointAt: this.messages.checkpointer?.lastCompleted?.at ?? null,
    };
  }

  private oldestUnprocessedAgeS(running: RunningPipeline | undefined): number {
    const at = this.oldestUnprocessedAt(running);
    return at === null ? 0 : Math.max(0, this.ctx.clock() - at) / 1000;
  }

  /** Reads the broker's view of the consumer (the partition calls it each second while it consumes). */
  async refreshLag(): Promise<void> {
    const { nats, layout, metrics } = this.ctx;
    try {
      const info = await nats.jsm.consumers.info(layout.events.name, this.durable);
      // Acks held for the checkpoint, counted with the broker's figures: those events are processed.
      const held = this.messages.checkpointer?.heldMessages ?? 0;
      const unprocessed = info.num_pending + Math.max(0, info.num_ack_pending - held);
      // The partition's first message past the last one started: nothing after the position was processed
      // (delivered and buffered, held at a barrier, or still at the broker). Its store time ages while
      // nothing is published, which freshness measured at PubAcks cannot show.
      let nextAt: number | null = null;
      if (unprocessed > 0) {
        const next = await nats.jsm.streams
          .getMessage(layout.events.name, {
            // Above the ack floor too: without checkpoints a new owner's position starts below what is acked.
            seq: Math.max(this.messages.position, info.ack_floor.stream_seq) + 1,
            next_by_subj: partitionFilter(layout.subjects.eventsPrefix, this.messages.partition),
          } as unknown as { seq: number })
          .catch(() => null);
        if (next) nextAt = next.time.getTime();
      }
      this.lag = { pending: info.num_pending, ackPending: info.num_ack_pending, held, nextAt };
      this.lagSince = Date.now();
      metrics.partitions.pending.set({ partition: this.messages.label }, info.num_pending);
    } catch (err) {
      this.ctx.logger.debug({ partition: this.messages.partition, err: String(err) }, 'consumer info failed');
    }
  }

  /**
   * Store time (ms) of the oldest message not processed yet: started or waiting in this process, or the
   * next one at the broker (as last read; it keeps ageing while the broker cannot be asked). null: none.
   */
  oldestUnprocessedAt(running: RunningPipeline | undefined): number | null {
    const local = running?.oldestUnsettled?.storedAtMs;
    const next = this.lag.nextAt;
    if (local === undefined) return next;
    return next === null ? local : Math.min(local, next);
  }

  /** Messages of the partition not processed: at the broker, or delivered and not done (held acks are done). */
  get unprocessed(): number {
    return this.lag.pending + Math.max(0, this.lag.ackPending - this.lag.held);
  }
}
