/**
 * A slow host must not cost valid events their deliveries (no silent loss): what the pipeline holds —
 * in flight or pulled ahead and waiting behind a slow processor — is kept alive with in-progress acks, and a
 * delivery the broker made because the pipeline was slow does not count as a failed one towards max_deliver:
 * only the pipeline's own processing failures dead-letter an event. Real broker (the shared test broker).
 */
import {
  connectNats,
  type Effect,
  JetStreamSink,
  JetStreamSource,
  keySubject,
  layoutStreams,
  type NatsHandle,
  provisionStreams,
  runPipeline,
  type SourceMessage,
  type StreamLayout,
  streamLayout,
} from '../../apps/pipeline';
import { TEST_NATS_URL } from './broker-kit';

const text = new TextDecoder();
let nats: NatsHandle;
let counter = 0;
const toDelete: string[] = [];

async function provisioned(): Promise<StreamLayout> {
  const tag = `sak${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
  const layout = streamLayout({
    eventsStream: `${tag}_EVENTS`,
    predictionsStream: `${tag}_PREDICTIONS`,
    sideStream: `${tag}_SIDE`,
    subjectRoot: tag,
    duplicateWindowMs: 60_000,
  });
  for (const spec of layoutStreams(layout)) toDelete.push(spec.name);
  await provisionStreams(nats.jsm, layoutStreams(layout));
  return layout;
}

async function publishEvents(layout: StreamLayout, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
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

async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const predict =
  (layout: StreamLayout) =>
  (message: SourceMessage): Effect[] => {
    const event = JSON.parse(text.decode(message.data)) as { event_id: string; delivery_id: string };
    return [
      {
        subject: keySubject(layout.subjects.predictionsPrefix, event.delivery_id),
        data: JSON.stringify({ event_id: event.event_id }),
        msgId: `${event.delivery_id}|${event.event_id}`,
      },
    ];
  };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  nats = await connectNats({ servers: TEST_NATS_URL, connectTimeoutMs: 2000 });
});

afterEach(async () => {
  for (const name of toDelete.splice(0)) await nats.jsm.streams.delete(name).catch(() => undefined);
});

afterAll(async () => {
  await nats?.close();
});

describe('a slow pipeline keeps its deliveries', () => {
  test('messages pulled ahead, waiting behind a slow processor for 4 × ack_wait, are never redelivered', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 30);
    // The whole stream is pulled at once (batch 30), then processed one at a time, 150 ms each: the last ones
    // wait 4.5 s in the client, 4.5 × ack_wait. Without in-progress acks for them the broker sends them again
    // every second until max_deliver (3): their deliveries run out before any processor saw them.
    const source = await JetStreamSource.open(nats.js, nats.jsm, {
      stream: layout.events.name,
      durable: 'pipeline',
      maxAckPending: 30,
      ackWaitMs: 1000,
      maxDeliver: 3,
      batchSize: 30,
    });
    const deliveries: number[] = [];
    const pipeline = runPipeline({
      source,
      sink: new JetStreamSink(nats.js),
      subjects: layout.subjects,
      process: async (message) => {
        deliveries.push(message.deliveryCount);
        await sleep(150);
        return predict(layout)(message);
      },
      concurrency: 1,
    });
    await waitFor('30 acks', () => pipeline.stats.acked >= 30, 20_000);
    // A redelivery would come within ack_wait of the last ack.
    await sleep(1500);
    await pipeline.stop();
    expect(deliveries.filter((d) => d > 1)).toEqual([]);
    expect(deliveries).toHaveLength(30);
    expect(pipeline.stats).toMatchObject({ received: 30, acked: 30, naked: 0, deadLettered: 0 });
    expect((await nats.jsm.streams.info(layout.side.name)).state.messages).toBe(0);
    expect((await nats.jsm.streams.info(layout.predictions.name)).state.messages).toBe(30);
    expect(await source.lag()).toEqual({ pending: 0, ackPending: 0, redelivered: 0 });
  }, 30_000);

  test('an event on its last delivery that fails once (transiently) is retried, not dead-lettered', async () => {
    const layout = await provisioned();
    await publishEvents(layout, 1);
    // max_deliver 2. A consumer pulls the event and stops before starting it (a consumer restart, a rebalance):
    // the broker sends it again after ack_wait, its last delivery, though no processor ever failed it. That
    // delivery meets one transient failure (a backend blip): one processing failure of two allowed must not
    // dead-letter a valid event. It is retried and predicted.
    const options = {
      stream: layout.events.name,
      durable: 'pipeline',
      maxAckPending: 8,
      ackWaitMs: 1000,
      maxDeliver: 2,
      batchSize: 8,
    };
    const first = await JetStreamSource.open(nats.js, nats.jsm, options);
    const idle = runPipeline({
      source: first,
      sink: new JetStreamSink(nats.js),
      subjects: layout.subjects,
      process: () => [],
      concurrency: 1,
    });
    await idle.pause();
    await waitFor('the event pulled', async () => (await first.lag()).ackPending === 1, 10_000);
    await idle.stop();
    expect(idle.stats.received).toBe(0);

    const source = await JetStreamSource.open(nats.js, nats.jsm, options);
    const calls: number[] = [];
    const pipeline = runPipeline({
      source,
      sink: new JetStreamSink(nats.js),
      subjects: layout.subjects,
      process: (message) => {
        calls.push(message.deliveryCount);
        if (calls.length === 1)
          throw Object.assign(new Error('backend unavailable (injected)'), { retryable: true });
        return predict(layout)(message);
      },
      concurrency: 1,
      nakDelayMs: 100,
    });
    await waitFor('the event settled', () => pipeline.stats.acked >= 1, 15_000);
    await sleep(1500);
    await pipeline.stop();
    expect(calls[0]).toBe(2);
    const letters = (await nats.jsm.streams.info(layout.side.name)).state.messages;
    const dead =
      letters > 0 ? (await nats.jsm.streams.getMessage(layout.side.name, { seq: 1 }))?.json() : undefined;
    expect(dead).toBeUndefined();
    expect((await nats.jsm.streams.info(layout.predictions.name)).state.messages).toBe(1);
    expect(pipeline.stats).toMatchObject({ acked: 1, deadLettered: 0, abandoned: 0 });
    expect(await source.lag()).toMatchObject({ pending: 0, ackPending: 0 });
  }, 30_000);
});
