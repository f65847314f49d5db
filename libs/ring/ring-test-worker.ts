/**
 * Worker-thread side of the ring tests (stress.test.ts, recovery.test.ts). Not a test file itself: it is
 * compiled to dist/libs/ring/ring-test-worker.js and started with `new Worker(...)`.
 *
 * Record format used by the stress test (identifiable records, length >= 12):
 *   [u32 producerId][u32 seq][u32 hash(producerId, seq)][pattern bytes taken from a shared pseudo-random table]
 * The length itself is a function of the hash, so consumers check length, identity, order and every byte.
 * Zero-length records are extra (not numbered): consumers count them. A 4-byte record 0xffffffff is the stop
 * sentinel written by the main thread once all producers are done (each consumer takes exactly one).
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { RingBuffer } from './index';

export const STOP_MARK = 0xffffffff;
export const ID_BYTES = 12;

/** Per-consumer stats words in the stats SharedArrayBuffer (Int32, STATS_STRIDE words per consumer). */
export const STATS_STRIDE = 16;
export const S_TAKEN = 0;
export const S_ZEROS = 1;
export const S_BATCHES = 2;
export const S_MAX_BATCH = 3;
export const S_ERRORS = 4;
export const S_TIMEOUTS = 5;
export const S_FROM_P0 = 6; // records taken per producer, producers 0..7
export const S_WAITS = 14;

export interface ProducerData {
  role: 'producer';
  ring: SharedArrayBuffer;
  producerId: number;
  count: number;
}

export interface ConsumerData {
  role: 'consumer';
  ring: SharedArrayBuffer;
  consumerId: number;
  producers: number;
  perProducer: number;
  bitmap: SharedArrayBuffer;
  stats: SharedArrayBuffer;
  maxBatch: number;
}

export interface HoldLockData {
  role: 'hold-producer-lock' | 'hold-consumer-lock';
  ring: SharedArrayBuffer;
  ownerId: number;
  /** Int32[0] set to 1 (and notified) once the lock is held. */
  signal: SharedArrayBuffer;
  /** Hold this long, then finish normally (commit the 16-byte record / take the claimed record); default: until terminated. */
  holdMs?: number;
}

export type WorkerData = ProducerData | ConsumerData | HoldLockData;

/** murmur3 fmix32 of (producerId, seq). */
export function recordHash(producerId: number, seq: number): number {
  let h = (Math.imul(producerId + 1, 0x9e3779b1) ^ seq) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Payload length of record (producerId, seq): mostly small, some medium, a few near maxRecordBytes. */
export function recordLength(hash: number, maxRecordBytes: number): number {
  const bucket = hash % 1000;
  const r = hash >>> 10;
  if (bucket < 700) return ID_BYTES + (r % 116); // 12 .. 127
  if (bucket < 950) return 128 + (r % 896); // 128 .. 1023
  if (bucket < 995) return Math.min(1024 + (r % 7168), maxRecordBytes); // 1024 .. 8191
  return maxRecordBytes - (r % 64); // maxRecordBytes - 63 .. maxRecordBytes
}

/** Whether producer emits an extra zero-length record before (producerId, seq). About 0.5%. */
export function zeroBefore(hash: number): boolean {
  return ((hash >>> 3) & 0xff) === 7 || ((hash >>> 11) & 0xff) === 7;
}

const PATTERN_WINDOW = 0x10000;

/** Deterministic pseudo-random bytes: PATTERN_WINDOW + maxRecordBytes of them (identical in every thread). */
export function patternTable(maxRecordBytes: number): Uint8Array {
  const t = new Uint8Array(PATTERN_WINDOW + maxRecordBytes);
  let x = 0x12345678;
  for (let i = 0; i < t.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    t[i] = x & 0xff;
  }
  return t;
}

export function patternStart(hash: number): number {
  return hash & (PATTERN_WINDOW - 1);
}

async function produce(d: ProducerData): Promise<void> {
  const ring = RingBuffer.from(d.ring);
  const table = patternTable(ring.maxRecordBytes);
  const empty = new Uint8Array(0);
  const { bytes, view } = ring;
  let zeros = 0;
  let waits = 0;
  let timeouts = 0;
  for (let seq = 0; seq < d.count; seq++) {
    const hash = recordHash(d.producerId, seq);
    if (zeroBefore(hash)) {
      while (!ring.tryWrite(empty)) {
        waits++;
        if ((await ring.waitForSpace(0, 10_000)) === 'timed-out') timeouts++;
      }
      zeros++;
    }
    const len = recordLength(hash, ring.maxRecordBytes);
    let off = ring.reserve(len);
    while (off < 0) {
      waits++;
      if ((await ring.waitForSpace(len, 10_000)) === 'timed-out') timeouts++;
      off = ring.reserve(len);
    }
    view.setUint32(off, d.producerId, true);
    view.setUint32(off + 4, seq, true);
    view.setUint32(off + 8, hash, true);
    const p = patternStart(hash);
    bytes.set(table.subarray(p, p + len - ID_BYTES), off + ID_BYTES);
    ring.commit();
  }
  parentPort!.postMessage({ type: 'done', zeros, waits, timeouts });
}

async function consume(d: ConsumerData): Promise<void> {
  const ring = RingBuffer.from(d.ring);
  const table = patternTable(ring.maxRecordBytes);
  const bitmap = new Uint8Array(d.bitmap);
  const stats = new Int32Array(d.stats, d.consumerId * STATS_STRIDE * 4, STATS_STRIDE);
  const { bytes } = ring;
  // The batch is copied out of the ring inside the visitor (as a real consumer would, e.g. into a tensor) and
  // verified after claim() has returned the space to the producers.
  // A byte budget per batch: the visitor stops (returns false) when the next record does not fit.
  const batch = new Uint8Array(Math.max(128 * 1024, ring.maxRecordBytes + 8));
  const batchView = new DataView(batch.buffer);
  const batchOff = new Int32Array(d.maxBatch);
  const batchLen = new Int32Array(d.maxBatch);
  let fill = 0;
  let count = 0;
  let stop = false;
  const lastSeq = new Array<number>(d.producers).fill(-1);
  let firstError: string | undefined;
  const fail = (msg: string): void => {
    stats[S_ERRORS]!++;
    firstError ??= msg;
  };

  const visitor = (off: number, len: number): boolean => {
    if (stop) return false; // records after our stop sentinel belong to the other consumers
    if (fill + len > batch.length) return false; // batch full: this record stays for the next claim
    batch.set(bytes.subarray(off, off + len), fill);
    batchOff[count] = fill;
    batchLen[count] = len;
    fill = (fill + len + 7) & ~7;
    count++;
    if (len === 4 && ring.view.getUint32(off, true) === STOP_MARK) stop = true;
    return true;
  };

  while (true) {
    const seen = ring.writeSequence();
    fill = 0;
    count = 0;
    const n = ring.claim(visitor, d.maxBatch);
    if (n !== count) fail(`claim returned ${n} but the visitor took ${count}`);
    if (n > 0) {
      stats[S_BATCHES]!++;
      if (n > stats[S_MAX_BATCH]!) stats[S_MAX_BATCH] = n;
    }
    for (let i = 0; i < count; i++) {
      const o = batchOff[i]!;
      const len = batchLen[i]!;
      if (len === 0) {
        stats[S_ZEROS]!++;
        continue;
      }
      if (len === 4 && batchView.getUint32(o, true) === STOP_MARK) continue;
      stats[S_TAKEN]!++;
      if (len < ID_BYTES) {
        fail(`record of ${len} bytes is neither zero-length, a stop sentinel nor an identified record`);
        continue;
      }
      const pid = batchView.getUint32(o, true);
      const seq = batchView.getUint32(o + 4, true);
      const hash = batchView.getUint32(o + 8, true);
      if (pid >= d.producers || seq >= d.perProducer) {
        fail(`bad identity producer ${pid} seq ${seq} (len ${len})`);
        continue;
      }
      if (hash !== recordHash(pid, seq)) {
        fail(`producer ${pid} seq ${seq}: hash 0x${hash.toString(16)} is wrong`);
        continue;
      }
      if (len !== recordLength(hash, ring.maxRecordBytes)) {
        fail(
          `producer ${pid} seq ${seq}: length ${len}, expected ${recordLength(hash, ring.maxRecordBytes)}`,
        );
        continue;
      }
      const p = patternStart(hash) - ID_BYTES;
      for (let j = ID_BYTES; j < len; j++) {
        if (batch[o + j] !== table[p + j]) {
          fail(`producer ${pid} seq ${seq}: payload byte ${j} of ${len} corrupt`);
          break;
        }
      }
      if (seq <= lastSeq[pid]!) fail(`producer ${pid}: seq ${seq} after seq ${lastSeq[pid]} (order)`);
      lastSeq[pid] = seq;
      if (pid < 8) stats[S_FROM_P0 + pid]!++;
      if (Atomics.add(bitmap, pid * d.perProducer + seq, 1) !== 0)
        fail(`producer ${pid} seq ${seq}: duplicate`);
    }
    if (stop) break;
    if (n === 0) {
      stats[S_WAITS]!++;
      if ((await ring.waitForData(seen, 10_000)) === 'timed-out') stats[S_TIMEOUTS]!++;
    }
  }
  parentPort!.postMessage({ type: 'done', firstError });
}

function holdLock(d: HoldLockData): void {
  const ring = RingBuffer.from(d.ring);
  ring.setOwnerId(d.ownerId);
  const signal = new Int32Array(d.signal);
  const park = (): void => {
    Atomics.store(signal, 0, 1);
    Atomics.notify(signal, 0);
    Atomics.wait(signal, 1, 0, d.holdMs); // until terminated, or holdMs
  };
  if (d.role === 'hold-producer-lock') {
    const off = ring.reserve(16);
    ring.bytes.fill(0xee, off, off + 16); // half-written record: must never be published if we are killed
    park();
    ring.commit();
    parentPort!.postMessage({ type: 'done' });
  } else {
    const n = ring.claim((_off, _len, index) => {
      if (index > 0) return false;
      park();
      return true;
    }, 10);
    parentPort!.postMessage({ type: 'done', claimed: n });
  }
}

const data = workerData as WorkerData | undefined;
if (!isMainThread && parentPort && data) {
  const fail = (err: unknown): void => {
    parentPort!.postMessage({
      type: 'error',
      message: err instanceof Error ? (err.stack ?? err.message) : String(err),
    });
  };
  try {
    if (data.role === 'producer') produce(data).catch(fail);
    else if (data.role === 'consumer') consume(data).catch(fail);
    else holdLock(data);
  } catch (err) {
    fail(err);
  }
}
