/**
 * A dense softmax classifier (multinomial logistic regression when there are no hidden
 * layers, an MLP with ReLU hidden layers otherwise), trained with minibatch Adam on
 * softmax cross-entropy in plain TypeScript (Float64Array math). Fully deterministic for
 * a given seed: initialisation and minibatch order both come from the seeded PRNG.
 */
import { Rng } from '../../libs/rng';

export interface DenseLayer {
  nIn: number;
  nOut: number;
  /** Row-major [nIn, nOut] (the layout of ONNX `MatMul(X[N, nIn], W)`). */
  w: Float64Array;
  b: Float64Array;
}

export interface MlpOptions {
  /** Hidden layer widths; [] = multinomial logistic regression. */
  hidden: number[];
  epochs: number;
  batchSize: number;
  learningRate: number;
  /** L2 penalty coefficient on weights (not biases), added to the gradient. */
  weightDecay: number;
  seed: number;
  /** Multiplies raw inputs before the first layer (the graph does the same). */
  inputScale: number;
}

export interface TrainingData {
  /** Row-major [n, nIn]. */
  x: Float64Array;
  y: Int32Array;
  n: number;
  nIn: number;
  nClasses: number;
}

export interface Mlp {
  layers: DenseLayer[];
  inputScale: number;
}

/** Forward pass for one row; returns every layer's activation (post-ReLU; last = softmax). */
function forward(m: Mlp, x: Float64Array, off: number, acts: Float64Array[]): void {
  const a0 = acts[0]!;
  for (let i = 0; i < a0.length; i++) a0[i] = x[off + i]! * m.inputScale;
  const last = m.layers.length - 1;
  m.layers.forEach((L, l) => {
    const input = acts[l]!;
    const out = acts[l + 1]!;
    out.set(L.b);
    for (let i = 0; i < L.nIn; i++) {
      const v = input[i]!;
      if (v === 0) continue;
      const row = i * L.nOut;
      for (let j = 0; j < L.nOut; j++) out[j]! += v * L.w[row + j]!;
    }
    if (l < last) {
      for (let j = 0; j < L.nOut; j++) if (out[j]! < 0) out[j] = 0;
    } else {
      softmaxInPlace(out);
    }
  });
}

export function softmaxInPlace(v: Float64Array): void {
  let max = -Infinity;
  for (const x of v) if (x > max) max = x;
  let sum = 0;
  for (let j = 0; j < v.length; j++) sum += v[j] = Math.exp(v[j]! - max);
  for (let j = 0; j < v.length; j++) v[j]! /= sum;
}

function activations(m: Mlp, nIn: number): Float64Array[] {
  return [new Float64Array(nIn), ...m.layers.map((L) => new Float64Array(L.nOut))];
}

/** Class probabilities for every row, row-major [n, nClasses]. */
export function predictProba(m: Mlp, x: Float64Array, n: number, nIn: number): Float64Array {
  const acts = activations(m, nIn);
  const nOut = m.layers[m.layers.length - 1]!.nOut;
  const out = new Float64Array(n * nOut);
  for (let r = 0; r < n; r++) {
    forward(m, x, r * nIn, acts);
    out.set(acts[acts.length - 1]!, r * nOut);
  }
  return out;
}

/** Index of the largest value in each row of a row-major [n, k] matrix (first one on ties). */
export function argmaxRows(p: ArrayLike<number>, n: number, k: number): Int32Array {
  const out = new Int32Array(n);
  for (let r = 0; r < n; r++) {
    let best = 0;
    for (let j = 1; j < k; j++) if (p[r * k + j]! > p[r * k + best]!) best = j;
    out[r] = best;
  }
  return out;
}

export function accuracy(pred: Int32Array, y: Int32Array): number {
  let ok = 0;
  for (let i = 0; i < y.length; i++) if (pred[i] === y[i]) ok++;
  return ok / y.length;
}

export interface EpochLog {
  epoch: number;
  loss: number;
  trainAccuracy: number;
}

export function trainMlp(data: TrainingData, opt: MlpOptions, onEpoch?: (log: EpochLog) => void): Mlp {
  const rng = new Rng(opt.seed);
  const sizes = [data.nIn, ...opt.hidden, data.nClasses];
  const layers: DenseLayer[] = [];
  for (let l = 0; l + 1 < sizes.length; l++) {
    const nIn = sizes[l]!;
    const nOut = sizes[l + 1]!;
    const last = l + 2 === sizes.length;
    // He initialisation for ReLU layers, Glorot-ish for the softmax layer.
    const std = last ? Math.sqrt(1 / nIn) : Math.sqrt(2 / nIn);
    const w = new Float64Array(nIn * nOut);
    for (let i = 0; i < w.length; i++) w[i] = rng.normal() * std;
    layers.push({ nIn, nOut, w, b: new Float64Array(nOut) });
  }
  const m: Mlp = { layers, inputScale: opt.inputScale };

  // Adam state.
  const beta1 = 0.9;
  const beta2 = 0.999;
  const eps = 1e-8;
  const mW = layers.map((L) => new Float64Array(L.w.length));
  const vW = layers.map((L) => new Float64Array(L.w.length));
  const mB = layers.map((L) => new Float64Array(L.b.length));
  const vB = layers.map((L) => new Float64Array(L.b.length));
  const gW = layers.map((L) => new Float64Array(L.w.length));
  const gB = layers.map((L) => new Float64Array(L.b.length));
  let step = 0;

  const acts = activations(m, data.nIn);
  const deltas = layers.map((L) => new Float64Array(L.nOut));
  const order = new Int32Array(data.n);
  for (let i = 0; i < data.n; i++) order[i] = i;

  const adam = (p: Float64Array, g: Float64Array, mm: Float64Array, vv: Float64Array, lrT: number) => {
    for (let i = 0; i < p.length; i++) {
      const gi = g[i]!;
      mm[i] = beta1 * mm[i]! + (1 - beta1) * gi;
      vv[i] = beta2 * vv[i]! + (1 - beta2) * gi * gi;
      p[i]! -= (lrT * mm[i]!) / (Math.sqrt(vv[i]!) + eps);
    }
  };

  for (let epoch = 1; epoch <= opt.epochs; epoch++) {
    rng.shuffle(order);
    let lossSum = 0;
    let correct = 0;
    for (let start = 0; start < data.n; start += opt.batchSize) {
      const end = Math.min(data.n, start + opt.batchSize);
      const bs = end - start;
      for (const g of gW) g.fill(0);
      for (const g of gB) g.fill(0);
      for (let k = start; k < end; k++) {
        const r = order[k]!;
        forward(m, data.x, r * data.nIn, acts);
        const p = acts[acts.length - 1]!;
        const y = data.y[r]!;
        lossSum -= Math.log(Math.max(p[y]!, 1e-300));
        if (argmaxRows(p, 1, data.nClasses)[0] === y) correct++;
        // Backward: delta of the last layer = p - onehot(y).
        const dLast = deltas[deltas.length - 1]!;
        dLast.set(p);
        dLast[y]! -= 1;
        for (let l = layers.length - 1; l >= 0; l--) {
          const L = layers[l]!;
          const d = deltas[l]!;
          const input = acts[l]!;
          const gw = gW[l]!;
          const gb = gB[l]!;
          for (let j = 0; j < L.nOut; j++) gb[j]! += d[j]!;
          for (let i = 0; i < L.nIn; i++) {
            const v = input[i]!;
            if (v === 0) continue;
            const row = i * L.nOut;
            for (let j = 0; j < L.nOut; j++) gw[row + j]! += v * d[j]!;
          }
          if (l > 0) {
            const dPrev = deltas[l - 1]!;
            for (let i = 0; i < L.nIn; i++) {
              if (input[i]! <= 0) {
                dPrev[i] = 0; // ReLU gradient
                continue;
              }
              let s = 0;
              const row = i * L.nOut;
              for (let j = 0; j < L.nOut; j++) s += L.w[row + j]! * d[j]!;
              dPrev[i] = s;
            }
          }
        }
      }
      step++;
      const lrT = (opt.learningRate * Math.sqrt(1 - beta2 ** step)) / (1 - beta1 ** step);
      layers.forEach((L, l) => {
        const gw = gW[l]!;
        const gb = gB[l]!;
        for (let i = 0; i < gw.length; i++) gw[i] = gw[i]! / bs + opt.weightDecay * L.w[i]!;
        for (let i = 0; i < gb.length; i++) gb[i] = gb[i]! / bs;
        adam(L.w, gw, mW[l]!, vW[l]!, lrT);
        adam(L.b, gb, mB[l]!, vB[l]!, lrT);
      });
    }
    onEpoch?.({ epoch, loss: lossSum / data.n, trainAccuracy: correct / data.n });
  }
  return m;
}
