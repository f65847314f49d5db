/**
 * Open Inference Protocol (KServe v2) over HTTP/JSON: `POST /v2/models/{name}[/versions/{v}]/infer`.
 * One request carries one item (a leading batch dimension of 1, or none); the server batches requests as usual.
 * Tensors come as `{"name", "shape", "datatype", "data"}` with `data` flat (row-major) or nested.
 */

import type { BindLimits } from './bound';
import { ProtocolError, RequestError } from './errors';
import { float32Text } from './float32-text';
import type { InferenceRequest } from './request';
import { parseJsonObject } from './request';
import type { DType, ModelSignature } from './signature';
import { checkDims, MAX_DIM, MAX_RANK } from './signature';

const TO_DTYPE: Record<string, DType> = {
  FP32: 'float32',
  FP64: 'float64',
  INT32: 'int32',
  INT64: 'int64',
  UINT8: 'uint8',
  BOOL: 'bool',
  BYTES: 'string',
};

const TO_DATATYPE: Record<DType, string> = {
  float32: 'FP32',
  float64: 'FP64',
  int32: 'INT32',
  int64: 'INT64',
  uint8: 'UINT8',
  bool: 'BOOL',
  string: 'BYTES',
};

export function v2Datatype(dtype: DType): string {
  return TO_DATATYPE[dtype];
}

/** Rebuilds the nested per-item value the rest of the pipeline validates, from flat data and checked dims. */
function nest(data: unknown[], dims: number[], offset: number, axis: number): unknown {
  if (axis === dims.length) return data[offset];
  let stride = 1;
  for (let next = axis + 1; next < dims.length; next++) stride *= dims[next]!;
  const length = dims[axis]!;
  const rows = new Array<unknown>(length);
  for (let i = 0; i < length; i++) rows[i] = nest(data, dims, offset + i * stride, axis + 1);
  return rows;
}

/** Appends the leaves of `value` to `into`; false when it nests deeper than `depth` arrays (its shape's rank). */
function flatten(value: unknown[], into: unknown[], depth: number): boolean {
  for (let i = 0; i < value.length; i++) {
    const item = value[i];
    if (!Array.isArray(item)) into.push(item);
    else if (depth <= 1 || !flatten(item, into, depth - 1)) return false;
  }
  return true;
}

/**
 * Parses a v2 infer body into the common request. Shapes may include a leading batch dim of 1. Each tensor is
 * checked against the model's input before its data is touched: the datatype (absent: the model's; another:
 * dtype_mismatch), the rank and dims (checkDims, so `[1, 2147483648, 0]` is refused at once) and `data`
 * nested no deeper than the shape. Errors are RequestErrors carrying the request's id.
 */
export function decodeV2Request(
  text: string,
  model: string,
  version: string | undefined,
  signature: ModelSignature,
  limits: BindLimits,
): InferenceRequest {
  const record = parseJsonObject(text);
  const id = typeof record.id === 'string' ? record.id : null;
  const fail = (code: 'bad_request' | 'shape_mismatch' | 'dtype_mismatch', message: string): never => {
    throw new RequestError(id, new ProtocolError(code, message));
  };
  if (record.id !== undefined && typeof record.id !== 'string') fail('bad_request', '"id" must be a string');
  if (!Array.isArray(record.inputs) || record.inputs.length === 0)
    fail('bad_request', '"inputs" must be a non-empty array of tensors');
  const inputs: Record<string, unknown> = {};
  for (const raw of record.inputs as unknown[]) {
    if (typeof raw !== 'object' || raw === null) fail('bad_request', 'each input must be an object');
    const tensor = raw as Record<string, unknown>;
    if (typeof tensor.name !== 'string') fail('bad_request', 'each input needs a "name"');
    const name = tensor.name as string;
    const spec = signature.inputs.find((input) => input.name === name);
    if (!spec)
      fail(
        'bad_request',
        `unknown input "${name}"; this model takes ${signature.inputs.map((s) => s.name).join(', ')}`,
      );
    const datatype = tensor.datatype;
    if (datatype !== undefined && (typeof datatype !== 'string' || !Object.hasOwn(TO_DTYPE, datatype)))
      fail(
        'dtype_mismatch',
        `input "${name}": "datatype" must be one of ${Object.keys(TO_DTYPE).join(', ')}`,
      );
    if (datatype !== undefined && TO_DTYPE[datatype as string] !== spec!.dtype)
      fail('dtype_mismatch', `input "${name}" is ${TO_DATATYPE[spec!.dtype]}, got ${datatype}`);
    const shape = tensor.shape;
    if (
      !Array.isArray(shape) ||
      shape.length > MAX_RANK ||
      !shape.every((dim) => Number.isInteger(dim) && dim >= 0 && dim <= MAX_DIM)
    ) {
      fail(
        'shape_mismatch',
        `input "${name}": "shape" must be a list of at most ${MAX_RANK} integers 0..${MAX_DIM}`,
      );
    }
    let dims = shape as number[];
    // One item per request: a leading batch dimension of 1 is accepted and dropped.
    if (dims.length === spec!.shape.length + 1) {
      if (dims[0] !== 1)
        fail('shape_mismatch', `input "${name}": one item per request (batch dimension 1), got ${dims[0]}`);
      dims = dims.slice(1);
    }
    let elements = 0;
    try {
      elements = checkDims(spec!, dims, limits.maxElements);
    } catch (error) {
      if (error instanceof ProtocolError) throw new RequestError(id, error);
      throw error;
    }
    if (!Array.isArray(tensor.data)) fail('bad_request', `input "${name}": "data" must be an array`);
    const flat: unknown[] = [];
    if (!flatten(tensor.data as unknown[], flat, Math.max(1, (shape as number[]).length)))
      fail('shape_mismatch', `input "${name}": "data" nests deeper than its shape [${dims.join(', ')}]`);
    if (flat.length !== elements)
      fail(
        'shape_mismatch',
        `input "${name}": shape [${dims.join(', ')}] needs ${elements} values, got ${flat.length}`,
      );
    inputs[name] = dims.length === 0 ? flat[0] : nest(flat, dims, 0, 0);
  }
  return {
    id,
    model,
    version,
    input: undefined,
    inputs,
    text: undefined,
    deadlineMs: undefined,
    priority: 'normal',
  };
}

export interface V2Output {
  name: string;
  dtype: DType;
  /** Per item (no batch dimension). */
  dims: number[];
  /** int64 values beyond ±2^53 are bigints (printed exactly). */
  data: unknown[];
}

export function encodeV2Response(
  model: string,
  version: string,
  id: string | null,
  outputs: V2Output[],
): string {
  // By hand, in the order JSON.stringify of the protocol's object gives: FP32 data prints shortest (float32-text.ts).
  let text =
    '{"model_name":' +
    JSON.stringify(model) +
    ',"model_version":' +
    JSON.stringify(version) +
    (id !== null ? ',"id":' + JSON.stringify(id) : '') +
    ',"outputs":[';
  outputs.forEach((output, i) => {
    text +=
      (i > 0 ? ',{"name":' : '{"name":') +
      JSON.stringify(output.name) +
      ',"datatype":"' +
      TO_DATATYPE[output.dtype] +
      '","shape":' +
      JSON.stringify([1, ...output.dims]) +
      ',"data":' +
      (output.dtype === 'float32'
        ? float32ListText(output.data as number[])
        : output.dtype === 'int64'
          ? integerListText(output.data as Array<number | bigint>)
          : JSON.stringify(output.data)) +
      '}';
  });
  return text + ']}';
}

function float32ListText(values: readonly number[]): string {
  let text = '[';
  for (let i = 0; i < values.length; i++) text += (i > 0 ? ',' : '') + float32Text(values[i]!);
  return text + ']';
}

/** int64 data: each value's exact integer (decodeOutputsFlat gives a bigint beyond ±2^53, a number within). */
function integerListText(values: ReadonlyArray<number | bigint>): string {
  let text = '[';
  for (let i = 0; i < values.length; i++) text += (i > 0 ? ',' : '') + String(values[i]!);
  return text + ']';
}

/** The protocol's error body; `code` is StreamInfer's stable error code. */
export function encodeV2Error(code: string, message: string): string {
  return JSON.stringify({ error: message, code });
}

export function v2ModelMetadata(
  name: string,
  versions: string[],
  signature: ModelSignature,
): Record<string, unknown> {
  const tensor = (spec: ModelSignature['inputs'][number]) => ({
    name: spec.name,
    datatype: TO_DATATYPE[spec.dtype],
    shape: [-1, ...spec.shape],
  });
  return {
    name,
    versions,
    platform: 'onnxruntime_onnx',
    inputs: signature.inputs.map(tensor),
    outputs: signature.outputs.map(tensor),
  };
}

/**
 * One route parameter (a path segment) percent-decoded; undefined when its escapes are malformed
 * (`%`, `%E0%A4%A`, a lone surrogate), which the caller answers `400 bad_request`.
 */
export function decodePathSegment(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  if (raw.indexOf('%') < 0) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}
