/** Which expiry mechanism a bucket runs, and the TTL arithmetic: no broker. */
import {
  bucketLimits,
  chooseExpiry,
  expiresAt,
  keyTtlHeader,
  keyTtlSeconds,
  markerTtlMs,
  noticeBoundMs,
  serverHasKeyTtl,
} from './expiry';

describe('serverHasKeyTtl', () => {
  test('the API level decides when the server reports one', () => {
    expect(serverHasKeyTtl({ version: '2.15.2', apiLevel: 5 })).toBe(true);
    expect(serverHasKeyTtl({ version: '2.11.0', apiLevel: 1 })).toBe(true);
    expect(serverHasKeyTtl({ version: '2.11.0', apiLevel: 0 })).toBe(false);
  });

  test('otherwise the version: 2.11.0 and later', () => {
    expect(serverHasKeyTtl({ version: '2.9.10' })).toBe(false);
    expect(serverHasKeyTtl({ version: '2.10.29' })).toBe(false);
    expect(serverHasKeyTtl({ version: '2.11.0' })).toBe(true);
    expect(serverHasKeyTtl({ version: 'v2.12.1' })).toBe(true);
    expect(serverHasKeyTtl({ version: '3.0.0-beta' })).toBe(true);
    expect(serverHasKeyTtl({ version: '1.99.99' })).toBe(false);
    expect(serverHasKeyTtl({ version: 'garbage' })).toBe(false);
    expect(serverHasKeyTtl({})).toBe(false);
  });
});

describe('TTL arithmetic', () => {
  test('a key TTL is whole seconds, rounded up (the server truncates), at least 1 s', () => {
    expect(keyTtlSeconds(1000)).toBe(1);
    expect(keyTtlSeconds(1001)).toBe(2);
    expect(keyTtlSeconds(2500)).toBe(3);
    expect(keyTtlSeconds(10_000)).toBe(10);
    expect(keyTtlHeader(10_000)).toBe('10s');
    expect(keyTtlHeader(1500)).toBe('2s');
    expect(() => keyTtlSeconds(999)).toThrow(RangeError);
    expect(() => keyTtlSeconds(Number.NaN)).toThrow(RangeError);
  });

  test('a key never expires before ttlMs; max_age (the backstop) decides a TTL of odd milliseconds', () => {
    for (const ttl of [1000, 1500, 2000, 2999, 10_000]) {
      expect(expiresAt('key', ttl, 5000)).toBe(5000 + ttl);
      expect(expiresAt('bucket', ttl, 5000)).toBe(5000 + ttl);
      expect(expiresAt('key', ttl, 0)).toBeLessThanOrEqual(keyTtlSeconds(ttl) * 1000);
    }
  });

  test('a bucket-mode observer learns one poll later at most; a key-mode one from its watch', () => {
    expect(noticeBoundMs('bucket', 2000, 667)).toBe(2667);
    expect(noticeBoundMs('key', 2000, 667)).toBe(2000);
  });

  test('markers live as long as a key, and never under the server minimum of 1 s', () => {
    expect(markerTtlMs(10_000)).toBe(10_000);
    expect(markerTtlMs(1000)).toBe(1000);
    expect(markerTtlMs(10)).toBe(1000);
  });
});

describe('mode selection', () => {
  const current = { version: '2.15.2', apiLevel: 5 };
  const old = { version: '2.9.10' };

  test('a bucket is created with markers only where the server has them and they are wanted', () => {
    expect(bucketLimits('auto', current, 3000)).toEqual({ ttl: 3000, markerTTL: 3000 });
    expect(bucketLimits('auto', old, 3000)).toEqual({ ttl: 3000 });
    expect(bucketLimits('bucket', current, 3000)).toEqual({ ttl: 3000 });
  });

  test('auto on a current server with a marker bucket: per-key TTLs', () => {
    const choice = chooseExpiry('auto', current, { markerTtlMs: 3000 }, 'lease bucket b');
    expect(choice).toMatchObject({ expiry: 'key', warn: false });
    expect(choice.why).toContain('per-key TTL');
    expect(choice.why).toContain('2.15.2');
  });

  test('auto on 2.9: the bucket-wide TTL, and why', () => {
    const choice = chooseExpiry('auto', old, { markerTtlMs: 0 }, 'lease bucket b');
    expect(choice).toMatchObject({ expiry: 'bucket', warn: false });
    expect(choice.why).toContain('nats-server 2.9.10 has no per-key TTL');
  });

  test('a bucket created without markers keeps the bucket-wide TTL on a current server, with a warning', () => {
    const choice = chooseExpiry('auto', current, { markerTtlMs: 0 }, 'lease bucket b');
    expect(choice).toMatchObject({ expiry: 'bucket', warn: true });
    expect(choice.why).toMatch(/^lease bucket b was created without limit markers/);
    expect(choice.why).toContain('delete the bucket');
  });

  test('asked for the bucket-wide TTL: that, whatever the bucket has', () => {
    expect(chooseExpiry('bucket', current, { markerTtlMs: 3000 }, 'b')).toMatchObject({
      expiry: 'bucket',
      warn: false,
    });
    expect(chooseExpiry('bucket', old, { markerTtlMs: 0 }, 'b').expiry).toBe('bucket');
  });

  test('markers on a server that reports no support (a downgrade): the bucket-wide TTL', () => {
    expect(chooseExpiry('auto', old, { markerTtlMs: 3000 }, 'b').expiry).toBe('bucket');
  });
});
