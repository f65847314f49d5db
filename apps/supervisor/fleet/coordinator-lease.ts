/**
 * One coordinator at a time per fleet: KV `streaminfer_fleet_<F>_lease`, key `coordinator`, taken with
 * kv.create, renewed by CAS every TTL/3, released by a delete on our revision. The bucket's max_age is the
 * TTL, so a coordinator that dies leaves the lease to expire.
 */
import { requirePositiveInt } from '../../../libs/config';
import { isWrongRevision, KvLease, LeaseBucket } from '../../../libs/jetstream';
import type { FleetConnection } from './connection';
import { FleetError, invalidOptions } from './errors';
import { openBucket } from './kv-bucket';
import { decodeJson, LEASE_KEY, requireHostId } from './records';

export const DEFAULT_LEASE_TTL_MS = 15_000;

/** The lease's value: who coordinates which reload, since when. */
export interface LeaseHolder {
  host: string;
  reloadId: string;
  since: string;
}

export type LeaseAcquire = { held: true } | { held: false; holder: LeaseHolder };

export interface CoordinatorLeaseOptions {
  /** Lease TTL (the bucket's max_age), >= 1000 ms. */
  ttlMs?: number;
  /** The lease was taken over or not renewed within its TTL: stop coordinating, write nothing more. */
  onLost?: (holder: LeaseHolder, why: string) => void;
  /** A renewal that failed and will be retried. */
  onError?: (err: unknown) => void;
}

function parseHolder(bytes: Uint8Array): LeaseHolder {
  const value = decodeJson('coordinator lease', bytes) as Partial<LeaseHolder> | null;
  if (
    typeof value?.host !== 'string' ||
    typeof value.reloadId !== 'string' ||
    typeof value.since !== 'string'
  )
    throw new FleetError('invalid_record', 'coordinator lease: expected {host, reloadId, since}');
  return { host: value.host, reloadId: value.reloadId, since: value.since };
}

interface Held {
  holder: LeaseHolder;
  lease: KvLease;
}

export class CoordinatorLease {
  readonly ttlMs: number;
  private held: Held | undefined;
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly conn: FleetConnection,
    private readonly bucket: LeaseBucket,
    private readonly options: CoordinatorLeaseOptions,
  ) {
    this.ttlMs = bucket.ttlMs;
  }

  static async open(conn: FleetConnection, options: CoordinatorLeaseOptions = {}): Promise<CoordinatorLease> {
    const ttlMs = requirePositiveInt(
      'lease ttlMs',
      options.ttlMs ?? DEFAULT_LEASE_TTL_MS,
      1000,
      invalidOptions,
    );
    const kv = await openBucket(conn, conn.names.leaseBucket, { history: 1, ttlMs });
    // The bucket's max_age is the lease's TTL (no per-key TTL: one key, written by hosts of any version).
    const bucket = new LeaseBucket(kv, conn.js, conn.names.leaseBucket, ttlMs, 'bucket', (what, op) =>
      conn.call(what, op),
    );
    return new CoordinatorLease(conn, bucket, options);
  }

  /** Held by this instance and renewed within the TTL. */
  get holds(): boolean {
    return this.held?.lease.fresh() ?? false;
  }

  /** Takes the lease if nobody holds it; held by another → their value. Renews until release() or loss. */
  acquire(who: { host: string; reloadId: string }): Promise<LeaseAcquire> {
    if (this.held) return Promise.reject(new FleetError('conflict', 'this host holds the lease already'));
    const holder: LeaseHolder = {
      host: requireHostId(who.host),
      reloadId: who.reloadId,
      since: new Date().toISOString(),
    };
    const text = JSON.stringify(holder);
    return this.conn.call('lease acquire', async () => {
      // Twice: the holder read after a lost create may have expired or been released in between.
      for (let attempt = 0; attempt < 2; attempt++) {
        try {
          const lease = await KvLease.take(this.bucket, LEASE_KEY, text, 'absent');
          this.held = { holder, lease };
          this.timer = setInterval(() => this.tick(), Math.max(1, Math.floor(this.ttlMs / 3)));
          this.timer.unref();
          return { held: true };
        } catch (err) {
          if (!isWrongRevision(err)) throw err;
        }
        const other = await this.read();
        if (other) return { held: false, holder: other };
      }
      throw new FleetError('conflict', 'the coordinator lease changed hands twice while taking it');
    });
  }

  /** Who holds the lease now (anyone, this host included), or undefined. */
  current(): Promise<LeaseHolder | undefined> {
    return this.conn.call('lease read', () => this.read());
  }

  /** Stops renewing and deletes the lease if it is still ours (CAS on our revision). */
  async release(): Promise<void> {
    const held = this.held;
    if (!held) return;
    this.stopRenewing();
    await held.lease.settled();
    await held.lease.release();
  }

  private async read(): Promise<LeaseHolder | undefined> {
    const entry = await this.bucket.kv.get(LEASE_KEY);
    // The server's max_age decides expiry, not this host's clock: until the server drops it, it is held
    // (kv.create would fail on it anyway).
    if (entry?.operation !== 'PUT') return undefined;
    return parseHolder(entry.value);
  }

  private stopRenewing(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.held = undefined;
  }

  private lost(held: Held, why: string): void {
    if (this.held !== held) return;
    this.stopRenewing();
    this.options.onLost?.(held.holder, why);
  }

  private tick(): void {
    const held = this.held;
    if (!held || held.lease.renewing) return;
    if (!held.lease.fresh()) {
      this.lost(held, `not renewed within its ttl of ${this.ttlMs} ms`);
      return;
    }
    void this.renew(held);
  }

  private async renew(held: Held): Promise<void> {
    const result = await held.lease.renew(Math.floor(this.ttlMs / 3));
    if (result.outcome === 'failed') this.options.onError?.(result.err);
    else if (result.outcome === 'lost') this.lost(held, 'the lease was taken by another writer');
  }
}
