/**
 * Effects for events the pipeline does not predict on. They go through the sink like predictions, so
 * the source message is acked only once its dead letter or late record is stored: never dropped.
 */
import { keySubject, type SubjectLayout } from './layout';
import type { Effect, JetStreamSink, Published } from './sink';
import type { SourceMessage } from './source';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The raw payload as text when it is UTF-8, base64 otherwise: a dead letter must hold any bytes. */
function rawFields(data: Uint8Array): { raw: string } | { raw_base64: string } {
  try {
    return { raw: strictUtf8.decode(data) };
  } catch {
    return { raw_base64: Buffer.from(data).toString('base64') };
  }
}

export interface DeadLetter {
  reason: string;
  raw?: string;
  raw_base64?: string;
  source_subject: string;
  source_stream_seq: number;
  delivery_count: number;
  dead_lettered_at: string;
}

/** Msg-Id from the source position, so a redelivered invalid event is dead-lettered once. */
export function deadLetterEffect(
  subjects: SubjectLayout,
  sourceStream: string,
  message: SourceMessage,
  reason: string,
  now: () => number = Date.now,
): Effect {
  const letter: DeadLetter = {
    reason,
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
  };
}

export interface LateRecord {
  /** The event as received. */
  event: unknown;
  delivery_id: string;
  event_time: string;
  watermark: string;
  allowed_lateness_ms: number;
  source_stream_seq: number;
}

/** Late side output on `<latePrefix>.<delivery_id>`; Msg-Id from the event id. */
export function lateEffect(subjects: SubjectLayout, eventId: string, record: LateRecord): Effect {
  return {
    subject: keySubject(subjects.latePrefix, record.delivery_id),
    data: JSON.stringify(record),
    msgId: `late:${eventId}`,
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
