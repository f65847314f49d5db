/**
 * `delay-risk` v1: P(late) of a food delivery from its windowed features
 * (libs/delivery FEATURE_NAMES), trained here in TypeScript on simulator runs
 * (libs/delivery/simulator). Deterministic: seeded simulator, seeded trainer, stable graph.
 *
 * Graph: Sub(features, mean) → Mul(1/std) → MatMul → Add → Relu → MatMul → Add → Softmax →
 * Slice(class 1) = `risk` [batch, 1]. Feature scaling lives in the graph, so the pipeline
 * feeds the raw feature vector.
 */
import {
  computeFeatures,
  FEATURE_NAMES,
  featureVector,
  N_FEATURES,
  simulate,
  slideTimes,
} from '../../libs/delivery';
import { markdownTable } from '../markdown';
import type { ModelConfig } from './config';
import { encodeModel, floatInitializer, int64Initializer, model, node } from './onnx-builder';
import { type Mlp, type MlpOptions, predictProba, trainMlp } from './train-mlp';
import { type BuiltModel, valueInfo } from './types';

export const DELAY_RISK_CONFIG: ModelConfig = {
  name: 'delay-risk',
  description:
    'Food-delivery delay risk: [speed_5m_kmh, distance_remaining_km, stops, traffic_alerts_10m, minutes_to_promised] → P(late)',
  inputs: [{ name: 'features', dtype: 'float32', shape: [N_FEATURES] }],
  outputs: [{ name: 'risk', dtype: 'float32', shape: [1] }],
  batching: { policy: 'greedy', max_batch_size: 256, max_queue_delay_ms: 2 },
  default_version: '1',
};

/** The simulator run the model learns from. */
export const DELAY_RISK_SIM = {
  seed: 20261108,
  deliveries: 150,
  durationMs: 4 * 3_600_000,
  gpsIntervalMs: 10_000,
} as const;

export const DELAY_RISK_TRAINING: MlpOptions = {
  hidden: [16],
  epochs: 30,
  batchSize: 64,
  learningRate: 0.003,
  weightDecay: 1e-4,
  seed: 20261109,
  inputScale: 1,
};

/** Acceptance bound the build enforces and the tests re-check on the committed model. */
export const MIN_HELD_OUT_AUC = 0.85;

export interface DelayRiskData {
  /** Row-major [n, N_FEATURES], raw feature values. */
  x: Float64Array;
  /** 1 = the delivery ended late. */
  y: Int32Array;
  n: number;
  deliveries: number;
  lateDeliveries: number;
}

export interface DelayRiskDataset {
  train: DelayRiskData;
  heldOut: DelayRiskData;
}

/**
 * One sample per delivery per minute boundary between pickup and drop-off (the sliding
 * window's evaluation times), features from the delivery's events up to that minute.
 * Delivery i (generation order) with i % 5 === 4 is held out: no delivery is in both sets.
 */
export function delayRiskDataset(sim: Partial<typeof DELAY_RISK_SIM> = {}): DelayRiskDataset {
  const { deliveries } = simulate({ ...DELAY_RISK_SIM, ...sim });
  const rows: [number[], number[]] = [[], []];
  const labels: [number[], number[]] = [[], []];
  const counts = [
    { deliveries: 0, late: 0 },
    { deliveries: 0, late: 0 },
  ];
  const v = new Float32Array(N_FEATURES);
  deliveries.forEach((d, i) => {
    const set = i % 5 === 4 ? 1 : 0;
    counts[set]!.deliveries++;
    if (d.late) counts[set]!.late++;
    for (const t of slideTimes(d.pickupMs, d.deliveredMs - 1)) {
      const f = computeFeatures(d.events, t);
      if (!f.ok) continue;
      featureVector(f.features, v);
      rows[set]!.push(...v);
      labels[set]!.push(d.late ? 1 : 0);
    }
  });
  const make = (s: 0 | 1): DelayRiskData => ({
    x: Float64Array.from(rows[s]),
    y: Int32Array.from(labels[s]),
    n: labels[s].length,
    deliveries: counts[s]!.deliveries,
    lateDeliveries: counts[s]!.late,
  });
  return { train: make(0), heldOut: make(1) };
}

/** Per-feature mean and standard deviation (population) of the training rows. */
export function standardization(d: DelayRiskData): { mean: Float64Array; std: Float64Array } {
  const mean = new Float64Array(N_FEATURES);
  const std = new Float64Array(N_FEATURES);
  for (let r = 0; r < d.n; r++)
    for (let j = 0; j < N_FEATURES; j++) mean[j]! += d.x[r * N_FEATURES + j]! / d.n;
  for (let r = 0; r < d.n; r++)
    for (let j = 0; j < N_FEATURES; j++) std[j]! += (d.x[r * N_FEATURES + j]! - mean[j]!) ** 2 / d.n;
  for (let j = 0; j < N_FEATURES; j++) std[j] = Math.sqrt(std[j]!) || 1;
  return { mean, std };
}

function standardize(d: DelayRiskData, s: { mean: Float64Array; std: Float64Array }): Float64Array {
  const out = new Float64Array(d.x.length);
  for (let i = 0; i < d.x.length; i++) {
    const j = i % N_FEATURES;
    out[i] = (d.x[i]! - s.mean[j]!) / s.std[j]!;
  }
  return out;
}

/**
 * Area under the ROC curve: the probability that a random positive scores above a random
 * negative (ties count half), by the rank-sum (Mann–Whitney U) formula with average ranks.
 */
export function auc(scores: ArrayLike<number>, labels: ArrayLike<number>): number {
  const n = scores.length;
  const idx = Array.from({ length: n }, (_, i) => i).sort((a, b) => scores[a]! - scores[b]!);
  let pos = 0;
  let rankSum = 0;
  for (let i = 0; i < n; ) {
    let j = i;
    while (j + 1 < n && scores[idx[j + 1]!] === scores[idx[i]!]) j++;
    const avgRank = (i + j) / 2 + 1;
    for (let k = i; k <= j; k++) {
      if (labels[idx[k]!] === 1) {
        pos++;
        rankSum += avgRank;
      }
    }
    i = j + 1;
  }
  const neg = n - pos;
  if (pos === 0 || neg === 0) return Number.NaN;
  return (rankSum - (pos * (pos + 1)) / 2) / (pos * neg);
}

export interface TrainedDelayRisk {
  mlp: Mlp;
  mean: Float64Array;
  std: Float64Array;
  bytes: Uint8Array;
  finalLoss: number;
}

export function delayRiskToOnnx(t: Omit<TrainedDelayRisk, 'bytes' | 'finalLoss'>): Uint8Array {
  const [features] = DELAY_RISK_CONFIG.inputs;
  const [risk] = DELAY_RISK_CONFIG.outputs;
  const initializers = [
    floatInitializer('feature_mean', [N_FEATURES], t.mean),
    floatInitializer(
      'feature_inv_std',
      [N_FEATURES],
      t.std.map((s) => 1 / s),
    ),
    int64Initializer('late_start', [1], [1]),
    int64Initializer('late_end', [1], [2]),
    int64Initializer('class_axis', [1], [1]),
  ];
  const nodes = [
    node('Sub', ['features', 'feature_mean'], ['centered']),
    node('Mul', ['centered', 'feature_inv_std'], ['x0']),
  ];
  let x = 'x0';
  t.mlp.layers.forEach((L, l) => {
    const k = l + 1;
    initializers.push(
      floatInitializer(`W${k}`, [L.nIn, L.nOut], L.w),
      floatInitializer(`b${k}`, [L.nOut], L.b),
    );
    nodes.push(node('MatMul', [x, `W${k}`], [`mm${k}`]), node('Add', [`mm${k}`, `b${k}`], [`z${k}`]));
    if (l === t.mlp.layers.length - 1) {
      nodes.push(node('Softmax', [`z${k}`], ['probabilities'], { axis: -1 }));
    } else {
      nodes.push(node('Relu', [`z${k}`], [`h${k}`]));
      x = `h${k}`;
    }
  });
  nodes.push(node('Slice', ['probabilities', 'late_start', 'late_end', 'class_axis'], ['risk']));
  return encodeModel(
    model({
      docString: `delay-risk v1: P(late) from ${FEATURE_NAMES.join(', ')}; trained on the StreamInfer delivery simulator`,
      graph: {
        name: 'delay_risk',
        inputs: [valueInfo(features!)],
        outputs: [valueInfo(risk!)],
        nodes,
        initializers,
      },
    }),
  );
}

export function trainDelayRisk(
  train: DelayRiskData,
  log: (line: string) => void = () => {},
): TrainedDelayRisk {
  const s = standardization(train);
  let finalLoss = Number.NaN;
  const mlp = trainMlp(
    { x: standardize(train, s), y: train.y, n: train.n, nIn: N_FEATURES, nClasses: 2 },
    DELAY_RISK_TRAINING,
    (e) => {
      finalLoss = e.loss;
      if (e.epoch % 10 === 0) log(`  delay-risk epoch ${e.epoch}: loss ${e.loss.toFixed(4)}`);
    },
  );
  return { mlp, ...s, bytes: delayRiskToOnnx({ mlp, ...s }), finalLoss };
}

/** P(late) per row with the trained weights (float64, in TypeScript). */
export function predictRisk(t: Omit<TrainedDelayRisk, 'bytes'>, d: DelayRiskData): Float64Array {
  const p = predictProba(t.mlp, standardize(d, t), d.n, N_FEATURES);
  const out = new Float64Array(d.n);
  for (let i = 0; i < d.n; i++) out[i] = p[i * 2 + 1]!;
  return out;
}

/** P(late) per row from ONNX model bytes or a path, with onnxruntime-node (what the server computes). */
export async function onnxRisk(modelFile: Uint8Array | string, d: DelayRiskData): Promise<Float32Array> {
  const ort = await import('onnxruntime-node');
  const session =
    typeof modelFile === 'string'
      ? await ort.InferenceSession.create(modelFile, { intraOpNumThreads: 1 })
      : await ort.InferenceSession.create(modelFile, { intraOpNumThreads: 1 });
  try {
    const out = await session.run({
      features: new ort.Tensor('float32', Float32Array.from(d.x), [d.n, N_FEATURES]),
    });
    const risk = out['risk'];
    if (!risk) throw new Error('delay-risk model has no output "risk"');
    return risk.data as Float32Array;
  } finally {
    await session.release();
  }
}

export interface DelayRiskMetrics {
  train: DelayRiskData;
  heldOut: DelayRiskData;
  trainAuc: number;
  heldOutAuc: number;
  /** Held-out AUC on rows before the promised time only (minutes_to_promised > 0): the early warnings. */
  earlyAuc: number;
  earlyRows: number;
  /** Held-out rows with risk > ALERT_THRESHOLD, and how many of them are late deliveries. */
  alerts: number;
  alertsLate: number;
  /** Held-out late-delivery rows that were alerted. */
  lateRowsAlerted: number;
  lateRows: number;
  params: number;
  bytes: number;
  finalLoss: number;
}

export const ALERT_THRESHOLD_FOR_README = 0.8;

const MINUTES_TO_PROMISED = FEATURE_NAMES.indexOf('minutes_to_promised');

function earlyAuc(risk: Float32Array, d: DelayRiskData): { earlyAuc: number; earlyRows: number } {
  const s: number[] = [];
  const y: number[] = [];
  for (let i = 0; i < d.n; i++) {
    if (d.x[i * N_FEATURES + MINUTES_TO_PROMISED]! <= 0) continue;
    s.push(risk[i]!);
    y.push(d.y[i]!);
  }
  return { earlyAuc: auc(s, y), earlyRows: s.length };
}

export async function buildDelayRisk(log: (line: string) => void = () => {}): Promise<BuiltModel> {
  const { train, heldOut } = delayRiskDataset();
  log(
    `  delay-risk data: ${train.n} train rows (${train.deliveries} deliveries), ${heldOut.n} held-out rows`,
  );
  const t = trainDelayRisk(train, log);
  const heldRisk = await onnxRisk(t.bytes, heldOut);
  const trainRisk = await onnxRisk(t.bytes, train);
  let alerts = 0;
  let alertsLate = 0;
  let lateRows = 0;
  let lateRowsAlerted = 0;
  for (let i = 0; i < heldOut.n; i++) {
    const alert = heldRisk[i]! > ALERT_THRESHOLD_FOR_README;
    const late = heldOut.y[i] === 1;
    if (alert) alerts++;
    if (alert && late) alertsLate++;
    if (late) lateRows++;
    if (late && alert) lateRowsAlerted++;
  }
  const m: DelayRiskMetrics = {
    train,
    heldOut,
    trainAuc: auc(trainRisk, train.y),
    heldOutAuc: auc(heldRisk, heldOut.y),
    ...earlyAuc(heldRisk, heldOut),
    alerts,
    alertsLate,
    lateRows,
    lateRowsAlerted,
    params: t.mlp.layers.reduce((s, L) => s + L.w.length + L.b.length, 0) + 2 * N_FEATURES,
    bytes: t.bytes.length,
    finalLoss: t.finalLoss,
  };
  if (!(m.heldOutAuc >= MIN_HELD_OUT_AUC)) {
    throw new Error(`delay-risk: held-out AUC ${m.heldOutAuc} < ${MIN_HELD_OUT_AUC}`);
  }
  return {
    config: DELAY_RISK_CONFIG,
    versions: { '1': t.bytes },
    files: { 'README.md': renderDelayRiskReadme(m) },
    summary: [
      `delay-risk v1: held-out AUC ${m.heldOutAuc.toFixed(4)} (${heldOut.n} rows, ${heldOut.deliveries} deliveries), ` +
        `before promised time ${m.earlyAuc.toFixed(4)}, train AUC ${m.trainAuc.toFixed(4)}; alerts (P > 0.8) on held-out: ${alerts}, ${pct(alertsLate / Math.max(1, alerts))} late`,
    ],
  };
}

const pct = (x: number) => `${(x * 100).toFixed(1)} %`;

export function renderDelayRiskReadme(m: DelayRiskMetrics): string {
  return `# delay-risk: P(late) for a food delivery\n\n${readmeBody(m)}`;
}

function readmeBody(m: DelayRiskMetrics): string {
  const o = DELAY_RISK_TRAINING;
  return [
    '<!-- Generated by `npm run models` (scripts/models/delay-risk.ts); do not edit by hand. -->',
    '',
    'The model of the reference event-stream workload: a food-delivery pipeline keeps',
    'windowed features per delivery and flags deliveries likely to be late (alert when P(late) > 0.80).',
    '',
    'Input `features`: float32 [5], RAW values in this order (`FEATURE_NAMES` in',
    'libs/delivery/features.ts, computed by `computeFeatures`). Scaling happens inside the graph.',
    '',
    markdownTable(
      ['#', 'feature', 'definition'],
      [
        [
          '0',
          '`speed_5m_kmh`',
          'path length of the GPS points in (t − 5 min, t] ÷ their time span, km/h (0 with < 2 points)',
        ],
        [
          '1',
          '`distance_remaining_km`',
          'haversine distance from the latest GPS point to the destination (first status event)',
        ],
        ['2', '`stops`', 'stationary periods so far: runs of GPS points within 30 m lasting ≥ 60 s'],
        ['3', '`traffic_alerts_10m`', 'traffic events on the delivery’s route in (t − 10 min, t]'],
        ['4', '`minutes_to_promised`', '(promised_time − t) in minutes, negative once overdue'],
      ],
      { pad: true },
    ),
    '',
    'Output `risk`: float32 [1], P(the delivery ends after its promised time).',
    '',
    '## Figures',
    '',
    'Computed by the build with onnxruntime-node on the emitted model file:',
    '',
    markdownTable(
      ['', 'deliveries', 'late deliveries', 'rows (one per delivery-minute)', 'AUC'],
      [
        [
          'train',
          String(m.train.deliveries),
          String(m.train.lateDeliveries),
          String(m.train.n),
          m.trainAuc.toFixed(4),
        ],
        [
          'held-out',
          String(m.heldOut.deliveries),
          String(m.heldOut.lateDeliveries),
          String(m.heldOut.n),
          m.heldOutAuc.toFixed(4),
        ],
      ],
      { pad: true },
    ),
    '',
    `Held-out AUC on the ${m.earlyRows} rows before the promised time (minutes_to_promised > 0, when a warning`,
    `still helps): ${m.earlyAuc.toFixed(4)}. Rows past the promised time are trivially late; they are in the main figure`,
    'because the pipeline keeps predicting until the delivery ends.',
    '',
    `Held-out rows with P(late) > 0.80: ${m.alerts}, of which ${m.alertsLate} (${pct(m.alertsLate / Math.max(1, m.alerts))}) belong to`,
    `deliveries that did end late; ${m.lateRowsAlerted} of ${m.lateRows} late-delivery rows (${pct(m.lateRowsAlerted / Math.max(1, m.lateRows))}) are alerted.`,
    `The build fails below a held-out AUC of ${MIN_HELD_OUT_AUC}. Parameters: ${m.params} (with the scaling`,
    `vectors); model.onnx: ${m.bytes} B.`,
    '',
    '## Data',
    '',
    `One run of the delivery simulator (libs/delivery/simulator, seed ${DELAY_RISK_SIM.seed}): ${DELAY_RISK_SIM.deliveries} delivery slots`,
    `run deliveries back to back for ${DELAY_RISK_SIM.durationMs / 3_600_000} h of event time, GPS every ${DELAY_RISK_SIM.gpsIntervalMs / 1000} s.`,
    'A delivery is driven along a bent route of 1.5–7 km (straight line) at the driver’s own',
    'urban speed (N(24, 6) km/h clipped to [10, 40], ±10 % per minute), with random stops of 30–180 s',
    '(about one every 5 minutes) and slowed by traffic incidents on its route (speed × (1 − 0.12 ×',
    'severity), severity 1–5, ~1.2 incidents per route-hour lasting 5–25 min, 12 routes). The promised',
    'time is the route length at a nominal 22 km/h plus a 4–12 min buffer; the delivery is late when',
    'it arrives after it. So slow drivers, thin buffers, incidents and many stops make it late.',
    '',
    'One row per delivery per minute boundary between pickup and drop-off (the 1-minute step of the',
    'sliding window), features from the delivery’s events up to that minute, label = the delivery',
    'ended late. Split by delivery: the i-th generated delivery with i % 5 === 4 is held out, so no',
    'delivery contributes rows to both sets.',
    '',
    '## Architecture and training',
    '',
    `MLP 5 → ${o.hidden.join(' → ')} ReLU → 2 softmax; \`risk\` is the softmax's class-1 column.`,
    'Graph: `Sub(features, mean)` → `Mul(1/std)` (training-set standardisation) → `MatMul` → `Add` →',
    '`Relu` → `MatMul` → `Add` → `Softmax(axis=-1)` → `Slice` class 1. Opset 17, IR version 8, symbolic',
    'batch dimension. Trained in TypeScript (scripts/models/train-mlp.ts, the digits trainer): minibatch',
    `Adam, softmax cross-entropy, ${o.epochs} epochs, batch ${o.batchSize}, learning rate ${o.learningRate},`,
    `weight decay ${o.weightDecay}, seed ${o.seed}; final training loss ${m.finalLoss.toFixed(4)}. Seeded simulator and`,
    'trainer: rebuilding produces a byte-identical model.onnx.',
    '',
    '## Rebuilding',
    '',
    '```',
    'npm run models',
    'node dist/scripts/build-models.js --only delay-risk',
    '```',
    '',
  ].join('\n');
}
