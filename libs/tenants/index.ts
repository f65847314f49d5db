export {
  answeredSubprotocol,
  BEARER_PROTOCOL_PREFIX,
  bearerKey,
  hashKey,
  MAX_KEY_LENGTH,
  SUBPROTOCOL,
  subprotocolKey,
} from './credentials';
export { TenantFileError } from './errors';
export {
  MAX_KEYS_PER_TENANT,
  MAX_TENANTS,
  parseTenantFile,
  TENANT_NAME,
  type TenantSpec,
} from './file';
export { clampPriority } from './priority';
export { REBALANCE_RETRY_MS, ShareBucket } from './share-bucket';
export {
  type Share,
  type ShareOptions,
  ShareSplitter,
  type TenantDemand,
  type TenantLimits,
} from './shares';
