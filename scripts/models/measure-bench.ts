/**
 * Measures the bench model in-process with onnxruntime-node on one intra-op thread:
 * items/s at each batch size. Batch sizes are measured in interleaved rounds; the report
 * gives the best round (least disturbed by other processes) and the median round.
 *
 *   node dist/scripts/models/measure-bench.js [--model models/bench/1/model.onnx]
 *        [--batches 1,2,4,8,16,32,64,128,256] [--rounds 5] [--seconds 0.5] [--threads 1]
 *
 * --seconds is the time per batch size per round.
 */
import { readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import { Rng } from '../../libs/rng';

export interface BenchPoint {
  batch: number;
  /** Best round. */
  msPerCall: number;
  itemsPerSecond: number;
  /** Median round. */
  medianItemsPerSecond: number;
}

export async function measure(
  modelBytes: Uint8Array,
  batches: number[],
  seconds: number,
  threads = 1,
  rounds = 1,
): Promise<BenchPoint[]> {
  const session = await ort.InferenceSession.create(modelBytes, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
  const inputName = session.inputNames[0]!;
  const meta = session.inputMetadata[0];
  const width = meta?.isTensor && typeof meta.shape[1] === 'number' ? meta.shape[1] : 256;
  const rng = new Rng(7);
  const feeds = batches.map((batch) => {
    const data = new Float32Array(batch * width);
    for (let i = 0; i < data.length; i++) data[i] = rng.next();
    return { [inputName]: new ort.Tensor('float32', data, [batch, width]) };
  });
  for (const f of feeds) for (let i = 0; i < 2; i++) await session.run(f); // warm-up
  const msPerCall: number[][] = batches.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (let b = 0; b < batches.length; b++) {
      let calls = 0;
      const t0 = process.hrtime.bigint();
      let elapsed = 0;
      while (elapsed < seconds * 1e9 || calls < 3) {
        await session.run(feeds[b]!);
        calls++;
        elapsed = Number(process.hrtime.bigint() - t0);
      }
      msPerCall[b]!.push(elapsed / 1e6 / calls);
    }
  }
  await session.release();
  return batches.map((batch, b) => {
    const ms = [...msPerCall[b]!].sort((x, y) => x - y);
    const best = ms[0]!;
    const median = ms[Math.floor(ms.length / 2)]!;
    return {
      batch,
      msPerCall: best,
      itemsPerSecond: (batch * 1000) / best,
      medianItemsPerSecond: (batch * 1000) / median,
    };
  });
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const opt = (name: string, def: string) => {
    const i = args.indexOf(name);
    return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : def;
  };
  const file = opt('--model', path.resolve(__dirname, '../../../models/bench/1/model.onnx'));
  const batches = opt('--batches', '1,2,4,8,16,32,64,128,256').split(',').map(Number);
  const seconds = Number(opt('--seconds', '0.5'));
  const rounds = Number(opt('--rounds', '5'));
  const threads = Number(opt('--threads', '1'));
  const points = await measure(readFileSync(file), batches, seconds, threads, rounds);
  const base = points[0]!;
  console.log(`model ${file}`);
  console.log(
    `intraOpNumThreads=${threads}, ${rounds} rounds × ${seconds} s per batch size; ` +
      `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), load avg ${os.loadavg()[0]!.toFixed(2)}`,
  );
  console.log('batch  best ms/call  best items/s  × batch 1  median items/s  × batch 1');
  for (const p of points) {
    console.log(
      [
        String(p.batch).padStart(5),
        p.msPerCall.toFixed(3).padStart(12),
        p.itemsPerSecond.toFixed(0).padStart(12),
        (p.itemsPerSecond / base.itemsPerSecond).toFixed(2).padStart(9),
        p.medianItemsPerSecond.toFixed(0).padStart(14),
        (p.medianItemsPerSecond / base.medianItemsPerSecond).toFixed(2).padStart(9),
      ].join('  '),
    );
  }
  const best = points.reduce((a, b) => (b.itemsPerSecond > a.itemsPerSecond ? b : a));
  console.log(
    `best batch ${best.batch}: ${best.itemsPerSecond.toFixed(0)} items/s = ` +
      `${(best.itemsPerSecond / base.itemsPerSecond).toFixed(1)}× batch 1 (${base.itemsPerSecond.toFixed(0)} items/s)`,
  );
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
