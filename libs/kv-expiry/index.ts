/**
 * How keys leave a TTL bucket: the bucket-wide TTL (nats-server 2.9) or per-key TTLs with limit markers
 * (2.11+). Pure: which mechanism a bucket runs, and the TTL arithmetic.
 */
export {
  bucketLimits,
  chooseExpiry,
  type ExpiryChoice,
  expiresAt,
  KEY_TTL_MIN_VERSION,
  type KvExpiry,
  type KvExpiryWanted,
  keyTtlHeader,
  keyTtlSeconds,
  markerTtlMs,
  noticeBoundMs,
  type ServerFacts,
  serverHasKeyTtl,
} from './expiry';
