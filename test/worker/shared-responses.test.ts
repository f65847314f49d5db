/**
 * Two lanes of one LaneHost (two slots, one worker thread) write into one response ring. Each lane's loop is
 * its own chain of promises, and their microtasks interleave: a lane that held a response-ring reservation
 * across an `await` had it found open by the other lane, whose reserve() then threw and ended its loop for good
 * ("lane loop failed"): every later request of that version went unanswered by the worker. Seen from outside
 * as one client's impossible-deadline requests on two versions stalling one of them.
 */
import { MessageChannel } from 'node:worker_threads';
import { InflightTable } from '../../apps/worker/inflight-table';
import type { WorkerEvent } from '../../apps/worker/messages';
import serve from '../../apps/worker/worker';
import { metricsBufferFor } from '../../libs/metrics';
import {
  errorCodeFromIndex,
  type ModelSignature,
  parseSignature,
  readResponseRequestId,
  readResponseStatus,
  requestRecordBytes,
  writeRequestRecord,
} from '../../libs/protocol';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import { LOOKUP_IDS, lookupConfig, lookupRepository } from '../integration/lookup-model';

const SLOTS = [1, 2];

/** One LaneHost in this thread serving `lookup` on SLOTS (one lane each), driven through its rings. */
async function startHost() {
  const { file } = lookupRepository(undefined);
  const signature: ModelSignature = parseSignature(lookupConfig(undefined), 'lookup');
  const lanes = SLOTS.map((slot) => ({
    slot,
    rings: [0, 1, 2].map(() => {
      const ring = RingBuffer.create(256 * 1024);
      ring.setOwnerId(100);
      return ring;
    }),
    doorbell: Doorbell.create(),
  }));
  const responses = RingBuffer.create(1024 * 1024);
  responses.setOwnerId(101);
  const channel = new MessageChannel();
  const events: WorkerEvent[] = [];
  let loadedCount = 0;
  const loaded = new Promise<void>((resolve, reject) => {
    channel.port1.on('message', (event: WorkerEvent) => {
      events.push(event);
      if (event.type === 'loaded' && ++loadedCount === SLOTS.length) resolve();
      if (event.type === 'load-failed') reject(new Error(event.error));
    });
  });
  const served = serve({
    nodeIndex: 0,
    workerIndex: 0,
    port: channel.port2,
    responseRing: responses.buffer,
    metrics: metricsBufferFor(2),
    metricsShard: 1,
    inflight: InflightTable.createBuffer(1),
    device: { kind: 'cpu' },
    intraOpThreads: 1,
    logLevel: 'silent',
  });
  for (const lane of lanes)
    channel.port1.postMessage({
      type: 'load',
      slot: lane.slot,
      model: 'lookup',
      version: String(lane.slot),
      file,
      signature,
      rings: lane.rings.map((ring) => ring.buffer),
      doorbell: lane.doorbell.buffer,
      batching: { policy: 'greedy', maxBatchSize: 16, maxQueueDelayMs: 5 },
    });
  await loaded;

  let nextId = 1;
  const raw = new Uint8Array(new BigInt64Array([0n, 1n, 2n, 3n]).buffer);
  const bound = {
    inputs: [
      { spec: signature.inputs[0]!, index: 0, dims: [LOOKUP_IDS], value: undefined, byteLength: 32, raw },
    ],
    inputMask: 1,
    byteLength: 8 + 4 + raw.length,
  };
  /** `count` requests on each lane, all already past their deadline; the doorbells rung together. */
  const sendExpired = (count: number): Map<number, number> => {
    const slotOf = new Map<number, number>();
    for (const lane of lanes) {
      const ring = lane.rings[1]!;
      for (let i = 0; i < count; i++) {
        const offset = ring.reserve(requestRecordBytes(bound));
        if (offset < 0) throw new Error('request ring full');
        const requestId = nextId++;
        const now = clock();
        writeRequestRecord(
          ring.view,
          ring.bytes,
          offset,
          { requestId, slot: lane.slot, priority: 'normal', enqueuedAt: now - 1, deadlineAt: now - 0.5 },
          bound,
        );
        ring.commit(undefined, false);
        slotOf.set(requestId, lane.slot);
      }
    }
    for (const lane of lanes) lane.doorbell.ring();
    return slotOf;
  };
  const codes = new Map<number, string>();
  const collect = (offset: number): boolean => {
    const view = responses.view;
    codes.set(readResponseRequestId(view, offset), errorCodeFromIndex(readResponseStatus(view, offset)));
    return true;
  };
  /** The code each of `ids` was answered with; those not answered within `timeoutMs` are missing. */
  const answersFor = async (ids: number[], timeoutMs: number): Promise<Map<number, string>> => {
    const until = Date.now() + timeoutMs;
    while (ids.some((id) => !codes.has(id)) && Date.now() < until) {
      const sequence = responses.writeSequence();
      if (responses.pendingRecords() === 0) await responses.waitForData(sequence, 50, false);
      responses.claim(collect, 4096);
    }
    return new Map(ids.filter((id) => codes.has(id)).map((id) => [id, codes.get(id)!]));
  };
  const stop = async (): Promise<void> => {
    channel.port1.postMessage({ type: 'drain' });
    await served;
    channel.port1.close();
  };
  return { sendExpired, answersFor, stop, events };
}

describe('LaneHost: lanes sharing one response ring', () => {
  it('two lanes answering expired requests at once both keep answering', async () => {
    const host = await startHost();
    try {
      // Rounds of 64 expired requests per lane: every answer is an error answer (the path that reserved
      // across an await), and both lanes write them in the same microtask turns.
      for (let round = 0; round < 20; round++) {
        const slotOf = host.sendExpired(64);
        const answered = await host.answersFor([...slotOf.keys()], 5000);
        const perSlot = SLOTS.map(
          (slot) => [...answered.keys()].filter((id) => slotOf.get(id) === slot).length,
        );
        expect({ round, perSlot }).toEqual({ round, perSlot: [64, 64] });
        expect(new Set(answered.values())).toEqual(new Set(['deadline_exceeded']));
      }
      const failures = host.events.filter((event) => event.type === 'log' && event.level === 'error');
      expect(failures).toEqual([]);
    } finally {
      await host.stop();
    }
  }, 60000);
});
