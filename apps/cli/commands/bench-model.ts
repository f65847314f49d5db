/**
 * `streaminfer bench model <name>`: the model's own speed in-process — no server, no rings — at batch sizes
 * 1, 2, 4, … with the thread settings the server's workers use. This is the ceiling served throughput is
 * measured against.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Command } from 'commander';
import { parseDeviceEntry } from '../../../libs/config';
import { defaultIntraOpThreads, loadSession, ort } from '../../../libs/inference';
import type { TensorSpec } from '../../../libs/protocol';
import { readModel } from '../../../libs/registry';

export interface BenchModelOptions {
  modelsDir: string;
  model: string;
  version?: string;
  maxBatch: number;
  /** Batch sizes to measure; default 1, 2, 4, … up to maxBatch. */
  batchSizes?: readonly number[];
  minMs: number;
  device: string;
  intraOpThreads?: number;
  workers: number;
}

export interface BatchSpeed {
  batchSize: number;
  calls: number;
  usPerCall: number;
  usPerItem: number;
  itemsPerSecond: number;
}

export interface BenchModelResult {
  model: string;
  version: string;
  executionProvider: string;
  intraOpThreads: number;
  results: BatchSpeed[];
  best: BatchSpeed;
  speedupBestOverBatch1: number;
}

function makeTensor(spec: TensorSpec, batch: number, seed: number): ort.Tensor {
  const dims = [batch, ...spec.shape.map((dim) => (dim === -1 ? 8 : dim))];
  const count = dims.reduce((product, dim) => product * dim, 1);
  let state = seed >>> 0;
  const random = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  switch (spec.dtype) {
    case 'string':
      return new ort.Tensor(
        'string',
        Array.from({ length: count }, () => Math.floor(random() * 1e9).toString(36)),
        dims,
      );
    case 'float64':
      return new ort.Tensor(
        'float64',
        Float64Array.from({ length: count }, () => random() * 16),
        dims,
      );
    case 'int32':
      return new ort.Tensor(
        'int32',
        Int32Array.from({ length: count }, () => Math.floor(random() * 16)),
        dims,
      );
    case 'int64':
      return new ort.Tensor(
        'int64',
        BigInt64Array.from({ length: count }, () => BigInt(Math.floor(random() * 16))),
        dims,
      );
    case 'uint8':
    case 'bool':
      return new ort.Tensor(
        spec.dtype,
        Uint8Array.from({ length: count }, () => Math.floor(random() * 2)),
        dims,
      );
    default:
      // Pixel-count-like values (0..16) suit the shipped models; any float works for timing.
      return new ort.Tensor(
        'float32',
        Float32Array.from({ length: count }, () => Math.round(random() * 16)),
        dims,
      );
  }
}

function powersOfTwo(max: number): number[] {
  const sizes: number[] = [];
  for (let batch = 1; batch <= max; batch *= 2) sizes.push(batch);
  return sizes;
}

export async function benchModel(options: BenchModelOptions): Promise<BenchModelResult> {
  const entry = readModel(path.join(path.resolve(options.modelsDir), options.model), options.model);
  const version = options.version ?? entry.defaultVersion;
  const file = entry.versions.find((candidate) => candidate.version === version)?.file;
  if (!file) throw new Error(`model ${options.model} has no version ${version}`);
  const intraOpThreads =
    options.intraOpThreads ?? defaultIntraOpThreads(os.availableParallelism(), options.workers);
  const device = parseDeviceEntry(options.device);
  if (!device)
    throw new Error(`invalid --device "${options.device}": expected cpu, auto, cuda[:N] or webgpu[:N]`);
  const loaded = await loadSession(file, { device, intraOpThreads });
  const session = loaded.session;
  const results: BatchSpeed[] = [];
  try {
    for (const batch of options.batchSizes ?? powersOfTwo(options.maxBatch)) {
      const feeds: Record<string, ort.Tensor> = {};
      entry.signature.inputs.forEach((spec, index) => {
        feeds[spec.name] = makeTensor(spec, batch, 1 + index + batch);
      });
      const fetches = entry.signature.outputs
        .filter((spec) => spec.from === undefined || feeds[spec.from])
        .map((spec) => spec.name);
      for (let i = 0; i < 3; i++) await session.run(feeds, fetches);
      let calls = 0;
      const started = performance.now();
      let elapsed = 0;
      while (elapsed < options.minMs || calls < 5) {
        await session.run(feeds, fetches);
        calls++;
        elapsed = performance.now() - started;
      }
      const usPerCall = (elapsed * 1000) / calls;
      results.push({
        batchSize: batch,
        calls,
        usPerCall,
        usPerItem: usPerCall / batch,
        itemsPerSecond: (batch * 1e6) / usPerCall,
      });
    }
  } finally {
    await session.release();
  }
  const best = results.reduce((a, b) => (b.itemsPerSecond > a.itemsPerSecond ? b : a));
  return {
    model: options.model,
    version,
    executionProvider: loaded.executionProvider,
    intraOpThreads,
    results,
    best,
    speedupBestOverBatch1: best.itemsPerSecond / results[0]!.itemsPerSecond,
  };
}

export function formatBenchModel(result: BenchModelResult): string {
  const lines = [
    `model ${result.model} v${result.version} on ${result.executionProvider}, ${result.intraOpThreads} intra-op thread(s), in-process`,
    '',
    '| batch | calls | µs/call | µs/item | items/s |',
    '|---:|---:|---:|---:|---:|',
    ...result.results.map(
      (row) =>
        `| ${row.batchSize} | ${row.calls} | ${row.usPerCall.toFixed(1)} | ${row.usPerItem.toFixed(1)} | ${Math.round(row.itemsPerSecond)} |`,
    ),
    '',
    `best: batch ${result.best.batchSize}, ${Math.round(result.best.itemsPerSecond)} items/s = ${result.speedupBestOverBatch1.toFixed(1)}× batch 1`,
  ];
  return lines.join('\n');
}

/** Adds `bench` (measure without a server) and `bench model`. */
export function registerBench(program: Command, fail: (message: string) => never): void {
  const bench = program.command('bench').description('measure without a server');
  bench
    .command('model <name>')
    .description(
      "the model's own speed in-process at batch sizes 1, 2, 4, …, with the server workers' thread settings",
    )
    .option(
      '--models-dir <dir>',
      'model repository',
      process.env.STREAMINFER_MODELS_DIR?.trim() || './models',
    )
    .option('--version <v>', 'model version (default: the default version)')
    .option('--max-batch <n>', 'largest batch size', '256')
    .option('--min-ms <ms>', 'time spent per batch size', '1000')
    .option(
      '--device <spec>',
      'cpu | auto | cuda[:N] | webgpu[:N]',
      process.env.STREAMINFER_DEVICE?.trim() || 'cpu',
    )
    .option(
      '--workers <n>',
      'workers per node the threads are sized for',
      process.env.STREAMINFER_WORKERS?.trim() || '1',
    )
    .option(
      '--intra-op-threads <n>',
      'ONNX Runtime intra-op threads (default: as the server: (cores - 1) / workers)',
    )
    .option('--json', 'machine-readable output')
    .action(async (name: string, flags: Record<string, string | boolean | undefined>) => {
      const positive = (key: string): number => {
        const value = Number(flags[key]);
        if (!Number.isInteger(value) || value < 1)
          fail(`--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a positive integer`);
        return value;
      };
      const options: BenchModelOptions = {
        modelsDir: String(flags.modelsDir),
        model: name,
        maxBatch: positive('maxBatch'),
        minMs: positive('minMs'),
        device: String(flags.device),
        workers: positive('workers'),
      };
      if (typeof flags.version === 'string') options.version = flags.version;
      if (flags.intraOpThreads !== undefined) options.intraOpThreads = positive('intraOpThreads');
      const result = await benchModel(options);
      console.log(flags.json ? JSON.stringify(result, null, 2) : formatBenchModel(result));
    });
}
