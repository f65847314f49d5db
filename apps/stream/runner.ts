/**
 * Wires source → processor → sink → ack with bounded concurrency. The processor (the event-time engine
 * and inference, later) is injected; it is called in arrival order, and its effects are published
 * before the message is acked. A processor error dead-letters the event (the pipeline never blocks on
 * one bad event); a publish failure naks it with a delay so the broker redelivers it, except on its last
 * allowed delivery (max_deliver), where it is dead-lettered instead: the broker would never send it again.
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
}

export interface RunnerStats {
  received: number;
  acked: number;
  naked: number;
  deadLettered: number;
  processorErrors: number;
  /** Messages on their last delivery whose effects and dead letter both failed to publish. */
  abandoned: number;
}

export interface RunningPipeline {
  readonly stats: RunnerStats;
  /** Stops pulling, waits for in-flight messages to be published and acked. */
  stop(): Promise<void>;
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
    abandoned: 0,
  };
  const inFlight = new Set<Promise<void>>();
  const { source, sink, subjects } = options;

  async function effectsOf(message: SourceMessage): Promise<Effect[]> {
    try {
      return await options.process(message);
    } catch (err) {
      stats.processorErrors++;
      stats.deadLettered++;
      options.onError?.(err, message);
      const reason = `processor_error: ${err instanceof Error ? err.message : String(err)}`;
      return [deadLetterEffect(subjects, source.stream, message, reason)];
    }
  }

  async function handle(message: SourceMessage, effects: Promise<Effect[]>): Promise<void> {
    try {
      await publishThenAck(sink, message, await effects);
      stats.acked++;
    } catch (err) {
      options.onError?.(err, message);
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
    }
  }

  async function lastDelivery(message: SourceMessage, err: unknown): Promise<void> {
    const reason = `max_deliver_exhausted: ${err instanceof Error ? err.message : String(err)}`;
    try {
      await publishThenAck(sink, message, [deadLetterEffect(subjects, source.stream, message, reason)]);
      stats.deadLettered++;
      stats.acked++;
    } catch (dlqErr) {
      // The event stays in the stream (a new consumer can replay it); counted and reported, not hidden.
      stats.abandoned++;
      options.onError?.(dlqErr, message);
    }
  }

  async function loop(): Promise<void> {
    try {
      for await (const message of source.messages()) {
        stats.received++;
        // Started here, before any await, so the processor sees messages in arrival order.
        const task = handle(message, effectsOf(message)).finally(() => inFlight.delete(task));
        inFlight.add(task);
        while (inFlight.size >= concurrency) await Promise.race(inFlight);
      }
    } finally {
      await Promise.allSettled(inFlight);
    }
  }

  const done = loop();
  return {
    stats,
    done,
    async stop() {
      await source.stop();
      await done;
    },
  };
}
