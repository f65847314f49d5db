/** Seeded randomness and hostile values shared by the fuzz suites (deterministic: same seed, same frames). */
import { Rng } from '../../libs/rng';

/** The project's seeded generator (mulberry32) with what the fuzzers draw: an index, an item, raw bytes. */
export class Random extends Rng {
  /** Uniform integer in [0, below). */
  below(below: number): number {
    return Math.floor(this.next() * below);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }

  bytes(length: number): Uint8Array {
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) out[i] = this.below(256);
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
