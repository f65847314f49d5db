/**
 * The engine's dedupe: every processed event id until its forget time, in buckets of DEDUPE_BUCKET_MS so ids
 * share one timer per bucket, and the buckets packed for a snapshot (an unchanged bucket is not packed again).
 */
import { packStrings } from './pack';

const DEDUPE_OVERHEAD_BYTES = 48;
/** Forget times are rounded up to this, so ids share one timer per bucket instead of one each. */
export const DEDUPE_BUCKET_MS = 1000;

export class DedupeIds {
  /** Processed event id → event time at which it is forgotten. */
  private readonly seen = new Map<string, number>();
  /** Forget time (a multiple of DEDUPE_BUCKET_MS) → the ids forgotten then. */
  private readonly forgetBuckets = new Map<number, string[]>();
  /** Dedupe buckets as last packed, with the bucket's length then: unchanged buckets are not packed again. */
  private readonly packedBuckets = new Map<number, { length: number; packed: string }>();
  /** Approximate bytes the ids hold. */
  bytes = 0;

  has(eventId: string): boolean {
    return this.seen.has(eventId);
  }

  get size(): number {
    return this.seen.size;
  }

  /** Remembers `eventId` until `forgetAt`; true when that opened a new bucket (the caller sets its timer). */
  remember(eventId: string, forgetAt: number): boolean {
    this.seen.set(eventId, forgetAt);
    this.bytes += DEDUPE_OVERHEAD_BYTES + 2 * eventId.length;
    const bucket = this.forgetBuckets.get(forgetAt);
    if (bucket !== undefined) {
      bucket.push(eventId);
      return false;
    }
    this.forgetBuckets.set(forgetAt, [eventId]);
    return true;
  }

  /** The ids of the bucket forgotten at `at`. */
  forget(at: number): void {
    const bucket = this.forgetBuckets.get(at);
    if (bucket === undefined) return;
    this.forgetBuckets.delete(at);
    this.packedBuckets.delete(at);
    for (const eventId of bucket) {
      if (this.seen.delete(eventId)) this.bytes -= DEDUPE_OVERHEAD_BYTES + 2 * eventId.length;
    }
  }

  /**
   * The dedupe buckets by forget time. Ids only join the newest buckets, so a bucket whose length has not
   * changed is the one packed last time. Sorted in place: the order within a bucket means nothing, sorted ids
   * front-code well, and the next sort finds them (nearly) sorted.
   */
  pack(): [number, string][] {
    const out: [number, string][] = [];
    for (const at of [...this.forgetBuckets.keys()].sort((a, b) => a - b)) {
      const ids = this.forgetBuckets.get(at)!;
      let cached = this.packedBuckets.get(at);
      if (cached === undefined || cached.length !== ids.length) {
        cached = { length: ids.length, packed: packStrings(ids.sort()) };
        this.packedBuckets.set(at, cached);
      }
      out.push([at, cached.packed]);
    }
    return out;
  }
}
