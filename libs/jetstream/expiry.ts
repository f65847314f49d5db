/**
 * How the keys of a TTL bucket (partition leases, instance and host heartbeats) leave it once their writer
 * stops rewriting them. Two mechanisms, one chosen per bucket when it is opened:
 *
 * - `bucket`: the bucket's max_age removes a key not rewritten within the TTL (nats-server 2.9 has nothing
 *   finer); nobody is told, so a taker or observer finds out by polling.
 * - `key`: every write carries `Nats-TTL` (per-message TTL, nats-server 2.11+) and the bucket has limit markers
 *   (`subject_delete_marker_ttl`): when a key expires the server writes a marker that every watcher receives, so
 *   a taker learns of an expiry from its watch. max_age stays as the backstop (keys written by an older build, a
 *   stream leader still on 2.9 in a rolling upgrade, delete markers), so both kinds of writer share a bucket.
 *
 * Pure: no I/O; the callers read the server and the bucket and act on the answer.
 */

export type KvExpiry = 'bucket' | 'key';

/** What a caller asks for: the best the server and bucket offer, or the bucket-wide TTL only. */
export type KvExpiryWanted = 'auto' | 'bucket';

/** The first release with per-message TTLs and limit markers (JetStream API level 1). */
export const KEY_TTL_MIN_VERSION = '2.11.0';

/** What the connected server says of itself: `nc.info.version` and `$JS.API.INFO`'s `api.level` (2.11+). */
export interface ServerFacts {
  version?: string;
  apiLevel?: number;
}

function parseVersion(version: string): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/**
 * Whether the server takes `Nats-TTL` and limit markers. The JetStream API level decides when the server
 * reports one (ADR-48: level 1 or newer); otherwise the version does (2.9 and 2.10 report no level).
 */
export function serverHasKeyTtl(server: ServerFacts): boolean {
  if (typeof server.apiLevel === 'number') return server.apiLevel >= 1;
  const have = server.version ? parseVersion(server.version) : undefined;
  const need = parseVersion(KEY_TTL_MIN_VERSION)!;
  if (!have) return false;
  for (let i = 0; i < 3; i++) if (have[i] !== need[i]) return have[i]! > need[i]!;
  return true;
}

/**
 * The whole seconds a key's `Nats-TTL` says. The server truncates a TTL to whole seconds ("2500ms" expires
 * after 2 s, seen on 2.15.2) and refuses one under 1 s: rounded up here, so a key never goes before ttlMs.
 */
export function keyTtlSeconds(ttlMs: number): number {
  if (!Number.isFinite(ttlMs) || ttlMs < 1000)
    throw new RangeError(`a key TTL must be >= 1000 ms, got ${ttlMs}`);
  return Math.ceil(ttlMs / 1000);
}

/** The `Nats-TTL` header value for ttlMs (a Go duration in whole seconds). */
export function keyTtlHeader(ttlMs: number): string {
  return `${keyTtlSeconds(ttlMs)}s`;
}

/**
 * When the server removes a key written at `writtenAt` (its stored timestamp), not counting the server's
 * own lag: max_age in both modes, and in `key` mode the per-key TTL too, whichever is first. A TTL that is
 * not whole seconds rounds the per-key TTL up, so max_age decides then.
 */
export function expiresAt(expiry: KvExpiry, ttlMs: number, writtenAt: number): number {
  const byAge = writtenAt + ttlMs;
  return expiry === 'key' ? Math.min(byAge, writtenAt + keyTtlSeconds(ttlMs) * 1000) : byAge;
}

/**
 * The most a taker or observer waits, after a key's last write, to know it is gone (server lag apart): the
 * expiry, plus in `bucket` mode one poll period (nothing tells it sooner).
 */
export function noticeBoundMs(expiry: KvExpiry, ttlMs: number, pollEveryMs: number): number {
  return expiresAt(expiry, ttlMs, 0) + (expiry === 'bucket' ? pollEveryMs : 0);
}

/** How long the server keeps a limit marker: as long as a key lives (markers must be >= 1 s). */
export function markerTtlMs(ttlMs: number): number {
  return Math.max(1000, ttlMs);
}

/** The KV limits (nats.js KvOptions `ttl`, `markerTTL`) a bucket is created with. */
export function bucketLimits(
  wanted: KvExpiryWanted,
  server: ServerFacts,
  ttlMs: number,
): { ttl: number; markerTTL?: number } {
  return wanted === 'auto' && serverHasKeyTtl(server)
    ? { ttl: ttlMs, markerTTL: markerTtlMs(ttlMs) }
    : { ttl: ttlMs };
}

export interface ExpiryChoice {
  expiry: KvExpiry;
  /** For the log line that says which mechanism runs, and why. */
  why: string;
  /** The bucket and the server disagree with what was asked: say it as a warning. */
  warn: boolean;
}

/**
 * The mechanism for a bucket just opened (created or found). `markerTtlMs` is the bucket's limit-marker TTL
 * (KvStatus.markerTTL; 0 when it has none). A bucket keeps what it was created with: one created without
 * markers (on 2.9, or by an older StreamInfer) runs `bucket` even on a current server, and says so.
 */
export function chooseExpiry(
  wanted: KvExpiryWanted,
  server: ServerFacts,
  bucket: { markerTtlMs: number },
  what: string,
): ExpiryChoice {
  const version = server.version ?? 'unknown';
  if (wanted === 'bucket')
    return {
      expiry: 'bucket',
      why: `${what}: bucket-wide TTL (max_age) as asked${bucket.markerTtlMs > 0 ? '; its limit markers still reach watchers' : ''}`,
      warn: false,
    };
  if (!serverHasKeyTtl(server))
    return {
      expiry: 'bucket',
      why: `${what}: nats-server ${version} has no per-key TTL (${KEY_TTL_MIN_VERSION}+): bucket-wide TTL (max_age), expiries found by polling`,
      warn: false,
    };
  if (bucket.markerTtlMs <= 0)
    return {
      expiry: 'bucket',
      why:
        `${what} was created without limit markers (on nats-server < ${KEY_TTL_MIN_VERSION} or by an older ` +
        'StreamInfer): bucket-wide TTL (max_age), expiries found by polling; delete the bucket while nothing ' +
        'uses it to have it re-created with per-key TTLs',
      warn: true,
    };
  return {
    expiry: 'key',
    why: `${what}: per-key TTL and limit markers (nats-server ${version}): expiries reach watchers`,
    warn: false,
  };
}
