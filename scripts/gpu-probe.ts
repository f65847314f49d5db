/**
 * The ONNX Runtime half of scripts/gpu-probe.sh (run that; it prints the driver and Vulkan ICDs first): which
 * backends this onnxruntime-node build lists, which providers create a session for the bench model under the
 * server's own strict device rules (cpu, cuda:0, webgpu:0, each with its error when it fails), and the bench
 * model's in-process items/s at batch 1, 8, 32 and 64 on every provider that works (`streaminfer bench model`'s
 * code). Needs only dist/, node_modules/onnxruntime-node (+ onnxruntime-common) and models/bench.
 *
 *   node dist/scripts/gpu-probe.js [--models-dir DIR] [--min-ms MS] [--providers cpu,cuda,webgpu]
 *
 * Exit 0 when CPU works (a CPU-only host reports CPU only), 1 when even CPU fails.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseDeviceEntry } from '../libs/config';
import { defaultIntraOpThreads } from '../libs/device';
import {
  availableBackends,
  type BenchModelResult,
  benchModel,
  loadSession,
  ort,
  ortMessage,
} from '../libs/inference';

const BATCH_SIZES = [1, 8, 32, 64];
const MODEL = 'bench';

interface Options {
  modelsDir: string;
  minMs: number;
  providers: string[];
}

function parseArgs(argv: string[]): Options {
  const options: Options = {
    modelsDir: path.resolve(__dirname, '../../models'),
    minMs: 1000,
    providers: ['cpu', 'cuda:0', 'webgpu:0'],
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--models-dir') options.modelsDir = path.resolve(value);
    else if (flag === '--min-ms') options.minMs = Number(value);
    else if (flag === '--providers') options.providers = value.split(',').map((entry) => entry.trim());
    else throw new Error(`unknown option ${flag}`);
  }
  for (const entry of options.providers)
    if (!parseDeviceEntry(entry) || entry.startsWith('auto')) throw new Error(`not a provider: ${entry}`);
  return options;
}

function ortVersion(): string {
  try {
    return (require('onnxruntime-node/package.json') as { version: string }).version;
  } catch {
    return ort.env.versions?.common ?? 'unknown';
  }
}

/** One strict session create per provider: the same path `--device` takes at start. */
async function tryProvider(modelFile: string, device: string): Promise<string | undefined> {
  const started = performance.now();
  try {
    const loaded = await loadSession(modelFile, { device: parseDeviceEntry(device)!, intraOpThreads: 1 });
    await loaded.session.release();
    console.log(`  ${device.padEnd(9)} ok (${(performance.now() - started).toFixed(0)} ms to create)`);
    return undefined;
  } catch (error) {
    const reason = ortMessage(error);
    console.log(`  ${device.padEnd(9)} FAILED: ${reason}`);
    return reason;
  }
}

function table(results: BenchModelResult[]): string[] {
  const header = `| provider | threads | ${BATCH_SIZES.map((size) => `b${size} items/s`).join(' | ')} | b64 ÷ b1 |`;
  const lines = [header, `|---|---:|${BATCH_SIZES.map(() => '---:|').join('')}---:|`];
  for (const result of results) {
    const speeds = BATCH_SIZES.map((size) =>
      Math.round(result.results.find((row) => row.batchSize === size)?.itemsPerSecond ?? 0),
    );
    const gain = (speeds[speeds.length - 1] ?? 0) / Math.max(1, speeds[0] ?? 0);
    lines.push(
      `| ${result.executionProvider} | ${result.intraOpThreads} | ${speeds.join(' | ')} | ${gain.toFixed(1)}× |`,
    );
  }
  return lines;
}

async function main(): Promise<number> {
  const options = parseArgs(process.argv.slice(2));
  const modelFile = path.join(options.modelsDir, MODEL, '1', 'model.onnx');
  console.log(`== ONNX Runtime (onnxruntime-node ${ortVersion()}, node ${process.version})`);
  let listed: unknown;
  try {
    listed = ort.listSupportedBackends();
  } catch (error) {
    listed = `listSupportedBackends failed: ${ortMessage(error)}`;
  }
  console.log(`listSupportedBackends(): ${JSON.stringify(listed)}`);
  console.log(`backends the server plans with: ${availableBackends().join(', ')}`);
  console.log(`\n== sessions for ${path.relative(process.cwd(), modelFile) || modelFile}`);
  const working: string[] = [];
  for (const device of options.providers)
    if ((await tryProvider(modelFile, device)) === undefined) working.push(device);

  const cores = os.availableParallelism();
  console.log(
    `\n== ${MODEL} model in-process, ${options.minMs} ms per batch size, ${cores} cores (intra-op threads as a 1-node 1-worker server: ${defaultIntraOpThreads(cores, 1)})`,
  );
  const results: BenchModelResult[] = [];
  for (const device of working) {
    try {
      results.push(
        await benchModel({
          modelsDir: options.modelsDir,
          model: MODEL,
          maxBatch: 64,
          batchSizes: BATCH_SIZES,
          minMs: options.minMs,
          device,
          workers: 1,
        }),
      );
    } catch (error) {
      console.log(`  ${device}: bench failed: ${ortMessage(error)}`);
    }
  }
  for (const line of table(results)) console.log(line);
  const gpus = results.filter((result) => result.executionProvider !== 'cpu');
  console.log(gpus.length === 0 ? '\nresult: CPU only' : `\nresult: ${gpus.length} GPU provider(s) work`);
  return results.some((result) => result.executionProvider === 'cpu') ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`gpu-probe: ${(error as Error).message}`);
    process.exit(2);
  },
);
