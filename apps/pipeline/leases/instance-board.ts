/**
 * The instances of one pipeline group: each writes a heartbeat `<group>.i.<id>` every renewal; the live ones
 * (their heartbeats not expired) decide each one's balanced share. The watch on the group's keys tells of
 * deleted leases and of instances joining or leaving at once instead of on the next renewal tick.
 */
import type { KvWatchEntry } from '@nats-io/kv';
import type { Logger } from 'pino';
import { type LeaseBucket, listKeys, liveKeys } from '../../../libs/jetstream';
import type { NatsHandle } from '../connection';
import { type HeartbeatValue, heartbeatKey } from './lease-types';

export class InstanceBoard {
  private live: string[] = [];
  private heartbeating = false;
  private watcher: { stop(): void } | null = null;
  private watchingNow = false;
  private stopped = false;

  constructor(
    private readonly nats: NatsHandle,
    private readonly bucket: LeaseBucket,
    private readonly group: string,
    private readonly instanceId: string,
    private readonly logger: Logger,
  ) {}

  /** The watch is delivering (in per-key TTL mode it stands in for most passes). */
  get watching(): boolean {
    return this.watchingNow;
  }

  /** The live instances the last pass saw. */
  liveInstances(): string[] {
    return [...this.live];
  }

  /** Records the live set a pass saw; true when it differs from the last one. */
  setLive(live: string[]): boolean {
    if (live.join() === this.live.join()) return false;
    this.live = live;
    return true;
  }

  /** The instances heartbeating now, read from the bucket, sorted. */
  async instances(): Promise<string[]> {
    const prefix = `${this.group}.i.`;
    const keys = await this.liveKeys(`${prefix}*`);
    return keys.map((k) => k.slice(prefix.length)).sort();
  }

  /** The partitions with a lease key, or the delete marker of one given back (until max_age drops it). */
  async leaseKeys(): Promise<number[]> {
    const prefix = `${this.group}.p.`;
    const keys = await listKeys(this.nats.jsm, this.bucket.bucket, `${prefix}*`);
    return keys.map((k) => Number(k.slice(prefix.length)));
  }

  /** One heartbeat (skipped while the previous one is in flight); a failure is retried on the next tick. */
  async heartbeat(owned: number[], timeoutMs: number): Promise<void> {
    if (this.heartbeating) return;
    this.heartbeating = true;
    try {
      const value: HeartbeatValue = { id: this.instanceId, at: new Date().toISOString(), owned };
      await this.bucket.write(this.key(), JSON.stringify(value), undefined, timeoutMs);
    } catch (err) {
      this.logger.debug({ err }, 'heartbeat failed');
    } finally {
      this.heartbeating = false;
    }
  }

  /** A graceful stop's first step: survivors that see a lease go should already count one instance fewer. */
  async deleteHeartbeat(): Promise<void> {
    await this.bucket.kv.delete(this.key()).catch((err: unknown) => this.warn('heartbeat delete', err));
  }

  /** Runs the watch until stop(); `due` is called when a pass should run now. */
  async watch(due: () => void): Promise<void> {
    try {
      const iter = await this.bucket.kv.watch({ key: `${this.group}.>`, include: 'updates' });
      if (this.stopped) {
        iter.stop();
        return;
      }
      this.watcher = iter;
      const leasePrefix = `${this.group}.p.`;
      const instancePrefix = `${this.group}.i.`;
      this.watchingNow = true;
      // If the watch ends (connection closed) the ticks still run every pass, only later.
      for await (const entry of iter) this.onWatch(entry, leasePrefix, instancePrefix, due);
    } catch (err) {
      if (!this.stopped) this.warn('watch', err);
    } finally {
      this.watchingNow = false;
    }
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.stop();
    this.watcher = null;
  }

  private onWatch(entry: KvWatchEntry, leasePrefix: string, instancePrefix: string, due: () => void): void {
    if (this.stopped) return;
    const removed = entry.operation !== 'PUT';
    if (entry.key.startsWith(leasePrefix) && removed) due();
    else if (entry.key.startsWith(instancePrefix)) {
      const id = entry.key.slice(instancePrefix.length);
      if (removed || !this.live.includes(id)) due();
    }
  }

  /** The keys matching `filter` whose last entry is a PUT (a graceful stop's deletes stay as markers). */
  private async liveKeys(filter: string): Promise<string[]> {
    return liveKeys(this.bucket.kv, await listKeys(this.nats.jsm, this.bucket.bucket, filter));
  }

  private key(): string {
    return heartbeatKey(this.group, this.instanceId);
  }

  private warn(what: string, err: unknown): void {
    this.logger.warn({ err, instance: this.instanceId }, `lease ${what} failed`);
  }
}
