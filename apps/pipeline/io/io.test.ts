/** The broker-free parts of the JetStream I/O layer: contract defaults, option checks, retry arithmetic. */

import { createHash } from 'node:crypto';
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { PipelineIoError } from '../errors';
import { keySubject, layoutStreams, streamLayout } from './layout';
import { deadLetterEffect, isDeadLetter, lateEffect } from './side-outputs';
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
    expect(() => streamLayout({ subjectRoot: 'bad.>' })).toThrow(PipelineIoError);
  });

  test('options are refused before any I/O', () => {
    expect(() => streamLayout({ predictionsStream: 'has space' })).toThrow(/predictionsStream/);
    expect(() => streamLayout({ duplicateWindowMs: 999 })).toThrow(/duplicateWindowMs/);
    expect(() => streamLayout({ maxBytes: 0 })).toThrow(/maxBytes/);
  });

  test('a key that is not one subject token is refused', () => {
    expect(keySubject('delivery.events', 'order-482')).toBe('delivery.events.order-482');
    for (const bad of ['', 'a.b', 'a b', '*', '>'])
      expect(() => keySubject('p', bad)).toThrow(PipelineIoError);
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
    expect(() => hashPartitioner(0)).toThrow(PipelineIoError);
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
      raw_bytes: 5,
      source_subject: 'delivery.events.order-1',
      source_stream_seq: 42,
      delivery_count: 1,
      dead_lettered_at: '1970-01-01T00:00:00.000Z',
    });
    const bytes = deadLetterEffect(subjects, 'S', message(new Uint8Array([0xff, 0x00])), 'not_utf8');
    expect(JSON.parse(bytes.data as string)).toMatchObject({ raw_base64: '/wA=' });
  });

  test('a dead letter too large for max_payload fits: the payload start, its length and digest, its position', () => {
    const bytes = (s: string) => Buffer.byteLength(s);
    const sha = (d: Uint8Array) => createHash('sha256').update(d).digest('hex');
    const control = new Uint8Array(200_000).fill(1);
    const letter = deadLetterEffect(subjects, 'S', message(control), 'payload: too big');
    expect(isDeadLetter(letter) && letter.deadLetter).toBe('invalid');
    expect(bytes(letter.data as string)).toBeGreaterThan(1_200_000);
    const fitted = letter.fit!(10_000);
    expect(bytes(fitted)).toBeLessThanOrEqual(10_000);
    expect(bytes(fitted)).toBeGreaterThan(9_990);
    const cut = JSON.parse(fitted);
    expect(cut).toMatchObject({
      raw_bytes: 200_000,
      raw_truncated: true,
      raw_sha256: sha(control),
      source_stream_seq: 42,
      reason: 'payload: too big',
    });
    expect(cut.raw).toBe('\u0001'.repeat(cut.raw.length));
    // Binary: whole base64 quanta of the first bytes.
    const binary = Uint8Array.from({ length: 100_000 }, (_, i) => ((i * 7) % 256) | 0x80);
    const b = JSON.parse(deadLetterEffect(subjects, 'S', message(binary), 'r').fit!(5_000));
    expect(Buffer.from(b.raw_base64, 'base64')).toEqual(
      Buffer.from(binary.subarray(0, Buffer.from(b.raw_base64, 'base64').length)),
    );
    expect(b).toMatchObject({ raw_bytes: 100_000, raw_truncated: true, raw_sha256: sha(binary) });
    // Never half a surrogate pair; a letter that fits is left whole.
    const emoji = deadLetterEffect(subjects, 'S', message('😀'.repeat(5_000)), 'r');
    for (const max of [1_000, 1_001, 1_002, 1_003]) {
      const raw = JSON.parse(emoji.fit!(max)).raw as string;
      expect(raw).toBe('😀'.repeat(raw.length / 2));
    }
    expect(emoji.fit!(1_000_000)).toBe(emoji.data);
    // A reason is clipped: the envelope stays small whatever the error said.
    const long = deadLetterEffect(subjects, 'S', message('x'), `processor_error: ${'e'.repeat(50_000)}`);
    expect(JSON.parse(long.data as string).reason.length).toBeLessThan(1100);
    expect(isDeadLetter(long) && long.deadLetter).toBe('processor_error');
  });

  test('a late record too large for max_payload keeps the payload start instead of the event', () => {
    const raw = new TextEncoder().encode(JSON.stringify({ event_id: 'g', pad: '"'.repeat(50_000) }));
    const effect = lateEffect(
      subjects,
      'g',
      {
        event: JSON.parse(new TextDecoder().decode(raw)),
        delivery_id: 'order-9',
        event_time: '2026-11-08T10:02:00Z',
        watermark: '2026-11-08T10:20:00Z',
        allowed_lateness_ms: 60_000,
        source_stream_seq: 7,
      },
      raw,
    );
    const fitted = effect.fit!(4_000);
    expect(Buffer.byteLength(fitted)).toBeLessThanOrEqual(4_000);
    const record = JSON.parse(fitted);
    expect(record.event).toBeUndefined();
    expect(record).toMatchObject({ delivery_id: 'order-9', source_stream_seq: 7, raw_bytes: raw.length });
    expect(record.raw.startsWith('{"event_id":"g"')).toBe(true);
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

  test('a side output that failed every attempt goes to the spool (its caller acks); a full spool fails it', async () => {
    const spooled: string[] = [];
    const retired: string[] = [];
    let room = true;
    const spool = {
      put: async (msgId: string, subject: string, data: string | Uint8Array, kind: string) => {
        if (!room) return false;
        spooled.push(`${kind} ${subject} ${msgId} ${String(data)}`);
        return true;
      },
      landed: (msgId: string) => void retired.push(msgId),
    };
    let up = false;
    const client = {
      publish: async () => {
        if (!up) throw new Error('503 no responders');
        return { stream: 'S', seq: 1, duplicate: false } as PubAck;
      },
    } as unknown as JetStreamClient;
    const sink = new JetStreamSink(client, { maxAttempts: 2, sleep: async () => undefined, spool });
    const letter = { subject: 'delivery.dlq', data: '{}', msgId: 'dlq:E:3', spool: 'invalid' as const };
    await expect(sink.publish(letter)).resolves.toEqual({
      stream: '',
      seq: 0,
      duplicate: false,
      spooled: true,
    });
    expect(spooled).toEqual(['invalid delivery.dlq dlq:E:3 {}']);
    // A prediction is never spooled: its failure stays the caller's (nak, retry).
    await expect(sink.publish({ subject: 'p', data: 'x', msgId: 'p1' })).rejects.toMatchObject({
      code: 'publish_failed',
    });
    room = false;
    await expect(sink.publish({ ...letter, msgId: 'dlq:E:4' })).rejects.toMatchObject({
      code: 'publish_failed',
    });
    expect(sink.stats).toMatchObject({ exhausted: 2, publishFailures: 6 });
    // Once the broker takes a side output from the sink itself, a spooled copy is retired.
    up = true;
    await expect(sink.publish({ ...letter, msgId: 'dlq:E:5' })).resolves.toMatchObject({ seq: 1 });
    expect(retired).toEqual(['dlq:E:5']);
  });

  test('an effect over max_payload is fitted when it can be, refused at once when it cannot', async () => {
    const sent: number[] = [];
    const client = {
      publish: async (_s: string, data: string) => {
        sent.push(Buffer.byteLength(data));
        return { stream: 'S', seq: 1, duplicate: false } as PubAck;
      },
    } as unknown as JetStreamClient;
    const fitted: number[] = [];
    const sink = new JetStreamSink(client, {
      maxPayload: () => 2_000,
      onFitted: (_e, bytes) => fitted.push(bytes),
    });
    await sink.publish({ subject: 's', data: 'x'.repeat(1_000), msgId: 'small' });
    await sink.publish({
      subject: 's',
      data: 'x'.repeat(5_000),
      msgId: 'big',
      fit: (max) => 'y'.repeat(max),
    });
    expect(fitted).toEqual([5_000]);
    // Room for the Msg-Id header block.
    expect(sent[0]).toBe(1_000);
    expect(sent[1]).toBeLessThan(2_000 - 'NATS/1.0\r\nNats-Msg-Id: big\r\n\r\n'.length);
    await expect(
      sink.publish({ subject: 's', data: 'x'.repeat(5_000), msgId: 'nofit' }),
    ).rejects.toMatchObject({
      code: 'payload_too_large',
    });
    expect(sent).toHaveLength(2);
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
