/**
 * Micro benchmark (not a test): SPSC throughput across two worker threads.
 *
 *   npx tsc -p tsconfig.json && node dist/loadtest/micro/ring.js [records=5000000] [recordBytes=64] [capacity=262144] [batch=256]
 *
 * One producer thread writes `records` records of `recordBytes` bytes (reserve + fill + commit, waiting with
 * waitForSpace when full); one consumer thread claims batches of up to `batch` records, copying each payload out
 * (one `set` per record, as a worker building a tensor would) and waiting with waitForData when empty.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { RingBuffer } from '../../libs/ring/index';

interface BenchData {
  role: 'producer' | 'consumer';
  ring: SharedArrayBuffer;
  records: number;
  recordBytes: number;
  batch: number;
}

async function producer(d: BenchData): Promise<void> {
  const ring = RingBuffer.from(d.ring);
  const src = new Uint8Array(d.recordBytes).fill(7);
  let waits = 0;
  for (let i = 0; i < d.records; i++) {
    let off = ring.reserve(d.recordBytes);
    while (off < 0) {
      waits++;
      await ring.waitForSpace(d.recordBytes, 1000);
      off = ring.reserve(d.recordBytes);
    }
    ring.bytes.set(src, off);
    ring.view.setUint32(off, i, true);
    ring.commit();
  }
  parentPort!.postMessage({ waits });
}

async function consumer(d: BenchData): Promise<void> {
  const ring = RingBuffer.from(d.ring);
  const out = new Uint8Array(d.batch * d.recordBytes);
  const { bytes, view } = ring;
  let fill = 0;
  let expected = 0;
  let bad = 0;
  const visitor = (off: number, len: number): boolean => {
    if (view.getUint32(off, true) !== expected++) bad++;
    out.set(bytes.subarray(off, off + len), fill);
    fill += len;
    return true;
  };
  let got = 0;
  let waits = 0;
  let batches = 0;
  while (got < d.records) {
    const seen = ring.writeSequence();
    fill = 0;
    const n = ring.claim(visitor, d.batch);
    got += n;
    if (n > 0) batches++;
    else {
      waits++;
      await ring.waitForData(seen, 1000);
    }
  }
  parentPort!.postMessage({ waits, batches, bad });
}

function start(data: BenchData): Promise<Record<string, number>> {
  const w = new Worker(__filename, { workerData: data });
  return new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  });
}

async function main(): Promise<void> {
  const [records = 5_000_000, recordBytes = 64, capacity = 256 * 1024, batch = 256] = process.argv
    .slice(2)
    .map(Number);
  const ring = RingBuffer.create(capacity);
  const base = { ring: ring.buffer, records, recordBytes, batch };
  const t0 = performance.now();
  const [p, c] = await Promise.all([
    start({ ...base, role: 'producer' }),
    start({ ...base, role: 'consumer' }),
  ]);
  const s = (performance.now() - t0) / 1000;
  console.log(
    `SPSC ${records} x ${recordBytes} B records, ring ${capacity} B, claim batch <= ${batch}: ` +
      `${(records / s / 1e6).toFixed(2)} M records/s, ${((records * recordBytes) / s / 1e6).toFixed(0)} MB/s payload ` +
      `(${s.toFixed(2)} s incl. thread start; producer waits ${p.waits}, consumer waits ${c.waits}, ` +
      `avg batch ${(records / (c.batches ?? 1)).toFixed(1)}, order errors ${c.bad})`,
  );
}

if (isMainThread) {
  main().catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
} else {
  const d = workerData as BenchData;
  (d.role === 'producer' ? producer(d) : consumer(d)).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
