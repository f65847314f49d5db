/** What the fleet's KV buckets share: opening with a checked TTL, CAS errors, listing keys without kv.keys(). */
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { ClusterConnection } from './connection';
import { ClusterError } from './errors';

/** Creates the bucket when missing; an existing one must have the same TTL, or keys expire on its clock. */
export function openBucket(
  conn: ClusterConnection,
  bucket: string,
  options: { history: number; ttlMs?: number },
): Promise<KV> {
  return conn.call(`bucket ${bucket}`, async () => {
    const kvm = new Kvm(conn.js);
    let kv: KV;
    try {
      kv = await kvm.create(bucket, { history: options.history, ttl: options.ttlMs ?? 0 });
    } catch (err) {
      // nats-server refuses to "create" a stream that exists with another configuration.
      if (!(err instanceof JetStreamApiError)) throw err;
      kv = await kvm.open(bucket);
    }
    const ttl = (await kv.status()).ttl;
    if (ttl !== (options.ttlMs ?? 0))
      throw new ClusterError(
        'invalid_options',
        `bucket ${bucket} has ttl ${ttl} ms, this host expects ${options.ttlMs ?? 0} ms`,
      );
    return kv;
  });
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
 * ephemeral consumer behind and can wait ~30 s on a TTL bucket (apps/stream/leases.ts); one stream-info
 * request with a subjects filter lists the subjects without a consumer.
 */
export async function listKeys(conn: ClusterConnection, bucket: string): Promise<string[]> {
  const prefix = `$KV.${bucket}.`;
  const info = await conn.jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}>` });
  // No matching subject: the server leaves the map out.
  return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
}
