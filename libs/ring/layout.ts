/**
 * Shared-memory layout of a ring (internal; exported from index.ts only as RING_LAYOUT for diagnostics/tests).
 *
 * SharedArrayBuffer = [ header: HEADER_BYTES ][ data area: capacity bytes ]
 *
 * The header is an Int32Array. Words written by different parties live in different 128-byte slots so that
 * a producer and a consumer do not false-share a cache line (128 rather than 64 because of adjacent-line
 * prefetching on x86):
 *
 *   slot 0  meta (written once by create)      magic, version, capacity, header bytes
 *   slot 1  producer publication               write position, write sequence, commit intent (pos, seq)
 *   slot 2  producer lock (producers only)     lock word (owner id, 0 = free), lock waiters, wrap count
 *   slot 3  consumer publication               read position, read sequence, claim intent (pos, seq)
 *   slot 4  consumer lock (consumers only)     lock word, lock waiters
 *   slot 5  consumers waiting for data         count (read by every commit)
 *   slot 6  producers waiting for space        count (read by every claim)
 *
 * Positions are byte counters that only grow (mod 2^32); the data offset is `pos & (capacity - 1)`.
 * Sequences are record counters (mod 2^32).
 *
 * Data area records, 8-byte aligned:
 *   [u32 length][u32 length ^ RECORD_CHECK][payload: length bytes][pad to 8]
 * A record never straddles the end of the data area: when it would, a skip marker (length = SKIP_MARKER)
 * is written in its place and the record starts at offset 0; the consumer jumps over the tail.
 * Payload offsets are therefore 8-byte aligned, in the data area and in the SharedArrayBuffer.
 */

export const RING_MAGIC = 0x474e5253; // 'SRNG' little-endian
export const RING_LAYOUT_VERSION = 1;
export const HEADER_BYTES = 1024;
export const RECORD_HEADER_BYTES = 8;
export const SKIP_MARKER = 0xffffffff;
export const RECORD_CHECK = 0x52494e47; // 'RING'
export const MIN_CAPACITY = 1024;
export const MAX_CAPACITY = 2 ** 30;

const SLOT = 32; // Int32 words per 128-byte slot

export const H_MAGIC = 0;
export const H_VERSION = 1;
export const H_CAPACITY = 2;
export const H_HEADER_BYTES = 3;

export const H_WRITE_POS = SLOT * 1;
export const H_WRITE_SEQ = SLOT * 1 + 1;
export const H_P_INTENT_POS = SLOT * 1 + 2;
export const H_P_INTENT_SEQ = SLOT * 1 + 3;

export const H_P_LOCK = SLOT * 2;
export const H_P_LOCK_WAITERS = SLOT * 2 + 1;
export const H_WRAP_COUNT = SLOT * 2 + 2;

export const H_READ_POS = SLOT * 3;
export const H_READ_SEQ = SLOT * 3 + 1;
export const H_C_INTENT_POS = SLOT * 3 + 2;
export const H_C_INTENT_SEQ = SLOT * 3 + 3;

export const H_C_LOCK = SLOT * 4;
export const H_C_LOCK_WAITERS = SLOT * 4 + 1;

export const H_WAITING_CONSUMERS = SLOT * 5;
export const H_WAITING_PRODUCERS = SLOT * 6;

/** Bytes a record of `length` payload bytes occupies in the data area (header + payload + padding). */
export function recordBytes(length: number): number {
  return (length + RECORD_HEADER_BYTES + 7) & ~7;
}

/** Everything above, as one frozen object (for diagnostics and white-box tests). */
export const RING_LAYOUT = Object.freeze({
  RING_MAGIC,
  RING_LAYOUT_VERSION,
  HEADER_BYTES,
  RECORD_HEADER_BYTES,
  SKIP_MARKER,
  RECORD_CHECK,
  MIN_CAPACITY,
  MAX_CAPACITY,
  H_MAGIC,
  H_VERSION,
  H_CAPACITY,
  H_HEADER_BYTES,
  H_WRITE_POS,
  H_WRITE_SEQ,
  H_P_INTENT_POS,
  H_P_INTENT_SEQ,
  H_P_LOCK,
  H_P_LOCK_WAITERS,
  H_WRAP_COUNT,
  H_READ_POS,
  H_READ_SEQ,
  H_C_INTENT_POS,
  H_C_INTENT_SEQ,
  H_C_LOCK,
  H_C_LOCK_WAITERS,
  H_WAITING_CONSUMERS,
  H_WAITING_PRODUCERS,
});
