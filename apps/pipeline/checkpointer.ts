/**
 * The pipeline's checkpoints (aligned, like Flink's barrier): close the runner's barrier so every message
 * started is published, snapshot the decider with the source position and the output streams' last
 * sequences, reopen, then write the checkpoint and — only once it is the restore point — ack the messages it
 * covers. Until then their acks are held, so after a crash the broker still holds exactly the span since the
 * last completed checkpoint. On restore, what the output streams gained after the checkpoint is read back
 * (their Msg-Ids), and replayed effects already there are not published again: exactly once even when the
 * replay reaches beyond the broker's duplicate window.
 */

import { setImmediate as yieldToIo } from 'node:timers/promises';
import { DeliverPolicy, JetStreamApiError } from '@nats-io/jetstream';
import type { Logger } from 'pino';
import type { SnapshotJob } from '../../libs/delivery';
import type { NatsHandle } from './connection';
import type { ModelPin } from './inference/inference';
import { CHECKPOINT_VERSION, type Checkpoint, CheckpointStore } from './io/checkpoints';
import type { StreamLayout } from './io/layout';
import type { Effect } from './io/sink';
import type { SourceMessage } from './io/source';
import type { CheckpointMetrics } from './metrics';

/** What a checkpoint reads of the pipeline, at the barrier: the decider's state as a snapshot job begun there. */
export interface CheckpointState {
  state: SnapshotJob;
  position: number;
  pin: ModelPin;
  epoch: number;
}

export interface CompletedCheckpoint {
  id: number;
  position: number;
  at: number;
  bytes: number;
  durationMs: number;
}

interface Taken {
  id: number;
  position: number;
  /** The checkpoint's JSON up to its state, which the job completes. */
  prefix: string;
  job: SnapshotJob;
  held: SourceMessage[];
  startedAt: number;
  /** Barrier alignment and the snapshot's head, ms. */
  pausedMs: number;
}

const encoder = new TextEncoder();
/** JetStream's "stream not found". */
const STREAM_NOT_FOUND = 10059;
/** Keys captured between checks of the slice's time budget. */
const KEYS_PER_CHECK = 32;
/** How long one slice of an incremental snapshot may hold the event loop before yielding to I/O. */
const SLICE_MS = 4;

export class Checkpointer {
  private held: SourceMessage[] = [];
  private nextId = 1;
  /** Msg-Ids the output streams gained after the restored checkpoint. */
  private readonly publishedSince = new Set<string>();
  /**
   * The restored checkpoint's output sequences and the end of the replay after it. A checkpoint taken before
   * the replay is done must keep both: the span it has still to replay had its effects published before the
   * restore, so the read-back (this process's, and a later restore's) has to start where the restored one did.
   */
  private restoredOutputs: Checkpoint['outputs'] | undefined;
  private replayUntil = 0;
  private inProgress: Promise<void> | undefined;
  /** Messages of taken checkpoints not yet persisted (or given back to `held`). */
  private writing = 0;
  lastCompleted: CompletedCheckpoint | undefined;

  private constructor(
    private readonly store: CheckpointStore,
    private readonly nats: NatsHandle,
    private readonly layout: StreamLayout,
    private readonly metrics: CheckpointMetrics,
    private readonly logger: Logger,
    private readonly clock: () => number,
    /** Still the partition's owner (its lease): checked before the pointer moves. */
    private readonly fence: () => boolean,
    /** The sink's highest PubAck sequence per output stream (undefined: none yet). */
    private readonly lastAcked: (stream: string) => number | undefined,
  ) {}

  static async open(
    nats: NatsHandle,
    bucket: string,
    pipeline: string,
    partition: string,
    layout: StreamLayout,
    metrics: CheckpointMetrics,
    logger: Logger,
    clock: () => number,
    fence: () => boolean = () => true,
    lastAcked: (stream: string) => number | undefined = () => undefined,
  ): Promise<Checkpointer> {
    const store = await CheckpointStore.open(nats.js, bucket, pipeline, partition, nats.replicas);
    return new Checkpointer(store, nats, layout, metrics, logger, clock, fence, lastAcked);
  }

  /** The stream sequence the restored partition replays up to (what the previous owner had been handed). */
  setReplayUntil(seq: number): void {
    this.replayUntil = seq;
  }

  /** Acks held: for the next checkpoint, and those of a checkpoint being written (acked once it completes). */
  get heldMessages(): number {
    return this.held.length + this.writing;
  }

  /** The latest completed checkpoint (null: none), with the Msg-Ids published after it loaded for filter(). */
  async restore(): Promise<Checkpoint | null> {
    const checkpoint = await this.store.latest();
    if (!checkpoint) return null;
    this.nextId = checkpoint.id + 1;
    this.restoredOutputs = checkpoint.outputs;
    await this.readPublishedSince(this.layout.predictions.name, checkpoint.outputs.predictions);
    await this.readPublishedSince(this.layout.side.name, checkpoint.outputs.side);
    this.lastCompleted = {
      id: checkpoint.id,
      position: checkpoint.position,
      at: Date.parse(checkpoint.createdAt),
      bytes: 0,
      durationMs: 0,
    };
    return checkpoint;
  }

  /** The runner's ack: held until a checkpoint covers the message. */
  readonly hold = (message: SourceMessage): Promise<void> => {
    this.held.push(message);
    return Promise.resolve();
  };

  /** Effects not already in the output streams since the restored checkpoint (a replay's repeats dropped). */
  filter(effects: Effect[]): Effect[] {
    if (this.publishedSince.size === 0) return effects;
    const out = effects.filter((e) => !this.publishedSince.has(e.msgId));
    if (out.length < effects.length) this.metrics.replayDeduplicated.inc(effects.length - out.length);
    return out;
  }

  /**
   * Must run while the runner's barrier is closed (nothing in flight): what the checkpoint covers and the
   * snapshot job begun at that point. The state itself is captured by persist(), or by serialize() after
   * the barrier has opened again (the job keeps it as of now).
   */
  async takeWhilePaused(read: () => CheckpointState, pausedSince?: number): Promise<Taken> {
    const startedAt = pausedSince ?? this.clock();
    // Every effect of this partition so far is acknowledged (the barrier is closed), and the PubAcks say where
    // they landed: a later effect can only land above the highest of them. What lies between it and the
    // stream's end belongs to other partitions and is read back harmlessly after a restore.
    const [predictions, side] = await Promise.all([
      this.outputPosition(this.layout.predictions.name),
      this.outputPosition(this.layout.side.name),
    ]);
    const s = read();
    const replaying = this.restoredOutputs !== undefined && s.position < this.replayUntil;
    const header: Omit<Checkpoint, 'state'> = {
      version: CHECKPOINT_VERSION,
      id: this.nextId++,
      createdAt: new Date(this.clock()).toISOString(),
      position: s.position,
      outputs: replaying ? this.restoredOutputs! : { predictions, side },
      pin: s.pin,
      epoch: s.epoch,
    };
    const prefix = `${JSON.stringify(header).slice(0, -1)},"state":`;
    const held = this.held;
    this.held = [];
    this.writing += held.length;
    return {
      id: header.id,
      position: s.position,
      prefix,
      job: s.state,
      held,
      startedAt,
      pausedMs: this.clock() - startedAt,
    };
  }

  /**
   * Captures the snapshot's keys in slices of a few ms, yielding to I/O between them: the partitions go on
   * processing, and each key is captured before it changes (the job's copy-on-write), so the state written
   * is the barrier's. The cost of a large state is spread instead of stalling the process.
   */
  async serialize(taken: Taken): Promise<void> {
    try {
      for (;;) {
        const until = performance.now() + SLICE_MS;
        let done = taken.job.step(KEYS_PER_CHECK);
        while (!done && performance.now() < until) done = taken.job.step(KEYS_PER_CHECK);
        if (done) return;
        await yieldToIo();
      }
    } catch (err) {
      taken.job.cancel();
      throw err;
    }
  }

  /** Where a stream's effects published after now will land above; the broker is asked only before any PubAck. */
  private async outputPosition(stream: string): Promise<number> {
    const acked = this.lastAcked(stream);
    if (acked !== undefined) return acked;
    try {
      return (await this.nats.jsm.streams.info(stream)).state.last_seq;
    } catch (err) {
      // The side stream deleted under a running pipeline (its outputs go to the spool meanwhile): nothing of
      // this partition is in it, and one made again starts at 1. Checkpoints, and so acks, go on.
      if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return 0;
      throw err;
    }
  }

  /** A checkpoint that will not complete: its messages wait for the next one. */
  private giveBack(taken: Taken): void {
    this.writing -= taken.held.length;
    this.held = taken.held.concat(this.held);
  }

  /** Writes a taken checkpoint; on success acks what it covers, on failure keeps holding it for the next. */
  async persist(taken: Taken): Promise<boolean> {
    let bytes: Uint8Array;
    try {
      bytes = encoder.encode(`${taken.prefix}${taken.job.finish()}}`);
      await this.store.save(taken.id, taken.position, bytes, this.fence);
    } catch (err) {
      this.giveBack(taken);
      this.metrics.failures.inc();
      this.logger.error({ id: taken.id, err: String(err) }, 'checkpoint failed; its messages stay unacked');
      return false;
    }
    this.writing -= taken.held.length;
    for (const message of taken.held) message.ack().catch(() => undefined);
    // A later restore starts from this checkpoint: what was published before it cannot come back — unless
    // the replay is not done, whose effects were published before the restore.
    if (taken.position >= this.replayUntil) {
      this.publishedSince.clear();
      this.restoredOutputs = undefined;
    }
    const now = this.clock();
    const durationMs = now - taken.startedAt;
    this.lastCompleted = {
      id: taken.id,
      position: taken.position,
      at: now,
      bytes: bytes.length,
      durationMs,
    };
    this.metrics.duration.observe(durationMs / 1000);
    this.metrics.pause.observe(taken.pausedMs / 1000);
    this.metrics.bytes.set(bytes.length);
    this.metrics.written.inc(bytes.length);
    this.metrics.position.set(taken.position);
    this.logger.info(
      {
        checkpoint: taken.id,
        position: taken.position,
        bytes: bytes.length,
        ms: durationMs,
        pausedMs: taken.pausedMs,
        acked: taken.held.length,
      },
      'checkpoint completed',
    );
    return true;
  }

  /** One checkpoint through the given barrier; at most one at a time (a tick that finds one running skips). */
  run(barrier: { pause(): Promise<void>; resume(): void }, read: () => CheckpointState): Promise<void> {
    if (this.inProgress) return this.inProgress;
    const run = (async () => {
      const pausedSince = this.clock();
      await barrier.pause();
      let taken: Taken;
      try {
        taken = await this.takeWhilePaused(read, pausedSince);
      } finally {
        barrier.resume();
      }
      try {
        await this.serialize(taken);
      } catch (err) {
        this.giveBack(taken);
        throw err;
      }
      await this.persist(taken);
    })().catch((err: unknown) => {
      this.metrics.failures.inc();
      this.logger.error({ err: String(err) }, 'checkpoint failed');
    });
    this.inProgress = run.finally(() => {
      this.inProgress = undefined;
    });
    return this.inProgress;
  }

  private async readPublishedSince(stream: string, afterSeq: number): Promise<void> {
    let info: Awaited<ReturnType<typeof this.nats.jsm.streams.info>>;
    try {
      info = await this.nats.jsm.streams.info(stream);
    } catch (err) {
      // The side stream deleted (a partition moving meanwhile): nothing to read back; what the replay
      // dead-letters again goes to the spool under the same Msg-Ids, which the broker dedupes.
      if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return;
      throw err;
    }
    const last = info.state.last_seq;
    if (last <= afterSeq) return;
    const consumer = await this.nats.js.consumers.get(stream, {
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: afterSeq + 1,
    });
    const messages = await consumer.consume();
    for await (const m of messages) {
      const id = m.headers?.get('Nats-Msg-Id');
      if (id) this.publishedSince.add(id);
      if (m.seq >= last) break;
    }
    await messages.close();
    this.logger.info(
      { stream, after: afterSeq, ids: this.publishedSince.size },
      'read back what was published after the checkpoint',
    );
  }
}
