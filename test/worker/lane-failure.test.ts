/**
 * A lane loop that fails takes its worker thread down, so the node replaces the thread (reloading its lanes,
 * answering the requests it held) instead of keeping a version loaded that answers nothing. Made to fail here
 * by a request ring whose shared memory was written outside the ring protocol (the claim throws
 * ring_corrupt); before, the thread logged "lane loop failed" and lived on with a dead lane.
 */
import path from 'node:path';
import { MessageChannel, Worker } from 'node:worker_threads';
import { InflightTable } from '../../apps/worker/inflight-table';
import type { WorkerEvent, WorkerInit } from '../../apps/worker/messages';
import { metricsBufferFor } from '../../libs/metrics';
import { parseSignature, requestRecordBytes, writeRequestRecord } from '../../libs/protocol';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import { LOOKUP_IDS, lookupConfig, lookupRepository } from '../integration/lookup-model';

const THREAD = path.join(__dirname, 'lane-thread.js');

describe('LaneHost: a failed lane loop', () => {
  it('ends its worker thread (the node then replaces it) instead of leaving the version silent', async () => {
    const { file } = lookupRepository(undefined);
    const signature = parseSignature(lookupConfig(undefined), 'lookup');
    const rings = [0, 1, 2].map(() => {
      const ring = RingBuffer.create(64 * 1024);
      ring.setOwnerId(100);
      return ring;
    });
    const doorbell = Doorbell.create();
    const channel = new MessageChannel();
    const init: WorkerInit = {
      nodeIndex: 0,
      workerIndex: 0,
      port: channel.port2,
      responseRing: RingBuffer.create(64 * 1024).buffer,
      metrics: metricsBufferFor(2),
      metricsShard: 1,
      inflight: InflightTable.createBuffer(1),
      device: { kind: 'cpu' },
      intraOpThreads: 1,
      logLevel: 'silent',
    };
    const events: WorkerEvent[] = [];
    const loaded = new Promise<void>((resolve, reject) => {
      channel.port1.on('message', (event: WorkerEvent) => {
        events.push(event);
        if (event.type === 'loaded') resolve();
        if (event.type === 'load-failed') reject(new Error(event.error));
      });
    });
    const thread = new Worker(THREAD, { workerData: init, transferList: [channel.port2] });
    const died = new Promise<Error | undefined>((resolve) => {
      thread.once('error', resolve);
      setTimeout(() => resolve(undefined), 10_000).unref();
    });
    try {
      channel.port1.postMessage({
        type: 'load',
        slot: 1,
        model: 'lookup',
        version: '1',
        file,
        signature,
        rings: rings.map((ring) => ring.buffer),
        doorbell: doorbell.buffer,
        batching: { policy: 'greedy', maxBatchSize: 16, maxQueueDelayMs: 5 },
      });
      await loaded;
      const raw = new Uint8Array(new BigInt64Array([0n, 1n, 2n, 3n]).buffer);
      const bound = {
        inputs: [
          { spec: signature.inputs[0]!, index: 0, dims: [LOOKUP_IDS], value: undefined, byteLength: 32, raw },
        ],
        inputMask: 1,
        byteLength: 8 + 4 + raw.length,
      };
      const ring = rings[1]!;
      const offset = ring.reserve(requestRecordBytes(bound));
      const now = clock();
      writeRequestRecord(
        ring.view,
        ring.bytes,
        offset,
        { requestId: 1, slot: 1, priority: 'normal', enqueuedAt: now, deadlineAt: now + 60_000 },
        bound,
      );
      ring.commit(undefined, false);
      // the record header's check word (just before the payload): the ring's next claim throws on it
      ring.view.setUint32(offset - 4, 0xdeadbeef, true);
      doorbell.ring();
      const error = await died;
      expect(error?.message).toMatch(/^lane loop of lookup v1 failed: ring record header .* is corrupt/);
      expect(events.some((event) => event.type === 'log' && event.msg === 'lane loop failed')).toBe(true);
    } finally {
      channel.port1.close();
      await thread.terminate();
    }
  }, 30000);
});
