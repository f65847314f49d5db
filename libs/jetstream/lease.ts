/**
 * A lease is one KV key held by compare-and-set: taken with a create (or a CAS on a revision read), renewed by
 * CAS on the revision of the last write, given back by a delete on that revision. Whoever stops renewing loses
 * it to the bucket's expiry (max_age, or on nats-server 2.11+ the key's own TTL: expiry.ts). The fleet's
 * coordinator lease and the pipeline's partition leases are both this; what they do around it (fencing tokens,
 * assignment, heartbeats) is theirs.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { isWrongRevision } from './buckets';
import { type KvExpiry, keyTtlHeader } from './expiry';

/** Runs one NATS operation (the fleet's fails fast while the connection is down); default: runs it. */
export type NatsCall = <T>(what: string, op: () => Promise<T>) => Promise<T>;

const direct: NatsCall = (_what, op) => op();
const decoder = new TextDecoder();

/** A bucket of leases (and heartbeats): every write goes with the bucket's expiry mechanism. */
export class LeaseBucket {
  private readonly ttlHeader: string;

  constructor(
    readonly kv: KV,
    private readonly js: JetStreamClient,
    readonly bucket: string,
    /** Keys nobody rewrites go within this (the bucket's max_age; in `key` mode also each key's TTL). */
    readonly ttlMs: number,
    /** How a key nobody rewrites leaves the bucket (chosen when the bucket was opened). */
    readonly expiry: KvExpiry,
    readonly call: NatsCall = direct,
  ) {
    this.ttlHeader = keyTtlHeader(ttlMs);
  }

  /**
   * Every write of a lease or heartbeat: `previous` 'absent' (create), a revision (compare-and-set) or none.
   * In per-key TTL mode each carries Nats-TTL (kv.update and kv.put take none: a plain publish then).
   */
  async write(
    key: string,
    value: string,
    previous: number | 'absent' | undefined,
    timeoutMs?: number,
  ): Promise<number> {
    const keyTtl = this.expiry === 'key';
    if (previous === 'absent') return this.kv.create(key, value, keyTtl ? this.ttlHeader : undefined);
    if (!keyTtl) {
      if (previous !== undefined) return this.kv.update(key, value, previous, timeoutMs);
      return this.kv.put(key, value, timeoutMs !== undefined ? { timeout: timeoutMs } : {});
    }
    const ack = await this.js.publish(`$KV.${this.bucket}.${key}`, value, {
      ttl: this.ttlHeader,
      ...(previous !== undefined ? { expect: { lastSubjectSequence: previous } } : {}),
      ...(timeoutMs !== undefined ? { timeout: timeoutMs } : {}),
    });
    return ack.seq;
  }
}

export type RenewResult =
  /** Written: held for another TTL from when the write was sent. */
  | { outcome: 'renewed' }
  /** The revision had moved, yet the key holds our value (an earlier write timed out but landed): still ours. */
  | { outcome: 'kept' }
  /** Someone else wrote the key (it expired and was taken): stop, write nothing more under this lease. */
  | { outcome: 'lost' }
  /** The write (or the recheck after a moved revision) failed: retried on the next renewal. */
  | { outcome: 'failed'; stage: 'write' | 'recheck'; err: unknown };

export class KvLease {
  /** The revision of the write that took the key: names this acquisition (a fencing token). */
  readonly token: number;
  private revisionNow: number;
  private renewedAtMs: number;
  private inFlight: Promise<RenewResult> | undefined;

  private constructor(
    private readonly bucket: LeaseBucket,
    readonly key: string,
    /** The value written at every renewal: how a recheck knows the key is still ours. */
    readonly value: string,
    revision: number,
    sentAt: number,
  ) {
    this.token = revision;
    this.revisionNow = revision;
    this.renewedAtMs = sentAt;
  }

  /**
   * Takes the key: `previous` 'absent' creates it, a revision takes it over by compare-and-set (a key read and
   * found to be one's own). Throws what the write throws: isWrongRevision(err) when someone else was faster.
   */
  static async take(
    bucket: LeaseBucket,
    key: string,
    value: string,
    previous: number | 'absent',
  ): Promise<KvLease> {
    const sentAt = Date.now();
    const revision = await bucket.write(key, value, previous);
    return new KvLease(bucket, key, value, revision, sentAt);
  }

  /** The revision of the last write that landed. */
  get revision(): number {
    return this.revisionNow;
  }

  /** When the last write that landed was sent: the server stamps it later, so expiry is never earlier than this + TTL. */
  get renewedAt(): number {
    return this.renewedAtMs;
  }

  /** Renewed within the TTL, by this process's clock. */
  fresh(now = Date.now()): boolean {
    return now - this.renewedAtMs < this.bucket.ttlMs;
  }

  get renewing(): boolean {
    return this.inFlight !== undefined;
  }

  /** Resolves once no renewal is in flight (a delete must name the revision the last one wrote). */
  async settled(): Promise<void> {
    await this.inFlight;
  }

  /** One renewal; a second call while one is in flight joins it. */
  renew(timeoutMs: number): Promise<RenewResult> {
    if (!this.inFlight)
      this.inFlight = this.renewOnce(timeoutMs).finally(() => {
        this.inFlight = undefined;
      });
    return this.inFlight;
  }

  /** Deletes the key if it is still ours (CAS on our revision); someone else's now is theirs to keep. */
  async release(): Promise<void> {
    await this.bucket.call('lease release', async () => {
      try {
        await this.bucket.kv.delete(this.key, { previousSeq: this.revisionNow });
      } catch (err) {
        if (!isWrongRevision(err)) throw err;
      }
    });
  }

  private async renewOnce(timeoutMs: number): Promise<RenewResult> {
    const sentAt = Date.now();
    try {
      this.revisionNow = await this.bucket.call('lease renew', () =>
        this.bucket.write(this.key, this.value, this.revisionNow, timeoutMs),
      );
      this.renewedAtMs = sentAt;
      return { outcome: 'renewed' };
    } catch (err) {
      if (!isWrongRevision(err)) return { outcome: 'failed', stage: 'write', err };
    }
    // The revision moved: ours (an earlier write timed out yet landed) or someone else's (expired and taken).
    try {
      const entry = await this.bucket.call('lease recheck', () => this.bucket.kv.get(this.key));
      if (entry?.operation === 'PUT' && decoder.decode(entry.value) === this.value) {
        this.revisionNow = entry.revision;
        return { outcome: 'kept' };
      }
    } catch (err) {
      return { outcome: 'failed', stage: 'recheck', err };
    }
    return { outcome: 'lost' };
  }
}
