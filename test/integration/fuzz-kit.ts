/** Seeded randomness and hostile values shared by the fuzz suites (deterministic: same seed, same frames). */

/** mulberry32: small, fast, good enough for fuzzing, and reproducible from one 32-bit seed. */
export class Random {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  int(below: number): number {
    return Math.floor(this.next() * below);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  bytes(length: number): Uint8Array {
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) out[i] = this.int(256);
    return out;
  }
}

/** Values of every JSON type, and the awkward corners of each, to put in any field. */
export const ODD_VALUES: readonly unknown[] = [
  null,
  true,
  false,
  0,
  -0,
  -1,
  1.5,
  1e308,
  -1e308,
  2 ** 53 + 2,
  '',
  ' ',
  '0',
  'NaN',
  'Infinity',
  '\u0000',
  '\ud800',
  'x'.repeat(300),
  'é'.repeat(50),
  [],
  [null],
  [[]],
  [1, 'a', null, {}],
  {},
  { a: 1 },
  { constructor: { prototype: { polluted: true } } },
  Array.from({ length: 70 }, (_, i) => i),
  [[1, 2], [3]],
];

/** Every odd value as JSON text, plus values JSON.stringify cannot produce, to put in place of a field's value. */
export const ODD_VALUE_TEXTS: readonly string[] = [
  ...ODD_VALUES.map((value) => JSON.stringify(value)),
  '{"__proto__":{"polluted":true}}',
  '{"a":1,"a":2}',
  `${'['.repeat(3000)}${']'.repeat(3000)}`,
  `${'{"a":'.repeat(2000)}1${'}'.repeat(2000)}`,
  '1e999',
  '-1e999',
  '123456789012345678901234567890',
  '"\\ud800"',
];

/** Text that JSON.stringify cannot produce: raw tokens spliced into a frame. */
export const RAW_TOKENS: readonly string[] = [
  'NaN',
  'Infinity',
  '-Infinity',
  'undefined',
  '1e999',
  '-',
  '0x10',
  '01',
  '"\\ud800"',
  '"\\u0000"',
  '"\\uZZZZ"',
  "'single'",
  ',',
  ':',
  '{',
  '}',
  '[',
  ']',
  '//',
  '/*',
  '"',
  '\\',
];
