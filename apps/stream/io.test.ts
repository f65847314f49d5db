/** The broker-free parts of the JetStream I/O layer: contract defaults, option checks, retry arithmetic. */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { StreamIoError } from './errors';
import { keySubject, layoutStreams, streamLayout } from './layout';
import { deadLetterEffect, lateEffect } from './side-outputs';
import { JetStreamSink } from './sink';
import { hashPartitioner, type SourceMessage } from './source';

function message(data: Uint8Array | string, overrides: Partial<SourceMessage> = {}): SourceMessage {
  return {
    data: typeof data === 'string' ? new TextEncoder().encode(data) : data,
    subject: 'delivery.events.order-1',
    streamSeq: 42,
    deliveryCount: 1,
    partition: '0',
    storedAtMs: 0,
    ack: async () => undefined,
    nak: () => undefined,
    term: () => undefined,
    working: () => undefined,
    ...overrides,
  };
}

describe('stream layout', () => {
  test('defaults are the public contract', () => {
    const layout = streamLayout();
    expect(layoutStreams(layout).map((s) => [s.name, s.subjects])).toEqual([
      ['DELIVERY_EVENTS', ['delivery.events.>']],
      ['DELIVERY_PREDICTIONS', ['delivery.predictions.>', 'delivery.alerts.>', 'delivery.epochs']],
      ['DELIVERY_SIDE', ['delivery.late.>', 'delivery.dlq']],
    ]);
    expect(layout.subjects.deadLetterSubject).toBe('delivery.dlq');
    expect(layout.events.duplicateWindowMs).toBe(120_000);
  });

  test('a subject root keeps tests and tenants apart', () => {
    const layout = streamLayout({ subjectRoot: 'test.a1', eventsStream: 'E1' });
    expect(layout.events).toMatchObject({ name: 'E1', subjects: ['test.a1.delivery.events.>'] });
    expect(() => streamLayout({ subjectRoot: 'bad.>' })).toThrow(StreamIoError);
  });

  test('options are refused before any I/O', () => {
    expect(() => streamLayout({ predictionsStream: 'has space' })).toThrow(/predictionsStream/);
    expect(() => streamLayout({ duplicateWindowMs: 999 })).toThrow(/duplicateWindowMs/);
    expect(() => streamLayout({ maxBytes: 0 })).toThrow(/maxBytes/);
  });

  test('a key that is not one subject token is refused', () => {
    expect(keySubject('delivery.events', 'order-482')).toBe('delivery.events.order-482');
    for (const bad of ['', 'a.b', 'a b', '*', '>']) expect(() => keySubject('p', bad)).toThrow(StreamIoError);
  });
});

describe('partitions', () => {
  test('the hash partitioner is stable and within range', () => {
    const partitionOf = hashPartitioner(4);
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const p = partitionOf(`delivery.events.order-${i}`);
      expect(partitionOf(`other.prefix.order-${i}`)).toBe(p);
      seen.add(p);
    }
    expect([...seen].sort()).toEqual(['0', '1', '2', '3']);
    expect(() => hashPartitioner(0)).toThrow(StreamIoError);
  });
});

describe('side outputs', () => {
  const subjects = streamLayout().subjects;

  test('a dead letter keeps UTF-8 as text, other bytes as base64, and dedupes on the source position', () => {
    const text = deadLetterEffect(subjects, 'DELIVERY_EVENTS', message('{"x":'), 'invalid_json', () => 0);
    expect(text.subject).toBe('delivery.dlq');
    expect(text.msgId).toBe('dlq:DELIVERY_EVENTS:42');
    expect(JSON.parse(text.data as string)).toEqual({
      reason: 'invalid_json',
      raw: '{"x":',
      source_subject: 'delivery.events.order-1',
      source_stream_seq: 42,
      delivery_count: 1,
      dead_lettered_at: '1970-01-01T00:00:00.000Z',
    });
    const bytes = deadLetterEffect(subjects, 'S', message(new Uint8Array([0xff, 0x00])), 'not_utf8');
    expect(JSON.parse(bytes.data as string)).toMatchObject({ raw_base64: '/wA=' });
  });

  test('a late record goes to the key subject with the event id as Msg-Id', () => {
    const effect = lateEffect(subjects, 'gps-1', {
      event: { event_id: 'gps-1' },
      delivery_id: 'order-9',
      event_time: '2026-11-08T10:02:00Z',
      watermark: '2026-11-08T10:20:00Z',
      allowed_lateness_ms: 60_000,
      source_stream_seq: 7,
    });
    expect(effect).toMatchObject({ subject: 'delivery.late.order-9', msgId: 'late:gps-1' });
  });
});

describe('sink retries', () => {
  function flakyClient(failures: number, calls: string[]): JetStreamClient {
    let left = failures;
    return {
      publish: async (_subject: string, _data: unknown, opts: { msgID: string }) => {
        calls.push(opts.msgID);
        if (left-- > 0) throw new Error('timeout');
        return { stream: 'S', seq: 1, duplicate: false } as PubAck;
      },
    } as unknown as JetStreamClient;
  }

  test('each failed attempt is counted and retried under the same Msg-Id with capped backoff', async () => {
    const calls: string[] = [];
    const sleeps: number[] = [];
    const sink = new JetStreamSink(flakyClient(4, calls), {
      maxAttempts: 5,
      backoffBaseMs: 100,
      backoffMaxMs: 500,
      sleep: async (ms) => void sleeps.push(ms),
    });
    await expect(sink.publish({ subject: 's', data: 'x', msgId: 'd1' })).resolves.toMatchObject({ seq: 1 });
    expect(calls).toEqual(['d1', 'd1', 'd1', 'd1', 'd1']);
    expect(sleeps).toEqual([100, 200, 400, 500]);
    expect(sink.stats).toEqual({ published: 1, duplicates: 0, publishFailures: 4, exhausted: 0 });
  });

  test('after the last attempt the failure is a typed error, never a silent drop', async () => {
    const sink = new JetStreamSink(flakyClient(10, []), { maxAttempts: 2, sleep: async () => undefined });
    await expect(sink.publish({ subject: 's', data: 'x', msgId: 'd2' })).rejects.toMatchObject({
      code: 'publish_failed',
    });
    expect(sink.stats).toMatchObject({ publishFailures: 2, exhausted: 1 });
    await expect(sink.publish({ subject: 's', data: 'x', msgId: '' })).rejects.toThrow(/no msgId/);
  });

  test('lastAcked is the highest PubAck sequence per stream, whatever order the acks come back in', async () => {
    const acks: PubAck[] = [
      { stream: 'P', seq: 7, duplicate: false } as PubAck,
      { stream: 'P', seq: 5, duplicate: false } as PubAck,
      { stream: 'S', seq: 2, duplicate: false } as PubAck,
      // A duplicate answers with the first copy's (lower) sequence: it never moves the position back.
      { stream: 'P', seq: 3, duplicate: true } as PubAck,
    ];
    const client = { publish: async () => acks.shift()! } as unknown as JetStreamClient;
    const sink = new JetStreamSink(client);
    expect(sink.lastAcked('P')).toBeUndefined();
    for (const id of ['a', 'b', 'c', 'd']) await sink.publish({ subject: 's', data: 'x', msgId: id });
    expect(sink.lastAcked('P')).toBe(7);
    expect(sink.lastAcked('S')).toBe(2);
  });
});
