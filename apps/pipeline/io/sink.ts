/**
 * Publishes effects with a Msg-Id and awaits each PubAck. A failed attempt is counted and retried with
 * backoff under the same Msg-Id (the broker drops the copy if an earlier attempt did land); when every
 * attempt failed the caller gets a typed error and must not ack the source message.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import { requirePositiveInt } from '../../../libs/config';
import { invalidOptions, PipelineIoError } from '../errors';
import type { SourceMessage } from './source';
import type { SpoolKind } from './spool-log';

export interface Effect {
  subject: string;
  data: Uint8Array | string;
  /** JetStream dedupe id: the decision id for predictions and alerts. */
  msgId: string;
  /**
   * The effect cut down to at most `maxBytes` (side outputs holding a raw payload): the sink calls it when
   * `data` would exceed the connection's max_payload, which no retry could get past.
   */
  fit?: (maxBytes: number) => string;
  /**
   * Side outputs (dead letters, late records): when every attempt failed, the sink's spool may store it
   * instead, so its source message is acked and never holds its partition (replayed later, same Msg-Id).
   */
  spool?: SpoolKind;
}

/** Where the sink puts a side output the broker would not store (apps/pipeline/io/spool.ts). */
export interface SinkSpool {
  /** True once stored durably (or already pending); false: full or not writable, the caller holds it. */
  put(msgId: string, subject: string, data: string | Uint8Array, kind: SpoolKind): Promise<boolean>;
  /** The broker took this Msg-Id from the sink: a pending copy is retired. */
  landed(msgId: string): void;
}

export interface Published {
  stream: string;
  seq: number;
  /** The broker already held this Msg-Id inside its duplicate window. */
  duplicate: boolean;
  /** Not in the broker yet: stored in the spool, which publishes it later (stream '' and seq 0). */
  spooled?: true;
}

export interface SinkOptions {
  /** PubAck wait per attempt. */
  timeoutMs?: number;
  maxAttempts?: number;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** Injected so tests do not wait real backoff. */
  sleep?: (ms: number) => Promise<void>;
  onPublishFailure?: (effect: Effect, attempt: number, err: unknown) => void;
  /** The connection's max_payload (the server's INFO); undefined: not known, nothing is fitted. */
  maxPayload?: () => number | undefined;
  /** An effect was cut to fit max_payload (its original size in bytes). */
  onFitted?: (effect: Effect, bytes: number) => void;
  /** Takes side outputs (`effect.spool`) that failed every attempt; without one they fail like the rest. */
  spool?: SinkSpool;
}

/** Bytes of a publish besides the payload that count against max_payload: the Msg-Id header block. */
function headerBytes(msgId: string): number {
  return 'NATS/1.0\r\nNats-Msg-Id: \r\n\r\n'.length + Buffer.byteLength(msgId);
}

export interface SinkStats {
  published: number;
  duplicates: number;
  /** Failed attempts, retried or not. */
  publishFailures: number;
  /** Effects given up on after maxAttempts (their source message is naked, not acked). */
  exhausted: number;
}

const realSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class JetStreamSink {
  readonly stats: SinkStats = { published: 0, duplicates: 0, publishFailures: 0, exhausted: 0 };
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly backoffBaseMs: number;
  private readonly backoffMaxMs: number;
  private readonly sleep: (ms: number) => Promise<void>;
  /** Per output stream, the highest sequence a PubAck returned (see lastAcked). */
  private readonly acked = new Map<string, number>();

  constructor(
    private readonly js: JetStreamClient,
    private readonly options: SinkOptions = {},
  ) {
    this.timeoutMs = requirePositiveInt('timeoutMs', options.timeoutMs ?? 5000, 1, invalidOptions);
    this.maxAttempts = requirePositiveInt('maxAttempts', options.maxAttempts ?? 5, 1, invalidOptions);
    this.backoffBaseMs = requirePositiveInt('backoffBaseMs', options.backoffBaseMs ?? 50, 1, invalidOptions);
    this.backoffMaxMs = requirePositiveInt('backoffMaxMs', options.backoffMaxMs ?? 2000, 1, invalidOptions);
    if (this.backoffMaxMs < this.backoffBaseMs) {
      throw new PipelineIoError('invalid_options', 'backoffMaxMs must be >= backoffBaseMs');
    }
    this.sleep = options.sleep ?? realSleep;
  }

  async publish(effect: Effect): Promise<Published> {
    if (effect.msgId === '')
      throw new PipelineIoError('invalid_options', `effect on ${effect.subject} has no msgId`);
    const data = this.fitted(effect);
    let lastError: unknown;
    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      try {
        const ack = await this.js.publish(effect.subject, data, {
          msgID: effect.msgId,
          timeout: this.timeoutMs,
        });
        this.stats.published++;
        if (ack.duplicate) this.stats.duplicates++;
        if (ack.seq > (this.acked.get(ack.stream) ?? 0)) this.acked.set(ack.stream, ack.seq);
        if (effect.spool) this.options.spool?.landed(effect.msgId);
        return { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate };
      } catch (err) {
        lastError = err;
        this.stats.publishFailures++;
        this.options.onPublishFailure?.(effect, attempt, err);
        if (attempt < this.maxAttempts) {
          await this.sleep(Math.min(this.backoffMaxMs, this.backoffBaseMs * 2 ** (attempt - 1)));
        }
      }
    }
    const spool = this.options.spool;
    if (effect.spool && spool && (await spool.put(effect.msgId, effect.subject, data, effect.spool))) {
      return { stream: '', seq: 0, duplicate: false, spooled: true };
    }
    this.stats.exhausted++;
    throw new PipelineIoError(
      'publish_failed',
      `publish to ${effect.subject} (Msg-Id ${effect.msgId}) failed ${this.maxAttempts} times: ${String(lastError)}`,
      { cause: lastError },
    );
  }

  /**
   * The effect's data, cut by its `fit` when it would exceed max_payload. An effect without one that is too
   * large fails at once: the broker would refuse every attempt.
   */
  private fitted(effect: Effect): Uint8Array | string {
    const max = this.options.maxPayload?.();
    if (max === undefined) return effect.data;
    const { data } = effect;
    const room = max - headerBytes(effect.msgId) - 64;
    // A string's UTF-8 is at most 3 bytes per code unit: the common small effect is never measured.
    if ((typeof data === 'string' ? data.length * 3 : data.length) <= room) return data;
    const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.length;
    if (bytes <= room) return data;
    if (!effect.fit)
      throw new PipelineIoError(
        'payload_too_large',
        `publish to ${effect.subject} (Msg-Id ${effect.msgId}): ${bytes} bytes, over the connection's max_payload ${max}`,
      );
    this.options.onFitted?.(effect, bytes);
    return effect.fit(room);
  }

  /**
   * The highest sequence of `stream` a PubAck returned to this sink, or undefined before the first. Anything
   * published after every publish so far was acknowledged lands above it: what a checkpoint taken at a closed
   * barrier needs, without asking the broker (a stream info under load took up to 2.6 s at the barrier).
   */
  lastAcked(stream: string): number | undefined {
    return this.acked.get(stream);
  }

  /** All effects at once; rejects if any one was not acknowledged by the broker. */
  async publishAll(effects: readonly Effect[]): Promise<Published[]> {
    const settled = await Promise.allSettled(effects.map((effect) => this.publish(effect)));
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((s) => (s as PromiseFulfilledResult<Published>).value);
  }
}

/**
 * The exactly-once rule of the pipeline: the source message is acked only after every effect's PubAck
 * resolved. On a publish failure the message is left unacked (the caller naks it) and the error is thrown.
 */
export async function publishThenAck(
  sink: JetStreamSink,
  message: SourceMessage,
  effects: readonly Effect[],
): Promise<Published[]> {
  const published = await sink.publishAll(effects);
  await message.ack();
  return published;
}
