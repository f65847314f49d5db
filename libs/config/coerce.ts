/**
 * Value parsers. Each takes a raw value from any layer (already known to be set: not undefined or null;
 * strings already trimmed) and returns the typed value, or undefined when it does not fit. Flags and
 * environment variables arrive as strings, the file as JSON: numbers are accepted as numbers or numeric strings
 * everywhere; booleans, objects and arrays never are.
 */
export type Parser<T> = (raw: unknown) => { value: T } | undefined;

const NUMERIC = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

export function toNumber(raw: unknown): number | undefined {
  if (typeof raw === 'number') return Number.isFinite(raw) ? raw : undefined;
  if (typeof raw === 'string' && NUMERIC.test(raw)) {
    const value = Number(raw);
    return Number.isFinite(value) ? value : undefined;
  }
  return undefined;
}

export function integer(min: number, max: number): Parser<number> {
  return (raw) => {
    const value = toNumber(raw);
    return value !== undefined && Number.isInteger(value) && value >= min && value <= max
      ? { value }
      : undefined;
  };
}

export function decimal(min: number, max: number, options: { exclusiveMin?: boolean } = {}): Parser<number> {
  return (raw) => {
    const value = toNumber(raw);
    if (value === undefined || value < min || value > max) return undefined;
    if (options.exclusiveMin && value === min) return undefined;
    return { value };
  };
}

export function powerOfTwo(min: number, max: number): Parser<number> {
  const base = integer(min, max);
  return (raw) => {
    const parsed = base(raw);
    if (parsed === undefined) return undefined;
    return Number.isInteger(Math.log2(parsed.value)) ? parsed : undefined;
  };
}

/** Case-insensitive choice; returns the canonical (lower-case) spelling. */
export function oneOf<T extends string>(choices: readonly T[]): Parser<T> {
  return (raw) => {
    if (typeof raw !== 'string') return undefined;
    const value = raw.toLowerCase() as T;
    return choices.includes(value) ? { value } : undefined;
  };
}

export function text(pattern: RegExp, maxLength: number): Parser<string> {
  return (raw) =>
    typeof raw === 'string' && raw.length > 0 && raw.length <= maxLength && pattern.test(raw)
      ? { value: raw }
      : undefined;
}

const TRUE_WORDS = ['true', '1', 'yes', 'on'];
const FALSE_WORDS = ['false', '0', 'no', 'off'];

/** JSON booleans, or the usual words in flags and environment variables. */
export const flag: Parser<boolean> = (raw) => {
  if (typeof raw === 'boolean') return { value: raw };
  if (typeof raw !== 'string') return undefined;
  const word = raw.toLowerCase();
  if (TRUE_WORDS.includes(word)) return { value: true };
  if (FALSE_WORDS.includes(word)) return { value: false };
  return undefined;
};
