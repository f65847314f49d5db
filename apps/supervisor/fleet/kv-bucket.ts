/**
 * The fleet's buckets and object store opened through libs/jetstream: every open is one fleet call (fails fast
 * with `cluster_unavailable` while NATS is down) and a refusal is the fleet's FleetError.
 */
import type { KV } from '@nats-io/kv';
import type { ObjectStore } from '@nats-io/obj';
import {
  type ExpiryChoice,
  type KvExpiryWanted,
  openBucket as openKvBucket,
  openTtlBucket as openKvTtlBucket,
  openObjectStore as openStore,
} from '../../../libs/jetstream';
import { type FleetConnection, failFleet } from './connection';

/** Creates the bucket when missing; an existing one must have the same TTL and at least as many replicas. */
export function openBucket(
  conn: FleetConnection,
  bucket: string,
  options: { history: number; ttlMs?: number },
): Promise<KV> {
  return conn.call(`bucket ${bucket}`, () =>
    openKvBucket(conn, bucket, { ...options, what: `bucket ${bucket}`, fail: failFleet }),
  );
}

/** A bucket whose keys expire: per-key TTLs where the server has them and `wanted` allows (libs/jetstream). */
export function openTtlBucket(
  conn: FleetConnection,
  bucket: string,
  options: { history: number; ttlMs: number; wanted: KvExpiryWanted },
): Promise<{ kv: KV; choice: ExpiryChoice }> {
  return conn.call(`bucket ${bucket}`, () =>
    openKvTtlBucket(conn, bucket, { ...options, what: `bucket ${bucket}`, fail: failFleet }),
  );
}

/** Creates the object store when missing (with the connection's replica count); an existing one needs as many. */
export function openObjectStore(conn: FleetConnection, bucket: string): Promise<ObjectStore> {
  return conn.call(`object store ${bucket}`, () =>
    openStore(conn, bucket, { what: `object store ${bucket}`, fail: failFleet }),
  );
}
