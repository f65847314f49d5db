/**
 * Compact binary tensor frames for WebSocket clients that send numbers in bulk: a small JSON header and the
 * tensors' raw little-endian bytes, so neither side formats or parses a number.
 *
 * Frame: u8 0x53 ('S') · u8 version (1) · u16 headerLength · header (UTF-8 JSON) · zero padding to a multiple
 * of 8 bytes from the frame start · tensor data, each tensor padded to a multiple of 8 bytes.
 * Numeric tensors are `elements × bytesPerElement` raw bytes; string tensors are, per element, u32 byteLength
 * then UTF-8 bytes. Per-item dims exclude the batch dimension, as in config.json.
 *
 * Request header:  {"id", "model"?, "version"?, "deadline_ms"?, "priority"?, "inputs": [{"name", "dims", "dtype"?}]}
 * Response header: {"id", "model", "version", "epoch", "latency_ms", "label"?, "outputs": [{"name", "dtype", "dims"}]}
 * Errors are answered as the usual JSON text frame, matched by `id`.
 */

import type { BoundInput, BoundRequest } from './bound';
import { ProtocolError, RequestError, type RequestId } from './errors';
import type { InferenceRequest, Priority } from './request';
import { inputHeaderBytes, readEnvelope } from './request';
import type { DType, ModelSignature } from './signature';
import { bytesPerElement, checkDims, isDType, MAX_DIM, MAX_RANK } from './signature';
import { stringsEnd } from './wire';

export const BINARY_MAGIC = 0x53;
export const BINARY_VERSION = 1;
const PREFIX_BYTES = 4;
const MAX_HEADER_BYTES = 65535;

export interface BinaryTensor {
  name: string;
  dtype: DType;
  dims: number[];
  /** Numeric tensors: a typed array of the dtype (or raw bytes); string tensors: the strings. */
  data: ArrayBufferView | string[];
}

/**
 * A binary request, decoded but not yet bound to a model. A frame's tensors are laid out only by
 * bindBinaryRequest, from the model's dtypes (a frame may leave `dtype` out): `data` is then the frame's tensor
 * data (a view into the frame) and each tensor's `bytes` is undefined. In-process calls give each tensor its
 * exact `bytes` and no `data`.
 */
export interface BinaryRequest extends InferenceRequest {
  tensors: Array<{ name: string; dims: number[]; dtype: DType | undefined; bytes: Uint8Array | undefined }>;
  data?: Uint8Array;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const strictDecoder = new TextDecoder('utf-8', { fatal: true });

function align8(n: number): number {
  return (n + 7) & ~7;
}

export function isBinaryFrame(frame: ArrayBuffer): boolean {
  if (frame.byteLength < PREFIX_BYTES) return false;
  const head = new Uint8Array(frame, 0, 2);
  return head[0] === BINARY_MAGIC && head[1] === BINARY_VERSION;
}

function tensorBytes(tensor: BinaryTensor): Uint8Array {
  if (Array.isArray(tensor.data)) {
    const parts = tensor.data.map((text) => encoder.encode(text));
    const out = new Uint8Array(parts.reduce((sum, part) => sum + 4 + part.length, 0));
    const view = new DataView(out.buffer);
    let at = 0;
    for (const part of parts) {
      view.setUint32(at, part.length, true);
      out.set(part, at + 4);
      at += 4 + part.length;
    }
    return out;
  }
  const data = tensor.data as ArrayBufferView;
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** Builds a frame: used by clients for requests and by the server for answers. */
export function encodeBinaryFrame(
  header: Record<string, unknown>,
  tensors: Array<{ bytes: Uint8Array }>,
): Uint8Array {
  const headerBytes = encoder.encode(JSON.stringify(header));
  if (headerBytes.length > MAX_HEADER_BYTES)
    throw new ProtocolError('bad_request', 'binary frame header too large');
  let length = align8(PREFIX_BYTES + headerBytes.length);
  for (const tensor of tensors) length += align8(tensor.bytes.length);
  const frame = new Uint8Array(length);
  frame[0] = BINARY_MAGIC;
  frame[1] = BINARY_VERSION;
  new DataView(frame.buffer).setUint16(2, headerBytes.length, true);
  frame.set(headerBytes, PREFIX_BYTES);
  let at = align8(PREFIX_BYTES + headerBytes.length);
  for (const tensor of tensors) {
    frame.set(tensor.bytes, at);
    at += align8(tensor.bytes.length);
  }
  return frame;
}

/** Client side: a request frame for `model` with the given input tensors. */
export function encodeBinaryRequest(
  fields: { id?: RequestId; model?: string; version?: string; deadline_ms?: number; priority?: Priority },
  tensors: BinaryTensor[],
): Uint8Array {
  const header = {
    ...fields,
    inputs: tensors.map((tensor) => ({ name: tensor.name, dtype: tensor.dtype, dims: tensor.dims })),
  };
  return encodeBinaryFrame(
    header,
    tensors.map((tensor) => ({ bytes: tensorBytes(tensor) })),
  );
}

function fail(
  id: RequestId,
  message: string,
  code: 'bad_request' | 'shape_mismatch' | 'dtype_mismatch' = 'bad_request',
): never {
  throw new RequestError(id, new ProtocolError(code, message));
}

function readHeader(frame: ArrayBuffer): { header: Record<string, unknown>; dataStart: number } {
  if (!isBinaryFrame(frame)) {
    fail(
      null,
      `binary frames must start with 0x53 0x01 (StreamInfer tensor frame v${BINARY_VERSION}); send JSON as text frames`,
    );
  }
  const headerLength = new DataView(frame).getUint16(2, true);
  if (PREFIX_BYTES + headerLength > frame.byteLength)
    fail(null, 'binary frame header runs past the end of the frame');
  let header: unknown;
  try {
    header = JSON.parse(decoder.decode(new Uint8Array(frame, PREFIX_BYTES, headerLength)));
  } catch {
    fail(null, 'binary frame header is not valid JSON');
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header))
    fail(null, 'binary frame header must be a JSON object');
  return { header: header as Record<string, unknown>, dataStart: align8(PREFIX_BYTES + headerLength) };
}

/**
 * Server side: reads a request frame's header. Nothing is sized here: without the model a tensor's dtype may be
 * unknown, so bindBinaryRequest lays the tensors out. The views point into `frame`: use them before the
 * callback returns.
 */
export function decodeBinaryRequest(frame: ArrayBuffer, defaults: { model?: string } = {}): BinaryRequest {
  const { header, dataStart } = readHeader(frame);
  const envelope = readEnvelope(header, defaults);
  const id = envelope.id;
  if (!Array.isArray(header.inputs) || header.inputs.length === 0)
    fail(id, 'binary request needs "inputs": [{"name", "dims"}]');
  const tensors: BinaryRequest['tensors'] = [];
  for (const entry of header.inputs as unknown[]) {
    if (typeof entry !== 'object' || entry === null) fail(id, 'each entry of "inputs" must be an object');
    const spec = entry as Record<string, unknown>;
    if (typeof spec.name !== 'string') fail(id, 'each input needs a "name"');
    if (
      !Array.isArray(spec.dims) ||
      spec.dims.length > MAX_RANK - 1 ||
      !spec.dims.every((d) => Number.isInteger(d) && d >= 0 && d <= MAX_DIM)
    ) {
      fail(
        id,
        `input "${spec.name}": "dims" must be a list of at most ${MAX_RANK - 1} integers 0..${MAX_DIM} (per item, no batch dimension)`,
        'shape_mismatch',
      );
    }
    if (spec.dtype !== undefined && !isDType(spec.dtype))
      fail(id, `input "${spec.name}": unknown dtype`, 'dtype_mismatch');
    tensors.push({
      name: spec.name,
      dims: spec.dims as number[],
      dtype: spec.dtype as DType | undefined,
      bytes: undefined,
    });
  }
  const request: BinaryRequest = {
    id,
    model: envelope.model,
    version: envelope.version,
    input: undefined,
    inputs: undefined,
    text: undefined,
    deadlineMs: envelope.deadlineMs,
    priority: envelope.priority,
    tensors,
    data: new Uint8Array(frame, Math.min(dataStart, frame.byteLength)),
  };
  if (envelope.routingKey !== undefined) request.routingKey = envelope.routingKey;
  return request;
}

/**
 * Checks a binary request against the model's signature and lays out its tensors; the bound inputs carry the
 * raw bytes to copy. Each tensor's dtype is the model's (a frame's `dtype`, when given, must be it:
 * dtype_mismatch), its dims are checked (checkDims) before its bytes are sized, a numeric tensor is exactly
 * elements × bytesPerElement, string prefixes stay inside the frame, and the frame holds nothing past its
 * tensors but their padding.
 */
export function bindBinaryRequest(
  request: BinaryRequest,
  signature: ModelSignature,
  limits: { maxElements: number },
): BoundRequest {
  const bound: BoundInput[] = [];
  let mask = 0;
  let total = 0;
  const data = request.data;
  let at = 0;
  for (const tensor of request.tensors) {
    const index = signature.inputs.findIndex((spec) => spec.name === tensor.name);
    if (index < 0) {
      throw new ProtocolError(
        'bad_request',
        `unknown input "${tensor.name}"; this model takes ${signature.inputs.map((s) => s.name).join(', ')}`,
      );
    }
    if (mask & (1 << index)) throw new ProtocolError('bad_request', `input "${tensor.name}" given twice`);
    const spec = signature.inputs[index]!;
    const dtype = spec.dtype;
    if (tensor.dtype !== undefined && tensor.dtype !== dtype)
      throw new ProtocolError(
        'dtype_mismatch',
        `input "${spec.name}" is ${dtype}, the frame says ${tensor.dtype}`,
      );
    const elements = checkDims(spec, tensor.dims, limits.maxElements);
    let bytes: Uint8Array;
    if (data !== undefined) {
      const length = tensorLength(data, at, dtype, elements, spec.name);
      if (at + length > data.length) {
        throw new ProtocolError(
          'shape_mismatch',
          `input "${spec.name}" of ${dtype} [${tensor.dims.join(', ')}] needs ${length} data bytes, the frame holds ${Math.max(0, data.length - at)}`,
        );
      }
      bytes = data.subarray(at, at + length);
      at += align8(length);
    } else {
      if (tensor.bytes === undefined)
        throw new ProtocolError('bad_request', `input "${spec.name}" has no data`);
      bytes = tensor.bytes;
      const length = tensorLength(bytes, 0, dtype, elements, spec.name);
      if (length !== bytes.length) {
        throw new ProtocolError(
          'shape_mismatch',
          `input "${spec.name}" of ${dtype} [${tensor.dims.join(', ')}] needs ${length} data bytes, got ${bytes.length}`,
        );
      }
    }
    if (dtype === 'string') checkStrings(bytes, elements, spec.name);
    else if (dtype === 'float32' || dtype === 'float64') checkFinite(bytes, dtype, spec.name);
    bound.push({
      spec,
      index,
      dims: tensor.dims,
      value: undefined,
      byteLength: bytes.length,
      raw: bytes,
    });
    mask |= 1 << index;
    total += inputHeaderBytes(tensor.dims.length) + bytes.length;
  }
  // Past the last tensor only its padding: a frame with bytes no tensor accounts for was sized for other dims.
  if (data !== undefined && data.length > at) {
    throw new ProtocolError(
      'shape_mismatch',
      `the frame holds ${data.length - at} data bytes past its tensors (their dims and the model's dtypes size them)`,
    );
  }
  signature.inputs.forEach((spec, index) => {
    if (!spec.optional && !(mask & (1 << index)))
      throw new ProtocolError('bad_request', `missing input "${spec.name}"`);
  });
  bound.sort((a, b) => a.index - b.index);
  return { inputs: bound, inputMask: mask, byteLength: total };
}

/**
 * Bytes of a tensor of `elements` × `dtype` at `start` of `bytes`: numeric tensors by their size, strings walked
 * by their prefixes, every one inside `bytes` (bad_request when one leaves it).
 */
function tensorLength(
  bytes: Uint8Array,
  start: number,
  dtype: DType,
  elements: number,
  name: string,
): number {
  if (dtype !== 'string') return elements * bytesPerElement(dtype);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = stringsEnd(view, start, bytes.length, elements);
  if (end < 0) throw new ProtocolError('bad_request', `input "${name}": string data runs past its tensor`);
  return end - start;
}

function checkFinite(bytes: Uint8Array, dtype: DType, name: string): void {
  // Frame data starts 8-byte aligned, so a typed view needs no copy.
  const values =
    dtype === 'float64'
      ? new Float64Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 8)
      : new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (value - value !== 0)
      throw new ProtocolError('bad_request', `input "${name}" contains a non-finite number`);
  }
}

/** UTF-8 and no NUL (ONNX Runtime would cut the string there) in strings already walked by tensorLength. */
function checkStrings(bytes: Uint8Array, elements: number, name: string): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  for (let i = 0; i < elements; i++) {
    const length = view.getUint32(at, true);
    const text = bytes.subarray(at + 4, at + 4 + length);
    if (text.indexOf(0) >= 0)
      throw new ProtocolError('bad_request', `input "${name}" holds a NUL character (U+0000)`);
    try {
      strictDecoder.decode(text);
    } catch {
      throw new ProtocolError('bad_request', `input "${name}" holds invalid UTF-8`);
    }
    at += 4 + length;
  }
}

export interface DecodedBinaryResponse {
  header: Record<string, unknown> & {
    id: RequestId;
    outputs: Array<{ name: string; dtype: DType; dims: number[] }>;
  };
  tensors: Array<{ name: string; dtype: DType; dims: number[]; data: ArrayBufferView | string[] }>;
}

/** Client side: reads an answer frame (copies the tensor data out of the frame). */
export function decodeBinaryResponse(frame: ArrayBuffer | Uint8Array): DecodedBinaryResponse {
  const buffer =
    frame instanceof Uint8Array
      ? frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength)
      : frame;
  const { header, dataStart } = readHeader(buffer as ArrayBuffer);
  const outputs = (header.outputs ?? []) as DecodedBinaryResponse['header']['outputs'];
  const view = new DataView(buffer as ArrayBuffer);
  let at = dataStart;
  const tensors = outputs.map((output) => {
    const elements = output.dims.reduce((product, dim) => product * dim, 1);
    if (output.dtype === 'string') {
      const strings: string[] = [];
      let cursor = at;
      for (let i = 0; i < elements; i++) {
        const length = view.getUint32(cursor, true);
        strings.push(decoder.decode(new Uint8Array(buffer as ArrayBuffer, cursor + 4, length)));
        cursor += 4 + length;
      }
      at += align8(cursor - at);
      return { ...output, data: strings };
    }
    const length = elements * bytesPerElement(output.dtype);
    const copy = (buffer as ArrayBuffer).slice(at, at + length);
    at += align8(length);
    const data =
      output.dtype === 'float32'
        ? new Float32Array(copy)
        : output.dtype === 'float64'
          ? new Float64Array(copy)
          : output.dtype === 'int32'
            ? new Int32Array(copy)
            : output.dtype === 'int64'
              ? new BigInt64Array(copy)
              : new Uint8Array(copy);
    return { ...output, data };
  });
  return { header: header as DecodedBinaryResponse['header'], tensors };
}

/**
 * Server side: the answer frame for one successful response record of the response ring (outputs copied as
 * raw bytes; classifiers also get "label" in the header).
 */
export function encodeBinaryAnswer(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
  fields: { id: RequestId; model: string; version: string; epoch: number; latency_ms: number },
): Uint8Array {
  const count = view.getUint8(offset + 7);
  const outputs: Array<{ name: string; dtype: DType; dims: number[] }> = [];
  const sections: Array<{ bytes: Uint8Array }> = [];
  let cursor = offset + RESPONSE_HEADER;
  let label: string | undefined;
  for (let i = 0; i < count; i++) {
    const byteLength = view.getUint32(cursor, true);
    const rank = view.getUint8(cursor + 4);
    const spec = signature.outputs[view.getUint8(cursor + 5)];
    const dims: number[] = [];
    for (let axis = 0; axis < rank; axis++) dims.push(view.getUint32(cursor + 8 + 4 * axis, true));
    const data = cursor + inputHeaderBytes(rank);
    const dtype = spec?.dtype ?? 'float32';
    outputs.push({ name: spec?.name ?? `output_${i}`, dtype, dims });
    sections.push({ bytes: bytes.subarray(data, data + byteLength) });
    if (i === 0 && signature.labels && dtype === 'float32') {
      let best = 0;
      for (let k = 1; k < byteLength / 4; k++)
        if (view.getFloat32(data + 4 * k, true) > view.getFloat32(data + 4 * best, true)) best = k;
      label = signature.labels[best] ?? String(best);
    }
    cursor = data + byteLength;
  }
  const header: Record<string, unknown> = {
    ...fields,
    latency_ms: Math.round(fields.latency_ms * 1000) / 1000,
  };
  if (label !== undefined) header.label = label;
  header.outputs = outputs;
  return encodeBinaryFrame(header, sections);
}

/** Matches wire.ts RESPONSE_HEADER_BYTES (kept local to avoid an import cycle). */
const RESPONSE_HEADER = 24;
