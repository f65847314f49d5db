/**
 * Wires source → processor → sink → ack with bounded concurrency. The processor (the event-time engine
 * and inference, later) is injected; it is called in arrival order, and its effects are published
 * before the message is acked. A processor error dead-letters the event (the pipeline never blocks on
 * one bad event), unless it says `retryable` (then the message is naked like a failed publish); a publish failure naks it with a delay so the broker redelivers it, except on its last
 * allowed delivery (max_deliver), where it is dead-lettered instead: the broker would never send it again.
 * A message still in flight after a third of ack_wait gets an in-progress ack: on a loaded host the broker
 * would otherwise redeliver work already under way — more load, and deliveries counted towards max_deliver
 * that no processor ever failed.
 */
import { requirePositiveInt } from './errors';
import type { SubjectLayout } from './layout';
import { deadLetterEffect } from './side-outputs';
import { type Effect, type JetStreamSink, publishThenAck } from './sink';
import type { JetStreamSource, SourceMessage } from './source';

export type Processor = (message: SourceMessage) => Effect[] | Promise<Effect[]>;

export interface RunnerOptions {
  source: JetStreamSource;
  sink: JetStreamSink;
  subjects: SubjectLayout;
  process: Processor;
  /** Messages between receipt and ack at once; keep it <= the consumer's max_ack_pending. */
  concurrency: number;
  /** Redelivery delay after a failed publish. */
  nakDelayMs?: number;
  onError?: (err: unknown, message: SourceMessage) => void;
  /** Every effect of the message has its PubAck (called before the ack): where freshness is measured. */
  onPublished?: (message: SourceMessage, effects: readonly Effect[]) => void;
  /**
   * How a message is acked once its effects are stored (default: message.ack()). A checkpointing pipeline
   * holds it instead and acks at the next completed checkpoint.
   */
  ack?: (message: SourceMessage) => Promise<void>;
  /**
   * On a failure, retry the message here after nakDelayMs instead of naking it: the broker then delivers in
   * stream order only (a checkpoint's position means "everything up to here").
   */
  retryInPlace?: boolean;
  /** The message is done with: acked (effects or dead letter stored), naked (to come back) or abandoned. */
  onSettled?: (message: SourceMessage, outcome: 'acked' | 'naked' | 'abandoned') => void;
}

export interface RunnerStats {
  received: number;
  acked: number;
  naked: number;
  deadLettered: number;
  processorErrors: number;
  /** Failures retried in place (retryInPlace). */
  retried: number;
  /** Messages on their last delivery whose effects and dead letter both failed to publish. */
  abandoned: number;
}

export interface RunningPipeline {
  readonly stats: RunnerStats;
  /** Stops pulling, waits for in-flight messages to be published and acked. */
  stop(): Promise<void>;
  /** stop(), but a message failing in its retry-in-place loop is given up (left unacked), not retried. */
  abort(): Promise<void>;
  /**
   * A barrier: no new message is started until resume(); resolves once every message already started is
   * settled (published and acked, or naked). Messages pulled meanwhile wait, unacked, inside ack_wait.
   */
  pause(): Promise<void>;
  resume(): void;
  /** Messages started and not yet settled. */
  readonly inFlight: number;
  /** The earliest received of the messages not settled (started or held at a barrier); undefined: none. */
  readonly oldestUnsettled: SourceMessage | undefined;
  /** stop() or abort() was called. */
  readonly stopping: boolean;
  /** Settles when the source ends (after stop()) and nothing is in flight; rejects on a source error. */
  readonly done: Promise<void>;
}

export function runPipeline(options: RunnerOptions): RunningPipeline {
  const concurrency = requirePositiveInt('concurrency', options.concurrency);
  const nakDelayMs = requirePositiveInt('nakDelayMs', options.nakDelayMs ?? 1000, 0);
  const stats: RunnerStats = {
    received: 0,
    acked: 0,
    naked: 0,
    deadLettered: 0,
    processorErrors: 0,
    retried: 0,
    abandoned: 0,
  };
  const inFlight = new Set<Promise<void>>();
  const { source, sink, subjects } = options;
  // Started (or waiting at the gate) and not settled, with when the broker last heard of each.
  const touched = new Map<SourceMessage, number>();
  const touchEveryMs = Math.max(250, Math.floor(source.ackWaitMs / 3));
  const keepAlive = setInterval(() => {
    const now = Date.now();
    for (const [message, at] of touched) {
      if (now - at < touchEveryMs) continue;
      touched.set(message, now);
      try {
        message.working();
      } catch {
        // A closed connection: ack_wait brings the message back, as for a lost ack.
      }
    }
  }, touchEveryMs);
  keepAlive.unref();

  async function effectsOf(message: SourceMessage): Promise<Effect[]> {
    try {
      return await options.process(message);
    } catch (err) {
      // A processor that could not finish for now (its backend is down) gets the message redelivered.
      if ((err as { retryable?: unknown } | null)?.retryable === true) throw err;
      stats.processorErrors++;
      stats.deadLettered++;
      options.onError?.(err, message);
      const reason = `processor_error: ${err instanceof Error ? err.message : String(err)}`;
      return [deadLetterEffect(subjects, source.stream, message, reason)];
    }
  }

  const ack = options.ack ?? ((message: SourceMessage) => message.ack());

  async function handle(message: SourceMessage, effects: Promise<Effect[]>, attempt = 0): Promise<void> {
    try {
      const list = await effects;
      await sink.publishAll(list);
      options.onPublished?.(message, list);
      await ack(message);
      stats.acked++;
      options.onSettled?.(message, 'acked');
    } catch (err) {
      options.onError?.(err, message);
      if (options.retryInPlace) {
        // Aborted (the partition is no longer ours): leave it unacked for the next owner to replay.
        if (aborted) {
          stats.abandoned++;
          options.onSettled?.(message, 'abandoned');
          return;
        }
        // Keep the message (its position must not be passed by a redelivery): try it again here.
        // Short backoff first: a checkpoint's barrier waits for this message.
        stats.retried++;
        await new Promise((resolve) => setTimeout(resolve, Math.min(nakDelayMs, 25 * 2 ** attempt)));
        return handle(message, effectsOf(message), attempt + 1);
      }
      if (source.maxDeliver !== -1 && message.deliveryCount >= source.maxDeliver) {
        await lastDelivery(message, err);
        return;
      }
      // Not acked: the broker redelivers it after the delay (or after ack_wait if the nak is lost).
      stats.naked++;
      try {
        message.nak(nakDelayMs);
      } catch (nakErr) {
        // A closed connection cannot nak: ack_wait brings the message back all the same.
        options.onError?.(nakErr, message);
      }
      options.onSettled?.(message, 'naked');
    }
  }

  async function lastDelivery(message: SourceMessage, err: unknown): Promise<void> {
    const reason = `max_deliver_exhausted: ${err instanceof Error ? err.message : String(err)}`;
    try {
      await publishThenAck(sink, message, [deadLetterEffect(subjects, source.stream, message, reason)]);
      stats.deadLettered++;
      stats.acked++;
      options.onSettled?.(message, 'acked');
    } catch (dlqErr) {
      // The event stays in the stream (a new consumer can replay it); counted and reported, not hidden.
      stats.abandoned++;
      options.onError?.(dlqErr, message);
      options.onSettled?.(message, 'abandoned');
    }
  }

  async function loop(): Promise<void> {
    try {
      for await (const message of source.messages()) {
        touched.set(message, Date.now());
        while (gate && !stopping) await gate.promise;
        if (stopping) {
          // Pulled ahead, never started: left unacked (the iterator only ends once its buffer is read). A nak
          // would not help: the closed consumer's pull requests stay open at the broker until they expire.
          touched.delete(message);
          continue;
        }
        stats.received++;
        // Started here, before any await, so the processor sees messages in arrival order.
        const task = handle(message, effectsOf(message)).finally(() => {
          inFlight.delete(task);
          touched.delete(message);
        });
        inFlight.add(task);
        while (inFlight.size >= concurrency) await Promise.race(inFlight);
      }
    } finally {
      await Promise.allSettled(inFlight);
      clearInterval(keepAlive);
    }
  }

  let gate: { promise: Promise<void>; open: () => void } | undefined;
  let aborted = false;
  let stopping = false;
  const done = loop();
  return {
    stats,
    done,
    get inFlight() {
      return inFlight.size;
    },
    get oldestUnsettled() {
      // Insertion order: a keep-alive's set() on a present key does not move it.
      return touched.keys().next().value;
    },
    get stopping() {
      return stopping;
    },
    async stop() {
      // Before closing the source: its close() resolves only once the loop has read what was pulled ahead,
      // and a loop held at a barrier's gate would never read it.
      stopping = true;
      gate?.open();
      await source.stop();
      await done;
    },
    async abort() {
      aborted = true;
      await this.stop();
    },
    async pause() {
      if (!gate) {
        let open = () => {};
        const promise = new Promise<void>((resolve) => {
          open = resolve;
        });
        gate = { promise, open };
      }
      await Promise.allSettled(inFlight);
    },
    resume() {
      const g = gate;
      gate = undefined;
      g?.open();
    },
  };
}
