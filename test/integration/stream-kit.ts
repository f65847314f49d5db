/**
 * What the stream tests share: the broker address, unique stream names and subject roots per test (deleted
 * after), reading a stream back, waiting on a condition.
 */
import { type ConsumerMessages, DeliverPolicy } from '@nats-io/jetstream';
import type { NatsHandle } from '../../apps/stream';

export const NATS_URL = process.env['STREAMINFER_TEST_NATS'] ?? 'nats://127.0.0.1:4222';

export interface StreamNames {
  tag: string;
  events: string;
  predictions: string;
  side: string;
}

let counter = 0;

/** Names no other test (or run) uses; remember to delete them (deleteStreams). */
export function uniqueNames(prefix: string): StreamNames {
  const tag = `${prefix}${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
  return { tag, events: `${tag}_EVENTS`, predictions: `${tag}_PREDICTIONS`, side: `${tag}_SIDE` };
}

export async function deleteStreams(nats: NatsHandle, names: StreamNames[]): Promise<void> {
  for (const n of names)
    for (const s of [n.events, n.predictions, n.side])
      await nats.jsm.streams.delete(s).catch(() => undefined);
}

export interface StoredMessage {
  subject: string;
  data: Uint8Array;
  msgId?: string;
  json<T = Record<string, unknown>>(): T;
}

const text = new TextDecoder();

/** Every message of a stream (optionally of one subject filter), in order. */
export async function readStream(
  nats: NatsHandle,
  stream: string,
  filter?: string,
): Promise<StoredMessage[]> {
  const info = await nats.jsm.streams.info(stream, filter ? { subjects_filter: filter } : undefined);
  const total = filter
    ? Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)
    : info.state.messages;
  const out: StoredMessage[] = [];
  if (total === 0) return out;
  const consumer = await nats.js.consumers.get(stream, {
    deliver_policy: DeliverPolicy.All,
    ...(filter ? { filter_subjects: filter } : {}),
  });
  const messages: ConsumerMessages = await consumer.consume();
  for await (const m of messages) {
    const msgId = m.headers?.get('Nats-Msg-Id');
    const data = m.data;
    out.push({
      subject: m.subject,
      data,
      ...(msgId ? { msgId } : {}),
      json: <T>() => JSON.parse(text.decode(data)) as T,
    });
    if (out.length >= total) break;
  }
  await messages.close();
  return out;
}

export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
