import { ProtocolError } from './errors';

export const DTYPES = ['float32', 'float64', 'int32', 'int64', 'uint8', 'bool', 'string'] as const;
export type DType = (typeof DTYPES)[number];

/** Per-item tensor description: `shape` excludes the batch dimension; -1 marks a dynamic dimension. */
export interface TensorSpec {
  name: string;
  dtype: DType;
  shape: number[];
  /** Input only: may be left out of a request; the server then feeds an empty tensor. */
  optional?: boolean;
  /** Output only: returned only when this input was supplied. */
  from?: string;
}

export interface ModelSignature {
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  /** Present for classifiers: answers carry `label` and `probabilities` from the first output. */
  labels?: string[];
}

const BYTES_PER_ELEMENT: Record<DType, number> = {
  float32: 4,
  float64: 8,
  int32: 4,
  int64: 8,
  uint8: 1,
  bool: 1,
  string: 0,
};

export function bytesPerElement(dtype: DType): number {
  return BYTES_PER_ELEMENT[dtype];
}

export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && (DTYPES as readonly string[]).includes(value);
}

/** Most inputs a single model may declare: the request record keeps a bit per input. */
export const MAX_INPUTS = 8;
export const MAX_RANK = 8;

/** The largest dim a request record carries (u32). */
export const MAX_DIM = 0xffffffff;

/**
 * Per-item dims checked against an input's spec before anything is sized, copied or nested (every decoder
 * calls it): the rank is the spec's and every fixed dim equal; the elements, and the product of the non-zero
 * dims (so a zero dim cannot hide an absurd one such as [2147483648, 0]), are at most `maxElements`.
 * Returns the element count. Callers have capped the rank (MAX_RANK) before, so the dims are few.
 */
export function checkDims(spec: TensorSpec, dims: readonly number[], maxElements: number): number {
  const shape = spec.shape;
  let mismatch = dims.length !== shape.length;
  let elements = 1;
  let extent = 1;
  for (let axis = 0; axis < dims.length && !mismatch; axis++) {
    const dim = dims[axis]!;
    const expected = shape[axis]!;
    if (!(Number.isInteger(dim) && dim >= 0 && dim <= MAX_DIM) || (expected !== -1 && expected !== dim)) {
      mismatch = true;
      break;
    }
    elements *= dim;
    if (dim > 0) extent *= dim;
  }
  if (mismatch) {
    throw new ProtocolError(
      'shape_mismatch',
      `input "${spec.name}" expects shape [${shape.join(', ')}], got [${dims.slice(0, MAX_RANK).join(', ')}${dims.length > MAX_RANK ? ', …' : ''}]`,
    );
  }
  if (elements > maxElements || extent > maxElements) {
    throw new ProtocolError(
      'payload_too_large',
      elements > maxElements
        ? `input "${spec.name}" has ${elements} elements; the limit is ${maxElements}`
        : `input "${spec.name}" has dims [${dims.join(', ')}]: their non-zero product ${extent} is above the limit of ${maxElements} elements`,
    );
  }
  return elements;
}

/** Validates the tensor section of a model's config.json; messages name the offending field. */
export function parseSignature(raw: unknown, where: string): ModelSignature {
  if (typeof raw !== 'object' || raw === null)
    throw new ProtocolError('bad_request', `${where}: not an object`);
  const record = raw as Record<string, unknown>;
  const inputs = parseSpecs(record.inputs, `${where}.inputs`, 'input');
  const outputs = parseSpecs(record.outputs, `${where}.outputs`, 'output');
  if (inputs.length > MAX_INPUTS) {
    throw new ProtocolError('bad_request', `${where}.inputs: at most ${MAX_INPUTS} inputs are supported`);
  }
  if (!inputs.some((spec) => !spec.optional) && inputs.length === 0) {
    throw new ProtocolError('bad_request', `${where}.inputs: a model needs at least one input`);
  }
  for (const output of outputs) {
    if (output.from !== undefined && !inputs.some((input) => input.name === output.from)) {
      throw new ProtocolError('bad_request', `${where}.outputs: "${output.name}".from names no input`);
    }
  }
  let labels: string[] | undefined;
  if (record.labels !== undefined && record.labels !== null) {
    if (!Array.isArray(record.labels) || !record.labels.every((label) => typeof label === 'string')) {
      throw new ProtocolError('bad_request', `${where}.labels: expected an array of strings`);
    }
    labels = record.labels as string[];
  }
  return labels ? { inputs, outputs, labels } : { inputs, outputs };
}

function parseSpecs(raw: unknown, where: string, kind: 'input' | 'output'): TensorSpec[] {
  if (!Array.isArray(raw) || raw.length === 0)
    throw new ProtocolError('bad_request', `${where}: expected a non-empty array`);
  const names = new Set<string>();
  return raw.map((entry, index) => {
    const at = `${where}[${index}]`;
    if (typeof entry !== 'object' || entry === null)
      throw new ProtocolError('bad_request', `${at}: not an object`);
    const spec = entry as Record<string, unknown>;
    if (typeof spec.name !== 'string' || spec.name.length === 0) {
      throw new ProtocolError('bad_request', `${at}.name: expected a non-empty string`);
    }
    if (names.has(spec.name)) throw new ProtocolError('bad_request', `${at}.name: duplicate "${spec.name}"`);
    names.add(spec.name);
    if (!isDType(spec.dtype)) {
      throw new ProtocolError('bad_request', `${at}.dtype: expected one of ${DTYPES.join(', ')}`);
    }
    if (
      !Array.isArray(spec.shape) ||
      spec.shape.length > MAX_RANK - 1 ||
      !spec.shape.every((dim) => Number.isInteger(dim) && (dim === -1 || dim > 0))
    ) {
      throw new ProtocolError(
        'bad_request',
        `${at}.shape: expected up to ${MAX_RANK - 1} dims, each > 0 or -1`,
      );
    }
    const result: TensorSpec = { name: spec.name, dtype: spec.dtype, shape: spec.shape as number[] };
    if (kind === 'input' && spec.optional === true) result.optional = true;
    if (kind === 'output' && typeof spec.from === 'string') result.from = spec.from;
    return result;
  });
}

/** Index of the largest value: the top-1 class of a classifier's output. */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}
