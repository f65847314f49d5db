/** KvLease and LeaseBucket against an in-memory stand-in for one KV bucket: no broker. */
import { JetStreamApiCodes, JetStreamApiError, type JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { KvLease, LeaseBucket } from './lease';

const wrongRevision = () =>
  new JetStreamApiError({
    code: 400,
    err_code: JetStreamApiCodes.StreamWrongLastSequence,
    description: 'wrong last sequence',
  });

/** One key's last revision and value, with the compare-and-set rules of a KV bucket. */
function fakeBucket() {
  let seq = 0;
  const keys = new Map<string, { revision: number; value: string }>();
  const published: Array<{ subject: string; opts: unknown }> = [];
  const encoder = new TextEncoder();
  const kv = {
    async create(key: string, value: string) {
      if (keys.has(key)) throw wrongRevision();
      keys.set(key, { revision: ++seq, value });
      return seq;
    },
    async update(key: string, value: string, previous: number) {
      if (keys.get(key)?.revision !== previous) throw wrongRevision();
      keys.set(key, { revision: ++seq, value });
      return seq;
    },
    async put(key: string, value: string) {
      keys.set(key, { revision: ++seq, value });
      return seq;
    },
    async get(key: string) {
      const entry = keys.get(key);
      return entry
        ? { operation: 'PUT', revision: entry.revision, value: encoder.encode(entry.value) }
        : null;
    },
    async delete(key: string, opts?: { previousSeq?: number }) {
      if (opts?.previousSeq !== undefined && keys.get(key)?.revision !== opts.previousSeq)
        throw wrongRevision();
      keys.delete(key);
    },
  };
  const js = {
    async publish(subject: string, _value: string, opts: { expect?: { lastSubjectSequence?: number } }) {
      published.push({ subject, opts });
      return { seq: ++seq };
    },
  };
  return {
    keys,
    published,
    bucket: (expiry: 'bucket' | 'key' = 'bucket') =>
      new LeaseBucket(kv as unknown as KV, js as unknown as JetStreamClient, 'b', 3000, expiry),
    steal(key: string, value: string) {
      keys.set(key, { revision: ++seq, value });
    },
  };
}

describe('KvLease', () => {
  test('taken by a create: the token is the claim revision; renewals move the revision, never the token', async () => {
    const fake = fakeBucket();
    const lease = await KvLease.take(fake.bucket(), 'k', 'me', 'absent');
    expect(lease.token).toBe(lease.revision);
    expect(lease.fresh()).toBe(true);
    expect(await lease.renew(1000)).toEqual({ outcome: 'renewed' });
    expect(lease.revision).toBeGreaterThan(lease.token);
    expect(fake.keys.get('k')?.revision).toBe(lease.revision);
  });

  test('a second take of a held key fails as a wrong revision', async () => {
    const fake = fakeBucket();
    const bucket = fake.bucket();
    await KvLease.take(bucket, 'k', 'me', 'absent');
    await expect(KvLease.take(bucket, 'k', 'other', 'absent')).rejects.toBeInstanceOf(JetStreamApiError);
  });

  test('another writer on the key: lost; our own value under a newer revision: kept', async () => {
    const fake = fakeBucket();
    const lease = await KvLease.take(fake.bucket(), 'k', 'me', 'absent');
    fake.steal('k', 'me'); // an earlier renewal that timed out, yet landed
    expect(await lease.renew(1000)).toEqual({ outcome: 'kept' });
    expect(lease.revision).toBe(fake.keys.get('k')?.revision);
    fake.steal('k', 'other');
    expect(await lease.renew(1000)).toEqual({ outcome: 'lost' });
  });

  test('release deletes only our revision', async () => {
    const fake = fakeBucket();
    const lease = await KvLease.take(fake.bucket(), 'k', 'me', 'absent');
    fake.steal('k', 'other');
    await lease.release();
    expect(fake.keys.get('k')?.value).toBe('other');
    const own = await KvLease.take(fake.bucket(), 'j', 'me', 'absent');
    await own.release();
    expect(fake.keys.has('j')).toBe(false);
  });

  test('per-key TTL mode: a renewal is a publish with Nats-TTL and the expected revision', async () => {
    const fake = fakeBucket();
    const lease = await KvLease.take(fake.bucket('key'), 'k', 'me', 'absent');
    await lease.renew(500);
    expect(fake.published).toEqual([
      { subject: '$KV.b.k', opts: { ttl: '3s', expect: { lastSubjectSequence: lease.token }, timeout: 500 } },
    ]);
  });
});
