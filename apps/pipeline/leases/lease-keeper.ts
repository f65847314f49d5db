/**
 * Partition leases kept on a thread of their own (apps/pipeline/leases/lease-thread.ts, its own NATS connection): the
 * main thread may block longer than the lease TTL (restoring a large checkpoint, a big snapshot, a starved
 * CPU) without losing its partitions. Same surface as PartitionLeases. holds() stays synchronous and exact:
 * it reads the fence the thread publishes in shared memory, per acquisition (its token). The main thread beats into the same memory; the
 * thread lets the leases lapse once that beat is older than maxStallMs, so a wedged process still loses them.
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { requirePositiveInt } from '../../../libs/config';
import type { KvExpiry } from '../../../libs/jetstream';
import type { NatsAuth } from '../../../libs/nats-auth';
import { invalidOptions, PipelineIoError } from '../errors';
import type { LeaseChange, LeaseHandlers, LeaseOptions } from './lease-types';
import {
  beatView,
  type FromThread,
  fenceHolds,
  fenceView,
  fromWire,
  SLOT_MAIN_BEAT,
  slotBuffer,
  type ThreadInit,
  type ToThread,
  toWire,
} from './lease-wire';
import { checkLeaseOptions } from './leases';

export interface LeaseKeeperOptions extends Omit<LeaseOptions, 'nats' | 'mayRenew' | 'onValidity'> {
  /**
   * The NATS settings, loaded (libs/nats-auth): the thread opens its own connection (a busy main connection
   * must not delay renewals). They cross as workerData, a copy in memory: never argv or the environment.
   */
  auth: NatsAuth;
  /** Renewals stop once the main thread has not beaten for this long (> ttlMs). Default 60 s. */
  maxStallMs?: number;
  /** Replicas of the lease bucket when it is created (default 1). */
  replicas?: number;
}

export const DEFAULT_MAX_STALL_MS = 60_000;

export class LeaseKeeper {
  /** Called on every ownership change; must not throw. */
  onChange?: (change: LeaseChange) => void;
  /** The lease thread died: every partition was released as lost; the owner must fail loudly. */
  onFatal?: (err: Error) => void;
  /** How a lease nobody renews leaves the bucket, as the thread chose it at open. */
  expiry: KvExpiry = 'bucket';

  private readonly worker: Worker;
  private readonly beatSlot: BigInt64Array;
  private readonly fences: Uint32Array;
  private readonly beat: NodeJS.Timeout;
  /**
   * Partitions from the acquire request to the release (what PartitionLeases.owned() reports), each with
   * its acquisition's token.
   */
  private readonly held = new Map<number, number>();
  private handlers: LeaseHandlers | null = null;
  private live: string[] = [];
  private readonly peerAsks = new Map<
    number,
    { resolve: (p: string[]) => void; reject: (e: Error) => void }
  >();
  private asked = 0;
  private opened: { resolve: () => void; reject: (err: Error) => void } | null = null;
  private stopped: Promise<void> | null = null;
  private readonly exited: Promise<void>;
  private dead = false;

  private constructor(private readonly options: LeaseKeeperOptions & { maxStallMs: number }) {
    const sab = slotBuffer(options.partitions);
    this.beatSlot = beatView(sab);
    this.fences = fenceView(sab);
    this.beatNow();
    // Beats well inside maxStallMs; unref: a beat alone never keeps the process up.
    this.beat = setInterval(() => this.beatNow(), Math.min(1000, options.maxStallMs / 10)).unref();
    const init: ThreadInit = {
      auth: options.auth,
      connectionName: `streaminfer-leases-${options.instanceId}`,
      replicas: options.replicas ?? 1,
      bucket: options.bucket,
      group: options.group,
      instanceId: options.instanceId,
      partitions: options.partitions,
      ttlMs: options.ttlMs,
      reclaim: options.reclaim ?? false,
      expiry: options.expiry ?? 'auto',
      maxStallMs: options.maxStallMs,
      slots: sab,
      logLevel: options.logger.level,
      logBindings: options.logger.bindings(),
    };
    // Compiled next to this module (dist/apps/pipeline/leases): tests and the CLI run from there.
    this.worker = new Worker(join(__dirname, 'lease-thread.js'), { workerData: init });
    this.exited = new Promise((resolve) => {
      this.worker.once('exit', (code) => {
        this.died(new Error(`lease thread exited (code ${code})`));
        resolve();
      });
    });
    this.worker.on('error', (err) => this.died(err));
    this.worker.on('message', (m: FromThread) => this.onMessage(m));
  }

  /** Checks the options here, then opens the bucket on the thread; its errors arrive typed as they were. */
  static async open(options: LeaseKeeperOptions): Promise<LeaseKeeper> {
    checkLeaseOptions(options);
    const maxStallMs = requirePositiveInt(
      'maxStallMs',
      options.maxStallMs ?? DEFAULT_MAX_STALL_MS,
      1,
      invalidOptions,
    );
    if (maxStallMs <= options.ttlMs)
      throw new PipelineIoError(
        'invalid_options',
        `maxStallMs must be greater than ttlMs (${options.ttlMs}), got ${maxStallMs}`,
      );
    if (typeof options.auth !== 'object' || options.auth === null || options.auth.servers.length === 0)
      throw new PipelineIoError('invalid_options', 'auth must be loaded NATS settings (libs/nats-auth)');
    const keeper = new LeaseKeeper({ ...options, maxStallMs });
    await new Promise<void>((resolve, reject) => {
      keeper.opened = { resolve, reject };
    });
    return keeper;
  }

  start(handlers: LeaseHandlers): void {
    if (this.handlers) throw new PipelineIoError('invalid_options', 'LeaseKeeper already started');
    if (this.stopped || this.dead) throw new PipelineIoError('invalid_options', 'LeaseKeeper was stopped');
    this.handlers = handlers;
    this.send({ type: 'start' });
  }

  owned(): number[] {
    return [...this.held.keys()].sort((a, b) => a - b);
  }

  /**
   * The fence: owned under the acquisition `token` names (the one acquire was called with), and its last
   * renewal (sent time + ttl) not yet past. A loop of an earlier acquisition of the partition fails it even
   * while this instance holds the partition again. No message, no await, no allocation.
   */
  holds(partition: number, token: number): boolean {
    if (this.dead || this.held.get(partition) !== token) return false;
    return fenceHolds(this.fences, partition, token, Date.now());
  }

  /** The token of the acquisition this instance holds the partition under now; undefined when not held. */
  heldToken(partition: number): number | undefined {
    const token = this.held.get(partition);
    return token !== undefined && this.holds(partition, token) ? token : undefined;
  }

  liveInstances(): string[] {
    return [...this.live];
  }

  peers(): Promise<string[]> {
    if (this.dead) return Promise.reject(new PipelineIoError('lease_lost', 'the lease thread is gone'));
    const id = ++this.asked;
    return new Promise((resolve, reject) => {
      this.peerAsks.set(id, { resolve, reject });
      this.send({ type: 'peers', id });
    });
  }

  /** Graceful: the thread releases every partition through the handlers, deletes its keys and exits. */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      if (!this.dead) this.send({ type: 'stop' });
      await this.exited;
      clearInterval(this.beat);
    })();
    return this.stopped;
  }

  /** Test only: the thread dies as a crash would kill it. Resolves once the main thread has reacted. */
  async killThreadForTest(): Promise<void> {
    await this.worker.terminate();
    await this.exited;
  }

  // ---- internals ----

  private beatNow(): void {
    Atomics.store(this.beatSlot, SLOT_MAIN_BEAT, BigInt(Date.now()));
  }

  private send(message: ToThread): void {
    if (!this.dead) this.worker.postMessage(message);
  }

  private onMessage(m: FromThread): void {
    switch (m.type) {
      case 'opened':
        this.expiry = m.expiry;
        this.opened?.resolve();
        this.opened = null;
        return;
      case 'failed':
        // Not a death: the open failed and this ends the thread.
        this.stopped = this.exited.then(() => clearInterval(this.beat));
        this.opened?.reject(fromWire(m.error));
        this.opened = null;
        void this.worker.terminate();
        return;
      case 'acquire':
        this.held.set(m.partition, m.token);
        void this.answer(m.id, () => this.handlers!.acquire(m.partition, m.token), m.partition, m.token);
        return;
      case 'release': {
        // Asked while this thread was blocked, the lease may have lapsed since: then it is lost, not handed
        // over (another instance may own it already: write nothing).
        const reason = m.reason === 'lost' || !this.holds(m.partition, m.token) ? 'lost' : m.reason;
        if (reason === 'lost') this.forget(m.partition, m.token);
        void this.answer(
          m.id,
          () => this.handlers!.release(m.partition, reason, m.token),
          m.partition,
          m.token,
          true,
        );
        return;
      }
      case 'change':
        this.emit(m.change);
        return;
      case 'live':
        this.live = m.live;
        return;
      case 'peers': {
        const ask = this.peerAsks.get(m.id);
        this.peerAsks.delete(m.id);
        if (m.error) ask?.reject(fromWire(m.error));
        else ask?.resolve(m.peers ?? []);
        return;
      }
      case 'stopped':
        // Everything released and closed: end the thread (a lingering handle must not keep it, or stop(), up).
        void this.worker.terminate();
        return;
    }
  }

  private async answer(
    id: number,
    run: () => Promise<void>,
    partition: number,
    token: number,
    release = false,
  ): Promise<void> {
    try {
      await run();
      if (release) this.forget(partition, token);
      this.send({ type: 'answer', id });
    } catch (err) {
      // A failed acquire gives the lease back; a failed release is logged by the thread, as before.
      this.forget(partition, token);
      this.send({ type: 'answer', id, error: toWire(err) });
    }
  }

  /** Drops the partition if `token`'s acquisition is still the one held (a later one stays). */
  private forget(partition: number, token: number): void {
    if (this.held.get(partition) === token) this.held.delete(partition);
  }

  private emit(change: LeaseChange): void {
    try {
      this.onChange?.(change);
    } catch (err) {
      this.options.logger.warn({ err }, 'lease onChange listener failed');
    }
  }

  /** The thread is gone: nothing renews any more, so every partition is lost now, not at its TTL. */
  private died(err: Error): void {
    if (this.dead) return;
    this.dead = true;
    clearInterval(this.beat);
    const opening = this.opened;
    this.opened = null;
    // Not a bucket error the thread could report: it died (its module missing, out of memory) while opening.
    opening?.reject(
      new PipelineIoError('stream_provision_failed', `lease thread died while opening: ${err.message}`, {
        cause: err,
      }),
    );
    for (const ask of this.peerAsks.values()) ask.reject(new PipelineIoError('lease_lost', err.message));
    this.peerAsks.clear();
    // A stop (or a failed open) ends the thread on purpose: nothing is held any more then.
    if (this.stopped || opening) return;
    const lost = [...this.held].sort((a, b) => a[0] - b[0]);
    this.held.clear();
    this.options.logger.error(
      { err: err.message, partitions: lost.map(([p]) => p), instance: this.options.instanceId },
      'lease thread died: every partition treated as lost',
    );
    for (const [partition, token] of lost) {
      this.handlers
        ?.release(partition, 'lost', token)
        .catch((e: unknown) =>
          this.options.logger.error({ err: e, partition }, 'partition release handler failed'),
        );
      this.emit({ kind: 'released', partition, reason: 'lost', owned: this.owned() });
    }
    this.onFatal?.(err);
  }
}
