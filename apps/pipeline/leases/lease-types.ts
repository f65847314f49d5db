/** The partition leases' options, handlers, changes and key values (leases.ts runs them). */
import type { Logger } from 'pino';
import type { KvExpiryWanted } from '../../../libs/jetstream';
import type { NatsHandle } from '../connection';

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

/** The lease key of a partition: `<group>.p.<k>`. */
export function leaseKey(group: string, partition: number): string {
  return `${group}.p.${partition}`;
}

/** An instance's heartbeat key: `<group>.i.<id>`. */
export function heartbeatKey(group: string, instanceId: string): string {
  return `${group}.i.${instanceId}`;
}
