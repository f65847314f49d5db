/** Test support for the ring: deterministic payloads, writing, draining, the header words, typed errors. */
import { isRingError, type RingBuffer } from './index';
import { RING_LAYOUT } from './layout';

export const L = RING_LAYOUT;

/** Deterministic payload: byte i = (seed * 31 + i * 7) & 0xff. */
export function payload(length: number, seed: number): Uint8Array {
  const p = new Uint8Array(length);
  for (let i = 0; i < length; i++) p[i] = (seed * 31 + i * 7) & 0xff;
  return p;
}

export interface Rec {
  offset: number;
  length: number;
  index: number;
  data: Uint8Array;
}

/** Claims (or peeks) everything, copying each record out. */
export function drain(ring: RingBuffer, max = Number.POSITIVE_INFINITY, peek = false): Rec[] {
  const out: Rec[] = [];
  const visit = (offset: number, length: number, index: number): boolean => {
    out.push({ offset, length, index, data: ring.bytes.slice(offset, offset + length) });
    return true;
  };
  const n = peek ? ring.peek(visit, max) : ring.claim(visit, max);
  expect(n).toBe(out.length);
  return out;
}

export function write(ring: RingBuffer, length: number, seed: number): number {
  const off = ring.reserve(length);
  if (off >= 0) {
    ring.bytes.set(payload(length, seed), off);
    ring.commit();
  }
  return off;
}

export function header(ring: RingBuffer): Int32Array {
  return new Int32Array(ring.buffer, 0, L.HEADER_BYTES / 4);
}

export function expectCode(
  fn: () => unknown,
  ctor: abstract new (...args: never[]) => Error,
  code: string,
): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ctor);
  expect((caught as { code?: string }).code).toBe(code);
  expect(isRingError(caught, code as never)).toBe(true);
}
