/**
 * What the fleet's KV buckets and object store share: opening with a checked TTL and replica count, CAS errors,
 * listing keys without kv.keys().
 */
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { type ObjectStore, Objm } from '@nats-io/obj';
import {
  bucketLimits,
  chooseExpiry,
  type ExpiryChoice,
  type KvExpiryWanted,
  type ServerFacts,
} from '../../../libs/kv-expiry';
import { describeReplicasRefusal, replicasShortfall } from '../../../libs/nats-auth';
import type { ClusterConnection } from './connection';
import { ClusterError } from './errors';

/**
 * Creates the bucket when missing (with the connection's replica count); an existing one must have the same
 * TTL, or keys expire on its clock, and at least as many replicas as asked.
 */
export function openBucket(
  conn: ClusterConnection,
  bucket: string,
  options: { history: number; ttlMs?: number; markerTtlMs?: number },
): Promise<KV> {
  return conn.call(`bucket ${bucket}`, async () => {
    const kvm = new Kvm(conn.js);
    let kv: KV;
    try {
      kv = await kvm.create(bucket, {
        history: options.history,
        ttl: options.ttlMs ?? 0,
        replicas: conn.replicas,
        ...(options.markerTtlMs ? { markerTTL: options.markerTtlMs } : {}),
      });
    } catch (err) {
      const refused = describeReplicasRefusal(err, conn.replicas, `bucket ${bucket}`);
      if (refused) throw new ClusterError('invalid_options', refused, { cause: err });
      // nats-server refuses to "create" a stream that exists with another configuration.
      if (!(err instanceof JetStreamApiError)) throw err;
      kv = await kvm.open(bucket);
    }
    const status = await kv.status();
    const short = replicasShortfall(status.replicas, conn.replicas, `bucket ${bucket}`, `KV_${bucket}`);
    if (short) throw new ClusterError('invalid_options', short);
    const ttl = status.ttl;
    if (ttl !== (options.ttlMs ?? 0))
      throw new ClusterError(
        'invalid_options',
        `bucket ${bucket} has ttl ${ttl} ms, this host expects ${options.ttlMs ?? 0} ms`,
      );
    return kv;
  });
}

/** What the connected server says of itself; a refused $JS.API.INFO leaves the version to decide. */
async function serverFacts(conn: ClusterConnection): Promise<ServerFacts> {
  const version = conn.nc.info?.version;
  const level = await conn.jsm
    .getAccountInfo()
    .then((info) => info.api.level)
    .catch(() => undefined);
  return {
    ...(version !== undefined ? { version } : {}),
    ...(level !== undefined ? { apiLevel: level } : {}),
  };
}

/**
 * A bucket whose keys expire (libs/kv-expiry): created with limit markers where the server has them (and
 * `wanted` allows), opened as openBucket does; the mechanism it runs is the bucket's, said in `choice`.
 */
export async function openTtlBucket(
  conn: ClusterConnection,
  bucket: string,
  options: { history: number; ttlMs: number; wanted: KvExpiryWanted },
): Promise<{ kv: KV; choice: ExpiryChoice }> {
  const server = await conn.call(`bucket ${bucket}`, () => serverFacts(conn));
  const limits = bucketLimits(options.wanted, server, options.ttlMs);
  const kv = await openBucket(conn, bucket, {
    history: options.history,
    ttlMs: limits.ttl,
    ...(limits.markerTTL ? { markerTtlMs: limits.markerTTL } : {}),
  });
  const status = await conn.call(`bucket ${bucket}`, () => kv.status());
  return {
    kv,
    choice: chooseExpiry(options.wanted, server, { markerTtlMs: status.markerTTL }, `bucket ${bucket}`),
  };
}

/** Creates the object store when missing (with the connection's replica count); an existing one needs as many. */
export async function openObjectStore(conn: ClusterConnection, bucket: string): Promise<ObjectStore> {
  let store: ObjectStore;
  try {
    store = await new Objm(conn.js).create(bucket, { replicas: conn.replicas });
  } catch (err) {
    const refused = describeReplicasRefusal(err, conn.replicas, `object store ${bucket}`);
    if (refused) throw new ClusterError('invalid_options', refused, { cause: err });
    throw err;
  }
  const have = (await store.status()).replicas;
  const short = replicasShortfall(have, conn.replicas, `object store ${bucket}`, `OBJ_${bucket}`);
  if (short) throw new ClusterError('invalid_options', short);
  return store;
}

export function isWrongRevision(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence ||
      err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/**
 * The bucket's keys (delete markers included). Not kv.keys(): on nats-server 2.9 every call leaves an
 * ephemeral consumer behind and can wait ~30 s on a TTL bucket (apps/pipeline/leases/leases.ts); one stream-info
 * request with a subjects filter lists the subjects without a consumer.
 */
export async function listKeys(conn: ClusterConnection, bucket: string): Promise<string[]> {
  const prefix = `$KV.${bucket}.`;
  const info = await conn.jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}>` });
  // No matching subject: the server leaves the map out.
  return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
}
