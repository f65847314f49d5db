/**
 * Answer order across a reload, per WebSocket connection: once a connection has seen an answer of a new
 * model-table epoch it never sees one of an older epoch. An answer of epoch E is held while the same
 * connection still has requests of an epoch before E unanswered — and only then, and only on that
 * connection: other connections (and HTTP, one request at a time per connection) are never delayed.
 *
 * Holding is bounded in time (maxHoldMs from the first held answer) and bytes (maxHoldBytes). When a bound
 * is hit, everything held is delivered at once and the older requests still computing are let go: their
 * answers arrive late, after newer ones. That is the right trade: the older request is starved (a low
 * priority with a long deadline, or a stuck batch), and holding every newer answer of the connection behind
 * it would turn one slow request into a stalled stream and unbounded server memory; a late answer still
 * carries its own version and epoch, so a client can tell.
 *
 * Pure (no I/O, the caller passes the clock). The common case — no reload in progress — touches two
 * numbers and allocates nothing.
 */

/** How long an answer may be held behind older ones on its connection. */
export const EPOCH_HOLD_MAX_MS = 1000;
/** How many bytes of answers a connection may have held (they also count as unsent bytes). */
export const EPOCH_HOLD_MAX_BYTES = 1024 * 1024;

export interface EpochHoldLimits {
  maxHoldMs: number;
  maxHoldBytes: number;
}

export type HoldRelease = 'time' | 'bytes';

interface Held<T> {
  epoch: number;
  item: T;
  bytes: number;
}

export class EpochOrder<T> {
  /**
   * Epochs with requests of this connection, ascending, and how many each has unanswered. An entry whose
   * count drops to 0 stays until the epoch changes, so steady traffic never grows or shrinks the arrays.
   */
  private readonly epochs: number[] = [];
  private readonly counts: number[] = [];
  /** Requests of epochs below this are no longer waited for (a bound was hit while they computed). */
  private waitFloor = -Infinity;
  private held: Array<Held<T>> | undefined;
  private heldSince = 0;
  heldBytes = 0;

  constructor(private readonly limits: EpochHoldLimits) {}

  /** A request of `epoch` was admitted on this connection. */
  admitted(epoch: number): void {
    const last = this.epochs.length - 1;
    if (last >= 0 && this.epochs[last] === epoch) {
      this.counts[last]!++;
      return;
    }
    this.compact();
    let at = this.epochs.length;
    while (at > 0 && this.epochs[at - 1]! > epoch) at--;
    if (at > 0 && this.epochs[at - 1] === epoch) {
      this.counts[at - 1]!++;
      return;
    }
    this.epochs.splice(at, 0, epoch);
    this.counts.splice(at, 0, 1);
  }

  /** Drops epochs with nothing unanswered (only when a new epoch appears: rare). */
  private compact(): void {
    let kept = 0;
    for (let i = 0; i < this.epochs.length; i++) {
      if (this.counts[i] === 0) continue;
      this.epochs[kept] = this.epochs[i]!;
      this.counts[kept] = this.counts[i]!;
      kept++;
    }
    this.epochs.length = kept;
    this.counts.length = kept;
  }

  /**
   * A request of `epoch` is answered. True: deliver its answer now, then call `takeReady` when something is
   * held (newer answers may have been waiting for this one); false: the caller must `hold` it.
   */
  answered(epoch: number): boolean {
    for (let i = this.epochs.length - 1; i >= 0; i--) {
      if (this.epochs[i] === epoch) {
        if (this.counts[i]! > 0) this.counts[i]!--;
        break;
      }
    }
    return !this.olderPending(epoch);
  }

  /** Whether an answer of `epoch` must wait: a request of an earlier (still awaited) epoch is unanswered. */
  olderPending(epoch: number): boolean {
    const oldest = this.epochs[0];
    if (oldest === undefined || oldest >= epoch) return false;
    for (let i = 0; i < this.epochs.length; i++) {
      const e = this.epochs[i]!;
      if (e >= epoch) return false;
      if (e >= this.waitFloor && this.counts[i]! > 0) return true;
    }
    return false;
  }

  /**
   * Keeps an answer until the older ones are out. Returns 'bytes' when this hold passes the byte bound: the
   * caller then delivers `releaseAll('bytes')` right away.
   */
  hold(epoch: number, item: T, bytes: number, now: number): HoldRelease | undefined {
    if (this.held === undefined || this.held.length === 0) {
      this.held = [];
      this.heldSince = now;
    }
    this.held.push({ epoch, item, bytes });
    this.heldBytes += bytes;
    return this.heldBytes > this.limits.maxHoldBytes ? 'bytes' : undefined;
  }

  get heldCount(): number {
    return this.held?.length ?? 0;
  }

  /** When the time bound of what is held runs out (undefined: nothing held). */
  get releaseAt(): number | undefined {
    return this.heldCount > 0 ? this.heldSince + this.limits.maxHoldMs : undefined;
  }

  /** Held answers that may go now (no older request awaited), oldest epoch first; undefined if none. */
  takeReady(): T[] | undefined {
    if (this.held === undefined || this.held.length === 0) return undefined;
    const ready: T[] = [];
    const kept: Array<Held<T>> = [];
    this.held.sort((a, b) => a.epoch - b.epoch);
    for (const entry of this.held) {
      if (this.olderPending(entry.epoch)) kept.push(entry);
      else {
        ready.push(entry.item);
        this.heldBytes -= entry.bytes;
      }
    }
    this.held = kept;
    if (kept.length === 0) this.heldBytes = 0;
    return ready.length > 0 ? ready : undefined;
  }

  /** A bound ran out: everything held goes now, and requests older than it are no longer waited for. */
  releaseAll(): T[] {
    const held = this.held ?? [];
    held.sort((a, b) => a.epoch - b.epoch);
    for (const entry of held) if (entry.epoch > this.waitFloor) this.waitFloor = entry.epoch;
    this.held = undefined;
    this.heldBytes = 0;
    return held.map((entry) => entry.item);
  }

  /** The time bound: everything goes if the first held answer has waited maxHoldMs. */
  expired(now: number): boolean {
    const at = this.releaseAt;
    return at !== undefined && now >= at;
  }

  /** The connection closed: nothing held is sent. */
  clear(): void {
    this.held = undefined;
    this.heldBytes = 0;
  }
}
