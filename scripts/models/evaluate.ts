/** Runs classifiers with onnxruntime-node: what the server will actually compute. */
import * as ort from 'onnxruntime-node';
import { type Digits, N_CLASSES, N_PIXELS } from './digits-data';
import { argmaxRows } from './train-mlp';

/** Argmax predictions of a digits model (given as bytes or a path) for every row. */
export async function predictDigits(modelFile: Uint8Array | string, d: Digits): Promise<Int32Array> {
  const session =
    typeof modelFile === 'string'
      ? await ort.InferenceSession.create(modelFile, { intraOpNumThreads: 1 })
      : await ort.InferenceSession.create(modelFile, { intraOpNumThreads: 1 });
  try {
    const input = new ort.Tensor('float32', Float32Array.from(d.pixels), [d.n, N_PIXELS]);
    const out = await session.run({ pixels: input });
    const probs = out['probabilities'];
    if (!probs) throw new Error('digits model has no output "probabilities"');
    return argmaxRows(probs.data as Float32Array, d.n, N_CLASSES);
  } finally {
    await session.release();
  }
}

export function disagreement(a: Int32Array, b: Int32Array): number {
  let n = 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) n++;
  return n / a.length;
}
