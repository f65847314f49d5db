/**
 * Throughput of embedded inference (the stream pipeline's `embedded` backend) on one model: `concurrency`
 * callers each predict in a loop for `seconds`; prints predicts/s, the mean batch size the workers ran and the
 * latency percentiles of a call, as one JSON line.
 *
 *   node dist/loadtest/micro/embedded-bench.js [--workers 1] [--concurrency 256] [--seconds 5] [--model delay-risk]
 *     [--version 1] [--models-dir models]
 */
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { createEmbeddedBackend } from '../../apps/pipeline/inference/embedded';
import { quantileSorted } from '../harness/quantile';

export interface EmbeddedBenchResult {
  workers: number;
  concurrency: number;
  seconds: number;
  predicts: number;
  predictsPerSecond: number;
  meanBatchSize: number;
  retries: number;
  latencyMs: { p50: number; p95: number; p99: number };
}

export async function benchEmbedded(options: {
  modelsDir: string;
  model: string;
  version: string;
  workers: number;
  concurrency: number;
  seconds: number;
  /** One input row of the model. */
  row: (i: number) => Float32Array;
}): Promise<EmbeddedBenchResult> {
  const pin = { model: options.model, version: options.version };
  const backend = await createEmbeddedBackend({
    modelsDir: options.modelsDir,
    workers: options.workers,
    pins: [pin],
  });
  try {
    // Warm-up: sessions, JIT and the batch policy's first measurements are not what is measured.
    await Promise.all(Array.from({ length: 2000 }, (_, i) => backend.predict(pin, options.row(i))));
    const before = backend.batchStats(pin)!;
    const latencies: number[] = [];
    let predicts = 0;
    const started = performance.now();
    const until = started + options.seconds * 1000;
    await Promise.all(
      Array.from({ length: options.concurrency }, async (_, caller) => {
        for (let i = caller; performance.now() < until; i += options.concurrency) {
          const at = performance.now();
          await backend.predict(pin, options.row(i));
          latencies.push(performance.now() - at);
          predicts++;
        }
      }),
    );
    const elapsed = (performance.now() - started) / 1000;
    const after = backend.batchStats(pin)!;
    latencies.sort((a, b) => a - b);
    const quantile = (q: number): number => Math.round(quantileSorted(latencies, q) * 100) / 100;
    return {
      workers: options.workers,
      concurrency: options.concurrency,
      seconds: Math.round(elapsed * 100) / 100,
      predicts,
      predictsPerSecond: Math.round(predicts / elapsed),
      meanBatchSize: Math.round(((after.items - before.items) / (after.batches - before.batches)) * 10) / 10,
      retries: backend.retries,
      latencyMs: { p50: quantile(0.5), p95: quantile(0.95), p99: quantile(0.99) },
    };
  } finally {
    await backend.close();
  }
}

/** A delay-risk feature row: [speed_5m_kmh, distance_remaining_km, stops, traffic_alerts_10m, minutes_to_promised]. */
export function delayRiskRow(i: number): Float32Array {
  return new Float32Array([5 + (i % 40), 0.5 + (i % 13), i % 4, i % 3, (i % 50) - 10]);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      workers: { type: 'string', default: '1' },
      concurrency: { type: 'string', default: '256' },
      seconds: { type: 'string', default: '5' },
      model: { type: 'string', default: 'delay-risk' },
      version: { type: 'string', default: '1' },
      'models-dir': { type: 'string', default: path.resolve(__dirname, '../../../models') },
    },
  });
  const result = await benchEmbedded({
    modelsDir: values['models-dir'],
    model: values.model,
    version: values.version,
    workers: Number(values.workers),
    concurrency: Number(values.concurrency),
    seconds: Number(values.seconds),
    row: delayRiskRow,
  });
  console.log(JSON.stringify(result));
}

if (require.main === module) {
  main().catch((error: Error) => {
    console.error(error.message);
    process.exit(1);
  });
}
