/**
 * Typed errors of libs/ring. Every error thrown by a ring carries a stable `code` (`ERR_RING_*`).
 *
 * - Argument problems are `RingRangeError` (a `RangeError`) or `RingTypeError` (a `TypeError`), so code that
 *   checks `instanceof RangeError` / `TypeError` keeps working.
 * - Misuse of the reserve/commit protocol, lock problems and detected corruption are `RingError`.
 *
 * A full ring is NOT an error: `reserve()` returns -1 and `tryWrite()` returns false (back-pressure).
 */

export type RingErrorCode =
  /** capacity is not a power of two in the supported range */
  | 'ERR_RING_CAPACITY'
  /** a record payload larger than `maxRecordBytes` (or a negative / non-integer length) */
  | 'ERR_RING_RECORD_TOO_LARGE'
  /** `RingBuffer.from()` got something that is not a ring buffer created by this module (or another layout version) */
  | 'ERR_RING_BAD_BUFFER'
  /** any other invalid argument (owner id, maxRecords, timeout, visitor, ...) */
  | 'ERR_RING_INVALID_ARGUMENT'
  /** `commit()` / `abort()` without an open reservation */
  | 'ERR_RING_NO_RESERVATION'
  /** `reserve()` / `tryWrite()` while this instance still holds an uncommitted reservation */
  | 'ERR_RING_RESERVATION_PENDING'
  /** the calling owner already holds this lock (nested claim/peek in a visitor, two instances sharing an owner id, ...) */
  | 'ERR_RING_LOCK_REENTRY'
  /** the lock this reservation was made under was taken away (forceReleaseLocks named this owner as dead) */
  | 'ERR_RING_LOCK_LOST'
  /** a record header failed its integrity check: the shared memory was overwritten by something else */
  | 'ERR_RING_CORRUPT'
  /** the runtime lacks `Atomics.waitAsync` */
  | 'ERR_RING_UNSUPPORTED';

export interface RingErrorLike extends Error {
  readonly code: RingErrorCode;
}

/** Protocol misuse, lock problems, corruption. */
export class RingError extends Error implements RingErrorLike {
  readonly code: RingErrorCode;
  constructor(code: RingErrorCode, message: string) {
    super(message);
    this.name = 'RingError';
    this.code = code;
  }
}

/** Out-of-range arguments (capacity, record length, owner id, ...). */
export class RingRangeError extends RangeError implements RingErrorLike {
  readonly code: RingErrorCode;
  constructor(code: RingErrorCode, message: string) {
    super(message);
    this.name = 'RingRangeError';
    this.code = code;
  }
}

/** Arguments of the wrong type, or a buffer that is not a ring. */
export class RingTypeError extends TypeError implements RingErrorLike {
  readonly code: RingErrorCode;
  constructor(code: RingErrorCode, message: string) {
    super(message);
    this.name = 'RingTypeError';
    this.code = code;
  }
}

/** True for any error thrown by libs/ring (optionally: with this code). Works across realms (checks `code`). */
export function isRingError(err: unknown, code?: RingErrorCode): err is RingErrorLike {
  if (typeof err !== 'object' || err === null) return false;
  const c = (err as { code?: unknown }).code;
  if (typeof c !== 'string' || !c.startsWith('ERR_RING_')) return false;
  return code === undefined || c === code;
}
