/** The source's delivery-gap check, against a fake consumer: deliveries lost in transit end the iteration. */
import type { JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import { PipelineIoError } from '../errors';
import { JetStreamSource } from './source';

function fakeMsg(deliverySequence: number, streamSequence: number, deliveryCount = 1): JsMsg {
  return {
    data: new TextEncoder().encode(`m${streamSequence}`),
    subject: 'delivery.events.0.order-1',
    info: { deliverySequence, streamSequence, deliveryCount, timestampNanos: 1e15 },
    ack: () => undefined,
    nak: () => undefined,
    term: () => undefined,
    working: () => undefined,
  } as unknown as JsMsg;
}

async function read(
  deliveries: JsMsg[],
  startSequence?: number,
): Promise<{ seqs: number[]; error: unknown }> {
  const js = {
    consumers: {
      get: async () => ({
        consume: async () => ({
          async *[Symbol.asyncIterator]() {
            yield* deliveries;
          },
          close: async () => undefined,
        }),
      }),
    },
  } as unknown as JetStreamClient;
  const jsm = {
    consumers: {
      info: async () => ({}),
      update: async () => ({}),
      delete: async () => true,
      add: async () => ({}),
    },
  } as unknown as JetStreamManager;
  const source = await JetStreamSource.open(js, jsm, {
    stream: 'EVENTS',
    durable: 'p0',
    maxAckPending: 10,
    ackWaitMs: 1000,
    maxDeliver: -1,
    batchSize: 10,
    ...(startSequence === undefined ? {} : { startSequence }),
  });
  const seqs: number[] = [];
  try {
    for await (const m of source.messages()) seqs.push(m.streamSeq);
  } catch (error) {
    return { seqs, error };
  }
  return { seqs, error: undefined };
}

describe('JetStreamSource delivery sequence', () => {
  test('consecutive deliveries pass, redeliveries included (each takes the next delivery sequence)', async () => {
    const r = await read([fakeMsg(7, 10), fakeMsg(8, 12), fakeMsg(9, 10, 2), fakeMsg(10, 15)]);
    expect(r).toEqual({ seqs: [10, 12, 10, 15], error: undefined });
  });

  test('a jump ends the iteration before the message after the gap, with delivery_gap', async () => {
    // Deliveries 3 and 4 went to a connection that dropped them: stream messages 14 and 16 would come
    // back after ack_wait, behind 18.
    const r = await read([fakeMsg(1, 10), fakeMsg(2, 12), fakeMsg(5, 18), fakeMsg(6, 20)]);
    expect(r.seqs).toEqual([10, 12]);
    expect(r.error).toBeInstanceOf(PipelineIoError);
    expect((r.error as PipelineIoError).code).toBe('delivery_gap');
    expect((r.error as Error).message).toBe(
      'consumer p0: delivery 5 after 2: the deliveries between never arrived',
    );
  });

  test('a consumer the source created starts at delivery 1: the first pull lost is a gap too', async () => {
    // Recreated at stream 145 (a checkpoint's position + 1); deliveries 1-64 went to a connection cut as
    // the partition started. Taking 65 as the start moved the position past 145-208 and skipped them for good.
    const r = await read([fakeMsg(65, 209), fakeMsg(66, 210)], 145);
    expect(r.seqs).toEqual([]);
    expect((r.error as PipelineIoError).code).toBe('delivery_gap');
    expect((r.error as Error).message).toBe(
      'consumer p0: delivery 65 after 0: the deliveries between never arrived',
    );
    expect(await read([fakeMsg(1, 145), fakeMsg(2, 146)], 145)).toEqual({
      seqs: [145, 146],
      error: undefined,
    });
  });
});
