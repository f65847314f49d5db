/**
 * Shortest decimal text of a float32 value: the fewest significant digits that read back (as a double, then
 * rounded to float32: `Math.fround(Number(text))`) to the same float32 — what numpy prints for a float32, e.g.
 * 0.1f → `0.1`, where `JSON.stringify` prints the double `0.10000000149011612`. Written in JavaScript's number
 * layout (`1e-7`, `1.5e+30`, `123.5`, `0.001`), so the text is a JSON number; NaN and ±Infinity are `null` as in
 * `JSON.stringify`, and -0 is `0`.
 *
 * No npm package does this (there are shortest-double printers; none for float32 that is maintained), so it is
 * written here. Layout: JavaScript's, except for an integer whose shortest digits round up to one more digit
 * than it has (float32 1e11 = 99999997952 → `1e+11`, not `100000000000`), so the text is never longer than the
 * double's. The method: a float32 v has a rounding interval — the reals that round to v — bounded by the
 * midpoints to its neighbours (the lower one is nearer at the bottom of a binade). Scaled by 10^(8−k), where
 * 10^k ≤ v < 10^(k+1), v and the interval's bounds are reals in [1e8, 1e9]; the shortest text is the multiple
 * of the largest power of ten 10^t (t = 8 … 0) that lies in the scaled interval, the one nearest v when there
 * are several: 9 − t significant digits. float32 needs at most 9, so every integer here is exact in a double.
 * The scaling itself rounds (relative error ~3e-16, far below one unit of the 9th digit, ~1e-9), so a
 * candidate within `EDGE` of a bound is checked by reading its text back and dropped if it does not; no
 * candidate is ever returned unchecked unless it lies clearly inside the interval.
 */

const POW10_BIAS = 64;
/** 10^-64 … 10^64, each the double nearest the power (what the number parser gives for `1e<i>`). */
const POW10 = Float64Array.from({ length: 2 * POW10_BIAS + 1 }, (_, i) => Number(`1e${i - POW10_BIAS}`));
/** 10^0 … 10^9, exact. */
const INT_POW10 = [1, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000];
/** Scaled-space distance to an interval bound within which a candidate is verified by parsing its text. */
const EDGE = 1e-5;
const LOG10_2 = Math.LOG10E * Math.LN2;

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);
/** 2^(exponentBits − 150): one unit in the last place of a normal float32 with these exponent bits. */
const ULP = Float64Array.from({ length: 256 }, (_, bits) => 2 ** (Math.max(1, bits) - 150));

/**
 * Digits and decimal exponent of the shortest text, left in `shortest.digits` (an integer of at most 9 digits,
 * no trailing zeros), `shortest.length` (its digit count) and `shortest.exponent` (value = digits × 10^exponent).
 * `v` must be a finite float32 > 0.
 */
export const shortest = { digits: 0, exponent: 0, length: 1 };

export function shortestFloat32(v: number): void {
  F32[0] = v;
  const bits = U32[0]!;
  const exponentBits = bits >>> 23;
  const ulp = ULP[exponentBits]!;
  // Midpoints to the neighbours: exact in a double (25 significant bits at most).
  const upper = v + ulp / 2;
  const lower = (bits & 0x7fffff) === 0 && exponentBits > 1 ? v - ulp / 4 : v - ulp / 2;
  // k with 10^k <= v < 10^(k+1): from the binary exponent, then corrected against the scaled value.
  let k = exponentBits === 0 ? Math.floor(Math.log10(v)) : Math.floor((exponentBits - 127) * LOG10_2);
  let scale = POW10[POW10_BIAS + 8 - k]!;
  let scaled = v * scale;
  if (scaled >= 1e9) {
    k++;
    scale = POW10[POW10_BIAS + 8 - k]!;
    scaled = v * scale;
  } else if (scaled < 1e8) {
    k--;
    scale = POW10[POW10_BIAS + 8 - k]!;
    scaled = v * scale;
  }
  const lo = lower * scale;
  const hi = upper * scale;
  // Integer candidates at 9 digits; a bound within EDGE of an integer leaves that integer in doubt. All the
  // integers below are under 2^31: int32 arithmetic (| 0) instead of floating-point floor, ceil and modulo.
  let first = Math.ceil(lo - EDGE) | 0;
  let last = Math.floor(hi + EDGE) | 0;
  let firstInDoubt = first < lo + EDGE;
  let lastInDoubt = last > hi - EDGE;
  for (;;) {
    // The largest t with a multiple of 10^t in [first, last]: every interval of 10^t integers holds one, and
    // if 10^t has a multiple there so has 10^(t−1); so start from the sure one and climb while it holds.
    let t = 0;
    while (t < 8 && INT_POW10[t + 1]! <= last - first + 1) t++;
    while (
      t < 8 &&
      ((last / INT_POW10[t + 1]!) | 0) >= (((first + INT_POW10[t + 1]! - 1) / INT_POW10[t + 1]!) | 0)
    )
      t++;
    const unit = INT_POW10[t]!;
    const qFirst = ((first + unit - 1) / unit) | 0;
    const qLast = (last / unit) | 0;
    let q = (scaled / unit + 0.5) | 0;
    if (q < qFirst) q = qFirst;
    else if (q > qLast) q = qLast;
    const n = q * unit;
    if (
      ((firstInDoubt && n === first) || (lastInDoubt && n === last)) &&
      Math.fround(Number(`${q}e${t + k - 8}`)) !== v
    ) {
      // Outside the interval after all: drop that bound's integer and search again.
      if (n === first) {
        first++;
        firstInDoubt = false;
      } else {
        last--;
        lastInDoubt = false;
      }
      if (first > last) break;
      continue;
    }
    let digits = q;
    let exponent = t + k - 8;
    // q has 9 − t digits (scaled is in [1e8, 1e9)), one more when rounding carried it to 10^(9−t)
    let length = q >= INT_POW10[9 - t]! ? 10 - t : 9 - t;
    while (digits % 10 === 0) {
      digits = (digits / 10) | 0;
      exponent++;
      length--;
    }
    shortest.digits = digits;
    shortest.exponent = exponent;
    shortest.length = length;
    return;
  }
  // Unreachable for a float32 (its 9-digit rounding always reads back); kept total: the double's own text.
  shortest.digits = Number.NaN;
  shortest.exponent = 0;
}

/**
 * Writes the JSON text of float32 `value` at `at` in `out` (ASCII bytes) and returns the end. Room for 16 bytes
 * (the longest: `-1.23456789e-38`, 15) must be there.
 */
export function writeFloat32(out: Uint8Array, at: number, value: number): number {
  if (!Number.isFinite(value)) {
    out[at] = 0x6e; // null
    out[at + 1] = 0x75;
    out[at + 2] = 0x6c;
    out[at + 3] = 0x6c;
    return at + 4;
  }
  if (value === 0) {
    out[at] = 0x30;
    return at + 1;
  }
  if (value < 0) {
    out[at++] = 0x2d;
    value = -value;
  }
  shortestFloat32(value);
  const digits = shortest.digits;
  if (Number.isNaN(digits)) {
    // never for a float32 value; a double that is not one gets its own shortest text
    const text = String(value);
    for (let i = 0; i < text.length; i++) out[at++] = text.charCodeAt(i);
    return at;
  }
  return writeDecimal(out, at, value, digits, shortest.length, shortest.exponent);
}

/**
 * digits × 10^exponent (the shortest text of `value` > 0) in Number.prototype.toString's layout, and so
 * JSON.stringify's, but for an integer carried past its own digit count (below).
 */
function writeDecimal(
  out: Uint8Array,
  at: number,
  value: number,
  digits: number,
  length: number,
  exponent: number,
): number {
  // JavaScript's layout rule: n is the position of the decimal point relative to the first digit.
  const n = length + exponent;
  // An integer prints in full (JavaScript's layout) unless rounding to the shortest carried it to one more
  // digit than the value has: float32(1e11) is 99999997952, and 100000000000 would be longer than the double's
  // own text, so it prints 1e+11.
  if (length <= n && n <= 21) {
    if (value >= POW10[POW10_BIAS + n - 1]!) {
      at = writeDigits(out, at, digits, length);
      for (let i = length; i < n; i++) out[at++] = 0x30;
      return at;
    }
  } else if (0 < n && n <= 21) {
    // the point falls inside the digits: the fraction's digits, then the integer part's, from the right
    const fractionDigits = length - n;
    const unit = INT_POW10[fractionDigits]!;
    const whole = Math.floor(digits / unit);
    at = writeDigits(out, at, whole, n);
    out[at++] = 0x2e;
    return writeDigits(out, at, digits - whole * unit, fractionDigits);
  } else if (-6 < n && n <= 0) {
    out[at++] = 0x30;
    out[at++] = 0x2e;
    for (let i = n; i < 0; i++) out[at++] = 0x30;
    return writeDigits(out, at, digits, length);
  }
  // exponent form: d[.ddd]e±x
  const leading = Math.floor(digits / INT_POW10[length - 1]!);
  out[at++] = 0x30 + leading;
  if (length > 1) {
    out[at++] = 0x2e;
    at = writeDigits(out, at, digits - leading * INT_POW10[length - 1]!, length - 1);
  }
  out[at++] = 0x65; // e
  let e = n - 1;
  if (e < 0) {
    out[at++] = 0x2d;
    e = -e;
  } else out[at++] = 0x2b;
  if (e >= 10) {
    out[at++] = 0x30 + Math.floor(e / 10);
    e %= 10;
  }
  out[at++] = 0x30 + e;
  return at;
}

/** "00" … "99" as ASCII pairs. */
const PAIRS = Uint8Array.from(
  { length: 200 },
  (_, i) => 0x30 + (i & 1 ? (i >> 1) % 10 : Math.floor((i >> 1) / 10)),
);

/** `count` decimal digits of `n` (< 2^31; leading zeros included) at `at`; returns the end. */
function writeDigits(out: Uint8Array, at: number, n: number, count: number): number {
  const end = at + count;
  let i = end;
  let rest = n | 0;
  while (i - at >= 2) {
    const next = (rest / 100) | 0;
    const pair = (rest - next * 100) << 1;
    out[--i] = PAIRS[pair + 1]!;
    out[--i] = PAIRS[pair]!;
    rest = next;
  }
  if (i > at) out[--i] = 0x30 + rest;
  return end;
}

const scratch = new Uint8Array(32);
const latin1 = new TextDecoder('latin1');

/** The JSON text of a float32 value as a string (see writeFloat32); for tests and one-off use. */
export function float32Text(value: number): string {
  return latin1.decode(scratch.subarray(0, writeFloat32(scratch, 0, value)));
}
