/**
 * Shadow mode compares a candidate's answer with the stable one by the output's real dtype: top-1 for
 * classifiers, exact equality for integers, booleans and strings, a stated tolerance for floats. NaN never
 * counts as agreement (a model that answers NaN is broken, whatever the other side says).
 */
import type { DType, ModelSignature } from './signature';
import { argmax } from './signature';
import { outputSectionHeaderBytes, RESPONSE_HEADER_BYTES } from './wire';

/**
 * Floats agree when |a − b| ≤ SHADOW_FLOAT_TOLERANCE × max(1, |a|, |b|): relative for large values, absolute
 * below 1, the same for float32 and float64 (two model versions are compared, not two roundings of one).
 */
export const SHADOW_FLOAT_TOLERANCE = 1e-4;

/** The first output of an answer, copied out of the ring with its dtype. */
export type ShadowOutput =
  | { index: number; dtype: 'float32' | 'float64'; values: Float64Array }
  | { index: number; dtype: 'int32' | 'uint8' | 'bool'; values: Int32Array }
  | { index: number; dtype: 'int64'; values: BigInt64Array }
  | { index: number; dtype: 'string'; values: string[] };

const utf8Decoder = new TextDecoder();

/** The first output section of a successful response, decoded by the dtype the signature gives it. */
export function readFirstOutput(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
): ShadowOutput | undefined {
  if (view.getUint8(offset + 7) === 0) return undefined;
  const section = offset + RESPONSE_HEADER_BYTES;
  const byteLength = view.getUint32(section, true);
  const rank = view.getUint8(section + 4);
  const index = view.getUint8(section + 5);
  const dtype: DType = signature.outputs[index]?.dtype ?? 'float32';
  const data = section + outputSectionHeaderBytes(rank);
  let elements = 1;
  for (let axis = 0; axis < rank; axis++) elements *= view.getUint32(section + 8 + 4 * axis, true);
  switch (dtype) {
    case 'float32':
    case 'float64': {
      const width = dtype === 'float32' ? 4 : 8;
      if (byteLength !== elements * width) return undefined;
      const values = new Float64Array(elements);
      for (let i = 0; i < elements; i++)
        values[i] = width === 4 ? view.getFloat32(data + 4 * i, true) : view.getFloat64(data + 8 * i, true);
      return { index, dtype, values };
    }
    case 'int32':
    case 'uint8':
    case 'bool': {
      const width = dtype === 'int32' ? 4 : 1;
      if (byteLength !== elements * width) return undefined;
      const values = new Int32Array(elements);
      for (let i = 0; i < elements; i++)
        values[i] = width === 4 ? view.getInt32(data + 4 * i, true) : view.getUint8(data + i);
      return { index, dtype, values };
    }
    case 'int64': {
      if (byteLength !== elements * 8) return undefined;
      const values = new BigInt64Array(elements);
      for (let i = 0; i < elements; i++) values[i] = view.getBigInt64(data + 8 * i, true);
      return { index, dtype, values };
    }
    case 'string': {
      const values: string[] = [];
      let cursor = data;
      const end = data + byteLength;
      for (let i = 0; i < elements; i++) {
        if (cursor + 4 > end) return undefined;
        const length = view.getUint32(cursor, true);
        if (cursor + 4 + length > end) return undefined;
        values.push(utf8Decoder.decode(bytes.subarray(cursor + 4, cursor + 4 + length)));
        cursor += 4 + length;
      }
      return { index, dtype, values };
    }
  }
}

/**
 * Whether two answers agree. Different outputs, dtypes or sizes never do. Classifiers (numeric outputs
 * with labels) agree on top-1, and only without NaN on either side; other floats agree element by element
 * within SHADOW_FLOAT_TOLERANCE (infinities only with themselves, NaN never); integers, booleans and
 * strings must be equal.
 */
export function outputsAgree(a: ShadowOutput, b: ShadowOutput, classifier: boolean): boolean {
  if (a.index !== b.index || a.dtype !== b.dtype || a.values.length !== b.values.length) return false;
  switch (a.dtype) {
    case 'float32':
    case 'float64': {
      const x = a.values;
      const y = b.values as Float64Array;
      if (hasNaN(x) || hasNaN(y)) return false;
      if (classifier) return argmax(x) === argmax(y);
      for (let i = 0; i < x.length; i++) {
        const p = x[i]!;
        const q = y[i]!;
        if (p === q) continue;
        if (!Number.isFinite(p) || !Number.isFinite(q)) return false;
        if (!(Math.abs(p - q) <= SHADOW_FLOAT_TOLERANCE * Math.max(1, Math.abs(p), Math.abs(q))))
          return false;
      }
      return true;
    }
    case 'int32':
    case 'uint8':
    case 'bool': {
      const y = b.values as Int32Array;
      if (classifier && a.dtype !== 'bool') return argmax(a.values) === argmax(y);
      for (let i = 0; i < a.values.length; i++) if (a.values[i] !== y[i]) return false;
      return true;
    }
    case 'int64': {
      const y = b.values as BigInt64Array;
      if (classifier) return argmaxBig(a.values) === argmaxBig(y);
      for (let i = 0; i < a.values.length; i++) if (a.values[i] !== y[i]) return false;
      return true;
    }
    case 'string': {
      const y = b.values as string[];
      for (let i = 0; i < a.values.length; i++) if (a.values[i] !== y[i]) return false;
      return true;
    }
  }
}

function hasNaN(values: Float64Array): boolean {
  for (let i = 0; i < values.length; i++) if (Number.isNaN(values[i])) return true;
  return false;
}

function argmaxBig(values: BigInt64Array): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}
