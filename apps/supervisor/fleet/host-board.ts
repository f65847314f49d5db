/**
 * The fleet's live hosts: each host puts its HostBeat under its host id every TTL/4 in a bucket whose max_age
 * is the TTL, so a host that stops drops out after the TTL. On nats 2.11+ each beat also carries its own TTL
 * and the bucket has limit markers (libs/jetstream expiry.ts): a peer waiting on a host learns from a watch that its
 * heartbeat expired, instead of on its next poll.
 */
import type { KV } from '@nats-io/kv';
import { requirePositiveInt } from '../../../libs/config';
import {
  type ExpiryChoice,
  type KvExpiry,
  type KvExpiryWanted,
  LeaseBucket,
  listKeys,
} from '../../../libs/jetstream';
import type { FleetConnection } from './connection';
import { invalidOptions } from './errors';
import { openTtlBucket } from './kv-bucket';
import { decodeJson, type HostBeat, parseHostBeat, requireHostId } from './records';

export const DEFAULT_HEARTBEAT_TTL_MS = 10_000;

/** How often a peer waiting on a host checks its heartbeat (the watch tells sooner in per-key TTL mode). */
export const SILENCE_POLL_MS = 1000;

export interface HostBoardOptions {
  /** Heartbeat TTL (the bucket's max_age), >= 1000 ms. */
  ttlMs?: number;
  /** A failed beat or a malformed heartbeat skipped by list(); never thrown. */
  onError?: (err: unknown, what: string) => void;
  /** 'auto' (default): per-key TTLs and limit markers where server and bucket have them; 'bucket': max_age only. */
  expiry?: KvExpiryWanted;
}

export class HostBoard {
  readonly ttlMs: number;
  /** How a heartbeat nobody rewrites leaves the bucket, and why (chosen at open; the caller logs it). */
  readonly expiry: ExpiryChoice;
  private timer: NodeJS.Timeout | undefined;
  private beating = false;
  /** Writes with the bucket's expiry mechanism (a per-key TTL in `key` mode). */
  private readonly keys: LeaseBucket;

  private constructor(
    private readonly conn: FleetConnection,
    private readonly kv: KV,
    ttlMs: number,
    expiry: ExpiryChoice,
    private readonly onError: (err: unknown, what: string) => void,
  ) {
    this.ttlMs = ttlMs;
    this.expiry = expiry;
    this.keys = new LeaseBucket(kv, conn.js, conn.names.hostsBucket, ttlMs, expiry.expiry);
  }

  static async open(conn: FleetConnection, options: HostBoardOptions = {}): Promise<HostBoard> {
    const ttlMs = requirePositiveInt(
      'heartbeat ttlMs',
      options.ttlMs ?? DEFAULT_HEARTBEAT_TTL_MS,
      1000,
      invalidOptions,
    );
    const { kv, choice } = await openTtlBucket(conn, conn.names.hostsBucket, {
      history: 1,
      ttlMs,
      wanted: options.expiry ?? 'auto',
    });
    return new HostBoard(conn, kv, ttlMs, choice, options.onError ?? (() => undefined));
  }

  get mode(): KvExpiry {
    return this.expiry.expiry;
  }

  /** Puts one heartbeat under `value.host` (with its own TTL in per-key mode: kv.put takes none). */
  async beat(value: HostBeat): Promise<void> {
    const beat = parseHostBeat(value);
    const text = JSON.stringify(beat);
    await this.conn.call('heartbeat', () => this.keys.write(beat.host, text, undefined));
  }

  /**
   * Resolves once `hostId` is silent: 'removed' when `removed()` says so (no longer a member), 'silent' when
   * its heartbeat is older than the TTL. alive() is polled every pollMs; in per-key TTL mode the heartbeat's
   * limit marker also reaches a watch at once (the check then confirms), instead of on the next poll. stop()
   * ends the polling and the watch; the promise then never settles.
   */
  whenSilent(
    hostId: string,
    pollMs: number,
    removed: () => boolean = () => false,
  ): { silent: Promise<'silent' | 'removed'>; stop(): void } {
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    let stopWatch: () => void = () => undefined;
    const silent = new Promise<'silent' | 'removed'>((resolve) => {
      const check = async () => {
        if (settled) return;
        const gone = removed();
        const alive = gone ? false : await this.alive(hostId).catch(() => true);
        if (settled) return;
        if (!alive) {
          settled = true;
          stopWatch();
          resolve(gone ? 'removed' : 'silent');
          return;
        }
        if (timer) clearTimeout(timer);
        timer = setTimeout(() => void check(), pollMs);
      };
      timer = setTimeout(() => void check(), pollMs);
      stopWatch = this.watchGone(hostId, () => {
        if (timer) clearTimeout(timer);
        void check();
      });
    });
    return {
      silent,
      stop: () => {
        settled = true;
        if (timer) clearTimeout(timer);
        stopWatch();
      },
    };
  }

  /**
   * Calls `onGone` when the server removes `hostId`'s heartbeat (its limit marker, a delete or a purge), as
   * its watch receives it: per-key TTL mode only (in bucket mode nothing tells; the caller polls alive()).
   * Returns the stop. A watch that cannot start leaves the caller's polling to find out.
   */
  private watchGone(hostId: string, onGone: () => void): () => void {
    if (this.mode !== 'key') return () => undefined;
    let stopped = false;
    let iter: { stop(): void } | undefined;
    void (async () => {
      try {
        const watch = await this.kv.watch({ key: requireHostId(hostId), include: 'updates' });
        if (stopped) {
          watch.stop();
          return;
        }
        iter = watch;
        for await (const entry of watch) {
          if (entry.operation !== 'PUT') {
            if (!stopped) onGone();
            return;
          }
        }
      } catch (err) {
        if (!stopped) this.onError(err, `heartbeat watch of ${hostId}`);
      } finally {
        iter?.stop();
      }
    })();
    return () => {
      stopped = true;
      iter?.stop();
    };
  }

  /** Beats now and every intervalMs (default TTL/4) until stop(); a failed beat goes to onError. */
  start(getBeat: () => HostBeat, intervalMs = Math.floor(this.ttlMs / 4)): void {
    requirePositiveInt('heartbeat intervalMs', intervalMs, 1, invalidOptions);
    this.stop();
    const tick = async () => {
      // A beat slower than the interval is not stacked.
      if (this.beating) return;
      this.beating = true;
      try {
        await this.beat(getBeat());
      } catch (err) {
        this.onError(err, 'heartbeat');
      } finally {
        this.beating = false;
      }
    };
    this.timer = setInterval(() => void tick(), intervalMs);
    this.timer.unref();
    void tick();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * The hosts that beat within the TTL, sorted by host id. Age is the entry's server timestamp (the clock
   * max_age runs on); the server drops expired entries lazily, so a stale one can still be listed briefly.
   */
  list(): Promise<HostBeat[]> {
    return this.conn.call('host list', async () => {
      const keys = await listKeys(this.conn.jsm, this.conn.names.hostsBucket);
      const now = Date.now();
      const beats = await Promise.all(
        keys.map(async (key) => {
          const entry = await this.kv.get(key);
          if (entry?.operation !== 'PUT' || now - entry.created.getTime() >= this.ttlMs) return null;
          try {
            return parseHostBeat(decodeJson(`heartbeat ${key}`, entry.value));
          } catch (err) {
            this.onError(err, `heartbeat ${key}`);
            return null;
          }
        }),
      );
      return beats
        .filter((b): b is HostBeat => b !== null)
        .sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
    });
  }

  /** Whether `hostId` beat within the TTL (one key read; the shape is list()'s to check). */
  alive(hostId: string): Promise<boolean> {
    return this.conn.call('heartbeat read', async () => {
      const entry = await this.kv.get(requireHostId(hostId));
      return entry?.operation === 'PUT' && Date.now() - entry.created.getTime() < this.ttlMs;
    });
  }

  /** Graceful stop: stops the loop and deletes the host's heartbeat, so it drops out at once. */
  async remove(hostId: string = this.conn.hostId): Promise<void> {
    if (hostId === this.conn.hostId) {
      this.stop();
      // A beat in flight would put the key back after the delete.
      while (this.beating) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await this.conn.call('heartbeat remove', () => this.kv.delete(requireHostId(hostId)));
  }
}
