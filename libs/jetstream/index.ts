/**
 * NATS JetStream as the fleet and the pipeline use it: one connection wrapper, KV buckets and object stores
 * opened with checked TTL and replicas, keys listed without consumers, the KV lease both build on, and how keys
 * of a TTL bucket expire (expiry.ts: pure). Not a pure lib: NATS I/O is its job. Failures are thrown as the
 * caller's typed error (errors.ts).
 */
export {
  type BucketOptions,
  isWrongRevision,
  type JetStreamContext,
  listKeys,
  liveKeys,
  openBucket,
  openObjectStore,
  openTtlBucket,
  serverFacts,
} from './buckets';
export {
  isTransportError,
  JetStreamConnection,
  type JetStreamConnectOptions,
  type NatsConnection,
  openJetStream,
} from './connection';
export type { FailWith, JetStreamFailure } from './errors';
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
export { KvLease, LeaseBucket, type NatsCall, type RenewResult } from './lease';
export { createPlaced, PEER_OFFLINE_WAIT_MS, type PlacementWait } from './placement';
