/**
 * A LaneHost run in this thread (no node, no server): request records written into a slot's rings, answers
 * read back from the response ring. Covers batch isolation: a batch whose model run fails is bisected, so
 * only the items that fail alone are answered `model_error`.
 */
import { MessageChannel } from 'node:worker_threads';
import { InflightTable } from '../../apps/worker/inflight-table';
import type { WorkerEvent } from '../../apps/worker/messages';
import serve from '../../apps/worker/worker';
import type { BatchPolicyOptions } from '../../libs/batching';
import { metricsBufferFor, readPolicyState, readSlotTotals } from '../../libs/metrics';
import {
  decodeResult,
  errorCodeFromIndex,
  type ModelSignature,
  parseSignature,
  readComputeMs,
  readErrorResponse,
  readQueueMs,
  readResponseRequestId,
  readResponseStatus,
  requestRecordBytes,
  writeRequestRecord,
} from '../../libs/protocol';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import {
  expectedVectors,
  LOOKUP_IDS,
  lookupConfig,
  lookupRepository,
  POISON_ID,
} from '../integration/lookup-model';

const SLOT = 1;

interface Answer {
  requestId: number;
  status: number;
  batchSize: number;
  queueMs: number;
  computeMs: number;
  vectors?: number[];
  message?: string;
}

/** One worker thread's LaneHost serving `lookup` v1 on SLOT, driven through its rings. */
async function startLane(batching: BatchPolicyOptions) {
  const { file } = lookupRepository(undefined);
  const signature: ModelSignature = parseSignature(lookupConfig(undefined), 'lookup');
  const rings = [0, 1, 2].map(() => {
    const ring = RingBuffer.create(64 * 1024);
    ring.setOwnerId(100);
    return ring;
  });
  const doorbell = Doorbell.create();
  const responses = RingBuffer.create(256 * 1024);
  responses.setOwnerId(101);
  const metrics = metricsBufferFor(2);
  const channel = new MessageChannel();
  const events: WorkerEvent[] = [];
  const loaded = new Promise<void>((resolve, reject) => {
    channel.port1.on('message', (event: WorkerEvent) => {
      events.push(event);
      if (event.type === 'loaded') resolve();
      if (event.type === 'load-failed') reject(new Error(event.error));
    });
  });
  const served = serve({
    nodeIndex: 0,
    workerIndex: 0,
    port: channel.port2,
    responseRing: responses.buffer,
    metrics,
    metricsShard: 1,
    inflight: InflightTable.createBuffer(1),
    device: { kind: 'cpu' },
    intraOpThreads: 1,
    logLevel: 'silent',
  });
  let nextId = 1;
  /** Writes one request per ids list into the normal-priority ring; returns their ring ids. */
  const send = (batch: number[][]): number[] =>
    batch.map((ids) => {
      const raw = new Uint8Array(new BigInt64Array(ids.map(BigInt)).buffer);
      const bound = {
        inputs: [
          {
            spec: signature.inputs[0]!,
            index: 0,
            dims: [LOOKUP_IDS],
            value: undefined,
            byteLength: raw.length,
            raw,
          },
        ],
        inputMask: 1,
        byteLength: 8 + 4 + raw.length,
      };
      const ring = rings[1]!;
      const offset = ring.reserve(requestRecordBytes(bound));
      if (offset < 0) throw new Error('request ring full');
      const requestId = nextId++;
      const now = clock();
      writeRequestRecord(
        ring.view,
        ring.bytes,
        offset,
        { requestId, slot: SLOT, priority: 'normal', enqueuedAt: now, deadlineAt: now + 60_000 },
        bound,
      );
      ring.commit(undefined, false);
      return requestId;
    });
  const answers = new Map<number, Answer>();
  const collect = (offset: number): boolean => {
    const view = responses.view;
    const status = readResponseStatus(view, offset);
    const answer: Answer = {
      requestId: readResponseRequestId(view, offset),
      status,
      batchSize: view.getUint16(offset + 16, true),
      queueMs: readQueueMs(view, offset),
      computeMs: readComputeMs(view, offset),
    };
    if (status === 0)
      answer.vectors = (decodeResult(responses.bytes, view, offset, signature) as number[][]).flat();
    else answer.message = readErrorResponse(responses.bytes, view, offset).message;
    answers.set(answer.requestId, answer);
    return true;
  };
  /** Every answer for `ids`, waiting (bounded) for the lane to write them. */
  const answersFor = async (ids: number[]): Promise<Answer[]> => {
    const until = Date.now() + 10_000;
    while (ids.some((id) => !answers.has(id))) {
      if (Date.now() > until) throw new Error(`only ${answers.size} answers after 10 s`);
      const sequence = responses.writeSequence();
      if (responses.pendingRecords() === 0) await responses.waitForData(sequence, 100, false);
      responses.claim(collect, 4096);
    }
    return ids.map((id) => answers.get(id)!);
  };
  const load = (): Promise<void> => {
    channel.port1.postMessage({
      type: 'load',
      slot: SLOT,
      model: 'lookup',
      version: '1',
      file,
      signature,
      rings: rings.map((ring) => ring.buffer),
      doorbell: doorbell.buffer,
      batching,
    });
    return loaded;
  };
  const stop = async (): Promise<void> => {
    channel.port1.postMessage({ type: 'drain' });
    await served;
    channel.port1.close();
  };
  return {
    send,
    load,
    answersFor,
    stop,
    events,
    totals: () => readSlotTotals(metrics, SLOT),
    policy: () => readPolicyState(metrics, SLOT),
    doorbell,
  };
}

/** Victim ids: valid, varied, seeded (negative ids count from the table's end). */
function victimIds(item: number): number[] {
  return [item % 8, (item * 3 + 1) % 8, -1 - (item % 8), (item * 5) % 8];
}

describe('LaneHost batch isolation', () => {
  it('a failed run is bisected: only the items that fail alone get model_error, the rest their answers', async () => {
    // Adaptive, to see that its cost model learns nothing from the failed run or the bisection's runs.
    const lane = await startLane({
      policy: 'adaptive',
      maxBatchSize: 16,
      maxQueueDelayMs: 5,
      sloP99Ms: 1000,
      costPrior: { interceptMs: 7, perItemMs: 0.7 },
    });
    try {
      // Written before the lane starts: its first claim takes all 16 as one batch.
      const poisoned = new Set([3, 11]);
      const batch = Array.from({ length: 16 }, (_, item) =>
        poisoned.has(item) ? [0, POISON_ID, 1, 2] : victimIds(item),
      );
      const ids = lane.send(batch);
      await lane.load();
      const answers = await lane.answersFor(ids);
      answers.forEach((answer, item) => {
        if (poisoned.has(item)) {
          expect(errorCodeFromIndex(answer.status)).toBe('model_error');
          expect(answer.message).toMatch(/^model run failed: .*indices element out of data bounds, idx=1000/);
          expect(answer.batchSize).toBe(1);
        } else {
          expect({ item, status: answer.status, message: answer.message }).toEqual({
            item,
            status: 0,
            message: undefined,
          });
          expect(answer.vectors).toEqual(expectedVectors(batch[item]!));
          expect(answer.batchSize).toBeGreaterThanOrEqual(1);
          expect(answer.batchSize).toBeLessThanOrEqual(8);
        }
        expect(answer.queueMs).toBeGreaterThanOrEqual(0);
        expect(answer.computeMs).toBeGreaterThan(0);
      });
      // The ranges in order: [0,8) [0,4) [0,2) [2,4) [2,3) [3,4) [4,8) [8,16) [8,12) [8,10) [10,12) [10,11)
      // [11,12) [12,16): 14 runs after the failed full one.
      const totals = lane.totals();
      expect(totals.isolationRuns).toBe(14);
      // The failed full batch is no batch the policy learns from (and none of the bisection runs is).
      expect(totals.batches).toBe(0);
      expect(totals.batchSize.count).toBe(0);
      expect(lane.policy()).toMatchObject({ costInterceptMs: 7, costPerItemMs: 0.7 });
      // Item 0..1 were answered by the run of [0,2), 4..7 by [4,8): each answer names the run that made it.
      expect(answers.map((answer) => answer.batchSize)).toEqual([
        2, 2, 1, 1, 4, 4, 4, 4, 2, 2, 1, 1, 4, 4, 4, 4,
      ]);
    } finally {
      await lane.stop();
    }
  });

  it('a batch that runs is one run, learned from, with no bisection', async () => {
    const lane = await startLane({ policy: 'greedy', maxBatchSize: 16, maxQueueDelayMs: 5 });
    try {
      const batch = Array.from({ length: 16 }, (_, item) => victimIds(item));
      const ids = lane.send(batch);
      await lane.load();
      const answers = await lane.answersFor(ids);
      answers.forEach((answer, item) => {
        expect(answer.status).toBe(0);
        expect(answer.vectors).toEqual(expectedVectors(batch[item]!));
        expect(answer.batchSize).toBe(16);
      });
      const totals = lane.totals();
      expect(totals.isolationRuns).toBe(0);
      expect(totals.batches).toBe(1);
    } finally {
      await lane.stop();
    }
  });

  it('a batch of one that fails is answered model_error at once (nothing to bisect)', async () => {
    const lane = await startLane({ policy: 'greedy', maxBatchSize: 16, maxQueueDelayMs: 5 });
    try {
      const ids = lane.send([[POISON_ID, 0, 0, 0]]);
      await lane.load();
      const [answer] = await lane.answersFor(ids);
      expect(errorCodeFromIndex(answer!.status)).toBe('model_error');
      expect(answer!.message).toMatch(/^model run failed: /);
      expect(lane.totals().isolationRuns).toBe(0);
    } finally {
      await lane.stop();
    }
  });
});
