/**
 * Partition ownership through leases in a NATS KV bucket, so several `stream` instances share P partitions.
 * A lease is the key `<group>.p.<k>`, created only when absent and renewed by compare-and-set (KvLease,
 * libs/jetstream). A lease whose owner stopped renewing goes by the bucket's TTL (max_age: nats 2.9 has no
 * per-message TTL, the others find out on their next pass) or, on nats 2.11+, by its own per-key TTL with a
 * limit marker the others' watch receives (libs/jetstream expiry.ts). Every instance writes a heartbeat
 * `<group>.i.<id>` (instance-board.ts); the live heartbeats decide each one's balanced share (assignment.ts).
 */
import { requirePositiveInt } from '../../../libs/config';
import { type KvExpiry, LeaseBucket, openTtlBucket } from '../../../libs/jetstream';
import { failStreamIo } from '../connection';
import { invalidOptions, PipelineIoError, requireName } from '../errors';
import { balancedTarget, preferenceOrder } from './assignment';
import { InstanceBoard } from './instance-board';
import { type LeaseChange, type LeaseHandlers, type LeaseOptions, leaseKey } from './lease-types';
import { OwnedPartitions } from './owned-partitions';
import { PassScheduler } from './pass-scheduler';

export type {
  HeartbeatValue,
  LeaseChange,
  LeaseHandlers,
  LeaseOptions,
  LeaseValue,
  ReleaseReason,
} from './lease-types';

/** The options' checks, before any I/O (LeaseKeeper runs them before it starts its thread). */
export function checkLeaseOptions(options: Omit<LeaseOptions, 'nats' | 'logger'>): void {
  requireName('bucket', options.bucket);
  requireName('instanceId', options.instanceId);
  if (typeof options.group !== 'string' || !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(options.group))
    throw new PipelineIoError(
      'invalid_options',
      `group must be dot-separated tokens of [A-Za-z0-9_-] (got ${options.group})`,
    );
  requirePositiveInt('partitions', options.partitions, 1, invalidOptions);
  requirePositiveInt('ttlMs', options.ttlMs, 1000, invalidOptions);
}

/** Debounce before an assignment pass, so a burst of watch events (a graceful stop deletes several keys) is one pass. */
const ASSIGN_DEBOUNCE_MS = 50;

/**
 * Per-key TTL mode with the watch running: expiries, joins and leaves arrive on the watch, so a pass on every
 * renewal tick would only poll; one pass every this many ticks (once per TTL) is the backstop.
 */
const KEY_MODE_PASS_EVERY_TICKS = 3;

export class PartitionLeases {
  /** Called on every ownership change (e.g. to update a partitions-owned gauge); must not throw. */
  onChange?: (change: LeaseChange) => void;
  /** Called when a pass sees another set of live instances. */
  onLive?: (live: string[]) => void;

  private readonly preference: number[];
  private readonly renewEveryMs: number;
  private readonly board: InstanceBoard;
  private readonly partitions: OwnedPartitions;
  private readonly passes: PassScheduler;
  private handlers: LeaseHandlers | null = null;
  private timer: NodeJS.Timeout | null = null;
  private ticks = 0;
  private stopped = false;
  /** reclaim: the first pass looked for leases left under this id. */
  private reclaimed = false;

  private constructor(
    private readonly bucket: LeaseBucket,
    private readonly options: LeaseOptions,
  ) {
    this.preference = preferenceOrder(options.instanceId, options.partitions);
    this.renewEveryMs = Math.max(1, Math.floor(options.ttlMs / 3));
    this.board = new InstanceBoard(options.nats, bucket, options.group, options.instanceId, options.logger);
    this.partitions = new OwnedPartitions({
      bucket,
      group: options.group,
      instanceId: options.instanceId,
      logger: options.logger,
      renewEveryMs: this.renewEveryMs,
      mayRenew: () => this.mayRenew(),
      stopping: () => this.stopped,
      handlers: () => this.handlers,
      onValidity: options.onValidity,
      changed: (change) => this.emit(change),
      reassign: () => this.scheduleAssign(),
    });
    this.passes = new PassScheduler(
      () => this.assign(),
      (err) => this.warn('assignment pass', err),
      () => this.stopped,
    );
  }

  static async open(options: LeaseOptions): Promise<PartitionLeases> {
    checkLeaseOptions(options);
    const { bucket, nats, logger } = options;
    let opened: Awaited<ReturnType<typeof openTtlBucket>>;
    try {
      // history 1 matters for per-key TTLs too: no older revision can come back when the newest expires.
      // An existing bucket keeps its own TTL: leases would then expire on its clock, not ours (refused).
      opened = await openTtlBucket(nats, bucket, {
        history: 1,
        ttlMs: options.ttlMs,
        wanted: options.expiry ?? 'auto',
        what: `lease bucket ${bucket}`,
        fail: failStreamIo,
      });
    } catch (err) {
      if (err instanceof PipelineIoError) throw err;
      throw new PipelineIoError('stream_provision_failed', `lease bucket ${bucket}: ${String(err)}`, {
        cause: err,
      });
    }
    // A bucket keeps the mechanism it was created with; the log says which one runs, and why.
    const { kv, choice } = opened;
    const line = { bucket, expiry: choice.expiry, instance: options.instanceId };
    if (choice.warn) logger.warn(line, choice.why);
    else logger.info(line, choice.why);
    return new PartitionLeases(new LeaseBucket(kv, nats.js, bucket, options.ttlMs, choice.expiry), options);
  }

  /** How a lease or heartbeat nobody rewrites leaves the bucket (chosen at open, logged). */
  get expiry(): KvExpiry {
    return this.bucket.expiry;
  }

  /** Starts heartbeats, renewals and assignment (first pass right away). */
  start(handlers: LeaseHandlers): void {
    if (this.handlers) throw new PipelineIoError('invalid_options', 'PartitionLeases already started');
    if (this.stopped) throw new PipelineIoError('invalid_options', 'PartitionLeases was stopped');
    this.handlers = handlers;
    this.timer = setInterval(() => this.tick(), this.renewEveryMs);
    void this.board.watch(() => this.scheduleAssign());
    void this.heartbeat().finally(() => this.scheduleAssign(0));
  }

  owned(): number[] {
    return this.partitions.owned();
  }

  /**
   * Owned under the acquisition `token` names and renewed within the TTL: the fence to check before writing
   * anything for the partition.
   */
  holds(partition: number, token: number): boolean {
    return this.partitions.holds(partition, token);
  }

  liveInstances(): string[] {
    return this.board.liveInstances();
  }

  /** The instances heartbeating now, read from the bucket (before start(): who else is already running). */
  peers(): Promise<string[]> {
    return this.board.instances();
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
    const keepAlive = setInterval(() => this.partitions.renewAll(), this.renewEveryMs);
    try {
      await this.passes.current;
      // Heartbeat first: survivors that see a lease go should already count one instance fewer.
      await this.board.deleteHeartbeat();
      await this.partitions.releaseAll(handlers);
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
    return this.partitions.renewedAt(partition);
  }

  // ---- internals ----

  private mayRenew(): boolean {
    return this.options.mayRenew?.() ?? true;
  }

  private clearTimers(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.passes.cancel();
    this.board.stop();
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
    this.partitions.tick();
    this.ticks++;
    const passDue =
      this.expiry === 'bucket' || !this.board.watching || this.ticks % KEY_MODE_PASS_EVERY_TICKS === 0;
    void this.heartbeat().finally(() => {
      if (passDue) this.scheduleAssign();
    });
  }

  private async heartbeat(): Promise<void> {
    if (this.stopped || !this.mayRenew()) return;
    await this.board.heartbeat(this.owned(), this.renewEveryMs);
  }

  private scheduleAssign(delayMs = ASSIGN_DEBOUNCE_MS): void {
    if (this.stopped || !this.handlers || !this.mayRenew()) return;
    this.passes.schedule(delayMs);
  }

  private async assign(): Promise<void> {
    const handlers = this.handlers;
    if (!handlers || this.stopped) return;
    const self = this.options.instanceId;
    const [instances, leased] = await Promise.all([
      this.board.instances(),
      // Delete markers included: only a partition this pass would claim is looked at (see below).
      this.board.leaseKeys(),
    ]);
    const live = [...new Set([...instances, self])].sort();
    if (this.board.setLive(live)) this.onLive?.([...live]);
    const target = balancedTarget(this.options.partitions, live, self);

    // Too many: give back the ones this instance prefers least.
    const mine = this.partitions.keeping();
    if (mine.length > target) {
      const rank = new Map(this.preference.map((p, i) => [p, i]));
      mine.sort((a, b) => (rank.get(b.partition) ?? 0) - (rank.get(a.partition) ?? 0));
      for (const lease of mine.slice(0, mine.length - target)) {
        if (this.stopped) return;
        await this.partitions.releaseExtra(handlers, lease);
      }
      return;
    }
    // Listed: a lease, or the delete marker of one given back (a graceful stop) until max_age drops it.
    const taken = new Set(leased);
    const short = () => !this.stopped && this.partitions.keeping().length < target;
    if (this.options.reclaim && !this.reclaimed) {
      this.reclaimed = true;
      for (const partition of this.preference) {
        if (!short()) return;
        if (taken.has(partition) && !this.partitions.has(partition))
          await this.partitions.claim(handlers, partition, true);
      }
    }
    for (const partition of this.preference) {
      if (!short()) return;
      if (this.partitions.has(partition)) continue;
      const key = leaseKey(this.options.group, partition);
      if (taken.has(partition) && (await this.bucket.kv.get(key))?.operation === 'PUT') continue;
      await this.partitions.claim(handlers, partition);
    }
  }
}
