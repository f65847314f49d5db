/**
 * Stress: real worker threads hammer one ring with random-size records (0 bytes .. maxRecordBytes, wrapping
 * constantly), waiting with waitForData/waitForSpace. Consumers check content, length and per-producer order;
 * the main thread checks that every (producer, seq) arrived exactly once.
 */
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { RingBuffer } from './index';
import {
  type ConsumerData,
  type ProducerData,
  recordHash,
  S_BATCHES,
  S_ERRORS,
  S_FROM_P0,
  S_MAX_BATCH,
  S_TAKEN,
  S_TIMEOUTS,
  S_WAITS,
  S_ZEROS,
  STATS_STRIDE,
  STOP_MARK,
  zeroBefore,
} from './ring-test-worker';

const WORKER = path.join(__dirname, 'ring-test-worker.js');

interface DoneMessage {
  type: 'done' | 'error';
  message?: string;
  firstError?: string;
  zeros?: number;
  waits?: number;
  timeouts?: number;
}

function run(data: ProducerData | ConsumerData): { worker: Worker; done: Promise<DoneMessage> } {
  const worker = new Worker(WORKER, { workerData: data });
  const done = new Promise<DoneMessage>((resolve, reject) => {
    let result: DoneMessage | undefined;
    worker.on('message', (m: DoneMessage) => {
      if (m.type === 'error') reject(new Error(`${data.role} worker failed: ${m.message}`));
      else result = m;
    });
    worker.on('error', reject);
    worker.on('exit', (code) => {
      if (result) resolve(result);
      else reject(new Error(`${data.role} worker exited with code ${code} before finishing`));
    });
  });
  return { worker, done };
}

interface StressOptions {
  capacity: number;
  producers: number;
  consumers: number;
  perProducer: number;
  maxBatch: number;
}

async function stress(o: StressOptions): Promise<{ ms: number; ring: RingBuffer; stats: Int32Array }> {
  const ring = RingBuffer.create(o.capacity);
  const bitmap = new SharedArrayBuffer(o.producers * o.perProducer);
  const stats = new SharedArrayBuffer(o.consumers * STATS_STRIDE * 4);
  const t0 = performance.now();
  const consumers = Array.from({ length: o.consumers }, (_, consumerId) =>
    run({
      role: 'consumer',
      ring: ring.buffer,
      consumerId,
      producers: o.producers,
      perProducer: o.perProducer,
      bitmap,
      stats,
      maxBatch: o.maxBatch,
    }),
  );
  const producers = Array.from({ length: o.producers }, (_, producerId) =>
    run({ role: 'producer', ring: ring.buffer, producerId, count: o.perProducer }),
  );
  try {
    const produced = await Promise.all(producers.map((p) => p.done));
    // All data is in (or through) the ring: the main thread, a producer too, sends one stop sentinel per consumer.
    const stop = new Uint8Array(4);
    new DataView(stop.buffer).setUint32(0, STOP_MARK, true);
    for (let i = 0; i < o.consumers; i++) {
      while (!ring.tryWrite(stop)) {
        expect(await ring.waitForSpace(stop.length, 10_000)).toBe('ok');
      }
    }
    const consumed = await Promise.all(consumers.map((c) => c.done));
    const ms = performance.now() - t0;

    const s = new Int32Array(stats);
    const sum = (k: number): number => {
      let t = 0;
      for (let c = 0; c < o.consumers; c++) t += s[c * STATS_STRIDE + k]!;
      return t;
    };
    expect(consumed.map((c) => c.firstError ?? null)).toEqual(consumed.map(() => null));
    expect(sum(S_ERRORS)).toBe(0);
    // No lost wake-up: nobody ever sat out a 10 s wait while there was work.
    expect(sum(S_TIMEOUTS)).toBe(0);
    expect(produced.reduce((t, p) => t + (p.timeouts ?? 0), 0)).toBe(0);

    // Exactly once: every (producer, seq) was taken by exactly one consumer exactly once.
    const seen = new Uint8Array(bitmap);
    let missing = 0;
    let dup = 0;
    for (let i = 0; i < seen.length; i++) {
      if (seen[i] === 0) missing++;
      else if (seen[i] !== 1) dup++;
    }
    expect({ missing, dup }).toEqual({ missing: 0, dup: 0 });
    expect(sum(S_TAKEN)).toBe(o.producers * o.perProducer);

    // Zero-length records: the same number came out as went in (they carry no identity).
    let zerosExpected = 0;
    for (let p = 0; p < o.producers; p++) {
      for (let q = 0; q < o.perProducer; q++) if (zeroBefore(recordHash(p, q))) zerosExpected++;
    }
    expect(produced.reduce((t, p) => t + (p.zeros ?? 0), 0)).toBe(zerosExpected);
    expect(sum(S_ZEROS)).toBe(zerosExpected);

    expect(ring.pendingRecords()).toBe(0);
    expect(ring.freeBytes()).toBe(ring.capacity);
    expect(ring.writeSequence()).toBe(o.producers * o.perProducer + zerosExpected + o.consumers);
    expect(ring.readSequence()).toBe(ring.writeSequence());

    const perConsumer = Array.from({ length: o.consumers }, (_, c) => ({
      taken: s[c * STATS_STRIDE + S_TAKEN],
      batches: s[c * STATS_STRIDE + S_BATCHES],
      maxBatch: s[c * STATS_STRIDE + S_MAX_BATCH],
      waits: s[c * STATS_STRIDE + S_WAITS],
      fromProducers: Array.from(
        { length: Math.min(o.producers, 8) },
        (_, p) => s[c * STATS_STRIDE + S_FROM_P0 + p],
      ),
    }));
    const records = o.producers * o.perProducer + zerosExpected;
    console.log(
      `ring stress ${o.producers}P/${o.consumers}C capacity ${o.capacity}: ${records} records in ${ms.toFixed(0)} ms ` +
        `(${((records / ms) * 1000).toFixed(0)} rec/s), wraps ${ring.wrapCount()}, ` +
        `producer waits ${produced.map((p) => p.waits).join('/')}, consumers ${JSON.stringify(perConsumer)}`,
    );
    return { ms, ring, stats: s };
  } finally {
    await Promise.all([...producers, ...consumers].map((w) => w.worker.terminate()));
  }
}

describe('RingBuffer stress across worker threads', () => {
  test('MPMC: 2 producers x 500,000 records, 2 consumers, 64 KiB ring', async () => {
    const { ring, stats } = await stress({
      capacity: 64 * 1024,
      producers: 2,
      consumers: 2,
      perProducer: 500_000,
      maxBatch: 64,
    });
    // Records near maxRecordBytes in a 64 KiB ring: wrapping (skip markers) must have happened constantly.
    expect(ring.wrapCount()).toBeGreaterThan(1000);
    // Both consumers did real work and saw both producers (the per-consumer order check is meaningful).
    for (let c = 0; c < 2; c++) {
      expect(stats[c * STATS_STRIDE + S_FROM_P0]!).toBeGreaterThan(1000);
      expect(stats[c * STATS_STRIDE + S_FROM_P0 + 1]!).toBeGreaterThan(1000);
    }
  }, 120_000);

  test('SPSC: 1 producer x 400,000 records, 1 consumer, 16 KiB ring', async () => {
    const { ring, stats } = await stress({
      capacity: 16 * 1024,
      producers: 1,
      consumers: 1,
      perProducer: 400_000,
      maxBatch: 256,
    });
    expect(ring.wrapCount()).toBeGreaterThan(1000);
    expect(stats[S_MAX_BATCH]!).toBeGreaterThan(1);
  }, 120_000);
});
