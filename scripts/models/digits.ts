/**
 * `digits` v1 and v2: real classifiers trained here, in TypeScript, on digits.csv.gz.
 *
 *   v1  multinomial logistic regression   64 → 10 softmax
 *   v2  MLP                               64 → 128 ReLU → 64 ReLU → 10 softmax
 *
 * Both graphs take RAW pixel counts (0..16) and scale them by 1/16 inside the graph.
 */
import { markdownTable } from '../markdown';
import type { ModelConfig } from './config';
import { type Digits, loadDigits, N_CLASSES, N_PIXELS, split } from './digits-data';
import { disagreement, predictDigits } from './evaluate';
import { encodeModel, floatInitializer, model, node } from './onnx-builder';
import { accuracy, type Mlp, type MlpOptions, trainMlp } from './train-mlp';
import { type BuiltModel, valueInfo } from './types';

export const INPUT_SCALE = 1 / 16;

export const DIGITS_CONFIG: ModelConfig = {
  name: 'digits',
  description: 'Handwritten digit classifier: 8×8 image of pixel counts 0..16 → probabilities of 0..9',
  inputs: [{ name: 'pixels', dtype: 'float32', shape: [N_PIXELS] }],
  outputs: [{ name: 'probabilities', dtype: 'float32', shape: [N_CLASSES] }],
  labels: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
  // Objective: compute is ~0.4 ms per full batch; the server's own path (~1 ms) and the 5 ms cap dominate.
  batching: { max_batch_size: 64, max_queue_delay_ms: 5, slo_p99_ms: 10 },
  default_version: '2',
};

export interface DigitsVersionSpec {
  version: string;
  title: string;
  options: MlpOptions;
}

export const DIGITS_VERSIONS: DigitsVersionSpec[] = [
  {
    version: '1',
    title: 'multinomial logistic regression (64 → 10 softmax)',
    options: {
      hidden: [],
      epochs: 20,
      batchSize: 32,
      learningRate: 0.01,
      weightDecay: 1e-3,
      seed: 20240101,
      inputScale: INPUT_SCALE,
    },
  },
  {
    version: '2',
    title: 'MLP (64 → 128 ReLU → 64 ReLU → 10 softmax)',
    options: {
      hidden: [128, 64],
      epochs: 40,
      batchSize: 32,
      learningRate: 0.001,
      weightDecay: 1e-4,
      seed: 20240102,
      inputScale: INPUT_SCALE,
    },
  },
];

/** The ONNX graph of a trained dense classifier: Mul(1/16) → [MatMul → Add → Relu]* → MatMul → Add → Softmax. */
export function mlpToOnnx(m: Mlp, docString: string): Uint8Array {
  const [pixels] = DIGITS_CONFIG.inputs;
  const [probabilities] = DIGITS_CONFIG.outputs;
  const initializers = [floatInitializer('input_scale', [], [m.inputScale])];
  const nodes = [node('Mul', ['pixels', 'input_scale'], ['x0'])];
  let x = 'x0';
  m.layers.forEach((L, l) => {
    const k = l + 1;
    const last = l === m.layers.length - 1;
    initializers.push(
      floatInitializer(`W${k}`, [L.nIn, L.nOut], L.w),
      floatInitializer(`b${k}`, [L.nOut], L.b),
    );
    nodes.push(node('MatMul', [x, `W${k}`], [`mm${k}`]), node('Add', [`mm${k}`, `b${k}`], [`z${k}`]));
    if (last) {
      nodes.push(node('Softmax', [`z${k}`], ['probabilities'], { axis: -1 }));
    } else {
      nodes.push(node('Relu', [`z${k}`], [`h${k}`]));
      x = `h${k}`;
    }
  });
  return encodeModel(
    model({
      docString,
      graph: {
        name: 'digits',
        inputs: [valueInfo(pixels!)],
        outputs: [valueInfo(probabilities!)],
        nodes,
        initializers,
      },
    }),
  );
}

export interface TrainedDigits {
  version: DigitsVersionSpec;
  model: Mlp;
  bytes: Uint8Array;
  finalLoss: number;
  trainAccuracy: number;
}

export function trainDigitsVersions(data: Digits, log: (line: string) => void = () => {}): TrainedDigits[] {
  const { train } = split(data);
  return DIGITS_VERSIONS.map((v) => {
    let finalLoss = Number.NaN;
    let trainAccuracy = Number.NaN;
    const m = trainMlp(
      { x: train.pixels, y: train.labels, n: train.n, nIn: N_PIXELS, nClasses: N_CLASSES },
      v.options,
      (e) => {
        finalLoss = e.loss;
        trainAccuracy = e.trainAccuracy;
        if (e.epoch % 10 === 0 || e.epoch === v.options.epochs) {
          log(
            `  digits v${v.version} epoch ${e.epoch}: loss ${e.loss.toFixed(4)}, train acc ${e.trainAccuracy.toFixed(4)}`,
          );
        }
      },
    );
    const bytes = mlpToOnnx(m, `digits v${v.version}: ${v.title}; trained on digits.csv.gz (CC BY 4.0)`);
    return { version: v, model: m, bytes, finalLoss, trainAccuracy };
  });
}

/** Trains both versions, evaluates the emitted bytes with onnxruntime-node, renders the README. */
export async function buildDigits(
  dataPath: string,
  log: (line: string) => void = () => {},
): Promise<BuiltModel> {
  const data = loadDigits(dataPath);
  const { train, heldOut } = split(data);
  const trained = trainDigitsVersions(data, log);
  const allPreds: Int32Array[] = [];
  const versions: DigitsVersionMetrics[] = [];
  for (const t of trained) {
    const predAll = await predictDigits(t.bytes, data);
    const predHeld = await predictDigits(t.bytes, heldOut);
    allPreds.push(predAll);
    const heldOutAccuracy = accuracy(predHeld, heldOut.labels);
    versions.push({
      version: t.version.version,
      title: t.version.title,
      options: t.version.options,
      params: t.model.layers.reduce((s, L) => s + L.w.length + L.b.length, 0),
      bytes: t.bytes.length,
      trainAccuracy: accuracy(await predictDigits(t.bytes, train), train.labels),
      heldOutAccuracy,
      heldOutCorrect: Math.round(heldOutAccuracy * heldOut.n),
      allAccuracy: accuracy(predAll, data.labels),
    });
  }
  const disagreementRate = disagreement(allPreds[0]!, allPreds[1]!);
  const metrics: DigitsMetrics = {
    rows: data.n,
    trainRows: train.n,
    heldOutRows: heldOut.n,
    versions,
    disagreements: Math.round(disagreementRate * data.n),
    disagreementRate,
  };
  for (const v of versions) {
    if (v.heldOutAccuracy < MIN_HELD_OUT_ACCURACY) {
      throw new Error(
        `digits v${v.version}: held-out accuracy ${v.heldOutAccuracy} < ${MIN_HELD_OUT_ACCURACY}`,
      );
    }
  }
  if (disagreementRate < DISAGREEMENT_RANGE[0] || disagreementRate > DISAGREEMENT_RANGE[1]) {
    throw new Error(
      `digits: v1/v2 disagreement ${disagreementRate} outside [${DISAGREEMENT_RANGE.join(', ')}]`,
    );
  }
  return {
    config: DIGITS_CONFIG,
    versions: Object.fromEntries(trained.map((t) => [t.version.version, t.bytes])),
    files: { 'README.md': renderDigitsReadme(metrics) },
    summary: [
      ...versions.map(
        (v) =>
          `digits v${v.version}: ${v.title}, held-out accuracy ${pct(v.heldOutAccuracy)} ` +
          `(${v.heldOutCorrect}/${heldOut.n}), all rows ${pct(v.allAccuracy)}`,
      ),
      `digits v1 vs v2: disagree on ${metrics.disagreements}/${data.n} rows (${pct(disagreementRate)})`,
    ],
  };
}

/** Acceptance bounds the build enforces (and the tests re-check on the committed files). */
export const MIN_HELD_OUT_ACCURACY = 0.93;
export const DISAGREEMENT_RANGE: readonly [number, number] = [0.01, 0.1];

export interface DigitsVersionMetrics {
  version: string;
  title: string;
  options: MlpOptions;
  params: number;
  bytes: number;
  trainAccuracy: number;
  heldOutAccuracy: number;
  heldOutCorrect: number;
  allAccuracy: number;
}

export interface DigitsMetrics {
  rows: number;
  trainRows: number;
  heldOutRows: number;
  versions: DigitsVersionMetrics[];
  disagreements: number;
  disagreementRate: number;
}

const pct = (x: number) => `${(x * 100).toFixed(2)} %`;

/** 12345 → "12,345" (no locale data involved). */
const thousands = (n: number) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

/** models/digits/README.md, generated from the measured metrics (deterministic: no dates). */
export function renderDigitsReadme(m: DigitsMetrics): string {
  const [v1, v2] = m.versions;
  if (!v1 || !v2) throw new Error('digits README needs two versions');
  const lines = [
    '# digits — handwritten digit classifiers',
    '',
    '<!-- Generated by `npm run models` (scripts/build-models.ts); do not edit by hand. -->',
    '',
    'Input `pixels`: float32 [64], an 8×8 image row by row, each value the RAW pixel count 0..16',
    'exactly as in the data file. Scaling (× 1/16) happens inside the ONNX graph, so clients send',
    'the counts unchanged. Output `probabilities`: float32 [10] (softmax); labels `"0"`..`"9"`.',
    '',
    markdownTable(
      ['version', 'architecture', 'parameters', 'model.onnx', 'held-out accuracy', 'accuracy, all rows'],
      m.versions.map((v) => [
        v.version,
        v.title,
        thousands(v.params),
        `${thousands(v.bytes)} B`,
        `${pct(v.heldOutAccuracy)} (${v.heldOutCorrect}/${m.heldOutRows})`,
        pct(v.allAccuracy),
      ]),
      { pad: true },
    ),
    '',
    `v1 and v2 disagree (different argmax) on ${m.disagreements} of all ${m.rows} rows ` +
      `(${pct(m.disagreementRate)}), so canary and shadow comparisons have real differences to show.`,
    '`default_version` is 2.',
    '',
    'All figures are computed by the build with onnxruntime-node on the emitted model files.',
    '',
    '## Training',
    '',
    `- Data: \`digits.csv.gz\` (${m.rows} rows). Deterministic split: row index i (0-based) with`,
    `  i % 5 === 4 is held out (${m.heldOutRows} rows); the other ${m.trainRows} rows train.`,
    '  The held-out rows are never used for training.',
    '- Plain TypeScript (Float64Array math, scripts/models/train-mlp.ts): softmax cross-entropy,',
    '  minibatch Adam (β1 0.9, β2 0.999, ε 1e-8), L2 weight decay on weights (not biases) added to',
    '  the gradient, He-normal initialisation for ReLU layers, N(0, 1/fan_in) for the output layer.',
    '  Initialisation and the per-epoch shuffle come from a seeded mulberry32 PRNG, so training is',
    '  deterministic: rebuilding produces byte-identical model files.',
    '- Weights are trained in float64 and stored as float32.',
    '',
    markdownTable(
      [
        'version',
        'hidden layers',
        'epochs',
        'batch size',
        'learning rate',
        'weight decay',
        'seed',
        'final train accuracy',
      ],
      m.versions.map((v) => [
        v.version,
        v.options.hidden.length ? v.options.hidden.join(', ') : 'none',
        String(v.options.epochs),
        String(v.options.batchSize),
        String(v.options.learningRate),
        String(v.options.weightDecay),
        String(v.options.seed),
        pct(v.trainAccuracy),
      ]),
      { pad: true },
    ),
    '',
    'Graph: `Mul(pixels, 1/16)` → (`MatMul` → `Add` → `Relu`) per hidden layer → `MatMul` → `Add` →',
    '`Softmax(axis=-1)`. Opset 17, IR version 8, leading symbolic batch dimension `batch`.',
    '',
    '## Rebuilding',
    '',
    '```',
    'npm run models                      # all models',
    'node dist/scripts/build-models.js --only digits --data data/digits.csv.gz',
    '```',
    '',
    'The data path defaults to `data/digits.csv.gz` in the repository (CC BY 4.0, see data/README.md).',
    'Model files are committed; `npm ci` never retrains.',
    '',
    '## Attribution',
    '',
    'Trained on the test set of the UCI "Optical Recognition of Handwritten Digits" data set',
    '(E. Alpaydin, C. Kaynak, 1998), as distributed with scikit-learn,',
    'https://archive.ics.uci.edu/dataset/80/optical+recognition+of+handwritten+digits —',
    'licensed under CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/). These models are',
    'derived from that data.',
    '',
  ];
  return lines.join('\n');
}
