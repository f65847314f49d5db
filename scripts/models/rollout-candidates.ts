/**
 * Candidate versions of `digits` for the `rollout` bench scenario (automatic canary analysis).
 * They are NOT part of the shipped repository: the scenario writes them into its scratch copy of
 * `models/` at start, so `serve` on `models/` keeps loading digits 1 and 2 only.
 *
 *   3  "errs on a class": v2's graph with class 7's logit moved onto class 1 — every row v2 calls a 7
 *      is answered 1, every other row exactly as v2 (disagreement with v2 = v2's share of 7s, ~10 %)
 *   4  "slow": v2's graph plus a redundant Tanh-MatMul chain on the scaled input whose result is
 *      multiplied by 0 and added to the logits — the same probabilities as v2 (bit for bit), many
 *      times the compute
 *   5  "good": v2's architecture and hyper-parameters retrained by the same code (train-mlp.ts)
 *      with another seed — an honest retrain, disagreeing with v2 on a few rows only
 *
 * 3 and 4 are derived from the committed v2 file, so they follow it; 5 comes from the data file.
 * Deterministic: same inputs → same bytes. Written by the scenario, or by hand:
 *
 *   node dist/scripts/models/rollout-candidates.js --out /tmp/models   # writes /tmp/models/digits/{3,4,5}
 *   node dist/scripts/models/rollout-candidates.js --measure           # disagreement and latency figures
 *   node dist/scripts/models/rollout-candidates.js --out DIR --slow-depth 8   # a lighter slow chain, to compare
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { onnx } from 'onnx-proto';
import { Rng } from '../../libs/rng';
import { DIGITS_VERSIONS, INPUT_SCALE, mlpToOnnx } from './digits';
import { type Digits, digitsDataPath, loadDigits, N_CLASSES, N_PIXELS, split } from './digits-data';
import { predictDigits } from './evaluate';
import { measure } from './measure-bench';
import { encodeModel, floatInitializer, node } from './onnx-builder';
import { trainMlp } from './train-mlp';

export const ROLLOUT_VERSIONS = { errs: '3', slow: '4', good: '5' } as const;

/** Rows v2 answers `from` are answered `to` by the "errs on a class" candidate. */
export const MISCLASSIFIED = { from: 7, to: 1 } as const;

/**
 * The slow candidate's redundant chain: `depth` Tanh(MatMul) layers of `width` on the scaled input, one
 * shared square matrix (4.6 MB file). One item costs ~20 ms of compute on one intra-op thread (digits v2:
 * ~0.01 ms). Sized by what the server shows, not by the compute ratio: at 5 % of ~350 req/s on a 2-core
 * host (`--workers 2`), a chain of 8 layers (~0.6 ms) left the candidate's client p99 within 1.5× of the
 * stable's (the stable slows too: they share the cores); 240 layers give a p50 ~15× and a p99 ~3–5×.
 */
export const SLOW_CHAIN = { width: 1024, depth: 240, seed: 20240104 } as const;

/** The good candidate: v2's options, another seed. */
export const GOOD_SEED = 20240105;

const V2 = DIGITS_VERSIONS.find((v) => v.version === '2')!;

function decode(bytes: Uint8Array): onnx.ModelProto {
  return onnx.ModelProto.decode(bytes);
}

/** The softmax producing `probabilities`, and its input (the logits). */
function logitsOf(m: onnx.ModelProto): { softmax: onnx.INodeProto; logits: string; at: number } {
  const nodes = m.graph?.node ?? [];
  const at = nodes.findIndex((n) => n.opType === 'Softmax' && n.output?.[0] === 'probabilities');
  const softmax = nodes[at];
  const logits = softmax?.input?.[0];
  if (!softmax || !logits) throw new Error('not a digits graph: no Softmax producing "probabilities"');
  return { softmax, logits, at };
}

/**
 * Rewires the graph: the new `nodes` (and `inits`) compute `newLogits` from the old logits, inserted
 * just before the final Softmax, which then reads `newLogits`.
 */
function rewire(
  bytes: Uint8Array,
  nodes: onnx.INodeProto[],
  inits: onnx.ITensorProto[],
  newLogits: string,
  docString: string,
): Uint8Array {
  const m = decode(bytes);
  const { softmax, at } = logitsOf(m);
  const graph = m.graph!;
  softmax.input = [newLogits];
  const old = graph.node ?? [];
  graph.node = [...old.slice(0, at), ...nodes, ...old.slice(at)] as onnx.NodeProto[];
  graph.initializer = [...(graph.initializer ?? []), ...inits] as onnx.TensorProto[];
  m.docString = docString;
  return encodeModel(m);
}

function oneHot(k: number, i: number): number[] {
  return Array.from({ length: k }, (_, j) => (j === i ? 1 : 0));
}

/**
 * z' = z with columns `from` and `to` replaced: z'[to] = max(z[to], z[from]), z'[from] = z[from]·0 − 10⁴.
 * So argmax(z') = `to` where argmax(z) ∈ {from, to}, and argmax(z) everywhere else.
 */
export function errsOnAClass(
  v2: Uint8Array,
  from: number = MISCLASSIFIED.from,
  to: number = MISCLASSIFIED.to,
): Uint8Array {
  const { logits } = logitsOf(decode(v2));
  const keep = Array.from({ length: N_CLASSES }, (_, j) => (j === from || j === to ? 0 : 1));
  const sink = Array.from({ length: N_CLASSES }, (_, j) => (j === from ? -1e4 : 0));
  const inits = [
    floatInitializer('fault_pick_from', [N_CLASSES, 1], oneHot(N_CLASSES, from)),
    floatInitializer('fault_pick_to', [N_CLASSES, 1], oneHot(N_CLASSES, to)),
    floatInitializer('fault_keep', [N_CLASSES], keep),
    floatInitializer('fault_put_to', [1, N_CLASSES], oneHot(N_CLASSES, to)),
    floatInitializer('fault_sink', [N_CLASSES], sink),
  ];
  const nodes = [
    node('MatMul', [logits, 'fault_pick_from'], ['fault_z_from']),
    node('MatMul', [logits, 'fault_pick_to'], ['fault_z_to']),
    node('Max', ['fault_z_from', 'fault_z_to'], ['fault_z_max']),
    node('MatMul', ['fault_z_max', 'fault_put_to'], ['fault_moved']),
    node('Mul', [logits, 'fault_keep'], ['fault_kept']),
    node('Add', ['fault_kept', 'fault_moved'], ['fault_sum']),
    node('Add', ['fault_sum', 'fault_sink'], ['fault_logits']),
  ];
  return rewire(
    v2,
    nodes,
    inits,
    'fault_logits',
    `digits v${ROLLOUT_VERSIONS.errs} (rollout bench candidate, not shipped): digits v2 with every ${from} answered ${to}`,
  );
}

/**
 * z' = z + 0 · (Tanh chain of the scaled input): Tanh keeps every value finite, so the product is an
 * exact (signed) zero and the probabilities are v2's; the chain is still computed on every batch.
 */
export function slowedDown(
  v2: Uint8Array,
  chain: { width: number; depth: number; seed: number } = SLOW_CHAIN,
): Uint8Array {
  const m = decode(v2);
  const { logits } = logitsOf(m);
  // the scaled input: the first Mul's output
  const scaled = m.graph?.node?.[0]?.output?.[0];
  if (!scaled) throw new Error('not a digits graph: no input scaling node');
  const rng = new Rng(chain.seed);
  const matrix = (nIn: number, nOut: number): number[] => {
    const sd = 1 / Math.sqrt(nIn);
    return Array.from({ length: nIn * nOut }, () => rng.normal() * sd);
  };
  // one square matrix shared by the inner layers: the compute of `depth` layers, the file size of one
  const inits: onnx.ITensorProto[] = [
    floatInitializer('slow_W_in', [N_PIXELS, chain.width], matrix(N_PIXELS, chain.width)),
    floatInitializer('slow_W', [chain.width, chain.width], matrix(chain.width, chain.width)),
  ];
  const nodes: onnx.INodeProto[] = [];
  let x = scaled;
  for (let l = 1; l <= chain.depth; l++) {
    nodes.push(
      node('MatMul', [x, l === 1 ? 'slow_W_in' : 'slow_W'], [`slow_mm${l}`]),
      node('Tanh', [`slow_mm${l}`], [`slow_h${l}`]),
    );
    x = `slow_h${l}`;
  }
  const nIn = chain.width;
  inits.push(
    floatInitializer('slow_Wout', [nIn, N_CLASSES], matrix(nIn, N_CLASSES)),
    floatInitializer('slow_zero', [], [0]),
  );
  nodes.push(
    node('MatMul', [x, 'slow_Wout'], ['slow_out']),
    node('Mul', ['slow_out', 'slow_zero'], ['slow_nothing']),
    node('Add', [logits, 'slow_nothing'], ['slow_logits']),
  );
  return rewire(
    v2,
    nodes,
    inits,
    'slow_logits',
    `digits v${ROLLOUT_VERSIONS.slow} (rollout bench candidate, not shipped): digits v2 plus a redundant ` +
      `${chain.depth} × ${chain.width} Tanh-MatMul chain multiplied by 0`,
  );
}

/** v2's architecture and options retrained with another seed. */
export function retrained(data: Digits, seed: number = GOOD_SEED): Uint8Array {
  const { train } = split(data);
  const options = { ...V2.options, seed, inputScale: INPUT_SCALE };
  const m = trainMlp(
    { x: train.pixels, y: train.labels, n: train.n, nIn: N_PIXELS, nClasses: N_CLASSES },
    options,
  );
  return mlpToOnnx(
    m,
    `digits v${ROLLOUT_VERSIONS.good} (rollout bench candidate, not shipped): ${V2.title} retrained with seed ${seed}`,
  );
}

/** The three candidates, version → model.onnx bytes, from the repository's v2 file and data. */
export function buildRolloutCandidates(
  repoRoot: string,
  chain: { width: number; depth: number; seed: number } = SLOW_CHAIN,
): Record<string, Uint8Array> {
  const v2 = readFileSync(path.join(repoRoot, 'models', 'digits', '2', 'model.onnx'));
  const data = loadDigits(digitsDataPath(repoRoot));
  return {
    [ROLLOUT_VERSIONS.errs]: errsOnAClass(v2),
    [ROLLOUT_VERSIONS.slow]: slowedDown(v2, chain),
    [ROLLOUT_VERSIONS.good]: retrained(data),
  };
}

/** Writes `<modelsDir>/digits/<version>/model.onnx` for each candidate. */
export function writeRolloutCandidates(modelsDir: string, versions: Record<string, Uint8Array>): string[] {
  return Object.keys(versions)
    .sort()
    .map((v) => {
      const file = path.join(modelsDir, 'digits', v, 'model.onnx');
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, versions[v]!);
      return file;
    });
}

export interface CandidateFigures {
  version: string;
  bytes: number;
  /** share of all rows where the top-1 differs from v2 */
  disagreementWithV2: number;
  accuracy: number;
  /** accuracy on the rows whose true label is not MISCLASSIFIED.from */
  accuracyOtherClasses: number;
  heldOutAccuracy: number;
}

/** Disagreement and accuracy of each candidate (and v2) on every row, computed with onnxruntime-node. */
export async function candidateFigures(
  data: Digits,
  v2: Uint8Array,
  versions: Record<string, Uint8Array>,
): Promise<CandidateFigures[]> {
  const { heldOut } = split(data);
  const base = await predictDigits(v2, data);
  const rows: Record<string, Uint8Array> = { ...versions, '2': v2 };
  const out: CandidateFigures[] = [];
  for (const v of Object.keys(rows).sort()) {
    const bytes = rows[v]!;
    const pred = await predictDigits(bytes, data);
    const held = await predictDigits(bytes, heldOut);
    let differ = 0;
    let correct = 0;
    let others = 0;
    let othersCorrect = 0;
    for (let i = 0; i < data.n; i++) {
      if (pred[i] !== base[i]) differ++;
      if (pred[i] === data.labels[i]) correct++;
      if (data.labels[i] !== MISCLASSIFIED.from) {
        others++;
        if (pred[i] === data.labels[i]) othersCorrect++;
      }
    }
    let heldCorrect = 0;
    for (let i = 0; i < heldOut.n; i++) if (held[i] === heldOut.labels[i]) heldCorrect++;
    out.push({
      version: v,
      bytes: bytes.length,
      disagreementWithV2: differ / data.n,
      accuracy: correct / data.n,
      accuracyOtherClasses: othersCorrect / others,
      heldOutAccuracy: heldCorrect / heldOut.n,
    });
  }
  return out;
}

async function main(argv: string[]): Promise<void> {
  const root = path.resolve(__dirname, '..', '..', '..');
  const arg = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const t0 = Date.now();
  const depth = arg('--slow-depth');
  const width = arg('--slow-width');
  const versions = buildRolloutCandidates(root, {
    ...SLOW_CHAIN,
    ...(depth ? { depth: Number(depth) } : {}),
    ...(width ? { width: Number(width) } : {}),
  });
  console.log(
    `built candidates ${Object.keys(versions).join(', ')} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );
  const out = arg('--out');
  if (out) for (const f of writeRolloutCandidates(path.resolve(out), versions)) console.log(`wrote ${f}`);
  if (!argv.includes('--measure')) return;
  const v2 = readFileSync(path.join(root, 'models', 'digits', '2', 'model.onnx'));
  const data = loadDigits(digitsDataPath(root));
  const pct = (x: number): string => `${(x * 100).toFixed(2)} %`;
  for (const f of await candidateFigures(data, v2, versions)) {
    console.log(
      `digits v${f.version}: ${f.bytes} B, disagrees with v2 on ${pct(f.disagreementWithV2)} of rows, ` +
        `accuracy ${pct(f.accuracy)} (held out ${pct(f.heldOutAccuracy)}; rows not labelled ${MISCLASSIFIED.from}: ${pct(f.accuracyOtherClasses)})`,
    );
  }
  const batches = [1, 4, 16, 64];
  const base = await measure(v2, batches, 0.5, 1, 3);
  console.log('one intra-op thread, best of 3 rounds; ms per call (× v2)');
  for (const v of Object.keys(versions).sort()) {
    const pts = await measure(versions[v]!, batches, 0.5, 1, 3);
    console.log(
      `  v${v}: ` +
        pts
          .map(
            (p, i) =>
              `batch ${p.batch} ${p.msPerCall.toFixed(3)} ms (${(p.msPerCall / base[i]!.msPerCall).toFixed(1)}×)`,
          )
          .join(', '),
    );
  }
  console.log(`  v2: ${base.map((p) => `batch ${p.batch} ${p.msPerCall.toFixed(3)} ms`).join(', ')}`);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
