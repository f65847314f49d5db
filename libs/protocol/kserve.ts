/**
 * Open Inference Protocol (KServe v2) over HTTP/JSON: `POST /v2/models/{name}[/versions/{v}]/infer`.
 * One request carries one item (a leading batch dimension of 1, or none); the server batches requests as usual.
 * Tensors come as `{"name", "shape", "datatype", "data"}` with `data` flat (row-major) or nested.
 */

import { ProtocolError } from './errors';
import { float32Text } from './float32-text';
import type { InferenceRequest } from './request';
import { parseJsonObject, RequestError } from './request';
import type { DType, ModelSignature } from './signature';

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

/** Rebuilds the nested per-item value the rest of the pipeline validates, from flat data and dims. */
function nest(data: unknown[], dims: number[], offset: number, axis: number): unknown {
  if (axis === dims.length) return data[offset];
  const stride = dims.slice(axis + 1).reduce((product, dim) => product * dim, 1);
  return Array.from({ length: dims[axis]! }, (_, i) => nest(data, dims, offset + i * stride, axis + 1));
}

function flatten(value: unknown, into: unknown[]): void {
  if (Array.isArray(value)) for (const item of value) flatten(item, into);
  else into.push(value);
}

/**
 * Parses a v2 infer body into the common request. Shapes may include a leading batch dim of 1; the tensor's
 * datatype must be the model input's. Errors are RequestErrors carrying the request's id.
 */
export function decodeV2Request(
  text: string,
  model: string,
  version: string | undefined,
  signature: ModelSignature,
): InferenceRequest {
  const record = parseJsonObject(text);
  const id = typeof record.id === 'string' ? record.id : null;
  const fail = (code: 'bad_request' | 'shape_mismatch' | 'type_mismatch', message: string): never => {
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
    if (typeof datatype !== 'string' || TO_DTYPE[datatype] === undefined) {
      fail('type_mismatch', `input "${name}": "datatype" must be one of ${Object.keys(TO_DTYPE).join(', ')}`);
    }
    if (TO_DTYPE[datatype as string] !== spec!.dtype)
      fail('type_mismatch', `input "${name}" is ${TO_DATATYPE[spec!.dtype]}, got ${datatype}`);
    const shape = tensor.shape;
    if (!Array.isArray(shape) || !shape.every((dim) => Number.isInteger(dim) && dim >= 0)) {
      fail('shape_mismatch', `input "${name}": "shape" must be a list of non-negative integers`);
    }
    let dims = shape as number[];
    // One item per request: a leading batch dimension of 1 is accepted and dropped.
    if (dims.length === spec!.shape.length + 1) {
      if (dims[0] !== 1)
        fail('shape_mismatch', `input "${name}": one item per request (batch dimension 1), got ${dims[0]}`);
      dims = dims.slice(1);
    }
    if (!Array.isArray(tensor.data)) fail('bad_request', `input "${name}": "data" must be an array`);
    const flat: unknown[] = [];
    flatten(tensor.data, flat);
    const elements = dims.reduce((product, dim) => product * dim, 1);
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
      (output.dtype === 'float32' ? float32ListText(output.data as number[]) : JSON.stringify(output.data)) +
      '}';
  });
  return text + ']}';
}

function float32ListText(values: readonly number[]): string {
  let text = '[';
  for (let i = 0; i < values.length; i++) text += (i > 0 ? ',' : '') + float32Text(values[i]!);
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
