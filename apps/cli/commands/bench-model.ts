/**
 * `streaminfer bench model <name>`: the table of the model's own in-process speed per batch size, measured by
 * libs/inference (model-speed.ts, shared with scripts/gpu-probe.ts).
 */
import type { BenchModelResult } from '../../../libs/inference';

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
