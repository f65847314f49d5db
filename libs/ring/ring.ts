// One file by design: the ring's protocol (README.md) is one spec whose lock, intent and position steps must read together.
import { types } from 'node:util';
import { threadId } from 'node:worker_threads';
import { RingError, RingRangeError, RingTypeError } from './errors';
import {
  H_C_INTENT_POS,
  H_C_INTENT_SEQ,
  H_C_LOCK,
  H_CAPACITY,
  H_HEADER_BYTES,
  H_MAGIC,
  H_P_INTENT_POS,
  H_P_INTENT_SEQ,
  H_P_LOCK,
  H_READ_POS,
  H_READ_SEQ,
  H_VERSION,
  H_WAITING_CONSUMERS,
  H_WAITING_PRODUCERS,
  H_WRAP_COUNT,
  H_WRITE_POS,
  H_WRITE_SEQ,
  HEADER_BYTES,
  MAX_CAPACITY,
  MIN_CAPACITY,
  RECORD_CHECK,
  RECORD_HEADER_BYTES,
  RING_LAYOUT_VERSION,
  RING_MAGIC,
  recordBytes,
  SKIP_MARKER,
} from './layout';

/** Called once per record by peek()/claim(): `offset`/`length` locate the payload in `ring.bytes`/`ring.view`. */
export type RingVisitor = (offset: number, length: number, index: number) => boolean;
export type RingWaitResult = 'ok' | 'timed-out';

type WaitAsyncResult =
  | { async: false; value: 'not-equal' | 'timed-out' }
  | { async: true; value: Promise<'ok' | 'timed-out'> };
type WaitAsyncFn = (ta: Int32Array, index: number, value: number, timeout?: number) => WaitAsyncResult;

const waitAsync: WaitAsyncFn | undefined = (Atomics as unknown as { waitAsync?: WaitAsyncFn }).waitAsync;

/** Lock contention: re-check this many times before parking the thread on the lock word. */
const LOCK_SPINS = 64;
/** Upper bound of one park on a lock word (the unlocker notifies; this is only a safety net). */
const LOCK_PARK_MS = 20;
const MAX_OWNER_ID = 0x7fffffff;
const MAX_TIMER_MS = 2 ** 30;
const SKIP_CHECK = (SKIP_MARKER ^ RECORD_CHECK) >>> 0;
const noop = (): void => {};

function isPowerOfTwo(n: number): boolean {
  return n > 0 && (n & (n - 1)) === 0;
}

function validOwnerId(id: unknown): id is number {
  return typeof id === 'number' && Number.isInteger(id) && id >= 1 && id <= MAX_OWNER_ID;
}

function normalizeTimeout(timeoutMs: unknown): number {
  if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs)) {
    throw new RingTypeError(
      'ring_invalid_argument',
      `timeoutMs must be a number (ms, may be Infinity), got ${String(timeoutMs)}`,
    );
  }
  return timeoutMs > 0 ? timeoutMs : 0;
}

function requireWaitAsync(): WaitAsyncFn {
  if (waitAsync === undefined) {
    throw new RingError(
      'ring_unsupported',
      'Atomics.waitAsync is not available in this runtime (Node.js >= 16 required)',
    );
  }
  return waitAsync;
}

/**
 * Parks on `header[index] === value` without blocking the event loop. Atomics.waitAsync alone does not keep
 * a Node.js event loop alive (the process/worker would exit mid-wait), so a timer is held for the duration.
 */
function parkAsync(
  header: Int32Array,
  index: number,
  value: number,
  timeoutMs: number,
  keepAlive = true,
): Promise<RingWaitResult> {
  const r = requireWaitAsync()(header, index, value, timeoutMs);
  if (!r.async) return Promise.resolve(r.value === 'timed-out' ? 'timed-out' : 'ok');
  if (!keepAlive) return r.value.then(toWaitResult);
  const timer = setInterval(noop, Math.max(1, Math.min(timeoutMs, MAX_TIMER_MS)));
  return r.value.then((v) => {
    clearInterval(timer);
    return toWaitResult(v);
  });
}

function toWaitResult(value: 'ok' | 'timed-out'): RingWaitResult {
  return value === 'timed-out' ? 'timed-out' : 'ok';
}

/**
 * A bounded multi-producer / multi-consumer ring of variable-length records in a SharedArrayBuffer.
 * See libs/ring/README.md for the protocol, memory ordering and recovery rules. One class over the ~35-member
 * rule, like its file over 600 lines: its members are the protocol's steps on one shared header (reserve,
 * commit, claim, release, the locks, the intents, waits, recovery), and each step's ordering argument reads
 * the others'; split, a reader would hold two classes open to check one store.
 */
export class RingBuffer {
  /** The shared memory: header + data area. Send this to other threads and wrap it with RingBuffer.from(). */
  readonly buffer: SharedArrayBuffer;
  /** The data area (length = capacity). Payload offsets returned by reserve()/visitors index into it. */
  readonly bytes: Uint8Array;
  /** DataView over the data area (same offsets as `bytes`). */
  readonly view: DataView;
  /** Data area size in bytes (power of two). */
  readonly capacity: number;
  /** Largest payload one record can have: capacity / 2 - 8. A record of this size always fits an empty ring. */
  readonly maxRecordBytes: number;

  private readonly header: Int32Array;
  /** The data area as u32 words, for record headers (records are 8-byte aligned). */
  private readonly words: Uint32Array;
  private readonly mask: number;
  private owner: number;

  // The open reservation of this instance (between reserve() and commit()/abort()).
  private resActive = false;
  private resLength = 0;
  /** Data-area offset of the record header. */
  private resStart = 0;
  /** Write position when reserved (u32). */
  private resPos = 0;
  /** Tail bytes skipped (skip marker written at resPos) so that the record starts at offset 0; else 0. */
  private resSkip = 0;

  /** Total SharedArrayBuffer size for a ring of `capacityBytes` data bytes. */
  static byteLengthFor(capacityBytes: number): number {
    RingBuffer.validateCapacity(capacityBytes);
    return HEADER_BYTES + capacityBytes;
  }

  /** Allocates a new ring of `capacityBytes` data bytes (power of two, 1024 ..= 2^30). */
  static create(capacityBytes: number): RingBuffer {
    RingBuffer.validateCapacity(capacityBytes);
    const buffer = new SharedArrayBuffer(HEADER_BYTES + capacityBytes);
    const header = new Int32Array(buffer, 0, HEADER_BYTES >> 2);
    header[H_VERSION] = RING_LAYOUT_VERSION;
    header[H_CAPACITY] = capacityBytes;
    header[H_HEADER_BYTES] = HEADER_BYTES;
    Atomics.store(header, H_MAGIC, RING_MAGIC);
    return new RingBuffer(buffer, capacityBytes);
  }

  /** Wraps a ring created by RingBuffer.create() (in this or another thread). Throws on anything else. */
  static from(buffer: SharedArrayBuffer): RingBuffer {
    if (!types.isSharedArrayBuffer(buffer)) {
      throw new RingTypeError(
        'ring_bad_buffer',
        `RingBuffer.from() needs the SharedArrayBuffer of a ring (ring.buffer), got ${describe(buffer)}`,
      );
    }
    if (buffer.byteLength < HEADER_BYTES + MIN_CAPACITY) {
      throw new RingTypeError(
        'ring_bad_buffer',
        `RingBuffer.from(): buffer of ${buffer.byteLength} bytes is too small to be a ring (header ${HEADER_BYTES} + at least ${MIN_CAPACITY} data bytes)`,
      );
    }
    const header = new Int32Array(buffer, 0, HEADER_BYTES >> 2);
    const magic = Atomics.load(header, H_MAGIC);
    if (magic !== RING_MAGIC) {
      throw new RingTypeError(
        'ring_bad_buffer',
        `RingBuffer.from(): not a ring buffer (magic 0x${(magic >>> 0).toString(16)}, expected 0x${RING_MAGIC.toString(16)})`,
      );
    }
    const version = header[H_VERSION];
    if (version !== RING_LAYOUT_VERSION) {
      throw new RingTypeError(
        'ring_bad_buffer',
        `RingBuffer.from(): ring layout version ${version} is not supported (this build reads version ${RING_LAYOUT_VERSION})`,
      );
    }
    const capacity = header[H_CAPACITY] ?? 0;
    if (
      header[H_HEADER_BYTES] !== HEADER_BYTES ||
      !isPowerOfTwo(capacity) ||
      capacity < MIN_CAPACITY ||
      capacity > MAX_CAPACITY ||
      buffer.byteLength !== HEADER_BYTES + capacity
    ) {
      throw new RingTypeError(
        'ring_bad_buffer',
        `RingBuffer.from(): corrupt ring header (capacity ${capacity}, header bytes ${header[H_HEADER_BYTES]}, buffer ${buffer.byteLength} bytes)`,
      );
    }
    return new RingBuffer(buffer, capacity);
  }

  private static validateCapacity(capacityBytes: unknown): asserts capacityBytes is number {
    if (typeof capacityBytes !== 'number' || !Number.isInteger(capacityBytes)) {
      throw new RingTypeError(
        'ring_capacity',
        `ring capacity must be an integer number of bytes, got ${describe(capacityBytes)}`,
      );
    }
    if (capacityBytes < MIN_CAPACITY || capacityBytes > MAX_CAPACITY || !isPowerOfTwo(capacityBytes)) {
      throw new RingRangeError(
        'ring_capacity',
        `ring capacity must be a power of two between ${MIN_CAPACITY} and ${MAX_CAPACITY} bytes, got ${capacityBytes}`,
      );
    }
  }

  private constructor(buffer: SharedArrayBuffer, capacity: number) {
    this.buffer = buffer;
    this.capacity = capacity;
    this.mask = capacity - 1;
    this.maxRecordBytes = capacity / 2 - RECORD_HEADER_BYTES;
    this.header = new Int32Array(buffer, 0, HEADER_BYTES >> 2);
    this.bytes = new Uint8Array(buffer, HEADER_BYTES, capacity);
    this.view = new DataView(buffer, HEADER_BYTES, capacity);
    this.words = new Uint32Array(buffer, HEADER_BYTES, capacity >> 2);
    this.owner = threadId + 1;
  }

  // ---------------------------------------------------------------- producer side

  /**
   * Reserves one record of `length` payload bytes and takes the producer lock until commit()/abort().
   * Returns the payload offset in `bytes`/`view` (8-byte aligned, contiguous), or -1 when the ring has no
   * room now (nothing reserved, lock not held).
   */
  reserve(length: number): number {
    if (this.resActive) {
      throw new RingError(
        'ring_reservation_pending',
        'reserve() while a reservation is open: commit() or abort() the previous one first',
      );
    }
    if (!(length >= 0 && length <= this.maxRecordBytes) || (length | 0) !== length) {
      throw this.lengthError(length);
    }
    const h = this.header;
    this.lock(H_P_LOCK);
    const wp = Atomics.load(h, H_WRITE_POS) >>> 0;
    const rp = Atomics.load(h, H_READ_POS) >>> 0;
    const free = this.capacity - ((wp - rp) >>> 0);
    const need = recordBytes(length);
    const off = wp & this.mask;
    const tail = this.capacity - off;
    let start = off;
    let skip = 0;
    if (need > tail) {
      // The record would straddle the end: skip the tail and start at offset 0.
      start = 0;
      skip = tail;
    }
    if (need + skip > free) {
      this.unlock(H_P_LOCK);
      return -1;
    }
    this.resActive = true;
    this.resLength = length;
    this.resStart = start;
    this.resPos = wp;
    this.resSkip = skip;
    return start + RECORD_HEADER_BYTES;
  }

  /**
   * Publishes the reserved record, releases the producer lock and wakes waiting consumers (a notify is
   * issued only when some consumer is waiting). `length` (optional) shrinks the record to fewer bytes than
   * reserved, for producers that reserve an upper bound. `notify` false leaves the wake-up to a later
   * notifyConsumers(), so a producer that commits many records in one go wakes consumers once.
   */
  commit(length?: number, notify = true): void {
    if (!this.resActive) {
      throw new RingError(
        'ring_no_reservation',
        'commit() without an open reservation: call reserve() first',
      );
    }
    let len = this.resLength;
    if (length !== undefined) {
      if (!(length >= 0 && length <= len) || (length | 0) !== length) {
        throw new RingRangeError(
          'ring_invalid_argument',
          `commit(length): length must be an integer between 0 and the reserved ${len}, got ${describe(length)}`,
        );
      }
      len = length;
    }
    const h = this.header;
    if (Atomics.load(h, H_P_LOCK) !== this.owner) {
      this.resActive = false;
      throw new RingError(
        'ring_lock_lost',
        `commit(): the producer lock is no longer held by owner ${this.owner} (released by forceReleaseLocks?); the record was dropped`,
      );
    }
    const words = this.words;
    const skip = this.resSkip;
    if (skip !== 0) {
      const at = (this.resPos & this.mask) >> 2;
      words[at] = SKIP_MARKER;
      words[at + 1] = SKIP_CHECK;
      Atomics.add(h, H_WRAP_COUNT, 1);
    }
    const hw = this.resStart >> 2;
    words[hw] = len;
    words[hw + 1] = (len ^ RECORD_CHECK) >>> 0;
    const newPos = (this.resPos + skip + recordBytes(len)) | 0;
    const newSeq = (h[H_WRITE_SEQ]! + 1) | 0; // only the lock holder writes it
    // Commit intent first, so that forceReleaseLocks() can finish a commit whose thread died half-way.
    h[H_P_INTENT_POS] = newPos;
    Atomics.store(h, H_P_INTENT_SEQ, newSeq);
    // Publish: the position store makes the payload and header writes above visible to any consumer that
    // loads the position; the sequence is bumped after, so whoever sees the new sequence sees the record.
    Atomics.store(h, H_WRITE_POS, newPos);
    Atomics.store(h, H_WRITE_SEQ, newSeq);
    this.resActive = false;
    this.unlock(H_P_LOCK);
    if (notify && Atomics.load(h, H_WAITING_CONSUMERS) !== 0) Atomics.notify(h, H_WRITE_SEQ);
  }

  /** Wakes consumers waiting for data (no-op, and no syscall, when none waits). Pairs with commit(len, false). */
  notifyConsumers(): void {
    if (Atomics.load(this.header, H_WAITING_CONSUMERS) !== 0) Atomics.notify(this.header, H_WRITE_SEQ);
  }

  /** Drops the open reservation (nothing is published) and releases the producer lock. */
  abort(): void {
    if (!this.resActive) {
      throw new RingError('ring_no_reservation', 'abort() without an open reservation');
    }
    this.resActive = false;
    this.unlock(H_P_LOCK);
  }

  /** reserve + copy + commit. Returns false when the ring is full (nothing written). */
  tryWrite(payload: Uint8Array): boolean {
    const off = this.reserve(payload.length);
    if (off < 0) return false;
    try {
      this.bytes.set(payload, off);
    } catch (err) {
      this.abort();
      throw err;
    }
    this.commit();
    return true;
  }

  /** Whether reserve(length) would succeed right now (contiguous room included). */
  canReserve(length: number): boolean {
    if (!(length >= 0 && length <= this.maxRecordBytes) || (length | 0) !== length) {
      throw this.lengthError(length);
    }
    return this.hasRoomFor(length, Atomics.load(this.header, H_READ_POS) >>> 0);
  }

  /** True while this instance holds an uncommitted reservation. */
  get hasReservation(): boolean {
    return this.resActive;
  }

  // ---------------------------------------------------------------- consumer side

  /**
   * Visits committed, unconsumed records oldest first without consuming them (under the consumer lock, so
   * they cannot be claimed or overwritten meanwhile). Returns the number of visitor calls (including the one
   * that returned false).
   */
  peek(visitor: RingVisitor, maxRecords = Number.POSITIVE_INFINITY): number {
    this.checkVisitor(visitor, maxRecords);
    if (maxRecords < 1) return 0;
    const h = this.header;
    this.lock(H_C_LOCK);
    let visited = 0;
    try {
      let pos = Atomics.load(h, H_READ_POS) >>> 0;
      const rs = Atomics.load(h, H_READ_SEQ);
      const ws = Atomics.load(h, H_WRITE_SEQ);
      const wp = Atomics.load(h, H_WRITE_POS) >>> 0;
      const avail = (ws - rs) >>> 0;
      const limit = Math.min(avail, maxRecords);
      let seen = 0;
      while (seen < limit) {
        const off = pos & this.mask;
        const len = this.recordAt(off, pos, wp);
        if (len < 0) {
          pos = (pos + this.capacity - off) >>> 0;
          continue;
        }
        visited++;
        if (!visitor(off + RECORD_HEADER_BYTES, len, seen)) break;
        seen++;
        pos = (pos + recordBytes(len)) >>> 0;
      }
    } finally {
      this.unlock(H_C_LOCK);
    }
    return visited;
  }

  /**
   * Batch claim: visits records oldest first; the visitor copies what it needs and returns true to take the
   * record, false to stop (that record stays). Everything taken is consumed in one step at the end (space
   * freed, waiting producers notified). If the visitor throws, the records taken before are consumed, the
   * one it threw on is not, and the error propagates. Returns the number taken.
   */
  claim(visitor: RingVisitor, maxRecords: number): number {
    this.checkVisitor(visitor, maxRecords);
    if (maxRecords < 1) return 0;
    const h = this.header;
    this.lock(H_C_LOCK);
    const rp = Atomics.load(h, H_READ_POS) >>> 0;
    const rs = Atomics.load(h, H_READ_SEQ);
    let pos = rp;
    let taken = 0;
    try {
      // Sequence before position: every record counted by `ws` lies below `wp`.
      const ws = Atomics.load(h, H_WRITE_SEQ);
      const wp = Atomics.load(h, H_WRITE_POS) >>> 0;
      const avail = (ws - rs) >>> 0;
      const limit = Math.min(avail, maxRecords);
      while (taken < limit) {
        const off = pos & this.mask;
        const len = this.recordAt(off, pos, wp);
        if (len < 0) {
          pos = (pos + this.capacity - off) >>> 0;
          continue;
        }
        if (!visitor(off + RECORD_HEADER_BYTES, len, taken)) break;
        taken++;
        pos = (pos + recordBytes(len)) >>> 0;
      }
    } finally {
      if (pos !== rp) {
        const newSeq = (rs + taken) | 0;
        h[H_C_INTENT_POS] = pos | 0;
        Atomics.store(h, H_C_INTENT_SEQ, newSeq);
        Atomics.store(h, H_READ_POS, pos | 0);
        Atomics.store(h, H_READ_SEQ, newSeq);
      }
      this.unlock(H_C_LOCK);
      if (pos !== rp && Atomics.load(h, H_WAITING_PRODUCERS) !== 0) Atomics.notify(h, H_READ_POS);
    }
    return taken;
  }

  // ---------------------------------------------------------------- counters

  /** Committed records not yet consumed. */
  pendingRecords(): number {
    const rs = Atomics.load(this.header, H_READ_SEQ);
    const ws = Atomics.load(this.header, H_WRITE_SEQ);
    return (ws - rs) >>> 0;
  }

  /** Bytes not occupied by unconsumed records (a record needs recordBytes(length) of them, contiguous). */
  freeBytes(): number {
    const rp = Atomics.load(this.header, H_READ_POS);
    const wp = Atomics.load(this.header, H_WRITE_POS);
    const used = (wp - rp) >>> 0;
    return used >= this.capacity ? 0 : this.capacity - used;
  }

  /** Monotonic count of committed records (mod 2^32). Pass it to waitForData(). */
  writeSequence(): number {
    return Atomics.load(this.header, H_WRITE_SEQ) >>> 0;
  }

  /** Monotonic count of consumed records (mod 2^32). */
  readSequence(): number {
    return Atomics.load(this.header, H_READ_SEQ) >>> 0;
  }

  /** How many records were moved to offset 0 because they would have straddled the end of the data area. */
  wrapCount(): number {
    return Atomics.load(this.header, H_WRAP_COUNT) >>> 0;
  }

  // ---------------------------------------------------------------- waiting

  /**
   * Resolves 'ok' when the write sequence differs from `seenWriteSequence` (immediately if it already does),
   * 'timed-out' after `timeoutMs` (0 = just check; Infinity = no limit). Uses Atomics.waitAsync: the event loop
   * keeps running, and the pending wait keeps it alive.
   */
  /**
   * `keepAlive` false skips the timer that otherwise keeps the event loop alive during the wait, for callers
   * whose loop is kept alive anyway (a server socket, a MessagePort) and that wait very often.
   */
  async waitForData(seenWriteSequence: number, timeoutMs: number, keepAlive = true): Promise<RingWaitResult> {
    if (typeof seenWriteSequence !== 'number') {
      throw new RingTypeError(
        'ring_invalid_argument',
        `waitForData(): seenWriteSequence must be a number from writeSequence(), got ${describe(seenWriteSequence)}`,
      );
    }
    const t = normalizeTimeout(timeoutMs);
    const h = this.header;
    const expected = seenWriteSequence | 0;
    if (Atomics.load(h, H_WRITE_SEQ) !== expected) return 'ok';
    if (t === 0) return 'timed-out';
    // Count ourselves as waiting BEFORE the wait re-checks the sequence: a commit that lands in between either
    // changes the value the wait compares (so it returns at once) or sees the count and notifies.
    Atomics.add(h, H_WAITING_CONSUMERS, 1);
    try {
      return await parkAsync(h, H_WRITE_SEQ, expected, t, keepAlive);
    } finally {
      Atomics.sub(h, H_WAITING_CONSUMERS, 1);
    }
  }

  /** Resolves 'ok' when reserve(length) could succeed (immediately if it can now), 'timed-out' after timeoutMs. */
  async waitForSpace(length: number, timeoutMs: number): Promise<RingWaitResult> {
    if (!(length >= 0 && length <= this.maxRecordBytes) || (length | 0) !== length) {
      throw this.lengthError(length);
    }
    const t = normalizeTimeout(timeoutMs);
    const h = this.header;
    const deadline = performance.now() + t;
    for (;;) {
      const rp = Atomics.load(h, H_READ_POS);
      if (this.hasRoomFor(length, rp >>> 0)) return 'ok';
      const remaining = deadline - performance.now();
      if (!(remaining > 0)) return 'timed-out';
      Atomics.add(h, H_WAITING_PRODUCERS, 1);
      let r: RingWaitResult;
      try {
        r = await parkAsync(h, H_READ_POS, rp, remaining);
      } finally {
        Atomics.sub(h, H_WAITING_PRODUCERS, 1);
      }
      if (r === 'timed-out') return this.canReserve(length) ? 'ok' : 'timed-out';
    }
  }

  // ---------------------------------------------------------------- recovery

  /** This instance's lock owner id (default: worker_threads.threadId + 1). */
  get ownerId(): number {
    return this.owner;
  }

  /** Sets the lock owner id of this instance: a small positive integer unique per thread using the ring. */
  setOwnerId(id: number): void {
    if (!validOwnerId(id)) {
      throw new RingRangeError(
        'ring_invalid_argument',
        `owner id must be an integer between 1 and ${MAX_OWNER_ID}, got ${describe(id)}`,
      );
    }
    if (this.resActive) {
      throw new RingError('ring_reservation_pending', 'setOwnerId() while a reservation is open');
    }
    this.owner = id;
  }

  /**
   * Releases the producer and/or consumer lock if `deadOwnerId` holds it (that thread must really be gone).
   * A reservation or claim it had not published disappears; a commit or claim it died in the middle of
   * publishing is completed. Waiters are woken. Returns true if any lock was released.
   */
  forceReleaseLocks(deadOwnerId: number): boolean {
    if (!validOwnerId(deadOwnerId)) {
      throw new RingRangeError(
        'ring_invalid_argument',
        `forceReleaseLocks(): owner id must be an integer between 1 and ${MAX_OWNER_ID}, got ${describe(deadOwnerId)}`,
      );
    }
    if (deadOwnerId === this.owner) {
      throw new RingRangeError(
        'ring_invalid_argument',
        `forceReleaseLocks(${deadOwnerId}): that is this instance's own owner id`,
      );
    }
    const h = this.header;
    let released = false;
    // Take the lock over (dead -> us) so that nobody else can enter while the state is repaired.
    if (Atomics.compareExchange(h, H_P_LOCK, deadOwnerId, this.owner) === deadOwnerId) {
      released = true;
      try {
        const ws = Atomics.load(h, H_WRITE_SEQ);
        const intentSeq = Atomics.load(h, H_P_INTENT_SEQ);
        if (intentSeq !== ws) {
          // It died inside commit(): finish it if the position was published, else forget the intent.
          if (Atomics.load(h, H_WRITE_POS) === h[H_P_INTENT_POS]) Atomics.store(h, H_WRITE_SEQ, intentSeq);
          else Atomics.store(h, H_P_INTENT_SEQ, ws);
        }
      } finally {
        this.unlock(H_P_LOCK);
      }
      Atomics.notify(h, H_WRITE_SEQ);
    }
    if (Atomics.compareExchange(h, H_C_LOCK, deadOwnerId, this.owner) === deadOwnerId) {
      released = true;
      try {
        const rs = Atomics.load(h, H_READ_SEQ);
        const intentSeq = Atomics.load(h, H_C_INTENT_SEQ);
        if (intentSeq !== rs) {
          if (Atomics.load(h, H_READ_POS) === h[H_C_INTENT_POS]) Atomics.store(h, H_READ_SEQ, intentSeq);
          else Atomics.store(h, H_C_INTENT_SEQ, rs);
        }
      } finally {
        this.unlock(H_C_LOCK);
      }
      Atomics.notify(h, H_READ_POS);
    }
    return released;
  }

  // ---------------------------------------------------------------- internals

  /** Room for a record of `length` given read position `rp` (same rule as reserve()). */
  private hasRoomFor(length: number, rp: number): boolean {
    const wp = Atomics.load(this.header, H_WRITE_POS) >>> 0;
    const free = this.capacity - ((wp - rp) >>> 0);
    const need = recordBytes(length);
    const tail = this.capacity - (wp & this.mask);
    return (need > tail ? need + tail : need) <= free;
  }

  /**
   * Reads and checks the record header at data offset `off` (stream position `pos`, write position `wp`).
   * Returns the payload length, or -1 for a skip marker.
   */
  private recordAt(off: number, pos: number, wp: number): number {
    const w = off >> 2;
    const len = this.words[w]!;
    const check = this.words[w + 1]!;
    const ahead = (wp - pos) >>> 0;
    if (len === SKIP_MARKER) {
      if (check !== SKIP_CHECK || off === 0 || this.capacity - off > ahead) this.corrupt(off, len, check);
      return -1;
    }
    if (check !== (len ^ RECORD_CHECK) >>> 0 || len > this.maxRecordBytes) this.corrupt(off, len, check);
    const size = recordBytes(len);
    if (size > this.capacity - off || size > ahead) this.corrupt(off, len, check);
    return len;
  }

  private corrupt(off: number, len: number, check: number): never {
    throw new RingError(
      'ring_corrupt',
      `ring record header at data offset ${off} is corrupt (length 0x${len.toString(16)}, check 0x${check.toString(16)}): the shared memory was written outside the ring protocol`,
    );
  }

  private checkVisitor(visitor: unknown, maxRecords: unknown): void {
    if (typeof visitor !== 'function') {
      throw new RingTypeError(
        'ring_invalid_argument',
        `visitor must be a function, got ${describe(visitor)}`,
      );
    }
    if (typeof maxRecords !== 'number' || !(maxRecords >= 0)) {
      throw new RingRangeError(
        'ring_invalid_argument',
        `maxRecords must be a number >= 0, got ${describe(maxRecords)}`,
      );
    }
  }

  private lengthError(length: unknown): RingRangeError {
    return new RingRangeError(
      'ring_record_too_large',
      `record length must be an integer between 0 and maxRecordBytes (${this.maxRecordBytes} for a ${this.capacity}-byte ring), got ${describe(length)}`,
    );
  }

  /** Takes a lock word: compare-and-swap 0 -> owner; on contention spin briefly, then park on the word. */
  private lock(index: number): void {
    const prev = Atomics.compareExchange(this.header, index, 0, this.owner);
    if (prev !== 0) this.lockContended(index, prev);
  }

  private lockContended(index: number, prev: number): void {
    const h = this.header;
    const id = this.owner;
    if (prev === id) this.reentry(index);
    for (let i = 0; i < LOCK_SPINS; i++) {
      if (Atomics.load(h, index) === 0 && Atomics.compareExchange(h, index, 0, id) === 0) return;
    }
    // Park. The waiter count sits next to the lock word; unlock() notifies only when it is non-zero.
    Atomics.add(h, index + 1, 1);
    try {
      for (;;) {
        const cur = Atomics.compareExchange(h, index, 0, id);
        if (cur === 0) return;
        if (cur === id) this.reentry(index);
        Atomics.wait(h, index, cur, LOCK_PARK_MS);
      }
    } finally {
      Atomics.sub(h, index + 1, 1);
    }
  }

  /** Releases a lock word if (still) held by this owner, waking one parked thread if any. */
  private unlock(index: number): void {
    const h = this.header;
    if (Atomics.compareExchange(h, index, this.owner, 0) !== this.owner) return; // taken over: not ours
    if (Atomics.load(h, index + 1) !== 0) Atomics.notify(h, index, 1);
  }

  private reentry(index: number): never {
    const which = index === H_P_LOCK ? 'producer' : 'consumer';
    throw new RingError(
      'ring_lock_reentry',
      `the ${which} lock is already held by owner ${this.owner} (a reserve/claim/peek nested in another, or two threads sharing an owner id)`,
    );
  }
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'object') return Object.prototype.toString.call(v);
  if (typeof v === 'string') return JSON.stringify(v);
  return String(v);
}
