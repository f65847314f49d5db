/**
 * Record layouts carried by the rings between a gateway thread and its workers. Fixed little-endian
 * headers read with DataView; payloads are raw tensor bytes so workers copy them without parsing.
 *
 * Request record:  u32 requestId · u16 slot · u8 priority · u8 inputMask · f64 enqueuedAt · f64 deadlineAt
 *                  then per supplied input: u32 byteLength · u8 rank · u8 inputIndex · u16 0 · u32 dims[rank] · bytes
 * Response record: u32 requestId · u16 slot · u8 status (0 ok, else error code index) · u8 outputCount
 *                  f32 queueMs · f32 computeMs · u16 batchSize · u16 workerIndex · u32 0 (reserved)
 *                  then per output: u32 byteLength · u8 rank · u8 outputIndex · u16 0 · u32 dims[rank] · bytes
 *                  or, for an error, u32 messageLength · utf8 message.
 * Strings inside a tensor are u32 byteLength · utf8, one after another.
 */

import type { BoundRequest } from './bound';
import type { ErrorCode } from './errors';
import { errorCodeFromIndex, errorCodeIndex } from './errors';
import type { Priority } from './request';
import { inputHeaderBytes, utf8Encoder, utf8Length } from './request';
import type { DType, ModelSignature, TensorSpec } from './signature';
import { argmax, bytesPerElement } from './signature';

export const REQUEST_HEADER_BYTES = 24;
export const RESPONSE_HEADER_BYTES = 24;

export const PRIORITY_CODE: Record<Priority, number> = { low: 0, normal: 1, high: 2 };

export interface RequestRecordHeader {
  requestId: number;
  slot: number;
  priority: Priority;
  enqueuedAt: number;
  deadlineAt: number;
}

export function requestRecordBytes(bound: BoundRequest): number {
  return REQUEST_HEADER_BYTES + bound.byteLength;
}

export function writeRequestRecord(
  view: DataView,
  bytes: Uint8Array,
  offset: number,
  header: RequestRecordHeader,
  bound: BoundRequest,
): void {
  view.setUint32(offset, header.requestId, true);
  view.setUint16(offset + 4, header.slot, true);
  view.setUint8(offset + 6, PRIORITY_CODE[header.priority]);
  view.setUint8(offset + 7, bound.inputMask);
  view.setFloat64(offset + 8, header.enqueuedAt, true);
  view.setFloat64(offset + 16, header.deadlineAt, true);
  let cursor = offset + REQUEST_HEADER_BYTES;
  for (const input of bound.inputs) {
    view.setUint32(cursor, input.byteLength, true);
    view.setUint8(cursor + 4, input.dims.length);
    view.setUint8(cursor + 5, input.index);
    view.setUint16(cursor + 6, 0, true);
    let at = cursor + 8;
    for (const dim of input.dims) {
      view.setUint32(at, dim, true);
      at += 4;
    }
    let end: number;
    if (input.raw) {
      bytes.set(input.raw, at);
      end = at + input.raw.length;
    } else {
      end = writeElements(view, bytes, at, input.value, input.dims.length, input.spec.dtype);
    }
    cursor = at + input.byteLength;
    if (end !== cursor) throw new Error(`record size mismatch for input "${input.spec.name}"`);
  }
}

function writeElements(
  view: DataView,
  bytes: Uint8Array,
  at: number,
  value: unknown,
  rank: number,
  dtype: DType,
): number {
  if (rank === 0) return writeScalar(view, bytes, at, value, dtype);
  const rows = value as unknown[];
  for (let i = 0; i < rows.length; i++) at = writeElements(view, bytes, at, rows[i], rank - 1, dtype);
  return at;
}

function writeScalar(view: DataView, bytes: Uint8Array, at: number, value: unknown, dtype: DType): number {
  switch (dtype) {
    case 'float32':
      view.setFloat32(at, value as number, true);
      return at + 4;
    case 'float64':
      view.setFloat64(at, value as number, true);
      return at + 8;
    case 'int32':
      view.setInt32(at, value as number, true);
      return at + 4;
    case 'int64':
      // a safe integer or a decimal string, both checked by bindRequest
      view.setBigInt64(at, BigInt(value as number | string), true);
      return at + 8;
    case 'uint8':
      view.setUint8(at, value as number);
      return at + 1;
    case 'bool':
      view.setUint8(at, value ? 1 : 0);
      return at + 1;
    case 'string': {
      const text = value as string;
      const length = utf8Length(text);
      view.setUint32(at, length, true);
      if (length > 0) utf8Encoder.encodeInto(text, bytes.subarray(at + 4, at + 4 + length));
      return at + 4 + length;
    }
  }
}

// ---- request records, read by workers (no allocation on these accessors) ----

export function readRequestId(view: DataView, offset: number): number {
  return view.getUint32(offset, true);
}
export function readRequestSlot(view: DataView, offset: number): number {
  return view.getUint16(offset + 4, true);
}
export function readInputMask(view: DataView, offset: number): number {
  return view.getUint8(offset + 7);
}
export function readEnqueuedAt(view: DataView, offset: number): number {
  return view.getFloat64(offset + 8, true);
}
export function readDeadlineAt(view: DataView, offset: number): number {
  return view.getFloat64(offset + 16, true);
}

/**
 * Offset of the section of input `inputIndex` inside the request record at [offset, offset + length), or -1
 * when the request did not supply it or its sections run past the record.
 */
export function findInputSection(view: DataView, offset: number, length: number, inputIndex: number): number {
  const mask = view.getUint8(offset + 7);
  if ((mask & (1 << inputIndex)) === 0) return -1;
  const end = offset + length;
  let cursor = offset + REQUEST_HEADER_BYTES;
  while (cursor + SECTION_HEADER_BYTES <= end) {
    const rank = view.getUint8(cursor + 4);
    const next = cursor + inputHeaderBytes(rank) + view.getUint32(cursor, true);
    if (next > end) return -1;
    if (view.getUint8(cursor + 5) === inputIndex) return cursor;
    cursor = next;
  }
  return -1;
}

const SECTION_HEADER_BYTES = 8;

/** Why checkRequestRecord refused a record (index = its result); answered with the item's `internal` error. */
export const RECORD_PROBLEMS = [
  '',
  'the record is shorter than its header',
  'its input mask names inputs the model does not have',
  'a section runs past the record',
  'its sections are not the inputs its mask names, in order',
  "a section's dims differ from the model's input",
  "a tensor's byte length is not its elements × the dtype's size",
  'string lengths leave their section or do not fill it',
  'the record holds bytes past its sections',
] as const;

/**
 * The worker's check of a request record at [offset, offset + length) against the lane's signature, before
 * anything is copied (defence in depth: bind already checked the request). 0 when sound, else an index into
 * RECORD_PROBLEMS. Reads only inside the record; allocates nothing.
 */
export function checkRequestRecord(
  view: DataView,
  offset: number,
  length: number,
  signature: ModelSignature,
): number {
  if (length < REQUEST_HEADER_BYTES) return 1;
  const inputs = signature.inputs;
  const mask = view.getUint8(offset + 7);
  if (mask >>> inputs.length !== 0) return 2;
  const end = offset + length;
  let cursor = offset + REQUEST_HEADER_BYTES;
  for (let index = 0; index < inputs.length; index++) {
    if ((mask & (1 << index)) === 0) continue;
    if (cursor + SECTION_HEADER_BYTES > end) return 3;
    const byteLength = view.getUint32(cursor, true);
    const rank = view.getUint8(cursor + 4);
    const data = cursor + inputHeaderBytes(rank);
    if (data > end || data + byteLength > end) return 3;
    if (view.getUint8(cursor + 5) !== index) return 4;
    const spec = inputs[index]!;
    if (rank !== spec.shape.length) return 5;
    let elements = 1;
    for (let axis = 0; axis < rank; axis++) {
      const dim = view.getUint32(cursor + 8 + 4 * axis, true);
      const expected = spec.shape[axis]!;
      if (expected !== -1 && expected !== dim) return 5;
      // past byteLength no dtype fits: stop before the product loses exactness
      elements = elements * dim > byteLength ? byteLength + 1 : elements * dim;
    }
    if (spec.dtype === 'string') {
      if (!stringsFill(view, data, byteLength, elements)) return 7;
    } else if (elements * bytesPerElement(spec.dtype) !== byteLength) return 6;
    cursor = data + byteLength;
  }
  return cursor === end ? 0 : 8;
}

/**
 * Where `count` length-prefixed strings (u32 byteLength · utf8) from `start` end, or -1 when a prefix or a
 * string leaves [start, end). The one walk of the string layout: bind, the worker's check and its reader.
 */
export function stringsEnd(view: DataView, start: number, end: number, count: number): number {
  // every string needs its 4-byte prefix
  if (count * 4 > end - start) return -1;
  let cursor = start;
  for (let i = 0; i < count; i++) {
    if (cursor + 4 > end) return -1;
    cursor += 4 + view.getUint32(cursor, true);
    if (cursor > end) return -1;
  }
  return cursor;
}

/** Whether `count` length-prefixed strings lie inside [data, data + byteLength) and fill it exactly. */
function stringsFill(view: DataView, data: number, byteLength: number, count: number): boolean {
  return stringsEnd(view, data, data + byteLength, count) === data + byteLength;
}

export function sectionRank(view: DataView, section: number): number {
  return view.getUint8(section + 4);
}
export function sectionDim(view: DataView, section: number, axis: number): number {
  return view.getUint32(section + 8 + 4 * axis, true);
}
export function sectionByteLength(view: DataView, section: number): number {
  return view.getUint32(section, true);
}
export function sectionDataOffset(view: DataView, section: number): number {
  return section + inputHeaderBytes(view.getUint8(section + 4));
}

/** Two requests can share a batch when they supply the same inputs with the same per-item dims. */
export function sameBatchShape(view: DataView, offsetA: number, offsetB: number): boolean {
  if (view.getUint8(offsetA + 7) !== view.getUint8(offsetB + 7)) return false;
  const end = REQUEST_HEADER_BYTES;
  let a = offsetA + end;
  let b = offsetB + end;
  let remaining = popCount(view.getUint8(offsetA + 7));
  while (remaining-- > 0) {
    const rank = view.getUint8(a + 4);
    if (rank !== view.getUint8(b + 4)) return false;
    for (let axis = 0; axis < rank; axis++) {
      if (view.getUint32(a + 8 + 4 * axis, true) !== view.getUint32(b + 8 + 4 * axis, true)) return false;
    }
    a += inputHeaderBytes(rank) + view.getUint32(a, true);
    b += inputHeaderBytes(rank) + view.getUint32(b, true);
  }
  return true;
}

function popCount(mask: number): number {
  let count = 0;
  for (let bits = mask; bits !== 0; bits &= bits - 1) count++;
  return count;
}

/**
 * Decodes the `count` strings of the string input section at `section`, appending them to `target`; false
 * (nothing appended) when their prefixes leave the section or do not fill it.
 */
export function readStrings(
  bytes: Uint8Array,
  view: DataView,
  section: number,
  count: number,
  target: string[],
): boolean {
  const data = sectionDataOffset(view, section);
  if (!stringsFill(view, data, view.getUint32(section, true), count)) return false;
  let cursor = data;
  for (let i = 0; i < count; i++) {
    const length = view.getUint32(cursor, true);
    target.push(utf8Decoder.decode(bytes.subarray(cursor + 4, cursor + 4 + length)));
    cursor += 4 + length;
  }
  return true;
}

const utf8Decoder = new TextDecoder();
const EXACT_INTEGER = 2n ** 53n;

// ---- response records, written by workers ----

export interface ResponseHeader {
  requestId: number;
  slot: number;
  queueMs: number;
  computeMs: number;
  batchSize: number;
  workerIndex: number;
}

export function writeResponseHeader(
  view: DataView,
  offset: number,
  header: ResponseHeader,
  status: number,
  outputCount: number,
): void {
  view.setUint32(offset, header.requestId, true);
  view.setUint16(offset + 4, header.slot, true);
  view.setUint8(offset + 6, status);
  view.setUint8(offset + 7, outputCount);
  view.setFloat32(offset + 8, header.queueMs, true);
  view.setFloat32(offset + 12, header.computeMs, true);
  view.setUint16(offset + 16, Math.min(header.batchSize, 0xffff), true);
  view.setUint16(offset + 18, header.workerIndex, true);
  view.setUint32(offset + 20, 0, true);
}

export function errorResponseBytes(message: string): number {
  return RESPONSE_HEADER_BYTES + 4 + utf8Length(message);
}

export function writeErrorResponse(
  view: DataView,
  bytes: Uint8Array,
  offset: number,
  header: ResponseHeader,
  code: ErrorCode,
  message: string,
): void {
  writeResponseHeader(view, offset, header, errorCodeIndex(code), 0);
  const length = utf8Length(message);
  view.setUint32(offset + RESPONSE_HEADER_BYTES, length, true);
  if (length > 0)
    utf8Encoder.encodeInto(
      message,
      bytes.subarray(offset + RESPONSE_HEADER_BYTES + 4, offset + RESPONSE_HEADER_BYTES + 4 + length),
    );
}

export function outputSectionHeaderBytes(rank: number): number {
  return inputHeaderBytes(rank);
}

export function writeOutputSectionHeader(
  view: DataView,
  at: number,
  outputIndex: number,
  dims: ArrayLike<number>,
  byteLength: number,
): number {
  view.setUint32(at, byteLength, true);
  view.setUint8(at + 4, dims.length);
  view.setUint8(at + 5, outputIndex);
  view.setUint16(at + 6, 0, true);
  for (let axis = 0; axis < dims.length; axis++) view.setUint32(at + 8 + 4 * axis, dims[axis]!, true);
  return at + 8 + 4 * dims.length;
}

// ---- response records, read by the gateway ----

export function readResponseRequestId(view: DataView, offset: number): number {
  return view.getUint32(offset, true);
}
export function readResponseStatus(view: DataView, offset: number): number {
  return view.getUint8(offset + 6);
}
export function readQueueMs(view: DataView, offset: number): number {
  return view.getFloat32(offset + 8, true);
}
export function readComputeMs(view: DataView, offset: number): number {
  return view.getFloat32(offset + 12, true);
}
export function readErrorResponse(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
): { code: ErrorCode; message: string } {
  const length = view.getUint32(offset + RESPONSE_HEADER_BYTES, true);
  const start = offset + RESPONSE_HEADER_BYTES + 4;
  return {
    code: errorCodeFromIndex(view.getUint8(offset + 6)),
    message: utf8Decoder.decode(bytes.subarray(start, start + length)),
  };
}

/**
 * Turns the outputs of a successful response into the JSON `result`: one output → its value, several →
 * an object by output name; classifiers (signature.labels) → { label, probabilities }. int64 values beyond
 * ±2^53 are bigints (exact; json-answer.ts prints their digits).
 */
export function decodeResult(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
): unknown {
  const count = view.getUint8(offset + 7);
  let cursor = offset + RESPONSE_HEADER_BYTES;
  if (count === 1) {
    const outputIndex = view.getUint8(cursor + 5);
    const value = readSection(bytes, view, cursor, signature.outputs[outputIndex]);
    return signature.labels ? classify(value, signature.labels) : value;
  }
  const result: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const outputIndex = view.getUint8(cursor + 5);
    const spec = signature.outputs[outputIndex];
    result[spec?.name ?? `output_${outputIndex}`] = readSection(bytes, view, cursor, spec);
    cursor += outputSectionHeaderBytes(view.getUint8(cursor + 4)) + view.getUint32(cursor, true);
  }
  return result;
}

function classify(value: unknown, labels: string[]): unknown {
  if (!Array.isArray(value)) return value;
  const best = argmax(value as number[]);
  return { label: labels[best] ?? String(best), probabilities: value };
}

function readSection(
  bytes: Uint8Array,
  view: DataView,
  section: number,
  spec: TensorSpec | undefined,
): unknown {
  const rank = view.getUint8(section + 4);
  const dtype: DType = spec?.dtype ?? 'float32';
  const dims: number[] = [];
  for (let axis = 0; axis < rank; axis++) dims.push(view.getUint32(section + 8 + 4 * axis, true));
  const cursor = { at: section + outputSectionHeaderBytes(rank) };
  return readNested(bytes, view, cursor, dims, 0, dtype);
}

function readNested(
  bytes: Uint8Array,
  view: DataView,
  cursor: { at: number },
  dims: number[],
  axis: number,
  dtype: DType,
): unknown {
  if (axis === dims.length) return readScalar(bytes, view, cursor, dtype);
  const length = dims[axis]!;
  const out = new Array<unknown>(length);
  for (let i = 0; i < length; i++) out[i] = readNested(bytes, view, cursor, dims, axis + 1, dtype);
  return out;
}

function readScalar(bytes: Uint8Array, view: DataView, cursor: { at: number }, dtype: DType): unknown {
  const at = cursor.at;
  switch (dtype) {
    case 'float32':
      cursor.at += 4;
      return view.getFloat32(at, true);
    case 'float64':
      cursor.at += 8;
      return view.getFloat64(at, true);
    case 'int32':
      cursor.at += 4;
      return view.getInt32(at, true);
    case 'int64': {
      cursor.at += 8;
      // Exact: a number within ±2^53, else the bigint itself (json-answer.ts and kserve.ts print its digits).
      const value = view.getBigInt64(at, true);
      return value >= -EXACT_INTEGER && value <= EXACT_INTEGER ? Number(value) : value;
    }
    case 'uint8':
      cursor.at += 1;
      return view.getUint8(at);
    case 'bool':
      cursor.at += 1;
      return view.getUint8(at) !== 0;
    case 'string': {
      const length = view.getUint32(at, true);
      cursor.at += 4 + length;
      return utf8Decoder.decode(bytes.subarray(at + 4, at + 4 + length));
    }
  }
}

/** Every output of a successful response as flat values with per-item dims (Open Inference Protocol answers). */
export function decodeOutputsFlat(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
): Array<{ name: string; dtype: DType; dims: number[]; data: unknown[] }> {
  const count = view.getUint8(offset + 7);
  const outputs: Array<{ name: string; dtype: DType; dims: number[]; data: unknown[] }> = [];
  let section = offset + RESPONSE_HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    const byteLength = view.getUint32(section, true);
    const rank = view.getUint8(section + 4);
    const spec = signature.outputs[view.getUint8(section + 5)];
    const dtype: DType = spec?.dtype ?? 'float32';
    const dims: number[] = [];
    for (let axis = 0; axis < rank; axis++) dims.push(view.getUint32(section + 8 + 4 * axis, true));
    const elements = dims.reduce((product, dim) => product * dim, 1);
    const cursor = { at: section + outputSectionHeaderBytes(rank) };
    const data = new Array<unknown>(elements);
    for (let e = 0; e < elements; e++) data[e] = readScalar(bytes, view, cursor, dtype);
    outputs.push({ name: spec?.name ?? `output_${i}`, dtype, dims, data });
    section = section + outputSectionHeaderBytes(rank) + byteLength;
  }
  return outputs;
}
