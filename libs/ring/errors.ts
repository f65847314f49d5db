/**
 * Typed errors of libs/ring. Every error thrown by a ring carries a stable `code` (`ring_*`).
 *
 * - Argument problems are `RingRangeError` (a `RangeError`) or `RingTypeError` (a `TypeError`), so code that
 *   checks `instanceof RangeError` / `TypeError` keeps working.
 * - Misuse of the reserve/commit protocol, lock problems and detected corruption are `RingError`.
 *
 * A full ring is NOT an error: `reserve()` returns -1 and `tryWrite()` returns false (back-pressure).
 */

export type RingErrorCode =
  /** capacity is not a power of two in the supported range */
  | 'ring_capacity'
  /** a record payload larger than `maxRecordBytes` (or a negative / non-integer length) */
  | 'ring_record_too_large'
  /** `RingBuffer.from()` got something that is not a ring buffer created by this module (or another layout version) */
  | 'ring_bad_buffer'
  /** any other invalid argument (owner id, maxRecords, timeout, visitor, ...) */
  | 'ring_invalid_argument'
  /** `commit()` / `abort()` without an open reservation */
  | 'ring_no_reservation'
  /** `reserve()` / `tryWrite()` while this instance still holds an uncommitted reservation */
  | 'ring_reservation_pending'
  /** the calling owner already holds this lock (nested claim/peek in a visitor, two instances sharing an owner id, ...) */
  | 'ring_lock_reentry'
  /** the lock this reservation was made under was taken away (forceReleaseLocks named this owner as dead) */
  | 'ring_lock_lost'
  /** a record header failed its integrity check: the shared memory was overwritten by something else */
  | 'ring_corrupt'
  /** the runtime lacks `Atomics.waitAsync` */
  | 'ring_unsupported';

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
  if (typeof c !== 'string' || !c.startsWith('ring_')) return false;
  return code === undefined || c === code;
}
