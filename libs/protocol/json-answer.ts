/**
 * JSON answers written straight from a response record into one reused byte buffer: no array of numbers, no
 * JSON.stringify of the result. The text is what `JSON.stringify(decodeResult(...))` gives, with one decided
 * difference: float32 outputs print the shortest decimal that reads back to the same float32 (`0.1`, not the
 * double's `0.10000000149011612`; see float32-text.ts). float64 outputs keep the double's shortest text,
 * int64 outputs their exact integer (beyond ±2^53 decodeResult gives a bigint), other integers and booleans print as before, strings are JSON-escaped, NaN and ±Infinity are `null` and -0 is `0`
 * (JSON.stringify's choices).
 */

import type { RequestId } from './errors';
import { writeFloat32 } from './float32-text';
import { formatMilliseconds } from './responses';
import { bytesPerElement, type DType, type ModelSignature } from './signature';
import { decodeResult, outputSectionHeaderBytes, RESPONSE_HEADER_BYTES } from './wire';

/** The longest number text: float64 such as `-1.2345678901234567e-308` (24), int64 as a double likewise. */
const NUMBER_ROOM = 32;

/** An append-only UTF-8 text in a growable buffer, reused from answer to answer. */
class TextBuffer {
  bytes = Buffer.allocUnsafe(16 * 1024);
  at = 0;
  /** Whether any byte >= 0x80 was written (the text is then decoded as UTF-8, else as Latin-1: faster). */
  wide = false;

  reset(): void {
    this.at = 0;
    this.wide = false;
  }

  room(bytes: number): void {
    if (this.at + bytes <= this.bytes.length) return;
    const next = Buffer.allocUnsafe(Math.max(2 * this.bytes.length, this.at + bytes));
    this.bytes.copy(next, 0, 0, this.at);
    this.bytes = next;
  }

  byte(code: number): void {
    this.room(1);
    this.bytes[this.at++] = code;
  }

  /** Raw text (already JSON), any characters. */
  raw(text: string): void {
    this.room(3 * text.length);
    const written = this.bytes.write(text, this.at, 'utf8');
    if (written !== text.length) this.wide = true;
    this.at += written;
  }

  text(): string {
    return this.bytes.toString(this.wide ? 'utf8' : 'latin1', 0, this.at);
  }
}

const out = new TextBuffer();

/**
 * `{"id":…<head>{result},"latency_ms":…}` for a successful response record: the answer `encodeResultWithHead`
 * gives for `decodeResult(...)`, float32 values printed shortest.
 */
export function encodeResultRecord(
  id: RequestId,
  head: string,
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
  latencyMs: number,
): string {
  out.reset();
  out.raw(typeof id === 'number' ? '{"id":' + String(id) : '{"id":' + JSON.stringify(id));
  out.raw(head);
  writeResult(bytes, view, offset, signature);
  out.raw(',"latency_ms":' + formatMilliseconds(latencyMs) + '}');
  return out.text();
}

/** The result alone (what `JSON.stringify(decodeResult(...))` gives, float32 values printed shortest). */
export function encodeResultText(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  signature: ModelSignature,
): string {
  out.reset();
  writeResult(bytes, view, offset, signature);
  return out.text();
}

function writeResult(bytes: Uint8Array, view: DataView, offset: number, signature: ModelSignature): void {
  const count = view.getUint8(offset + 7);
  let section = offset + RESPONSE_HEADER_BYTES;
  if (count === 1) {
    const spec = signature.outputs[view.getUint8(section + 5)];
    const dtype: DType = spec?.dtype ?? 'float32';
    const rank = view.getUint8(section + 4);
    if (signature.labels && rank > 0) {
      out.raw('{"label":' + JSON.stringify(labelOf(bytes, view, offset, section, dtype, signature)));
      out.raw(',"probabilities":');
      writeSection(bytes, view, section, dtype);
      out.byte(0x7d);
      return;
    }
    writeSection(bytes, view, section, dtype);
    return;
  }
  const names: string[] = [];
  for (let i = 0, at = section; i < count; i++) {
    const outputIndex = view.getUint8(at + 5);
    names.push(signature.outputs[outputIndex]?.name ?? `output_${outputIndex}`);
    at += outputSectionHeaderBytes(view.getUint8(at + 4)) + view.getUint32(at, true);
  }
  if (!insertionOrdered(names)) {
    writeKeyedInObjectOrder(bytes, view, section, signature, names);
    return;
  }
  out.byte(0x7b);
  for (let i = 0; i < count; i++) {
    if (i > 0) out.byte(0x2c);
    out.raw(JSON.stringify(names[i]!) + ':');
    writeSection(bytes, view, section, signature.outputs[view.getUint8(section + 5)]?.dtype ?? 'float32');
    section += outputSectionHeaderBytes(view.getUint8(section + 4)) + view.getUint32(section, true);
  }
  out.byte(0x7d);
}

/**
 * Whether a plain object with these keys lists them in this order: unique names, none an array index (an
 * object lists those first, ascending).
 */
function insertionOrdered(names: readonly string[]): boolean {
  for (let i = 0; i < names.length; i++) {
    if (/^(0|[1-9][0-9]*)$/.test(names[i]!) && Number(names[i]) < 2 ** 32 - 1) return false;
    for (let j = 0; j < i; j++) if (names[j] === names[i]) return false;
  }
  return true;
}

/** Rare shapes (duplicate or numeric output names): each output's text keyed as a plain object orders them. */
function writeKeyedInObjectOrder(
  bytes: Uint8Array,
  view: DataView,
  section: number,
  signature: ModelSignature,
  names: readonly string[],
): void {
  const start = out.at;
  const texts: Record<string, string> = {};
  for (const name of names) {
    const from = out.at;
    writeSection(bytes, view, section, signature.outputs[view.getUint8(section + 5)]?.dtype ?? 'float32');
    texts[name] = out.bytes.toString('utf8', from, out.at);
    section += outputSectionHeaderBytes(view.getUint8(section + 4)) + view.getUint32(section, true);
  }
  out.at = start;
  out.byte(0x7b);
  let first = true;
  for (const name of Object.keys(texts)) {
    if (!first) out.byte(0x2c);
    first = false;
    out.raw(JSON.stringify(name) + ':' + texts[name]!);
  }
  out.byte(0x7d);
}

/** The label of a classifier's answer: as decodeResult's (argmax of the values, first on ties, NaN never). */
function labelOf(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  section: number,
  dtype: DType,
  signature: ModelSignature,
): string {
  const labels = signature.labels!;
  const rank = view.getUint8(section + 4);
  if (rank !== 1 || dtype === 'string' || dtype === 'bool') {
    // nested or non-numeric probabilities: as rare as odd; the general decoder's answer
    return (decodeResult(bytes, view, offset, signature) as { label: string }).label;
  }
  const length = view.getUint32(section + 8, true);
  const data = section + outputSectionHeaderBytes(rank);
  const size = bytesPerElement(dtype);
  let best = 0;
  let bestValue = 0;
  for (let i = 0; i < length; i++) {
    const value = numberAt(view, data + i * size, dtype);
    if (i === 0) bestValue = value;
    else if (value > bestValue) {
      best = i;
      bestValue = value;
    }
  }
  return labels[best] ?? String(best);
}

function numberAt(view: DataView, at: number, dtype: DType): number {
  switch (dtype) {
    case 'float32':
      return view.getFloat32(at, true);
    case 'float64':
      return view.getFloat64(at, true);
    case 'int32':
      return view.getInt32(at, true);
    case 'int64':
      return Number(view.getBigInt64(at, true));
    default:
      return view.getUint8(at);
  }
}

/** One output section's value: nested arrays by its dims (a scalar for rank 0). */
function writeSection(bytes: Uint8Array, view: DataView, section: number, dtype: DType): void {
  const rank = view.getUint8(section + 4);
  const data = section + outputSectionHeaderBytes(rank);
  if (rank === 0) {
    writeScalars(bytes, view, data, 1, dtype, false);
    return;
  }
  if (rank === 1) {
    writeScalars(bytes, view, data, view.getUint32(section + 8, true), dtype, true);
    return;
  }
  const dims: number[] = [];
  for (let axis = 0; axis < rank; axis++) dims.push(view.getUint32(section + 8 + 4 * axis, true));
  writeNested(bytes, view, data, dims, 0, dtype);
}

/** Writes dims[axis…] from `at`; returns the byte position after it. */
function writeNested(
  bytes: Uint8Array,
  view: DataView,
  at: number,
  dims: readonly number[],
  axis: number,
  dtype: DType,
): number {
  const length = dims[axis]!;
  if (axis === dims.length - 1) return writeScalars(bytes, view, at, length, dtype, true);
  out.byte(0x5b);
  for (let i = 0; i < length; i++) {
    if (i > 0) out.byte(0x2c);
    at = writeNested(bytes, view, at, dims, axis + 1, dtype);
  }
  out.byte(0x5d);
  return at;
}

/** `count` scalars from `at`, in brackets when `array`; returns the byte position after them. */
function writeScalars(
  bytes: Uint8Array,
  view: DataView,
  at: number,
  count: number,
  dtype: DType,
  array: boolean,
): number {
  if (array) out.byte(0x5b);
  switch (dtype) {
    case 'float32': {
      out.room(count * 17);
      const target = out.bytes;
      let cursor = out.at;
      for (let i = 0; i < count; i++) {
        if (i > 0) target[cursor++] = 0x2c;
        cursor = writeFloat32(target, cursor, view.getFloat32(at, true));
        at += 4;
      }
      out.at = cursor;
      break;
    }
    case 'string':
      for (let i = 0; i < count; i++) {
        if (i > 0) out.byte(0x2c);
        const length = view.getUint32(at, true);
        out.raw(JSON.stringify(utf8.decode(bytes.subarray(at + 4, at + 4 + length))));
        at += 4 + length;
      }
      break;
    case 'bool':
      for (let i = 0; i < count; i++) {
        if (i > 0) out.byte(0x2c);
        out.raw(view.getUint8(at) !== 0 ? 'true' : 'false');
        at += 1;
      }
      break;
    case 'int64':
      // The exact integer: the same text as the double's within ±2^53, its own digits beyond (not a rounded double).
      out.room(count * NUMBER_ROOM);
      for (let i = 0; i < count; i++) {
        if (i > 0) out.bytes[out.at++] = 0x2c;
        const text = String(view.getBigInt64(at, true));
        for (let c = 0; c < text.length; c++) out.bytes[out.at++] = text.charCodeAt(c);
        at += 8;
      }
      break;
    default: {
      const size = bytesPerElement(dtype);
      out.room(count * NUMBER_ROOM);
      for (let i = 0; i < count; i++) {
        if (i > 0) out.bytes[out.at++] = 0x2c;
        const value = numberAt(view, at, dtype);
        // String() is JSON.stringify's text for finite numbers (-0 → "0"); non-finite ones are null
        const text = Number.isFinite(value) ? String(value) : 'null';
        for (let c = 0; c < text.length; c++) out.bytes[out.at++] = text.charCodeAt(c);
        at += size;
      }
    }
  }
  if (array) out.byte(0x5d);
  return at;
}

const utf8 = new TextDecoder();
