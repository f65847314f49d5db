/**
 * `bench` v1: a heavy dense network whose per-call cost is real arithmetic, so batching pays:
 *
 *   features[N, 256] → MatMul 256×4096 → Add → Relu
 *                    → [MatMul 4096×4096 → Add → Relu] × 2, one shared weight matrix
 *                    → MatMul 4096×256 → Add → scores[N, 256]
 *
 * 18.9 M weights, ≈71 MFLOP per item. The hidden block is applied twice with the same
 * weights (cross-layer sharing, as in ALBERT): twice the arithmetic of one pass for the same
 * file size. At batch 1 each call streams the float32 weights from memory for one row
 * (GEMV, memory-bound: the 64 MB hidden matrix twice); at batch 32+ the same weights serve
 * every row (GEMM, compute-bound), so items/s grows more than tenfold.
 *
 * Weights are seeded random (not trained). To keep the committed file small they are
 * stored as int8 plus one float scale per matrix and dequantized in the graph with
 * Cast → Mul on initializers only, which ONNX Runtime constant-folds once at session
 * creation: at run time the network is plain float32 MatMuls.
 */

import { Rng } from '../../libs/rng';
import type { ModelConfig } from './config';
import { encodeModel, floatInitializer, int8Initializer, model, node } from './onnx-builder';
import { type BuiltModel, valueInfo } from './types';

export const BENCH_SEED = 0x5eed_b3c4;
export const BENCH_DIMS = [256, 4096, 4096, 256] as const;
/** How many times the square hidden layer runs (shared weights). */
export const BENCH_HIDDEN_REPEATS = 2;

export const BENCH_CONFIG: ModelConfig = {
  name: 'bench',
  description:
    'Benchmark model: seeded random dense net 256 → 4096 → (4096 → 4096) ×2 shared → 256 (≈71 MFLOP/item), batching pays',
  inputs: [{ name: 'features', dtype: 'float32', shape: [BENCH_DIMS[0]] }],
  outputs: [{ name: 'scores', dtype: 'float32', shape: [BENCH_DIMS[BENCH_DIMS.length - 1]!] }],
  // Objective: three full batches' compute (~50 ms each on the 2-core build host): one running, the wait, its own.
  batching: { max_batch_size: 64, max_queue_delay_ms: 50, slo_p99_ms: 150 },
  default_version: '1',
};

/**
 * Builds the bench graph for the given layer widths (exported so the measuring script can vary
 * it). Square hidden layers (nIn = nOut, not the first or last) run `hiddenRepeats` times with
 * their one weight matrix and bias.
 */
export function benchOnnx(
  dims: readonly number[] = BENCH_DIMS,
  seed = BENCH_SEED,
  hiddenRepeats = BENCH_HIDDEN_REPEATS,
): Uint8Array {
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
    );
    const repeats = l > 0 && !last && nIn === nOut ? hiddenRepeats : 1;
    for (let r = 0; r < repeats; r++) {
      // the first pass keeps the single-pass names, so a one-repeat graph is the plain MLP
      const s = r === 0 ? `${k}` : `${k}_${r + 1}`;
      nodes.push(node('MatMul', [x, `W${k}`], [`mm${s}`]));
      if (last) {
        nodes.push(node('Add', [`mm${s}`, `b${k}`], ['scores']));
      } else {
        nodes.push(node('Add', [`mm${s}`, `b${k}`], [`z${s}`]), node('Relu', [`z${s}`], [`h${s}`]));
        x = `h${s}`;
      }
    }
  }
  return encodeModel(
    model({
      docString:
        `bench v1: seeded random dense net ${dims.join(' → ')}, square hidden layers ×${hiddenRepeats} ` +
        `with shared weights (int8-stored weights, seed ${seed})`,
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
      `bench v1: dense ${BENCH_DIMS.join(' → ')}, hidden 4096×4096 ×${BENCH_HIDDEN_REPEATS} shared, ` +
        `${(params / 1e6).toFixed(2)} M params, ` +
        `model.onnx ${(bytes.length / 1e6).toFixed(2)} MB`,
    ],
  };
}
