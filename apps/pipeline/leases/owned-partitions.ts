/**
 * The partitions one instance holds: each a KvLease (libs/jetstream) plus the fence whoever works it checks.
 * Claims, renewals, losses and releases, and the handler calls each one makes.
 */
import type { Logger } from 'pino';
import { isWrongRevision, KvLease, type LeaseBucket } from '../../../libs/jetstream';
import {
  type LeaseChange,
  type LeaseHandlers,
  type LeaseValue,
  leaseKey,
  type ReleaseReason,
} from './lease-types';

type LeaseState = 'acquiring' | 'held' | 'releasing';

interface Lease {
  partition: number;
  state: LeaseState;
  /** The key held; its token (the claim's revision) is this acquisition's fencing token. */
  kv: KvLease;
  /** Fenced or expired: no more renewals, and no delete of a key that is no longer ours. */
  lost: boolean;
}

/** What the table needs of PartitionLeases. */
export interface OwnedPartitionsContext {
  bucket: LeaseBucket;
  group: string;
  instanceId: string;
  logger: Logger;
  /** Between renewals, and a renewal's timeout. */
  renewEveryMs: number;
  mayRenew(): boolean;
  /** PartitionLeases.stop() has begun: a drop from now on is a 'stop'. */
  stopping(): boolean;
  handlers(): LeaseHandlers | null;
  onValidity: ((partition: number, validUntil: number, token: number) => void) | undefined;
  changed(change: LeaseChange): void;
  /** A lease was lost: a pass may take another partition. */
  reassign(): void;
}

export class OwnedPartitions {
  private readonly leases = new Map<number, Lease>();

  constructor(private readonly ctx: OwnedPartitionsContext) {}

  owned(): number[] {
    return [...this.leases.keys()].sort((a, b) => a - b);
  }

  has(partition: number): boolean {
    return this.leases.has(partition);
  }

  /** Owned under the acquisition `token` names and renewed within the TTL. */
  holds(partition: number, token: number): boolean {
    const lease = this.leases.get(partition);
    return lease !== undefined && lease.kv.token === token && !lease.lost && lease.kv.fresh();
  }

  renewedAt(partition: number): number | null {
    return this.leases.get(partition)?.kv.renewedAt ?? null;
  }

  /** Those neither being given back nor lost. */
  keeping(): Lease[] {
    return [...this.leases.values()].filter((l) => l.state !== 'releasing' && !l.lost);
  }

  /** A renewal tick: a lease not renewed within its TTL is lost, the others are renewed. */
  tick(): void {
    for (const lease of [...this.leases.values()]) {
      if (!lease.lost && !lease.kv.fresh()) {
        this.ctx.logger.warn(
          { partition: lease.partition, instance: this.ctx.instanceId },
          'lease not renewed within its ttl: treated as lost',
        );
        this.markLost(lease);
      } else void this.renew(lease);
    }
  }

  /** Renewals only (while stop() drains the handlers). */
  renewAll(): void {
    for (const lease of this.leases.values()) void this.renew(lease);
  }

  /** stop(): every partition released ('stop', or 'lost' for one already fenced) and its key deleted. */
  async releaseAll(handlers: LeaseHandlers): Promise<void> {
    const leases = [...this.leases.values()];
    // A fence seen from now on only flags the lease: its one release is the one below.
    for (const lease of leases) lease.state = 'releasing';
    await Promise.all(
      leases.map(async (lease) => {
        await this.callRelease(handlers, lease, lease.lost ? 'lost' : 'stop');
        await this.dropLease(lease);
      }),
    );
  }

  /** Gives back one partition for a rebalance. */
  async releaseExtra(handlers: LeaseHandlers, lease: Lease): Promise<void> {
    if (lease.state !== 'held') return;
    lease.state = 'releasing';
    await this.callRelease(handlers, lease, lease.lost ? 'lost' : 'rebalance');
    await this.dropLease(lease);
    this.ctx.logger.info({ partition: lease.partition }, 'partition released for rebalance');
  }

  /** Takes a partition (a create; with ownPrevious a CAS on a lease our previous life holds) and starts it. */
  async claim(handlers: LeaseHandlers, partition: number, ownPrevious = false): Promise<void> {
    // A pass begun before a stall must not take partitions nobody will work.
    if (!this.ctx.mayRenew()) return;
    const { bucket, instanceId, logger } = this.ctx;
    const key = leaseKey(this.ctx.group, partition);
    const value: LeaseValue = { instance: instanceId, acquiredAt: new Date().toISOString() };
    const text = JSON.stringify(value);
    let kv: KvLease;
    try {
      if (ownPrevious) {
        // Only a lease our previous life holds: compare-and-set on the revision we read.
        const entry = await bucket.kv.get(key);
        if (entry?.operation !== 'PUT') return;
        const holder = (JSON.parse(new TextDecoder().decode(entry.value)) as Partial<LeaseValue>).instance;
        if (holder !== instanceId) return;
        kv = await KvLease.take(bucket, key, text, entry.revision);
        logger.info({ partition }, 'took back the lease of a previous life of this instance');
      } else kv = await KvLease.take(bucket, key, text, 'absent');
    } catch (err) {
      // Someone else was faster: the usual race between joiners, not an error.
      if (!isWrongRevision(err)) this.warn(`create of partition ${partition}`, err);
      return;
    }
    const lease: Lease = { partition, state: 'acquiring', kv, lost: false };
    this.leases.set(partition, lease);
    this.fence(lease);
    logger.info({ partition, instance: instanceId }, 'partition lease acquired');
    try {
      await handlers.acquire(partition, kv.token);
    } catch (err) {
      logger.error({ err, partition }, 'partition acquire handler failed: lease given back');
      await this.dropLease(lease);
      return;
    }
    if (lease.lost) {
      // Fenced while the acquire handler ran: undo it.
      this.leases.delete(partition);
      await this.callRelease(handlers, lease, 'lost');
      this.ctx.changed({ kind: 'released', partition, reason: 'lost', owned: this.owned() });
      return;
    }
    lease.state = 'held';
    this.ctx.changed({ kind: 'acquired', partition, owned: this.owned() });
  }

  private async renew(lease: Lease): Promise<void> {
    if (lease.kv.renewing || lease.lost || !this.ctx.mayRenew()) return;
    const result = await lease.kv.renew(this.ctx.renewEveryMs);
    const partition = lease.partition;
    if (result.outcome === 'renewed') {
      if (!lease.lost) this.fence(lease);
    } else if (result.outcome === 'failed') {
      const why = result.stage === 'write' ? 'lease renewal failed, retrying' : 'lease recheck failed';
      this.ctx.logger.debug({ err: result.err, partition }, why);
    } else if (result.outcome === 'lost') {
      this.ctx.logger.warn(
        { partition, instance: this.ctx.instanceId },
        'lease taken over by another writer',
      );
      this.markLost(lease);
    }
  }

  private markLost(lease: Lease): void {
    if (lease.lost || this.leases.get(lease.partition) !== lease) return;
    lease.lost = true;
    this.fence(lease);
    // An acquire or a rebalance release in progress finishes the job itself (see claim / releaseExtra).
    if (lease.state !== 'held') return;
    this.leases.delete(lease.partition);
    const handlers = this.ctx.handlers();
    if (handlers) void this.callRelease(handlers, lease, 'lost');
    this.ctx.changed({ kind: 'released', partition: lease.partition, reason: 'lost', owned: this.owned() });
    this.ctx.reassign();
  }

  private async callRelease(handlers: LeaseHandlers, lease: Lease, reason: ReleaseReason): Promise<void> {
    const partition = lease.partition;
    try {
      await handlers.release(partition, reason, lease.kv.token);
    } catch (err) {
      this.ctx.logger.error({ err, partition, reason }, 'partition release handler failed');
    }
  }

  /** Forgets a lease and deletes its key unless someone else wrote it since (CAS on our revision). */
  private async dropLease(lease: Lease): Promise<void> {
    if (this.leases.get(lease.partition) !== lease) return;
    this.leases.delete(lease.partition);
    const wasLost = lease.lost;
    lease.lost = true; // no renewal from now on
    this.fence(lease);
    // Wait for a renewal in flight, or the delete's revision is stale.
    await lease.kv.settled();
    if (!wasLost)
      await lease.kv
        .release()
        .catch((err: unknown) => this.warn(`delete of partition ${lease.partition}`, err));
    // A lease whose acquire never completed was never announced.
    if (lease.state !== 'acquiring')
      this.ctx.changed({
        kind: 'released',
        partition: lease.partition,
        reason: wasLost ? 'lost' : this.ctx.stopping() ? 'stop' : 'rebalance',
        owned: this.owned(),
      });
  }

  /** Publishes the fence of holds() for a lease that changed (renewed, lost, dropped). */
  private fence(lease: Lease): void {
    this.ctx.onValidity?.(
      lease.partition,
      lease.lost ? 0 : lease.kv.renewedAt + this.ctx.bucket.ttlMs,
      lease.kv.token,
    );
  }

  private warn(what: string, err: unknown): void {
    this.ctx.logger.warn({ err, instance: this.ctx.instanceId }, `lease ${what} failed`);
  }
}
