/**
 * Partition ownership through leases in a NATS KV bucket, so several `stream` instances share P partitions.
 * A lease is the key `<group>.p.<k>`, created only when absent (kv.create) and renewed by compare-and-set.
 * A lease whose owner stopped renewing goes by the bucket's TTL (max_age: nats 2.9 has no per-message TTL,
 * the others find out on their next pass) or, on nats 2.11+, by its own per-key TTL with a limit marker the
 * others' watch receives (libs/kv-expiry). Every instance writes a heartbeat `<group>.i.<id>`; the live
 * heartbeats decide each one's balanced share.
 */
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { type KV, Kvm, type KvWatchEntry } from '@nats-io/kv';
import type { Logger } from 'pino';
import {
  bucketLimits,
  chooseExpiry,
  type KvExpiry,
  type KvExpiryWanted,
  keyTtlHeader,
  type ServerFacts,
} from '../../../libs/kv-expiry';
import { describeReplicasRefusal, replicasShortfall } from '../../../libs/nats-auth';
import type { NatsHandle } from '../connection';
import { requireName, requirePositiveInt, StreamIoError } from '../errors';
import { fnv1a32 } from '../io/layout';

export interface LeaseOptions {
  nats: NatsHandle;
  /** KV bucket, created when missing with ttl = ttlMs and history 1. */
  bucket: string;
  /** Key namespace (e.g. the consumer durable name): keys `<group>.p.<k>` and `<group>.i.<instanceId>`. */
  group: string;
  /** [A-Za-z0-9_-]: it is a key token. */
  instanceId: string;
  partitions: number;
  /** Lease TTL (>= 1000 ms); leases and the heartbeat are rewritten every ttlMs/3. */
  ttlMs: number;
  /**
   * The id is this process's alone (a supervisor restarting its child keeps it, and never runs two): leases a
   * previous life left under it are taken back at once instead of after their TTL.
   */
  reclaim?: boolean;
  logger: Logger;
  /**
   * False while whoever works the partitions is stalled (LeaseKeeper: the main thread's heartbeat is too old):
   * no renewal, heartbeat or claim then, so the leases lapse and go to live instances.
   */
  mayRenew?: () => boolean;
  /**
   * Each change of a partition's fence: until when holds() is true (ms since epoch), 0 once lost or released,
   * and the token of the acquisition it is valid for.
   */
  onValidity?: (partition: number, validUntil: number, token: number) => void;
  /**
   * 'auto' (default): per-key TTLs and limit markers where the server (2.11+) and the bucket have them, the
   * bucket-wide TTL otherwise; 'bucket': the bucket-wide TTL only (the benchmark compares the two).
   */
  expiry?: KvExpiryWanted;
}

export type ReleaseReason = 'rebalance' | 'lost' | 'stop';

/**
 * `token` names one acquisition of the partition (the fencing token: its claim's KV revision, unique per
 * claim). Whoever works the partition fences on holds(partition, token) with the token it was started under:
 * after a loss and a new claim of the same partition, a loop of the old acquisition no longer passes.
 */
export interface LeaseHandlers {
  /** Start working the partition (may take seconds: restoring a checkpoint); renewals go on meanwhile. */
  acquire(partition: number, token: number): Promise<void>;
  /** Stop working it; 'lost' means another instance may own it already: stop at once, write nothing. */
  release(partition: number, reason: ReleaseReason, token: number): Promise<void>;
}

export type LeaseChange =
  | { kind: 'acquired'; partition: number; owned: number[] }
  | { kind: 'released'; partition: number; reason: ReleaseReason; owned: number[] };

/** The lease key's value. */
export interface LeaseValue {
  instance: string;
  acquiredAt: string;
}

export interface HeartbeatValue {
  id: string;
  at: string;
  owned: number[];
}

// ---- Pure part: who should own how many, and in which order an instance tries partitions. ----

/**
 * Balanced share of `self`: live ids sorted, rank r gets floor(P/N) + (r < P mod N ? 1 : 0). Every instance
 * computes the same split from the same live set, and the shares sum to P. `self` counts as live even when
 * its own heartbeat is not visible yet.
 */
export function balancedTarget(partitions: number, live: readonly string[], self: string): number {
  const ids = [...new Set([...live, self])].sort();
  const rank = ids.indexOf(self);
  const n = ids.length;
  return Math.floor(partitions / n) + (rank < partitions % n ? 1 : 0);
}

/** 32-bit FNV-1a with a murmur3 finaliser: cheap, stable across processes, well mixed for short keys. */
export function hash32(text: string): number {
  let h = fnv1a32(text);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * Rendezvous (highest random weight) order of partitions for one instance: instances prefer different
 * partitions, so simultaneous joiners rarely race for the same key, and the order of one instance never
 * depends on who else is live.
 */
export function preferenceOrder(instanceId: string, partitions: number): number[] {
  const scored = Array.from({ length: partitions }, (_, p) => ({ p, w: hash32(`${instanceId}/${p}`) }));
  scored.sort((a, b) => b.w - a.w || a.p - b.p);
  return scored.map((s) => s.p);
}

// ---- The KV-backed leases. ----

/** The options' checks, before any I/O (LeaseKeeper runs them before it starts its thread). */
export function checkLeaseOptions(options: Omit<LeaseOptions, 'nats' | 'logger'>): void {
  requireName('bucket', options.bucket);
  requireName('instanceId', options.instanceId);
  if (typeof options.group !== 'string' || !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(options.group))
    throw new StreamIoError(
      'invalid_options',
      `group must be dot-separated tokens of [A-Za-z0-9_-] (got ${options.group})`,
    );
  requirePositiveInt('partitions', options.partitions);
  requirePositiveInt('ttlMs', options.ttlMs, 1000);
}

type LeaseState = 'acquiring' | 'held' | 'releasing';

interface Lease {
  partition: number;
  state: LeaseState;
  revision: number;
  /** The claim's revision: this acquisition's fencing token (renewals move `revision`, never this). */
  token: number;
  value: string;
  /** When the last successful write was sent: the server stamps it later, so expiry is never earlier than this + ttl. */
  renewedAt: number;
  renewing: boolean;
  /** Fenced or expired: no more renewals, and no delete of a key that is no longer ours. */
  lost: boolean;
}

const decoder = new TextDecoder();

function isWrongRevision(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence ||
      err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/** Debounce before an assignment pass, so a burst of watch events (a graceful stop deletes several keys) is one pass. */
const ASSIGN_DEBOUNCE_MS = 50;

/**
 * Per-key TTL mode with the watch running: expiries, joins and leaves arrive on the watch, so a pass on every
 * renewal tick would only poll; one pass every this many ticks (once per TTL) is the backstop.
 */
const KEY_MODE_PASS_EVERY_TICKS = 3;

/** What the connected server says of itself; a refused $JS.API.INFO leaves the version to decide. */
export async function serverFacts(nats: NatsHandle): Promise<ServerFacts> {
  const version = nats.nc.info?.version;
  const level = await nats.jsm
    .getAccountInfo()
    .then((info) => info.api.level)
    .catch(() => undefined);
  return {
    ...(version !== undefined ? { version } : {}),
    ...(level !== undefined ? { apiLevel: level } : {}),
  };
}

export class PartitionLeases {
  /** Called on every ownership change (e.g. to update a partitions-owned gauge); must not throw. */
  onChange?: (change: LeaseChange) => void;
  /** Called when a pass sees another set of live instances. */
  onLive?: (live: string[]) => void;

  private readonly leases = new Map<number, Lease>();
  private readonly preference: number[];
  private readonly renewEveryMs: number;
  private live: string[] = [];
  private handlers: LeaseHandlers | null = null;
  private timer: NodeJS.Timeout | null = null;
  private debounce: NodeJS.Timeout | null = null;
  private assigning: Promise<void> | null = null;
  private assignAgain = false;
  private heartbeating = false;
  private watcher: { stop(): void } | null = null;
  /** The watch is delivering (in per-key TTL mode it stands in for most passes). */
  private watching = false;
  private ticks = 0;
  private readonly ttlHeader: string;
  private stopped = false;
  /** reclaim: the first pass looked for leases left under this id. */
  private reclaimed = false;

  private constructor(
    private readonly kv: KV,
    private readonly options: LeaseOptions,
    /** How a lease or heartbeat nobody rewrites leaves the bucket (chosen at open, logged). */
    readonly expiry: KvExpiry,
  ) {
    this.preference = preferenceOrder(options.instanceId, options.partitions);
    this.renewEveryMs = Math.max(1, Math.floor(options.ttlMs / 3));
    this.ttlHeader = keyTtlHeader(options.ttlMs);
  }

  static async open(options: LeaseOptions): Promise<PartitionLeases> {
    checkLeaseOptions(options);
    let kv: KV;
    let expiry: KvExpiry;
    try {
      const replicas = options.nats.replicas;
      const wanted = options.expiry ?? 'auto';
      const server = await serverFacts(options.nats);
      // history 1 matters for per-key TTLs too: no older revision can come back when the newest expires.
      kv = await new Kvm(options.nats.js).create(options.bucket, {
        ...bucketLimits(wanted, server, options.ttlMs),
        history: 1,
        replicas,
      });
      // An existing bucket keeps its own TTL: leases would then expire on its clock, not ours.
      const status = await kv.status();
      const short = replicasShortfall(
        status.replicas,
        replicas,
        `lease bucket ${options.bucket}`,
        `KV_${options.bucket}`,
      );
      if (short) throw new StreamIoError('stream_mismatch', short);
      const ttl = status.ttl;
      if (ttl !== options.ttlMs)
        throw new StreamIoError(
          'stream_mismatch',
          `lease bucket ${options.bucket} has ttl ${ttl} ms, expected ${options.ttlMs} ms`,
        );
      // A bucket keeps the mechanism it was created with; the log says which one runs, and why.
      const choice = chooseExpiry(
        wanted,
        server,
        { markerTtlMs: status.markerTTL },
        `lease bucket ${options.bucket}`,
      );
      expiry = choice.expiry;
      const line = { bucket: options.bucket, expiry, instance: options.instanceId };
      if (choice.warn) options.logger.warn(line, choice.why);
      else options.logger.info(line, choice.why);
    } catch (err) {
      if (err instanceof StreamIoError) throw err;
      const refused = describeReplicasRefusal(err, options.nats.replicas, `lease bucket ${options.bucket}`);
      if (refused) throw new StreamIoError('invalid_options', refused, { cause: err });
      throw new StreamIoError('stream_provision_failed', `lease bucket ${options.bucket}: ${String(err)}`, {
        cause: err,
      });
    }
    return new PartitionLeases(kv, options, expiry);
  }

  /** Starts heartbeats, renewals and assignment (first pass right away). */
  start(handlers: LeaseHandlers): void {
    if (this.handlers) throw new StreamIoError('invalid_options', 'PartitionLeases already started');
    if (this.stopped) throw new StreamIoError('invalid_options', 'PartitionLeases was stopped');
    this.handlers = handlers;
    this.timer = setInterval(() => this.tick(), this.renewEveryMs);
    void this.watch();
    void this.heartbeat().finally(() => this.scheduleAssign(0));
  }

  owned(): number[] {
    return [...this.leases.keys()].sort((a, b) => a - b);
  }

  /**
   * Owned under the acquisition `token` names and renewed within the TTL: the fence to check before writing
   * anything for the partition.
   */
  holds(partition: number, token: number): boolean {
    const lease = this.leases.get(partition);
    return (
      lease !== undefined &&
      lease.token === token &&
      !lease.lost &&
      Date.now() - lease.renewedAt < this.options.ttlMs
    );
  }

  liveInstances(): string[] {
    return [...this.live];
  }

  /** The instances heartbeating now, read from the bucket (before start(): who else is already running). */
  async peers(): Promise<string[]> {
    const prefix = `${this.options.group}.i.`;
    const keys = await this.listKeys(`${prefix}*`);
    return keys.map((k) => k.slice(prefix.length)).sort();
  }

  /** Graceful: releases every partition, deletes its leases (survivors take them at once) and the heartbeat. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.clearTimers();
    const handlers = this.handlers;
    if (!handlers) return; // never started: nothing written
    // Renewals go on while a pass in progress finishes and while the handlers drain: a slow acquire or
    // release must not let a lease expire under it.
    const keepAlive = setInterval(() => {
      for (const lease of this.leases.values()) void this.renew(lease);
    }, this.renewEveryMs);
    try {
      await this.assigning;
      // Heartbeat first: survivors that see a lease go should already count one instance fewer.
      await this.kv.delete(this.heartbeatKey()).catch((err: unknown) => this.warn('heartbeat delete', err));
      const leases = [...this.leases.values()];
      // A fence seen from now on only flags the lease: its one release is the one below.
      for (const lease of leases) lease.state = 'releasing';
      await Promise.all(
        leases.map(async (lease) => {
          await this.callRelease(handlers, lease, lease.lost ? 'lost' : 'stop');
          await this.dropLease(lease);
        }),
      );
    } finally {
      clearInterval(keepAlive);
    }
  }

  /** Test only: a crash. Timers stop, nothing is released or deleted; the leases expire by the TTL. */
  abandon(): void {
    this.stopped = true;
    this.clearTimers();
  }

  /** Test only: when the lease of `partition` was last renewed (ms since epoch), or null. */
  renewedAt(partition: number): number | null {
    return this.leases.get(partition)?.renewedAt ?? null;
  }

  // ---- internals ----

  /**
   * The keys matching `filter` whose last entry is a PUT. Not kv.keys(): on nats-server 2.9 every call leaves
   * an ephemeral consumer behind (seen here: 20 listings, 20 consumers still there 32 s later; one pass per
   * renewal made that thousands a day). One stream-info request lists the subjects, then (dropDeleted) a get
   * per subject drops delete markers (a graceful stop's deletes stay as markers until max_age).
   */
  private async listKeys(filter: string, dropDeleted = true): Promise<string[]> {
    const bucket = this.options.bucket;
    const subjectPrefix = `$KV.${bucket}.`;
    const info = await this.options.nats.jsm.streams.info(`KV_${bucket}`, {
      subjects_filter: `${subjectPrefix}${filter}`,
    });
    // No matching subject: the server leaves the map out.
    const keys = Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(subjectPrefix.length));
    if (!dropDeleted) return keys;
    const live = await Promise.all(
      keys.map(async (key) => ((await this.kv.get(key))?.operation === 'PUT' ? key : null)),
    );
    return live.filter((key): key is string => key !== null);
  }

  private leaseKey(partition: number): string {
    return `${this.options.group}.p.${partition}`;
  }

  private heartbeatKey(): string {
    return `${this.options.group}.i.${this.options.instanceId}`;
  }

  private mayRenew(): boolean {
    return this.options.mayRenew?.() ?? true;
  }

  /** Publishes the fence of holds() for a lease that changed (renewed, lost, dropped). */
  private fence(lease: Lease): void {
    this.options.onValidity?.(
      lease.partition,
      lease.lost ? 0 : lease.renewedAt + this.options.ttlMs,
      lease.token,
    );
  }

  private clearTimers(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.debounce) clearTimeout(this.debounce);
    this.timer = null;
    this.debounce = null;
    this.watcher?.stop();
    this.watcher = null;
  }

  private warn(what: string, err: unknown): void {
    this.options.logger.warn({ err, instance: this.options.instanceId }, `lease ${what} failed`);
  }

  private emit(change: LeaseChange): void {
    try {
      this.onChange?.(change);
    } catch (err) {
      this.warn('onChange listener', err);
    }
  }

  private tick(): void {
    if (this.stopped) return;
    for (const lease of [...this.leases.values()]) {
      if (!lease.lost && Date.now() - lease.renewedAt >= this.options.ttlMs) {
        this.options.logger.warn(
          { partition: lease.partition, instance: this.options.instanceId },
          'lease not renewed within its ttl: treated as lost',
        );
        this.markLost(lease);
      } else void this.renew(lease);
    }
    this.ticks++;
    const passDue =
      this.expiry === 'bucket' || !this.watching || this.ticks % KEY_MODE_PASS_EVERY_TICKS === 0;
    void this.heartbeat().finally(() => {
      if (passDue) this.scheduleAssign();
    });
  }

  /**
   * Every write of a lease or heartbeat: `previous` 'absent' (create), a revision (compare-and-set) or none.
   * In per-key TTL mode each carries Nats-TTL (kv.update and kv.put take none: a plain publish then).
   */
  private async write(
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
    const ack = await this.options.nats.js.publish(`$KV.${this.options.bucket}.${key}`, value, {
      ttl: this.ttlHeader,
      ...(previous !== undefined ? { expect: { lastSubjectSequence: previous } } : {}),
      ...(timeoutMs !== undefined ? { timeout: timeoutMs } : {}),
    });
    return ack.seq;
  }

  private async renew(lease: Lease): Promise<void> {
    if (lease.renewing || lease.lost || !this.mayRenew()) return;
    lease.renewing = true;
    const sentAt = Date.now();
    try {
      lease.revision = await this.write(
        this.leaseKey(lease.partition),
        lease.value,
        lease.revision,
        this.renewEveryMs,
      );
      lease.renewedAt = sentAt;
      if (!lease.lost) this.fence(lease);
    } catch (err) {
      if (isWrongRevision(err)) await this.recheck(lease);
      else this.options.logger.debug({ err, partition: lease.partition }, 'lease renewal failed, retrying');
    } finally {
      lease.renewing = false;
    }
  }

  /** The revision moved: ours (an earlier write timed out yet landed) or someone else's (fenced). */
  private async recheck(lease: Lease): Promise<void> {
    try {
      const entry = await this.kv.get(this.leaseKey(lease.partition));
      if (entry?.operation === 'PUT' && decoder.decode(entry.value) === lease.value) {
        lease.revision = entry.revision;
        return;
      }
    } catch (err) {
      this.options.logger.debug({ err, partition: lease.partition }, 'lease recheck failed');
      return;
    }
    this.options.logger.warn(
      { partition: lease.partition, instance: this.options.instanceId },
      'lease taken over by another writer',
    );
    this.markLost(lease);
  }

  private markLost(lease: Lease): void {
    if (lease.lost || this.leases.get(lease.partition) !== lease) return;
    lease.lost = true;
    this.fence(lease);
    // An acquire or a rebalance release in progress finishes the job itself (see claim / releaseExtra).
    if (lease.state !== 'held') return;
    this.leases.delete(lease.partition);
    const handlers = this.handlers;
    if (handlers) void this.callRelease(handlers, lease, 'lost');
    this.emit({ kind: 'released', partition: lease.partition, reason: 'lost', owned: this.owned() });
    this.scheduleAssign();
  }

  private async callRelease(handlers: LeaseHandlers, lease: Lease, reason: ReleaseReason): Promise<void> {
    const partition = lease.partition;
    try {
      await handlers.release(partition, reason, lease.token);
    } catch (err) {
      this.options.logger.error({ err, partition, reason }, 'partition release handler failed');
    }
  }

  private async heartbeat(): Promise<void> {
    if (this.heartbeating || this.stopped || !this.mayRenew()) return;
    this.heartbeating = true;
    try {
      const value: HeartbeatValue = {
        id: this.options.instanceId,
        at: new Date().toISOString(),
        owned: this.owned(),
      };
      await this.write(this.heartbeatKey(), JSON.stringify(value), undefined, this.renewEveryMs);
    } catch (err) {
      this.options.logger.debug({ err }, 'heartbeat failed');
    } finally {
      this.heartbeating = false;
    }
  }

  /** Deleted leases and joining or leaving instances trigger a pass at once instead of on the next tick. */
  private async watch(): Promise<void> {
    try {
      const iter = await this.kv.watch({ key: `${this.options.group}.>`, include: 'updates' });
      if (this.stopped) {
        iter.stop();
        return;
      }
      this.watcher = iter;
      const leasePrefix = `${this.options.group}.p.`;
      const instancePrefix = `${this.options.group}.i.`;
      this.watching = true;
      // If the watch ends (connection closed) the ticks still run every pass, only later.
      for await (const entry of iter) this.onWatch(entry, leasePrefix, instancePrefix);
    } catch (err) {
      if (!this.stopped) this.warn('watch', err);
    } finally {
      this.watching = false;
    }
  }

  private onWatch(entry: KvWatchEntry, leasePrefix: string, instancePrefix: string): void {
    if (this.stopped) return;
    const removed = entry.operation !== 'PUT';
    if (entry.key.startsWith(leasePrefix) && removed) this.scheduleAssign();
    else if (entry.key.startsWith(instancePrefix)) {
      const id = entry.key.slice(instancePrefix.length);
      if (removed || !this.live.includes(id)) this.scheduleAssign();
    }
  }

  private scheduleAssign(delayMs = ASSIGN_DEBOUNCE_MS): void {
    if (this.stopped || !this.handlers || !this.mayRenew()) return;
    if (this.assigning) {
      this.assignAgain = true;
      return;
    }
    if (this.debounce) return;
    this.debounce = setTimeout(() => {
      this.debounce = null;
      this.assigning = this.assignLoop().finally(() => {
        this.assigning = null;
      });
    }, delayMs);
  }

  /** Serialised: passes never overlap; events during a pass cause one more pass. */
  private async assignLoop(): Promise<void> {
    do {
      this.assignAgain = false;
      try {
        await this.assign();
      } catch (err) {
        this.warn('assignment pass', err);
      }
    } while (this.assignAgain && !this.stopped);
  }

  private async assign(): Promise<void> {
    const handlers = this.handlers;
    if (!handlers || this.stopped) return;
    const group = this.options.group;
    const [instanceKeys, leaseKeys] = await Promise.all([
      this.listKeys(`${group}.i.*`),
      // Delete markers included: only a partition this pass would claim is looked at (see below).
      this.listKeys(`${group}.p.*`, false),
    ]);
    const live = [
      ...new Set([...instanceKeys.map((k) => k.slice(`${group}.i.`.length)), this.options.instanceId]),
    ].sort();
    if (live.join() !== this.live.join()) {
      this.live = live;
      this.onLive?.([...live]);
    }
    const target = balancedTarget(this.options.partitions, this.live, this.options.instanceId);
    const keeping = () => [...this.leases.values()].filter((l) => l.state !== 'releasing' && !l.lost);

    // Too many: give back the ones this instance prefers least.
    const mine = keeping();
    if (mine.length > target) {
      const rank = new Map(this.preference.map((p, i) => [p, i]));
      mine.sort((a, b) => (rank.get(b.partition) ?? 0) - (rank.get(a.partition) ?? 0));
      for (const lease of mine.slice(0, mine.length - target)) {
        if (this.stopped) return;
        await this.releaseExtra(handlers, lease);
      }
      return;
    }
    // Listed: a lease, or the delete marker of one given back (a graceful stop) until max_age drops it.
    const taken = new Set(leaseKeys.map((k) => Number(k.slice(`${group}.p.`.length))));
    if (this.options.reclaim && !this.reclaimed) {
      this.reclaimed = true;
      for (const partition of this.preference) {
        if (this.stopped || keeping().length >= target) return;
        if (taken.has(partition) && !this.leases.has(partition)) await this.claim(handlers, partition, true);
      }
    }
    for (const partition of this.preference) {
      if (this.stopped || keeping().length >= target) return;
      if (this.leases.has(partition)) continue;
      if (taken.has(partition) && (await this.kv.get(this.leaseKey(partition)))?.operation === 'PUT')
        continue;
      await this.claim(handlers, partition);
    }
  }

  private async releaseExtra(handlers: LeaseHandlers, lease: Lease): Promise<void> {
    if (lease.state !== 'held') return;
    lease.state = 'releasing';
    await this.callRelease(handlers, lease, lease.lost ? 'lost' : 'rebalance');
    await this.dropLease(lease);
    this.options.logger.info({ partition: lease.partition }, 'partition released for rebalance');
  }

  /** Forgets a lease and deletes its key unless someone else wrote it since (CAS on our revision). */
  private async dropLease(lease: Lease): Promise<void> {
    if (this.leases.get(lease.partition) !== lease) return;
    this.leases.delete(lease.partition);
    const wasLost = lease.lost;
    lease.lost = true; // no renewal from now on
    this.fence(lease);
    // Wait for a renewal in flight, or the delete's revision is stale.
    while (lease.renewing) await new Promise((resolve) => setTimeout(resolve, 5));
    if (!wasLost)
      await this.kv
        .delete(this.leaseKey(lease.partition), { previousSeq: lease.revision })
        .catch((err: unknown) =>
          isWrongRevision(err) ? undefined : this.warn(`delete of partition ${lease.partition}`, err),
        );
    // A lease whose acquire never completed was never announced.
    if (lease.state !== 'acquiring')
      this.emit({
        kind: 'released',
        partition: lease.partition,
        reason: wasLost ? 'lost' : this.stopped ? 'stop' : 'rebalance',
        owned: this.owned(),
      });
  }

  private async claim(handlers: LeaseHandlers, partition: number, ownPrevious = false): Promise<void> {
    // A pass begun before a stall must not take partitions nobody will work.
    if (!this.mayRenew()) return;
    const value: LeaseValue = { instance: this.options.instanceId, acquiredAt: new Date().toISOString() };
    const text = JSON.stringify(value);
    const sentAt = Date.now();
    let revision: number;
    try {
      if (ownPrevious) {
        // Only a lease our previous life holds: compare-and-set on the revision we read.
        const entry = await this.kv.get(this.leaseKey(partition));
        if (!entry || entry.operation !== 'PUT') return;
        const holder = (JSON.parse(new TextDecoder().decode(entry.value)) as Partial<LeaseValue>).instance;
        if (holder !== this.options.instanceId) return;
        revision = await this.write(this.leaseKey(partition), text, entry.revision);
        this.options.logger.info({ partition }, 'took back the lease of a previous life of this instance');
      } else revision = await this.write(this.leaseKey(partition), text, 'absent');
    } catch (err) {
      // Someone else was faster: the usual race between joiners, not an error.
      if (!isWrongRevision(err)) this.warn(`create of partition ${partition}`, err);
      return;
    }
    const lease: Lease = {
      partition,
      state: 'acquiring',
      revision,
      token: revision,
      value: text,
      renewedAt: sentAt,
      renewing: false,
      lost: false,
    };
    this.leases.set(partition, lease);
    this.fence(lease);
    this.options.logger.info({ partition, instance: this.options.instanceId }, 'partition lease acquired');
    try {
      await handlers.acquire(partition, lease.token);
    } catch (err) {
      this.options.logger.error({ err, partition }, 'partition acquire handler failed: lease given back');
      await this.dropLease(lease);
      return;
    }
    if (lease.lost) {
      // Fenced while the acquire handler ran: undo it.
      this.leases.delete(partition);
      await this.callRelease(handlers, lease, 'lost');
      this.emit({ kind: 'released', partition, reason: 'lost', owned: this.owned() });
      return;
    }
    lease.state = 'held';
    this.emit({ kind: 'acquired', partition, owned: this.owned() });
  }
}
