/**
 * Wires source → processor → sink → ack with bounded concurrency. The processor (the event-time engine
 * and inference, later) is injected; it is called in arrival order, and its effects are published
 * before the message is acked. A processor error dead-letters the event (the pipeline never blocks on
 * one bad event), unless it says `retryable` (then the message is naked like a failed publish); a publish failure naks it with a delay so the broker redelivers it, except on its last
 * allowed delivery (max_deliver), where it is dead-lettered instead: the broker would never send it again.
 * Every message the pipeline holds — in flight, at a barrier's gate, or pulled ahead and queued behind a slow
 * processor — gets an in-progress ack once a third of ack_wait has passed since the broker last heard of it: on
 * a loaded host the broker would otherwise redeliver it, again every ack_wait, until max_deliver ran out on an
 * event no processor ever failed. The source is read as fast as it delivers (the broker's max_ack_pending bounds
 * what is pulled ahead; nats.js re-pulls on receipt, not on read), so nothing waits unseen in the client.
 * Redeliveries a slow or stalled host still causes (the event loop or the whole process held past ack_wait) do
 * not dead-letter an event: on its last delivery a failed message is retried in place until the pipeline's own
 * failures of it (publish failures; a retryable processor error, a backend down, is none) reach max_deliver;
 * only then is it a poison message.
 */
import { requirePositiveInt } from '../../libs/config';
import { invalidOptions } from './errors';
import type { SubjectLayout } from './io/layout';
import { deadLetterEffect } from './io/side-outputs';
import { type Effect, type JetStreamSink, type Published, publishThenAck } from './io/sink';
import type { JetStreamSource, SourceMessage } from './io/source';

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
  /**
   * Every effect of the message has its PubAck, or is in the sink's spool (`published[i].spooled`), called
   * before the ack: where freshness is measured.
   */
  onPublished?: (message: SourceMessage, effects: readonly Effect[], published: readonly Published[]) => void;
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
  /** Failures retried in place (retryInPlace, or on a last delivery with processing failures left). */
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
   * settled (published and acked, or naked). Messages pulled meanwhile wait, unacked, kept alive.
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
  const concurrency = requirePositiveInt('concurrency', options.concurrency, 1, invalidOptions);
  const nakDelayMs = requirePositiveInt('nakDelayMs', options.nakDelayMs ?? 1000, 0, invalidOptions);
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
  // Received and not settled (queued, at the gate or in flight), with when the broker last heard of each.
  const touched = new Map<SourceMessage, number>();
  // Checked twice as often as a message is due: a late timer (a loaded host) still touches it within
  // ack_wait / 2, where the old tick-equals-period schedule let drift skip a tick (2/3 of ack_wait untouched).
  const touchAfterMs = Math.max(250, Math.floor(source.ackWaitMs / 3));
  const keepAlive = setInterval(
    () => {
      const now = Date.now();
      for (const [message, at] of touched) {
        if (now - at < touchAfterMs) continue;
        touched.set(message, now);
        try {
          message.working();
        } catch {
          // A closed connection: ack_wait brings the message back, as for a lost ack.
        }
      }
    },
    Math.floor(touchAfterMs / 2),
  );
  keepAlive.unref();
  // Processing failures per stream sequence, over this runner's deliveries of it: what dead-letters an event
  // on its last delivery, rather than the broker's delivery count (which slowness raises too).
  const failures = new Map<number, number>();

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
      const published = await sink.publishAll(list);
      options.onPublished?.(message, list, published);
      await ack(message);
      failures.delete(message.streamSeq);
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
      // A retryable processor error (the backend is down) says nothing against the event: not counted.
      const retryable = (err as { retryable?: unknown } | null)?.retryable === true;
      const failed = (failures.get(message.streamSeq) ?? 0) + (retryable ? 0 : 1);
      failures.set(message.streamSeq, failed);
      if (source.maxDeliver !== -1 && message.deliveryCount >= source.maxDeliver) {
        // The broker sends it no more. Deliveries it made because the host was slow are not failures: retry
        // here (kept alive meanwhile) while this runner's own failures of it are below max_deliver. Stopping,
        // it is dead-lettered as before: nothing would deliver it again.
        if (failed < source.maxDeliver && !stopping) {
          stats.retried++;
          await new Promise((resolve) => setTimeout(resolve, nakDelayMs));
          return handle(message, effectsOf(message), attempt + 1);
        }
        failures.delete(message.streamSeq);
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

  // The source read eagerly into a queue: a message is kept alive from receipt, not from when it is started.
  const queue: SourceMessage[] = [];
  let head = 0;
  let readEnded = false;
  let readFailed = false;
  let readError: unknown;
  let wake: (() => void) | undefined;
  const reading = (async () => {
    try {
      for await (const message of source.messages()) {
        touched.set(message, Date.now());
        queue.push(message);
        wake?.();
      }
    } catch (err) {
      readFailed = true;
      readError = err;
    } finally {
      readEnded = true;
      wake?.();
    }
  })();

  /** The next message in arrival order; undefined once the source ended and the queue is read. */
  async function next(): Promise<SourceMessage | undefined> {
    while (head === queue.length) {
      if (readEnded) {
        if (readFailed) throw readError;
        return undefined;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    const message = queue[head]!;
    queue[head++] = undefined as unknown as SourceMessage;
    if (head === queue.length || head >= 4096) {
      queue.splice(0, head);
      head = 0;
    }
    return message;
  }

  async function loop(): Promise<void> {
    try {
      for (let message = await next(); message; message = await next()) {
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
      await reading;
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
      // Before closing the source: the loop, held at a barrier's gate, would otherwise never get to drop what
      // was pulled ahead and end.
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
