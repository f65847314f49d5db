/**
 * `bench` v1: a heavy dense network whose per-call cost is real arithmetic, so batching pays:
 *
 *   features[N, 256] → MatMul 256×4096 → Add → Relu → MatMul 4096×4096 → Add → Relu
 *                    → MatMul 4096×256 → Add → scores[N, 256]
 *
 * 18.9 M weights, ≈37.7 MFLOP per item. At batch 1 each call streams all 75 MB of float32
 * weights for one row (GEMV, memory-bound); at batch 32+ the same weights serve every row
 * (GEMM, compute-bound), so items/s grows about tenfold.
 *
 * Weights are seeded random (not trained). To keep the committed file small they are
 * stored as int8 plus one float scale per matrix and dequantized in the graph with
 * Cast → Mul on initializers only, which ONNX Runtime constant-folds once at session
 * creation: at run time the network is plain float32 MatMuls.
 */
import type { ModelConfig } from './config';
import { encodeModel, floatInitializer, int8Initializer, model, node } from './onnx-builder';
import { Rng } from './rng';
import { type BuiltModel, valueInfo } from './types';

export const BENCH_SEED = 0x5eed_b3c4;
export const BENCH_DIMS = [256, 4096, 4096, 256] as const;

export const BENCH_CONFIG: ModelConfig = {
  name: 'bench',
  description:
    'Benchmark model: seeded random dense net 256 → 4096 → 4096 → 256 (≈37.7 MFLOP/item), batching pays',
  inputs: [{ name: 'features', dtype: 'float32', shape: [BENCH_DIMS[0]] }],
  outputs: [{ name: 'scores', dtype: 'float32', shape: [BENCH_DIMS[BENCH_DIMS.length - 1]!] }],
  batching: { policy: 'fixed', max_batch_size: 64, max_queue_delay_ms: 50 },
  default_version: '1',
};

/** Builds the bench graph for the given layer widths (exported so the measuring script can vary it). */
export function benchOnnx(dims: readonly number[] = BENCH_DIMS, seed = BENCH_SEED): Uint8Array {
  const rng = new Rng(seed);
  const cfg = { ...BENCH_CONFIG };
  const input = { ...cfg.inputs[0]!, shape: [dims[0]!] };
  const output = { ...cfg.outputs[0]!, shape: [dims[dims.length - 1]!] };
  const initializers = [];
  const nodes = [];
  let x = 'features';
  for (let l = 0; l + 1 < dims.length; l++) {
    const k = l + 1;
    const nIn = dims[l]!;
    const nOut = dims[l + 1]!;
    const last = l + 2 === dims.length;
    // Uniform He-style initialisation: U(-a, a) with a = sqrt(6 / nIn), quantized to 255 levels.
    const a = Math.sqrt(6 / nIn);
    const q = new Int8Array(nIn * nOut);
    for (let i = 0; i < q.length; i++) q[i] = rng.int(-127, 127);
    const bias = new Float32Array(nOut);
    for (let i = 0; i < nOut; i++) bias[i] = (rng.next() - 0.5) * 0.1;
    initializers.push(
      int8Initializer(`W${k}_q`, [nIn, nOut], q),
      floatInitializer(`W${k}_scale`, [], [a / 127]),
      floatInitializer(`b${k}`, [nOut], bias),
    );
    nodes.push(
      node('Cast', [`W${k}_q`], [`W${k}_f`], { to: 1 /* FLOAT */ }),
      node('Mul', [`W${k}_f`, `W${k}_scale`], [`W${k}`]),
      node('MatMul', [x, `W${k}`], [`mm${k}`]),
    );
    if (last) {
      nodes.push(node('Add', [`mm${k}`, `b${k}`], ['scores']));
    } else {
      nodes.push(node('Add', [`mm${k}`, `b${k}`], [`z${k}`]), node('Relu', [`z${k}`], [`h${k}`]));
      x = `h${k}`;
    }
  }
  return encodeModel(
    model({
      docString: `bench v1: seeded random dense net ${dims.join(' → ')} (int8-stored weights, seed ${seed})`,
      graph: { name: 'bench', inputs: [valueInfo(input)], outputs: [valueInfo(output)], nodes, initializers },
    }),
  );
}

export function buildBench(): BuiltModel {
  const bytes = benchOnnx();
  const params = BENCH_DIMS.slice(1).reduce((s, d, i) => s + d * BENCH_DIMS[i]! + d, 0);
  return {
    config: BENCH_CONFIG,
    versions: { '1': bytes },
    summary: [
      `bench v1: dense ${BENCH_DIMS.join(' → ')}, ${(params / 1e6).toFixed(2)} M params, ` +
        `model.onnx ${(bytes.length / 1e6).toFixed(2)} MB`,
    ],
  };
}
