/**
 * Effects for events the pipeline does not predict on. They go through the sink like predictions, so
 * the source message is acked only once its dead letter or late record is stored: never dropped.
 *
 * A side output must always be publishable, whatever the event held: one that would not fit the broker's
 * max_payload (a 1 MB body; 200 KB of control characters, each `\u0001` once escaped) is given to the sink
 * with a `fit` that keeps the payload's start and says what was cut (its length and SHA-256), so it never
 * fails its publish for good and never holds its partition's position. One the broker refuses for another
 * reason (the side stream deleted, permissions, storage full) goes to the sink's spool (apps/pipeline/io/spool.ts)
 * and is published from there once the broker takes it: its source message is acked all the same.
 */
import { createHash } from 'node:crypto';
import { keySubject, type SubjectLayout } from './layout';
import type { Effect, JetStreamSink, Published } from './sink';
import type { SourceMessage } from './source';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
/** A reason is a short text (`<field>: <problem>`, an error message): longer ones are cut. */
const MAX_REASON_CHARS = 1024;

/** Why a dead letter was written: the label of `streaminfer_stream_dead_letters_total`. */
export type DeadLetterKind = 'invalid' | 'processor_error' | 'max_deliver';

/** A dead letter's effect: counted by its kind once its PubAck is in. */
export interface DeadLetterEffect extends Effect {
  deadLetter: DeadLetterKind;
}

export function isDeadLetter(effect: Effect): effect is DeadLetterEffect {
  return (effect as Partial<DeadLetterEffect>).deadLetter !== undefined;
}

/** What a side output says of the received payload: as text when UTF-8, base64 otherwise. */
interface RawFields {
  raw?: string;
  raw_base64?: string;
  /** The received payload's length in bytes. */
  raw_bytes: number;
  /** Set when only the payload's start is kept (the whole would not fit the broker). */
  raw_truncated?: true;
  /** SHA-256 (hex) of the whole received payload, when truncated. */
  raw_sha256?: string;
}

/** The raw payload as text when it is UTF-8, base64 otherwise: a dead letter must hold any bytes. */
function rawFields(data: Uint8Array): RawFields {
  try {
    return { raw: strictUtf8.decode(data), raw_bytes: data.length };
  } catch {
    return { raw_base64: Buffer.from(data).toString('base64'), raw_bytes: data.length };
  }
}

/** UTF-8 bytes of `s` as a JSON string's content (quotes excluded). */
function escapedBytes(s: string): number {
  return Buffer.byteLength(JSON.stringify(s)) - 2;
}

/** The longest start of `text` whose escaped form fits `budget` bytes (never half a surrogate pair). */
function textPrefix(text: string, budget: number): string {
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (escapedBytes(text.slice(0, mid)) <= budget) lo = mid;
    else hi = mid - 1;
  }
  const last = text.charCodeAt(lo - 1);
  if (lo > 0 && last >= 0xd800 && last <= 0xdbff) lo--;
  return text.slice(0, lo);
}

/**
 * `record` (holding `raw` or `raw_base64` of `data`) as JSON of at most `maxBytes` bytes: the raw field cut
 * to what fits beside the rest, marked truncated with the whole payload's digest. The rest is small (ids,
 * a clipped reason, times): only a max_payload below about 2 KB could leave no room at all.
 */
function fitRaw(record: Record<string, unknown> & RawFields, data: Uint8Array, maxBytes: number): string {
  const whole = JSON.stringify(record);
  if (Buffer.byteLength(whole) <= maxBytes) return whole;
  const cut: Record<string, unknown> & RawFields = {
    ...record,
    raw_truncated: true,
    raw_sha256: createHash('sha256').update(data).digest('hex'),
  };
  const isText = record.raw !== undefined;
  if (isText) cut.raw = '';
  else cut.raw_base64 = '';
  const budget = Math.max(0, maxBytes - Buffer.byteLength(JSON.stringify(cut)));
  if (isText) cut.raw = textPrefix(record.raw!, budget);
  else cut.raw_base64 = Buffer.from(data.subarray(0, Math.floor(budget / 4) * 3)).toString('base64');
  return JSON.stringify(cut);
}

export interface DeadLetter extends RawFields {
  reason: string;
  source_subject: string;
  source_stream_seq: number;
  delivery_count: number;
  dead_lettered_at: string;
}

function kindOf(reason: string): DeadLetterKind {
  if (reason.startsWith('processor_error')) return 'processor_error';
  if (reason.startsWith('max_deliver')) return 'max_deliver';
  return 'invalid';
}

/** Msg-Id from the source position, so a redelivered invalid event is dead-lettered once. */
export function deadLetterEffect(
  subjects: SubjectLayout,
  sourceStream: string,
  message: SourceMessage,
  reason: string,
  now: () => number = Date.now,
): DeadLetterEffect {
  const letter: DeadLetter = {
    reason: reason.length > MAX_REASON_CHARS ? `${reason.slice(0, MAX_REASON_CHARS)}…` : reason,
    ...rawFields(message.data),
    source_subject: message.subject,
    source_stream_seq: message.streamSeq,
    delivery_count: message.deliveryCount,
    dead_lettered_at: new Date(now()).toISOString(),
  };
  return {
    subject: subjects.deadLetterSubject,
    data: JSON.stringify(letter),
    msgId: `dlq:${sourceStream}:${message.streamSeq}`,
    fit: (maxBytes) => fitRaw({ ...letter }, message.data, maxBytes),
    deadLetter: kindOf(reason),
    spool: kindOf(reason),
  };
}

export interface LateRecord {
  /** The event as received (absent when the record would not fit the broker: `raw` then holds its start). */
  event?: unknown;
  delivery_id: string;
  event_time: string;
  watermark: string;
  allowed_lateness_ms: number;
  source_stream_seq: number;
}

/**
 * Late side output on `<latePrefix>.<delivery_id>`; Msg-Id from the event id. `raw` is the payload as
 * received: a record too large for the broker carries its start instead of `event`.
 */
export function lateEffect(
  subjects: SubjectLayout,
  eventId: string,
  record: LateRecord,
  raw?: Uint8Array,
): Effect {
  return {
    subject: keySubject(subjects.latePrefix, record.delivery_id),
    data: JSON.stringify(record),
    msgId: `late:${eventId}`,
    spool: 'late',
    ...(raw
      ? {
          fit: (maxBytes: number) => {
            const { event: _event, ...rest } = record;
            return fitRaw({ ...rest, ...rawFields(raw) }, raw, maxBytes);
          },
        }
      : {}),
  };
}

export function publishDeadLetter(
  sink: JetStreamSink,
  subjects: SubjectLayout,
  sourceStream: string,
  message: SourceMessage,
  reason: string,
): Promise<Published> {
  return sink.publish(deadLetterEffect(subjects, sourceStream, message, reason));
}
