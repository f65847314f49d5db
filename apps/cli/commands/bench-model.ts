/**
 * `streaminfer bench model <name>`: the table of the model's own in-process speed per batch size, measured by
 * libs/inference (model-speed.ts, shared with scripts/gpu-probe.ts).
 */
import type { Command } from 'commander';
import { type BenchModelOptions, type BenchModelResult, benchModel } from '../../../libs/inference';

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
