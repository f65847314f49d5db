/**
 * What the `stream-chaos` scenario reads from the broker: every prediction in an output stream with its
 * Msg-Id header and stored time (to compare two runs decision by decision), the consumer's ack floor while
 * the victim is down, and the cleanup of the checkpoint buckets (`OBJ_<bucket>`, `KV_<bucket>_head`).
 */
import { DeliverPolicy } from '@nats-io/jetstream';
import type { NatsHandle } from '../../apps/pipeline';
import type { OutputRecord } from './chaos-analysis';

const text = new TextDecoder();

interface PredictionBody {
  decision_id?: string;
  event_id?: string;
  event_time?: string;
  risk?: number;
  revision?: number;
}

/** Every prediction on `filter` in `stream`, in order (an ordered consumer up to the last sequence now). */
export async function readOutputs(nats: NatsHandle, stream: string, filter: string): Promise<OutputRecord[]> {
  const out: OutputRecord[] = [];
  const until = (await nats.jsm.streams.info(stream)).state.last_seq;
  if (until === 0) return out;
  const consumer = await nats.js.consumers.get(stream, {
    filter_subjects: filter,
    deliver_policy: DeliverPolicy.All,
  });
  const messages = await consumer.consume({ max_messages: 4096 });
  let idle: NodeJS.Timeout | undefined;
  const arm = (): void => {
    clearTimeout(idle);
    // nothing more matches the filter: stop waiting
    idle = setTimeout(() => void messages.close(), 5000);
  };
  arm();
  try {
    for await (const m of messages) {
      arm();
      const body = JSON.parse(text.decode(m.data)) as PredictionBody;
      out.push({
        decisionId: body.decision_id ?? '',
        msgId: m.headers?.get('Nats-Msg-Id') || undefined,
        risk: typeof body.risk === 'number' ? body.risk : Number.NaN,
        revision: typeof body.revision === 'number' ? body.revision : -1,
        eventId: body.event_id ?? '',
        eventMs: typeof body.event_time === 'string' ? Date.parse(body.event_time) : Number.NaN,
        storedMs: Number(m.info.timestampNanos) / 1e6,
      });
      if (m.seq >= until || m.info.pending === 0) break;
    }
  } finally {
    clearTimeout(idle);
    await messages.close().catch(() => undefined);
  }
  return out;
}

/** The durable's ack floor (stream sequence; everything up to it is acked), undefined when unknown. */
export async function ackFloor(
  nats: NatsHandle,
  stream: string,
  durable: string,
): Promise<number | undefined> {
  try {
    return (await nats.jsm.consumers.info(stream, durable)).ack_floor.stream_seq;
  } catch {
    return undefined;
  }
}

/** Deletes a checkpoint bucket's two streams (the object store and the pointer KV); missing ones are fine. */
export async function deleteCheckpointBuckets(nats: NatsHandle, bucket: string): Promise<void> {
  for (const s of [`OBJ_${bucket}`, `KV_${bucket}_head`])
    await nats.jsm.streams.delete(s).catch(() => undefined);
}

/** Stream names containing `tag` still on the broker (a cleanup check). */
export async function leftovers(nats: NatsHandle, tag: string): Promise<string[]> {
  const names: string[] = [];
  for await (const s of nats.jsm.streams.names()) if (s.includes(tag)) names.push(s);
  return names;
}
