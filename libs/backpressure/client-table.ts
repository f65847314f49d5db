import type { ClientState } from './client-state';
import { BackpressureError } from './errors';

/** Idle entries a get() that creates an entry may evict on the way (keeps every call O(1) amortized). */
const SWEEP_PER_INSERT = 8;

class Entry<K> {
  prev: Entry<K> | null = null;
  next: Entry<K> | null = null;

  constructor(
    readonly key: K,
    readonly state: ClientState,
    public seenAt: number,
  ) {}
}

/**
 * Bounded table of client states keyed by e.g. HTTP client address. Pure: time is the `now` passed in.
 *
 * Entries are kept in least-recently-seen order (an intrusive doubly linked list, so refreshing one moves
 * pointers and allocates nothing). Rules:
 * - An entry with requests in flight (`state.inflight > 0`) is never evicted; when an eviction scan meets one
 *   it counts as seen now (a client with work in flight is not idle) and goes to the recent end.
 * - Idle expiry: an entry not seen for `idleMs` (now − seenAt >= idleMs) and with nothing in flight is
 *   evicted by sweep(), and by get() when it creates an entry (at most SWEEP_PER_INSERT per call).
 * - Capacity: creating an entry while `size >= maxEntries` first evicts the least recently seen entries with
 *   nothing in flight until there is room. If every entry has requests in flight the table grows past
 *   maxEntries (it cannot forget them) and shrinks back on later insertions; so
 *   size <= max(maxEntries, clients with requests in flight + 1), and the number of clients with requests
 *   in flight is itself bounded by the model queue bounds.
 * An evicted state is simply dropped (a client that comes back starts with a full bucket); choose
 * idleMs >= 1000 × (1 + modelErrorPenalty) × rateLimitBurst / rateLimitRps so that expiry never forgives a
 * client rate-limit debt (model error penalties included).
 */
export class ClientTable<K> {
  readonly maxEntries: number;
  readonly idleMs: number;
  private readonly create: (now: number) => ClientState;
  private readonly entries = new Map<K, Entry<K>>();
  /** Least recently seen. */
  private head: Entry<K> | null = null;
  /** Most recently seen. */
  private tail: Entry<K> | null = null;

  constructor(maxEntries: number, idleMs: number, create: (now: number) => ClientState) {
    if (typeof maxEntries !== 'number' || !Number.isSafeInteger(maxEntries) || maxEntries < 1) {
      throw new BackpressureError(
        'maxEntries',
        `invalid ClientTable option maxEntries: expected an integer >= 1, got ${String(maxEntries)}`,
      );
    }
    if (typeof idleMs !== 'number' || Number.isNaN(idleMs) || idleMs < 0) {
      throw new BackpressureError(
        'idleMs',
        `invalid ClientTable option idleMs: expected a number >= 0 (Infinity = never), got ${String(idleMs)}`,
      );
    }
    if (typeof create !== 'function') {
      throw new BackpressureError('create', 'invalid ClientTable option create: expected a function');
    }
    this.maxEntries = maxEntries;
    this.idleMs = idleMs;
    this.create = create;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Every client state held (e.g. to apply new limits to all of them). */
  forEachState(visit: (state: ClientState) => void): void {
    for (const entry of this.entries.values()) visit(entry.state);
  }

  has(key: K): boolean {
    return this.entries.has(key);
  }

  /** The state of `key`, created when absent; marks it seen at `now`. */
  get(key: K, now: number): ClientState {
    const found = this.entries.get(key);
    if (found !== undefined) {
      found.seenAt = now;
      this.moveToTail(found);
      return found.state;
    }
    this.sweep(now, SWEEP_PER_INSERT);
    while (this.entries.size >= this.maxEntries && this.evictLeastRecentIdle(now)) {
      // evicted one
    }
    const entry = new Entry(key, this.create(now), now);
    this.append(entry);
    this.entries.set(key, entry);
    return entry.state;
  }

  /**
   * Evicts idle entries (not seen for idleMs, nothing in flight) from the least recent end, visiting at most
   * `limit` entries. Returns how many were evicted. Call it from a periodic timer to free memory early.
   */
  sweep(now: number, limit = Number.POSITIVE_INFINITY): number {
    let evicted = 0;
    let steps = Math.min(limit, this.entries.size);
    while (steps-- > 0) {
      const entry = this.head;
      if (entry === null || now - entry.seenAt < this.idleMs) break;
      if (entry.state.inflight > 0) {
        entry.seenAt = now;
        this.moveToTail(entry);
      } else {
        this.remove(entry);
        evicted++;
      }
    }
    return evicted;
  }

  /** Evicts the least recently seen entry with nothing in flight; false when every entry has work in flight. */
  private evictLeastRecentIdle(now: number): boolean {
    let steps = this.entries.size;
    while (steps-- > 0) {
      const entry = this.head;
      if (entry === null) return false;
      if (entry.state.inflight === 0) {
        this.remove(entry);
        return true;
      }
      entry.seenAt = now;
      this.moveToTail(entry);
    }
    return false;
  }

  private remove(entry: Entry<K>): void {
    this.unlink(entry);
    this.entries.delete(entry.key);
  }

  private moveToTail(entry: Entry<K>): void {
    if (this.tail === entry) return;
    this.unlink(entry);
    this.append(entry);
  }

  private append(entry: Entry<K>): void {
    entry.prev = this.tail;
    entry.next = null;
    if (this.tail === null) this.head = entry;
    else this.tail.next = entry;
    this.tail = entry;
  }

  private unlink(entry: Entry<K>): void {
    if (entry.prev === null) this.head = entry.next;
    else entry.prev.next = entry.next;
    if (entry.next === null) this.tail = entry.prev;
    else entry.next.prev = entry.prev;
    entry.prev = null;
    entry.next = null;
  }
}
