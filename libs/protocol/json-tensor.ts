/**
 * The fast path for JSON tensors: a request's top-level `"input"` holding a (nested, rectangular) array of
 * numbers is read straight into a reusable scratch buffer, without JSON.parse building a JS array of it, then
 * converted once into the dtype's bytes that the ring record copies as a binary frame's.
 *
 * Hand-written on purpose: no maintained library parses JSON number arrays straight into a typed buffer.
 * The scanner only ever accepts: anything it is not sure of (a string or null among the numbers, ragged or
 * empty rows, deep nesting, malformed text, an escaped key, a value out of the dtype's range) makes it give
 * up, and the request takes the general path (JSON.parse + bindRequest), which then answers exactly as before.
 * Numbers are converted to the same double JSON.parse gives (Clinger's exact fast path, else Number() of the
 * validated literal), and doubles to float32 as DataView.setFloat32 does.
 */
import type { BindLimits, BoundInput } from './bound';
import type { TensorSpec } from './signature';
import { MAX_RANK } from './signature';

const SPACE = 0x20;
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const MINUS = 0x2d;
const PLUS = 0x2b;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
const LOWER_E = 0x65;
const UPPER_E = 0x45;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/** Powers of ten a double holds exactly: m·10^e and m/10^e are then correctly rounded for m < 2^53. */
const EXACT_POW10 = Array.from({ length: 23 }, (_, e) => 10 ** e);
/** Significant digits whose integer value is exact in a double. */
const MAX_EXACT_DIGITS = 15;
/** Nesting the scanner follows (a tensor of MAX_RANK - 1 per-item dims); deeper goes the general path. */
const MAX_DEPTH = MAX_RANK - 1;

/**
 * The request text as bytes: reading a typed array costs a third of charCodeAt per character. ASCII only, so
 * byte offsets are string indexes; a 0 byte after the text stops every loop (no JSON token contains one).
 */
let bytes = new Uint8Array(4096);
const asciiEncoder = new TextEncoder();

/** Numbers of the last scan, as JSON.parse would give them; reused by every scan. */
let values = new Float64Array(1024);
let count = 0;
/** Incremented by every scan: a ScannedTensor is readable only until the next one. */
let generation = 0;
const rowLength = new Int32Array(MAX_DEPTH);
const dimsOfScan = new Int32Array(MAX_DEPTH);

/** The request's top-level numeric `"input"`, read by the scanner; valid until the next scan. */
export class ScannedTensor {
  readonly generation = generation;
  constructor(
    /** The whole request text and the array's span in it, for the general path. */
    readonly text: string,
    readonly start: number,
    readonly end: number,
    readonly dims: number[],
    readonly count: number,
  ) {}

  /** The array as JSON.parse reads it: what the general path binds when the fast one gives up. */
  materialize(): unknown {
    return JSON.parse(this.text.slice(this.start, this.end));
  }
}

/**
 * Finds the top-level `"input"` of a JSON request object and scans it when it is an array of numbers.
 * Undefined when the request is not such a request, or the scanner is not sure of it.
 */
export function scanJsonInput(text: string): ScannedTensor | undefined {
  if (text.length >= bytes.length) bytes = new Uint8Array(Math.max(text.length + 1, bytes.length * 2));
  // Non-ASCII text (its byte offsets are no string indexes) goes the general path.
  const encoded = asciiEncoder.encodeInto(text, bytes);
  if (encoded.read !== text.length || encoded.written !== text.length) return undefined;
  bytes[text.length] = 0;
  let i = skipSpace(0);
  if (bytes[i]! !== OPEN_OBJECT) return undefined;
  i = skipSpace(i + 1);
  if (bytes[i]! === CLOSE_OBJECT) return undefined;
  let found: ScannedTensor | undefined;
  let inputKeys = 0;
  for (;;) {
    if (bytes[i]! !== QUOTE) return undefined;
    const keyStart = i + 1;
    i = keyStart;
    for (let c = bytes[i]!; c !== QUOTE; c = bytes[++i]!) {
      // An escaped key could spell "input": JSON.parse decides those.
      if (c === BACKSLASH || c === 0) return undefined;
    }
    const isInput = i - keyStart === 5 && text.startsWith('input', keyStart);
    i = skipSpace(i + 1);
    if (bytes[i]! !== COLON) return undefined;
    i = skipSpace(i + 1);
    if (isInput) {
      if (++inputKeys > 1 || bytes[i]! !== OPEN_ARRAY) return undefined;
      const end = scanArray(text, i);
      if (end < 0) return undefined;
      found = new ScannedTensor(text, i, end, Array.from(dimsOfScan.subarray(0, scanRank)), count);
      i = end;
    } else {
      i = skipValue(i);
      if (i < 0) return undefined;
    }
    i = skipSpace(i);
    const c = bytes[i]!;
    if (c === CLOSE_OBJECT) return found;
    if (c !== COMMA) return undefined;
    i = skipSpace(i + 1);
  }
}

function skipSpace(i: number): number {
  for (;;) {
    const c = bytes[i]!;
    if (c !== SPACE && c !== LF && c !== CR && c !== TAB) return i;
    i++;
  }
}

/** Past one value of another field (not validated: JSON.parse of the rest does that), or -1. */
function skipValue(i: number): number {
  let depth = 0;
  for (;;) {
    const c = bytes[i]!;
    if (c === 0) return -1;
    if (c === QUOTE) {
      i++;
      for (let s = bytes[i]!; s !== QUOTE; s = bytes[++i]!) {
        if (s === 0) return -1;
        if (s === BACKSLASH && bytes[++i] === 0) return -1;
      }
      i++;
      if (depth === 0) return i;
      continue;
    }
    if (c === OPEN_ARRAY || c === OPEN_OBJECT) depth++;
    else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (depth === 0) return i;
      if (--depth === 0) return i + 1;
    } else if (depth === 0 && (c === COMMA || c === SPACE || c === LF || c === CR || c === TAB)) return i;
    i++;
  }
}

let scanRank = 0;

/** Scans the array at `i` into `values`; its end, or -1 when it is not a rectangular array of JSON numbers. */
function scanArray(text: string, i: number): number {
  generation++;
  count = 0;
  let leafDepth = -1;
  let depth = 1;
  rowLength[0] = 0;
  dimsOfScan.fill(-1);
  i++;
  for (;;) {
    i = skipSpace(i);
    const c = bytes[i]!;
    if (c === OPEN_ARRAY) {
      if (depth === MAX_DEPTH || (leafDepth !== -1 && depth >= leafDepth)) return -1;
      rowLength[depth++] = 0;
      i++;
      continue;
    }
    // Empty rows and trailing commas: the general path answers them.
    if (leafDepth === -1) leafDepth = depth;
    else if (leafDepth !== depth) return -1;
    i = scanNumber(text, i);
    if (i < 0) return -1;
    // Close every row this value ends.
    for (;;) {
      rowLength[depth - 1]!++;
      i = skipSpace(i);
      const next = bytes[i]!;
      if (next === COMMA) {
        i++;
        break;
      }
      if (next !== CLOSE_ARRAY) return -1;
      const length = rowLength[depth - 1]!;
      const known = dimsOfScan[depth - 1]!;
      if (known === -1) dimsOfScan[depth - 1] = length;
      else if (known !== length) return -1;
      i++;
      if (--depth === 0) {
        scanRank = leafDepth;
        return i;
      }
    }
  }
}

/** One JSON number at `i` appended to `values`; its end, or -1 when the text there is no JSON number. */
function scanNumber(text: string, i: number): number {
  const start = i;
  let c = bytes[i]!;
  const negative = c === MINUS;
  if (negative) c = bytes[++i]!;
  let mantissa = 0;
  let digits = 0;
  let exponent = 0;
  if (c === ZERO) {
    c = bytes[++i]!;
    if (c >= ZERO && c <= NINE) return -1;
  } else if (c > ZERO && c <= NINE) {
    do {
      mantissa = mantissa * 10 + (c - ZERO);
      digits++;
      c = bytes[++i]!;
    } while (c >= ZERO && c <= NINE);
  } else return -1;
  if (c === DOT) {
    c = bytes[++i]!;
    if (!(c >= ZERO && c <= NINE)) return -1;
    do {
      // Leading zeros of a fraction are not significant digits.
      if (mantissa !== 0 || c !== ZERO) {
        mantissa = mantissa * 10 + (c - ZERO);
        digits++;
      }
      exponent--;
      c = bytes[++i]!;
    } while (c >= ZERO && c <= NINE);
  }
  if (c === LOWER_E || c === UPPER_E) {
    c = bytes[++i]!;
    let sign = 1;
    if (c === MINUS || c === PLUS) {
      if (c === MINUS) sign = -1;
      c = bytes[++i]!;
    }
    if (!(c >= ZERO && c <= NINE)) return -1;
    let power = 0;
    do {
      if (power < 100_000) power = power * 10 + (c - ZERO);
      c = bytes[++i]!;
    } while (c >= ZERO && c <= NINE);
    exponent += sign * power;
  }
  let value: number;
  if (digits <= MAX_EXACT_DIGITS && exponent >= -22 && exponent <= 22) {
    value = exponent >= 0 ? mantissa * EXACT_POW10[exponent]! : mantissa / EXACT_POW10[-exponent]!;
    if (negative) value = -value;
  } else {
    // Rare (over 15 significant digits, huge or tiny exponents): the validated literal, correctly rounded.
    value = Number(text.slice(start, i));
  }
  if (count === values.length) {
    const grown = new Float64Array(values.length * 2);
    grown.set(values);
    values = grown;
  }
  values[count++] = value;
  return i;
}

const FLOAT32_MAX = 3.4028234663852886e38;
/** The bytes of the last bound scanned tensor, in its dtype; reused by every bind. */
let scratch = new ArrayBuffer(4096);
let scratchViews = viewsOf(scratch);

function viewsOf(buffer: ArrayBuffer) {
  return {
    bytes: new Uint8Array(buffer),
    float32: new Float32Array(buffer),
    float64: new Float64Array(buffer),
    int32: new Int32Array(buffer),
  };
}

/** The numbers of a scan that is still current, as JSON.parse gives them (a view of the scratch buffer). */
export function scannedNumbers(scanned: ScannedTensor): Float64Array | undefined {
  return scanned.generation === generation ? values.subarray(0, scanned.count) : undefined;
}

/**
 * The scanned tensor bound to `spec` as raw bytes (a view of a scratch buffer, valid until the next bind), or
 * undefined when the general path must decide: another shape, a dtype the fast path does not convert, a value
 * out of range, or a scan that is no longer current.
 */
export function bindScanned(
  scanned: ScannedTensor,
  spec: TensorSpec,
  index: number,
  limits: BindLimits,
): BoundInput | undefined {
  if (scanned.generation !== generation) return undefined;
  const dims = scanned.dims;
  if (dims.length !== spec.shape.length) return undefined;
  for (let axis = 0; axis < dims.length; axis++) {
    const expected = spec.shape[axis]!;
    if (expected !== -1 && expected !== dims[axis]) return undefined;
  }
  const n = scanned.count;
  if (n > limits.maxElements) return undefined;
  const width = spec.dtype === 'float64' ? 8 : spec.dtype === 'uint8' ? 1 : 4;
  const byteLength = n * width;
  if (byteLength > scratch.byteLength) {
    scratch = new ArrayBuffer(Math.max(byteLength, scratch.byteLength * 2));
    scratchViews = viewsOf(scratch);
  }
  const views = scratchViews;
  switch (spec.dtype) {
    case 'float32':
      for (let i = 0; i < n; i++) {
        const value = values[i]!;
        if (!(Math.abs(value) <= FLOAT32_MAX)) return undefined;
        views.float32[i] = value;
      }
      break;
    case 'float64':
      for (let i = 0; i < n; i++) {
        const value = values[i]!;
        if (!Number.isFinite(value)) return undefined;
        views.float64[i] = value;
      }
      break;
    case 'int32':
      for (let i = 0; i < n; i++) {
        const value = values[i]!;
        if ((value | 0) !== value) return undefined;
        views.int32[i] = value;
      }
      break;
    case 'uint8':
      for (let i = 0; i < n; i++) {
        const value = values[i]!;
        if (!(value >= 0 && value <= 255 && Math.floor(value) === value)) return undefined;
        views.bytes[i] = value;
      }
      break;
    default:
      return undefined;
  }
  return { spec, index, dims, value: scanned, byteLength, raw: views.bytes.subarray(0, byteLength) };
}
