import { float32Text, writeFloat32 } from './float32-text';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const fromBits = (bits: number): number => {
  u32[0] = bits >>> 0;
  return f32[0]!;
};

/** The fewest significant digits of any decimal that reads back to v (brute force: toExponential and its neighbours). */
function fewestDigits(v: number): number {
  for (let p = 1; p <= 9; p++) {
    const [mantissa, exponent] = v.toExponential(p - 1).split('e') as [string, string];
    const m = Number(mantissa.replace('.', ''));
    for (const d of [0, -1, 1]) {
      if (Math.fround(Number(`${m + d}e${Number(exponent) - (p - 1)}`)) === v) return p;
    }
  }
  return Number.POSITIVE_INFINITY;
}

function significantDigits(text: string): number {
  return text.replace(/^-/, '').replace(/e.*$/, '').replace('.', '').replace(/^0+/, '').replace(/0+$/, '')
    .length;
}

/** Every property the answer relies on, for one float32 value. */
function check(v: number): void {
  const text = float32Text(v);
  if (!Number.isFinite(v)) {
    expect(text).toBe('null');
    return;
  }
  // round trip, never longer than the double's text, a JSON number in JavaScript's layout, shortest
  if (Math.fround(Number(text)) !== v)
    throw new Error(`${v}: ${text} reads back as ${Math.fround(Number(text))}`);
  if (text.length > JSON.stringify(v).length)
    throw new Error(`${v}: ${text} longer than ${JSON.stringify(v)}`);
  // JavaScript's layout, but for integers carried past their digit count (1e+11, not 100000000000)
  const layout =
    /^-?[1-9](\.[0-9]+)?e\+[0-9]+$/.test(text) && Number.isInteger(v) ? text : String(Number(text));
  if (v !== 0 && layout !== text) throw new Error(`${v}: ${text} is not in JavaScript's layout`);
  // Object.is is toBe's comparison; a plain check, as above: jest's expect costs more than the check itself,
  // 145k times over.
  if (!Object.is(JSON.parse(text), Number(text)))
    throw new Error(`${v}: ${text} parses as JSON to ${JSON.parse(text)}, not ${Number(text)}`);
  if (v !== 0 && significantDigits(text) !== fewestDigits(Math.abs(v)))
    throw new Error(
      `${v}: ${text} has ${significantDigits(text)} digits, ${fewestDigits(Math.abs(v))} suffice`,
    );
}

describe('float32Text: the shortest decimal that reads back to the same float32', () => {
  test('known values', () => {
    expect(float32Text(Math.fround(0.1))).toBe('0.1');
    expect(JSON.stringify(Math.fround(0.1))).toBe('0.10000000149011612');
    expect(float32Text(Math.fround(1 / 3))).toBe('0.33333334');
    expect(float32Text(1)).toBe('1');
    expect(float32Text(-2.5)).toBe('-2.5');
    expect(float32Text(Math.fround(123456.789))).toBe('123456.79');
    expect(float32Text(16777216)).toBe('16777216');
    expect(float32Text(Math.fround(1e10))).toBe('10000000000');
    expect(float32Text(Math.fround(1e11))).toBe('1e+11'); // 99999997952: shorter than both full forms
    expect(float32Text(1000)).toBe('1000');
    expect(float32Text(Math.fround(1e21))).toBe('1e+21');
    expect(float32Text(Math.fround(1e-7))).toBe('1e-7');
    expect(float32Text(Math.fround(0.000001))).toBe('0.000001');
    expect(float32Text(fromBits(0x7f7fffff))).toBe('3.4028235e+38'); // max
    expect(float32Text(fromBits(0x00800000))).toBe('1.1754944e-38'); // min normal
    expect(float32Text(fromBits(0x00000001))).toBe('1e-45'); // min subnormal
    expect(float32Text(fromBits(0x007fffff))).toBe('1.1754942e-38'); // max subnormal
  });

  test('NaN and ±Infinity are null, -0 is 0 (as JSON.stringify)', () => {
    expect(float32Text(Number.NaN)).toBe('null');
    expect(float32Text(Number.POSITIVE_INFINITY)).toBe('null');
    expect(float32Text(Number.NEGATIVE_INFINITY)).toBe('null');
    expect(float32Text(fromBits(0x7fc00001))).toBe('null');
    expect(float32Text(-0)).toBe('0');
    expect(float32Text(0)).toBe('0');
  });

  test('edge values: every power of 2 and its neighbours, powers of 10, subnormals, both signs', () => {
    const values: number[] = [];
    for (let exponent = 0; exponent < 255; exponent++) {
      const bits = exponent << 23;
      for (const d of [-2, -1, 0, 1, 2]) if (bits + d >= 0) values.push(fromBits(bits + d));
    }
    for (let e = -45; e <= 38; e++)
      for (const m of [1, 2, 5, 9.999999, 1.5]) values.push(Math.fround(Number(`${m}e${e}`)));
    for (let bits = 1; bits < 4096; bits++) values.push(fromBits(bits)); // the smallest subnormals
    for (let bits = 0x7f7fffff; bits > 0x7f7ff000; bits--) values.push(fromBits(bits)); // the largest finite
    for (const v of values) {
      check(v);
      check(-v);
    }
  });

  test('random bit patterns and a stride over all 2^32', () => {
    let state = 0x5eed;
    const next = (): number => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return state;
    };
    for (let i = 0; i < 50_000; i++) check(fromBits(next()));
    // every 65,521st pattern (a prime stride): every exponent, both signs, NaNs and infinities among them
    for (let bits = 0; bits < 2 ** 32; bits += 65_521) check(fromBits(bits));
    // typical model outputs: values in [-1, 1]
    for (let i = 0; i < 30_000; i++) check(Math.fround((next() / 2 ** 32) * 2 - 1));
  });

  test('writeFloat32 writes the same ASCII into a buffer and returns the end', () => {
    const out = new Uint8Array(64).fill(0x21);
    const end = writeFloat32(out, 3, Math.fround(-1.2345678e-38));
    const text = String.fromCharCode(...out.subarray(3, end));
    expect(text).toBe(float32Text(Math.fround(-1.2345678e-38)));
    expect(out[2]).toBe(0x21);
    expect(out[end]).toBe(0x21);
    expect(end - 3).toBeLessThanOrEqual(16);
  });
});
