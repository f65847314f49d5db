/**
 * Compact JSON encodings for snapshots. A checkpoint is serialised synchronously at the pipeline's barrier,
 * so what matters is how many JSON values and characters it has: columns of small numbers and front-coded
 * strings instead of one object per event. Each decoder validates and throws EngineSnapshotError naming the
 * path of the bad element.
 */
import { EngineSnapshotError } from './errors';

export function bad(path: string, expected: string): never {
  throw new EngineSnapshotError(path, `invalid stream snapshot at ${path}: expected ${expected}`);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function int(path: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) bad(path, 'an integer');
  return value;
}

export function num(path: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) bad(path, 'a finite number');
  return value;
}

export function str(path: string, value: unknown): string {
  if (typeof value !== 'string') bad(path, 'a string');
  return value;
}

export function arr(path: string, value: unknown): unknown[] {
  if (!Array.isArray(value)) bad(path, 'an array');
  return value;
}

/**
 * Front coding into one string: per value `<length of the prefix shared with the previous value>:<length of
 * the rest>:<rest>`. Sorted ids of one key or one second ("…-gps-1389-3", "…-gps-1389-4") shrink to a few
 * characters, and a column is one JSON string, not one per value: the snapshot is built at the barrier and
 * everything in it lives until it is serialised, so fewer objects is less garbage-collection work.
 */
export function packStrings(values: readonly string[]): string {
  const parts = new Array<string>(values.length);
  let prev = '';
  for (let i = 0; i < values.length; i++) {
    const s = values[i]!;
    const max = Math.min(s.length, prev.length);
    let n = 0;
    while (n < max && s.charCodeAt(n) === prev.charCodeAt(n)) n++;
    parts[i] = `${n}:${s.length - n}:${s.slice(n)}`;
    prev = s;
  }
  return parts.join('');
}

/** The decimal integer in text[from, to), or -1. */
function decimal(text: string, from: number, to: number): number {
  if (to <= from || to - from > 15) return -1;
  let v = 0;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

export function unpackStrings(path: string, value: unknown): string[] {
  const text = str(path, value);
  const out: string[] = [];
  let prev = '';
  let pos = 0;
  while (pos < text.length) {
    const c1 = text.indexOf(':', pos);
    const c2 = c1 < 0 ? -1 : text.indexOf(':', c1 + 1);
    const n = c1 < 0 ? -1 : decimal(text, pos, c1);
    const len = c2 < 0 ? -1 : decimal(text, c1 + 1, c2);
    if (n < 0 || len < 0 || n > prev.length || c2 + 1 + len > text.length)
      bad(`${path}[${out.length}]`, 'a front-coded string (<shared prefix length>:<rest length>:<rest>)');
    prev = prev.slice(0, n) + text.slice(c2 + 1, c2 + 1 + len);
    out.push(prev);
    pos = c2 + 1 + len;
  }
  return out;
}

/** Integers as the first value, then differences: sorted times become a few digits each. */
export function packDeltas(values: readonly number[]): number[] {
  const out = new Array<number>(values.length);
  let prev = 0;
  for (let i = 0; i < values.length; i++) {
    out[i] = values[i]! - prev;
    prev = values[i]!;
  }
  return out;
}

export function unpackDeltas(path: string, value: unknown): number[] {
  const packed = arr(path, value);
  const out = new Array<number>(packed.length);
  let prev = 0;
  for (let i = 0; i < packed.length; i++) {
    const d = packed[i];
    // Checked inline: a path string per element would cost more than the decoding.
    if (typeof d !== 'number' || !Number.isSafeInteger(d)) bad(`${path}[${i}]`, 'an integer');
    prev += d;
    if (!Number.isSafeInteger(prev)) bad(`${path}[${i}]`, 'a difference that keeps the sum an integer');
    out[i] = prev;
  }
  return out;
}

/**
 * Indices as runs of consecutive values: [gap, length, gap, length, …], each gap from the end of the run
 * before (the first from 0). A window holding every event of its key is two numbers.
 */
export function packRuns(indices: readonly number[]): number[] {
  const out: number[] = [];
  let end = 0;
  let i = 0;
  while (i < indices.length) {
    const start = indices[i]!;
    let j = i + 1;
    while (j < indices.length && indices[j] === indices[j - 1]! + 1) j++;
    out.push(start - end, j - i);
    end = start + (j - i);
    i = j;
  }
  return out;
}

/** `limit`: every index must be below it (the length of the table the indices point into). */
export function unpackRuns(path: string, value: unknown, limit: number): number[] {
  const packed = arr(path, value);
  if (packed.length % 2 !== 0) bad(path, 'an even-length array of [gap, length] pairs');
  const out: number[] = [];
  let end = 0;
  for (let i = 0; i < packed.length; i += 2) {
    const gap = packed[i];
    const length = packed[i + 1];
    if (typeof gap !== 'number' || !Number.isSafeInteger(gap)) bad(`${path}[${i}]`, 'an integer');
    if (typeof length !== 'number' || !Number.isSafeInteger(length)) bad(`${path}[${i + 1}]`, 'an integer');
    const start = end + gap;
    if (length < 1 || start < 0 || start + length > limit)
      bad(`${path}[${i}]`, `a run inside the ${limit} events of the key`);
    for (let k = 0; k < length; k++) out.push(start + k);
    end = start + length;
  }
  return out;
}
