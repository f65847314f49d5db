/**
 * KV buckets and object stores as the fleet and the pipeline open them: created when missing with the
 * connection's replica count; an existing one must have at least as many replicas and the same TTL (or its keys
 * would expire on its clock). Also compare-and-set errors, and listing keys without kv.keys().
 */
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { type ObjectStore, Objm } from '@nats-io/obj';
import { describeReplicasRefusal, replicasShortfall } from '../nats-auth';
import type { FailWith } from './errors';
import {
  bucketLimits,
  chooseExpiry,
  type ExpiryChoice,
  type KvExpiryWanted,
  type ServerFacts,
} from './expiry';
import { createPlaced } from './placement';

/** What opening a bucket needs of a connection (JetStreamConnection has it). */
export interface JetStreamContext {
  js: JetStreamClient;
  jsm: JetStreamManager;
  nc: { info?: { version?: string } | undefined };
  /** The replica count a bucket or store is created with. */
  replicas: number;
}

export interface BucketOptions {
  history: number;
  /** The bucket's max_age (0 or absent: none); an existing bucket must have the same. */
  ttlMs?: number;
  /** Limit markers (per-key TTLs, nats-server 2.11+): how long the server keeps one. */
  markerTtlMs?: number;
  /** How messages name the bucket, e.g. `lease bucket b`. */
  what: string;
  fail: FailWith;
}

/** What the connected server says of itself; a refused $JS.API.INFO leaves the version to decide. */
export async function serverFacts(conn: Pick<JetStreamContext, 'jsm' | 'nc'>): Promise<ServerFacts> {
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
 * Creates the bucket when missing; an existing one must have the same TTL and at least the replicas asked for
 * (`mismatch` otherwise). A replica count the server refuses is `invalid_options`; other errors pass as they are.
 */
export async function openBucket(
  conn: JetStreamContext,
  bucket: string,
  options: BucketOptions,
): Promise<KV> {
  const { fail, what } = options;
  const kvm = new Kvm(conn.js);
  let kv: KV;
  try {
    kv = await createPlaced(() =>
      kvm.create(bucket, {
        history: options.history,
        ttl: options.ttlMs ?? 0,
        replicas: conn.replicas,
        ...(options.markerTtlMs ? { markerTTL: options.markerTtlMs } : {}),
      }),
    );
  } catch (err) {
    const refused = describeReplicasRefusal(err, conn.replicas, what);
    if (refused) throw fail('invalid_options', refused, { cause: err });
    // nats-server refuses to "create" a stream that exists with another configuration (a race of two creates).
    if (!(err instanceof JetStreamApiError)) throw err;
    kv = await kvm.open(bucket);
  }
  const status = await kv.status();
  const short = replicasShortfall(status.replicas, conn.replicas, what, `KV_${bucket}`);
  if (short) throw fail('mismatch', short);
  if (status.ttl !== (options.ttlMs ?? 0))
    throw fail('mismatch', `${what} has ttl ${status.ttl} ms, expected ${options.ttlMs ?? 0} ms`);
  return kv;
}

/**
 * A bucket whose keys expire (expiry.ts): created with limit markers where the server has them (and `wanted`
 * allows), opened as openBucket does; the mechanism it runs is the bucket's, said in `choice`.
 */
export async function openTtlBucket(
  conn: JetStreamContext,
  bucket: string,
  options: Omit<BucketOptions, 'ttlMs' | 'markerTtlMs'> & { ttlMs: number; wanted: KvExpiryWanted },
): Promise<{ kv: KV; choice: ExpiryChoice }> {
  const server = await serverFacts(conn);
  const limits = bucketLimits(options.wanted, server, options.ttlMs);
  const kv = await openBucket(conn, bucket, {
    history: options.history,
    ttlMs: limits.ttl,
    ...(limits.markerTTL ? { markerTtlMs: limits.markerTTL } : {}),
    what: options.what,
    fail: options.fail,
  });
  const status = await kv.status();
  return {
    kv,
    choice: chooseExpiry(options.wanted, server, { markerTtlMs: status.markerTTL }, options.what),
  };
}

/** Creates the object store when missing; an existing one needs as many replicas (`mismatch` otherwise). */
export async function openObjectStore(
  conn: Pick<JetStreamContext, 'js' | 'replicas'>,
  bucket: string,
  options: { what: string; fail: FailWith },
): Promise<ObjectStore> {
  let store: ObjectStore;
  try {
    store = await createPlaced(() => new Objm(conn.js).create(bucket, { replicas: conn.replicas }));
  } catch (err) {
    const refused = describeReplicasRefusal(err, conn.replicas, options.what);
    if (refused) throw options.fail('invalid_options', refused, { cause: err });
    throw err;
  }
  const have = (await store.status()).replicas;
  const short = replicasShortfall(have, conn.replicas, options.what, `OBJ_${bucket}`);
  if (short) throw options.fail('mismatch', short);
  return store;
}

/** A compare-and-set (create, update, delete on a revision) lost: someone else wrote the key. */
export function isWrongRevision(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence ||
      err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/**
 * The bucket's keys matching `filter` (delete markers included). Not kv.keys(): on nats-server 2.9 every call
 * leaves an ephemeral consumer behind (seen: 20 listings, 20 consumers still there 32 s later; one pass per
 * lease renewal made that thousands a day) and can wait ~30 s on a TTL bucket; one stream-info request with a
 * subjects filter lists the subjects without a consumer.
 */
export async function listKeys(jsm: JetStreamManager, bucket: string, filter = '>'): Promise<string[]> {
  const prefix = `$KV.${bucket}.`;
  const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}${filter}` });
  // No matching subject: the server leaves the map out.
  return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
}

/** The keys whose last entry is a PUT: listKeys lists a deleted key until max_age drops its delete marker. */
export async function liveKeys(kv: KV, keys: readonly string[]): Promise<string[]> {
  const live = await Promise.all(
    keys.map(async (key) => ((await kv.get(key))?.operation === 'PUT' ? key : null)),
  );
  return live.filter((key): key is string => key !== null);
}
