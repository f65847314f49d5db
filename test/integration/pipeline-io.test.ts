/**
 * The JetStream I/O layer against the real broker (the shared test broker,
 * broker-kit). Every test provisions streams of its own (unique names, subjects under a unique
 * root) and deletes them after. A missing broker fails the suite: jest's global setup starts one.
 */
import {
  connectNats,
  deadLetterEffect,
  type Effect,
  JetStreamSink,
  JetStreamSource,
  keySubject,
  layoutStreams,
  type NatsHandle,
  PipelineIoError,
  provisionStreams,
  publishDeadLetter,
  publishThenAck,
  runPipeline,
  type SourceMessage,
  type StreamLayout,
  streamLayout,
} from '../../apps/pipeline';
import { TEST_NATS_URL } from './broker-kit';

const NATS_URL = TEST_NATS_URL;
const text = new TextDecoder();

let nats: NatsHandle;
let counter = 0;
const toDelete: string[] = [];

function uniqueLayout(): StreamLayout {
  const tag = `sio${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
  const layout = streamLayout({
    eventsStream: `${tag}_EVENTS`,
    predictionsStream: `${tag}_PREDICTIONS`,
    sideStream: `${tag}_SIDE`,
    subjectRoot: tag,
    duplicateWindowMs: 60_000,
  });
  for (const spec of layoutStreams(layout)) toDelete.push(spec.name);
  return layout;
}

async function provisioned(): Promise<StreamLayout> {
  const layout = uniqueLayout();
  await provisionStreams(nats.jsm, layoutStreams(layout));
  return layout;
}

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * The source's lag once the broker has counted every ack sent (a plain ack is fire-and-forget: a consumer
 * info right after it may still see the message pending); the last read after 5 s otherwise.
 */
async function settledLag(source: JetStreamSource): Promise<Awaited<ReturnType<JetStreamSource['lag']>>> {
  let lag = await source.lag();
  const deadline = Date.now() + 5000;
  while ((lag.pending > 0 || lag.ackPending > 0 || lag.redelivered > 0) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    lag = await source.lag();
  }
  return lag;
}

async function messageCount(stream: string): Promise<number> {
  return (await nats.jsm.streams.info(stream)).state.messages;
}

async function publishEvents(layout: StreamLayout, count: number, from = 0): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const event = { event_id: `gps-${i}`, delivery_id: `order-${i % 7}`, type: 'gps' };
    await nats.js.publish(
      keySubject(layout.subjects.eventsPrefix, event.delivery_id),
      JSON.stringify(event),
      {
        msgID: event.event_id,
      },
    );
  }
}

/** Pulls from the source into `into` until stopped; no acks. */
function collect(source: JetStreamSource, into: SourceMessage[]): Promise<void> {
  return (async () => {
    for await (const message of source.messages()) into.push(message);
  })();
}

/** A pipeline whose every effect goes to a subject no stream captures: each publish fails at once. */
function unpublishablePipeline(source: JetStreamSource, layout: StreamLayout, tag: string) {
  const deliveries: number[] = [];
  const pipeline = runPipeline({
    source,
    sink: new JetStreamSink(nats.js, { maxAttempts: 1, timeoutMs: 1000 }),
    subjects: layout.subjects,
    process: (message) => {
      deliveries.push(message.deliveryCount);
      return [{ subject: `nowhere${process.pid}.${tag}`, data: '{}', msgId: tag }];
    },
    concurrency: 4,
    nakDelayMs: 50,
  });
  return { deliveries, pipeline };
}

/** A pipeline whose processor only counts the messages it starts. */
function countingPipeline(source: JetStreamSource, layout: StreamLayout) {
  let started = 0;
  const pipeline = runPipeline({
    source,
    sink: new JetStreamSink(nats.js),
    subjects: layout.subjects,
    process: () => {
      started++;
      return [];
    },
    concurrency: 4,
  });
  return { pipeline, started: () => started };
}

/** 'stopped', or what a hung stop() looks like after `ms`. */
function stopWithin(pipeline: { stop(): Promise<void> }, ms: number): Promise<string> {
  return Promise.race([
    pipeline.stop().then(() => 'stopped'),
    new Promise<string>((resolve) => setTimeout(() => resolve(`still waiting after ${ms / 1000} s`), ms)),
  ]);
}

function sourceOptions(
  layout: StreamLayout,
  overrides: Partial<Parameters<typeof JetStreamSource.open>[2]> = {},
) {
  return {
    stream: layout.events.name,
    durable: 'pipeline',
    maxAckPending: 64,
    ackWaitMs: 1000,
    maxDeliver: 10,
    batchSize: 16,
    ...overrides,
  };
}

beforeAll(async () => {
  try {
    nats = await connectNats({ servers: NATS_URL, connectTimeoutMs: 2000 });
  } catch (err) {
    throw new Error(
      `NATS JetStream is not reachable at ${NATS_URL}: jest's global setup starts one (test/broker-setup.ts). ${String(err)}`,
    );
  }
});

afterEach(async () => {
  for (const name of toDelete.splice(0)) await nats.jsm.streams.delete(name).catch(() => undefined);
});

afterAll(async () => {
  await nats?.close();
});

describe('stream provisioning', () => {
  test('creates the contract streams when missing, finds them the second time', async () => {
    const layout = uniqueLayout();
    const first = await provisionStreams(nats.jsm, layoutStreams(layout));
    expect(first.created).toEqual([layout.events.name, layout.predictions.name, layout.side.name]);
    const second = await provisionStreams(nats.jsm, layoutStreams(layout));
    expect(second).toEqual({ created: [], existing: first.created, updated: [] });

    const predictions = await nats.jsm.streams.info(layout.predictions.name);
    expect(predictions.config.subjects).toEqual([
      `${layout.subjects.predictionsPrefix}.>`,
      `${layout.subjects.alertsPrefix}.>`,
      layout.subjects.epochsSubject,
    ]);
    expect(predictions.config.duplicate_window).toBe(60_000 * 1_000_000);
    const side = await nats.jsm.streams.info(layout.side.name);
    expect(side.config.subjects).toEqual([
      `${layout.subjects.latePrefix}.>`,
      layout.subjects.deadLetterSubject,
    ]);
  });

  test('refuses an existing stream that does not capture the contract subjects', async () => {
    const layout = uniqueLayout();
    await nats.jsm.streams.add({
      name: layout.events.name,
      subjects: [`${layout.subjects.eventsPrefix}.only`],
    });
    const err = await provisionStreams(nats.jsm, layoutStreams(layout)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PipelineIoError);
    expect((err as PipelineIoError).code).toBe('stream_mismatch');
  });

  test('options are validated before any I/O', async () => {
    expect(() => streamLayout({ eventsStream: 'bad.name' })).toThrow(PipelineIoError);
    expect(() => streamLayout({ duplicateWindowMs: 10 })).toThrow(/duplicateWindowMs/);
    const layout = uniqueLayout();
    await expect(
      JetStreamSource.open(nats.js, nats.jsm, sourceOptions(layout, { batchSize: 100, maxAckPending: 10 })),
    ).rejects.toMatchObject({ code: 'invalid_options' });
    expect(() => new JetStreamSink(nats.js, { maxAttempts: 0 })).toThrow(/maxAttempts/);
  });
});

describe('sink', () => {
  test('the same Msg-Id published twice is stored once', async () => {
    const layout = await provisioned();
    const sink = new JetStreamSink(nats.js);
    const effect: Effect = {
      subject: keySubject(layout.subjects.predictionsPrefix, 'order-1'),
      data: '{"risk":0.5}',
      msgId: 'order-1|gps-1|delay-risk@1|rule@1',
    };
    const first = await sink.publish(effect);
    const second = await sink.publish(effect);
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ stream: layout.predictions.name, seq: first.seq, duplicate: true });
    expect(await messageCount(layout.predictions.name)).toBe(1);
    expect(sink.stats).toMatchObject({ published: 2, duplicates: 1, publishFailures: 0 });
  });

  test('a failed publish is retried, counted and thrown; the source message stays unacked', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 1);
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { ackWaitMs: 30_000 }),
    );
    const got: SourceMessage[] = [];
    const pulling = collect(source, got);
    await waitFor('one message', () => got.length === 1);

    const sleeps: number[] = [];
    const sink = new JetStreamSink(nats.js, {
      timeoutMs: 1000,
      maxAttempts: 3,
      sleep: async (ms) => void sleeps.push(ms),
    });
    // No stream captures this subject: the broker answers "no responders", the PubAck never comes.
    const nowhere: Effect = { subject: `nowhere${process.pid}.x`, data: '{}', msgId: 'm1' };
    const err = await publishThenAck(sink, got[0]!, [nowhere]).catch((e: unknown) => e);
    expect((err as PipelineIoError).code).toBe('publish_failed');
    expect(sink.stats).toMatchObject({ publishFailures: 3, exhausted: 1, published: 0 });
    expect(sleeps).toEqual([50, 100]);
    expect(await source.lag()).toMatchObject({ pending: 0, ackPending: 1 });
    await source.stop();
    await pulling;
  });
});

describe('source', () => {
  test('a message not acked before its consumer closed comes back with delivery count 2', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 1);
    const options = sourceOptions(layout, { ackWaitMs: 1000 });

    const firstConnection = await connectNats({ servers: NATS_URL });
    const first = await JetStreamSource.open(firstConnection.js, firstConnection.jsm, options);
    const firstGot: SourceMessage[] = [];
    const firstPulling = collect(first, firstGot);
    await waitFor('first delivery', () => firstGot.length === 1);
    expect(firstGot[0]).toMatchObject({ streamSeq: 1, deliveryCount: 1, partition: '0' });
    expect(JSON.parse(text.decode(firstGot[0]!.data))).toMatchObject({ event_id: 'gps-0' });
    expect(firstGot[0]!.subject).toBe(`${layout.subjects.eventsPrefix}.order-0`);
    await firstConnection.close(); // the process dies before its effects were published
    await firstPulling.catch(() => undefined);

    const started = Date.now();
    const second = await JetStreamSource.open(nats.js, nats.jsm, options);
    const got: SourceMessage[] = [];
    const pulling = collect(second, got);
    await waitFor('redelivery', () => got.length === 1);
    expect(got[0]).toMatchObject({ streamSeq: 1, deliveryCount: 2 });
    expect(Date.now() - started).toBeLessThan(5000);

    const sink = new JetStreamSink(nats.js);
    const effect = {
      subject: keySubject(layout.subjects.predictionsPrefix, 'order-0'),
      data: '{}',
      msgId: 'd-0',
    };
    await publishThenAck(sink, got[0]!, [effect]);
    expect(await messageCount(layout.predictions.name)).toBe(1);
    expect(await settledLag(second)).toEqual({ pending: 0, ackPending: 0, redelivered: 0 });
    await second.stop();
    await pulling;
  });

  test('max_ack_pending bounds the messages outstanding; an ack lets the next one in', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 20);
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { maxAckPending: 5, batchSize: 5, ackWaitMs: 30_000 }),
    );
    expect(await source.lag()).toEqual({ pending: 20, ackPending: 0, redelivered: 0 });
    const got: SourceMessage[] = [];
    const pulling = collect(source, got);
    await waitFor('five deliveries', () => got.length === 5);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(got.length).toBe(5);
    expect(await source.lag()).toEqual({ pending: 15, ackPending: 5, redelivered: 0 });

    await got[0]!.ack();
    await waitFor('the sixth delivery', () => got.length === 6);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(got.length).toBe(6);
    expect(got.map((m) => m.streamSeq)).toEqual([1, 2, 3, 4, 5, 6]);
    await source.stop();
    await pulling;
  });

  test('partition is a configurable function of the subject', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 3);
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { partitionOf: (subject) => subject.slice(subject.lastIndexOf('.') + 1) }),
    );
    const got: SourceMessage[] = [];
    const pulling = collect(source, got);
    await waitFor('three deliveries', () => got.length === 3);
    expect(got.map((m) => m.partition)).toEqual(['order-0', 'order-1', 'order-2']);
    for (const message of got) await message.ack();
    await source.stop();
    await pulling;
  });
});

describe('side outputs', () => {
  test('a dead letter carries the raw payload and the reason; its Msg-Id dedupes redeliveries', async () => {
    const layout = await provisioned();
    const invalid = new Uint8Array([0x7b, 0xff, 0xfe]); // not UTF-8, not JSON
    await nats.js.publish(`${layout.subjects.eventsPrefix}.order-9`, '{"event_id": broken');
    await nats.js.publish(`${layout.subjects.eventsPrefix}.order-9`, invalid);
    const source = await JetStreamSource.open(nats.js, nats.jsm, sourceOptions(layout));
    const got: SourceMessage[] = [];
    const pulling = collect(source, got);
    await waitFor('two deliveries', () => got.length === 2);
    const sink = new JetStreamSink(nats.js);
    await publishDeadLetter(sink, layout.subjects, layout.events.name, got[0]!, 'invalid_json');
    await publishDeadLetter(sink, layout.subjects, layout.events.name, got[0]!, 'invalid_json');
    await publishThenAck(sink, got[1]!, [
      deadLetterEffect(layout.subjects, layout.events.name, got[1]!, 'not_utf8'),
    ]);
    await got[0]!.ack();

    expect(await messageCount(layout.side.name)).toBe(2);
    const first = await nats.jsm.streams.getMessage(layout.side.name, { seq: 1 });
    expect(first?.subject).toBe(layout.subjects.deadLetterSubject);
    expect(first?.json()).toMatchObject({
      reason: 'invalid_json',
      raw: '{"event_id": broken',
      source_subject: `${layout.subjects.eventsPrefix}.order-9`,
      source_stream_seq: 1,
      delivery_count: 1,
    });
    const second = await nats.jsm.streams.getMessage(layout.side.name, { seq: 2 });
    expect(second?.json()).toMatchObject({
      reason: 'not_utf8',
      raw_base64: Buffer.from(invalid).toString('base64'),
    });
    await source.stop();
    await pulling;
  });
});

describe('pipeline runner', () => {
  const predictOrFail =
    (layout: StreamLayout) =>
    (message: SourceMessage): Effect[] => {
      const event = JSON.parse(text.decode(message.data)) as { event_id: string; delivery_id: string };
      return [
        {
          subject: keySubject(layout.subjects.predictionsPrefix, event.delivery_id),
          data: JSON.stringify({ event_id: event.event_id, risk: 0.1 }),
          msgId: `${event.delivery_id}|${event.event_id}`,
        },
      ];
    };

  test('source → processor → sink → ack, with a bad event dead-lettered and the lag drained', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 50);
    await nats.js.publish(`${layout.subjects.eventsPrefix}.order-x`, 'not json');
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { maxAckPending: 16 }),
    );
    expect((await source.lag()).pending).toBe(51);

    const sink = new JetStreamSink(nats.js);
    const started = Date.now();
    const pipeline = runPipeline({
      source,
      sink,
      subjects: layout.subjects,
      process: predictOrFail(layout),
      concurrency: 8,
    });
    await waitFor('51 acks', () => pipeline.stats.acked === 51);
    const elapsedMs = Date.now() - started;
    await pipeline.stop();

    expect(pipeline.stats).toEqual({
      received: 51,
      acked: 51,
      naked: 0,
      deadLettered: 1,
      processorErrors: 1,
      retried: 0,
      abandoned: 0,
    });
    expect(await messageCount(layout.predictions.name)).toBe(50);
    expect(await messageCount(layout.side.name)).toBe(1);
    const letter = await nats.jsm.streams.getMessage(layout.side.name, { seq: 1 });
    expect(letter?.json()).toMatchObject({
      raw: 'not json',
      reason: expect.stringMatching(/^processor_error: /),
    });
    expect(await settledLag(source)).toEqual({ pending: 0, ackPending: 0, redelivered: 0 });
    console.log(`pipeline-io runner: 51 events (1 dead-lettered) through the pipeline in ${elapsedMs} ms`);
  });

  test('a message processed for longer than ack_wait is kept alive (in-progress acks), never redelivered', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 3);
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { ackWaitMs: 1000, batchSize: 3 }),
    );
    const deliveries: number[] = [];
    const pipeline = runPipeline({
      source,
      sink: new JetStreamSink(nats.js),
      subjects: layout.subjects,
      // 3 × ack_wait each, all three at once: without in-progress acks the broker sends each again meanwhile.
      process: async (message) => {
        deliveries.push(message.deliveryCount);
        await new Promise((resolve) => setTimeout(resolve, 3000));
        return [];
      },
      concurrency: 3,
    });
    await waitFor('3 acks', () => pipeline.stats.acked === 3, 20_000);
    // A redelivery would have come within a second of the acks' ack_wait.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(deliveries).toEqual([1, 1, 1]);
    expect(pipeline.stats).toMatchObject({ received: 3, acked: 3, naked: 0 });
    expect(await settledLag(source)).toEqual({ pending: 0, ackPending: 0, redelivered: 0 });
    await pipeline.stop();
  }, 30_000);

  test('stop() right after start, before the consumer is open: returns at once', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 5);
    const source = await JetStreamSource.open(nats.js, nats.jsm, sourceOptions(layout));
    const { pipeline, started } = countingPipeline(source, layout);
    // A partition released the moment it started (a rebalance right after a takeover): the loop is still
    // opening its consumer.
    expect(await stopWithin(pipeline, 5000)).toBe('stopped');
    expect(started()).toBe(0);
  }, 30_000);

  test('stop() while a barrier holds the gate: returns at once and starts nothing of what was pulled ahead', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 20);
    const source = await JetStreamSource.open(
      nats.js,
      nats.jsm,
      sourceOptions(layout, { ackWaitMs: 30_000, batchSize: 10 }),
    );
    const { pipeline, started } = countingPipeline(source, layout);
    await pipeline.pause();
    // The consumer pulls its batch meanwhile; the loop holds one message at the gate.
    await waitFor('a pulled batch', async () => (await source.lag()).ackPending > 0);
    expect(await stopWithin(pipeline, 5000)).toBe('stopped');
    expect(started()).toBe(0);
    expect(pipeline.stats.received).toBe(0);
    // Left unacked: they come back after ack_wait, to whoever consumes next.
    expect((await source.lag()).ackPending).toBeGreaterThan(0);
  }, 30_000);

  test('an event whose effect cannot be published is naked and redelivered, never acked', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 1);
    const source = await JetStreamSource.open(nats.js, nats.jsm, sourceOptions(layout));
    const { deliveries, pipeline } = unpublishablePipeline(source, layout, 'y');
    await waitFor('three deliveries', () => deliveries.length >= 3);
    await pipeline.stop();
    expect(deliveries.slice(0, 3)).toEqual([1, 2, 3]);
    expect(pipeline.stats.acked).toBe(0);
    expect(pipeline.stats.naked).toBeGreaterThanOrEqual(3);
    expect((await source.lag()).pending).toBe(0);
  });

  test('on its last allowed delivery an unpublishable event is dead-lettered, not given up', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 1);
    const source = await JetStreamSource.open(nats.js, nats.jsm, sourceOptions(layout, { maxDeliver: 2 }));
    const { deliveries, pipeline } = unpublishablePipeline(source, layout, 'z');
    await waitFor('the dead letter', () => pipeline.stats.deadLettered === 1);
    await pipeline.stop();
    expect(deliveries).toEqual([1, 2]);
    expect(pipeline.stats).toMatchObject({ received: 2, naked: 1, acked: 1, deadLettered: 1, abandoned: 0 });
    const letter = await nats.jsm.streams.getMessage(layout.side.name, { seq: 1 });
    expect(letter?.json()).toMatchObject({
      reason: expect.stringMatching(/^max_deliver_exhausted: /),
      raw: expect.stringContaining('"event_id":"gps-0"'),
      delivery_count: 2,
    });
    expect(await settledLag(source)).toEqual({ pending: 0, ackPending: 0, redelivered: 0 });
  });
});
