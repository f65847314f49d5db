/** Test support for libs/config: the ConfigError a call throws, and every setting's environment variable. */
import type { SettingKey } from './index';
import { ConfigError } from './index';

/** The ConfigError `fn` throws (the test fails when it throws anything else, or nothing). */
export function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

/** Every setting's environment variable, written out (a renamed variable fails the tests). */
export const ENV: Record<SettingKey, string> = {
  port: 'STREAMINFER_PORT',
  host: 'STREAMINFER_HOST',
  nodes: 'STREAMINFER_NODES',
  workers: 'STREAMINFER_WORKERS',
  device: 'STREAMINFER_DEVICE',
  modelsDir: 'STREAMINFER_MODELS_DIR',
  defaultModel: 'STREAMINFER_MODEL_NAME',
  batchSize: 'STREAMINFER_BATCH_SIZE',
  batchTimeoutMs: 'STREAMINFER_BATCH_TIMEOUT_MS',
  batchPolicy: 'STREAMINFER_BATCH_POLICY',
  sloP99Ms: 'STREAMINFER_SLO_P99_MS',
  maxInflightPerClient: 'STREAMINFER_MAX_QUEUE_SIZE',
  rateLimitRps: 'STREAMINFER_RATE_LIMIT_RPS',
  rateLimitBurst: 'STREAMINFER_RATE_LIMIT_BURST',
  modelErrorPenalty: 'STREAMINFER_MODEL_ERROR_PENALTY',
  maxModelQueue: 'STREAMINFER_MAX_MODEL_QUEUE',
  slowConsumerWarnBytes: 'STREAMINFER_SLOW_CONSUMER_WARN_BYTES',
  slowConsumerCloseBytes: 'STREAMINFER_SLOW_CONSUMER_CLOSE_BYTES',
  trustForwardedFor: 'STREAMINFER_TRUST_FORWARDED_FOR',
  trustedProxies: 'STREAMINFER_TRUSTED_PROXIES',
  rateLimitKey: 'STREAMINFER_RATE_LIMIT_KEY',
  maxConnections: 'STREAMINFER_MAX_CONNECTIONS',
  maxConnectionsPerIp: 'STREAMINFER_MAX_CONNECTIONS_PER_IP',
  maxProtocolErrorsPerSecond: 'STREAMINFER_MAX_PROTOCOL_ERRORS_PER_SECOND',
  maxRateLimitedPerSecond: 'STREAMINFER_MAX_RATE_LIMITED_PER_SECOND',
  errorCoalesceMs: 'STREAMINFER_ERROR_COALESCE_MS',
  maxPayloadBytes: 'STREAMINFER_MAX_PAYLOAD_BYTES',
  requestTimeoutMs: 'STREAMINFER_REQUEST_TIMEOUT_MS',
  tlsCert: 'STREAMINFER_TLS_CERT',
  tlsKey: 'STREAMINFER_TLS_KEY',
  tlsClientCa: 'STREAMINFER_TLS_CLIENT_CA',
  adminToken: 'STREAMINFER_ADMIN_TOKEN',
  adminAllowedOrigins: 'STREAMINFER_ADMIN_ALLOWED_ORIGINS',
  apiKeysFile: 'STREAMINFER_API_KEYS_FILE',
  adminHost: 'STREAMINFER_ADMIN_HOST',
  adminPort: 'STREAMINFER_ADMIN_PORT',
  adminSocket: 'STREAMINFER_ADMIN_SOCKET',
  adminTokenFile: 'STREAMINFER_ADMIN_TOKEN_FILE',
  adminTlsCert: 'STREAMINFER_ADMIN_TLS_CERT',
  adminTlsKey: 'STREAMINFER_ADMIN_TLS_KEY',
  metricsOnDataPort: 'STREAMINFER_METRICS_ON_DATA_PORT',
  strictModels: 'STREAMINFER_STRICT_MODELS',
  intraOpThreads: 'STREAMINFER_INTRA_OP_THREADS',
  ringBytes: 'STREAMINFER_RING_BYTES',
  shutdownTimeoutMs: 'STREAMINFER_SHUTDOWN_TIMEOUT_MS',
  reloadStepTimeoutMs: 'STREAMINFER_RELOAD_STEP_TIMEOUT_MS',
  logLevel: 'STREAMINFER_LOG_LEVEL',
  stateDir: 'STREAMINFER_STATE_DIR',
  cluster: 'STREAMINFER_CLUSTER',
  natsUser: 'STREAMINFER_NATS_USER',
  natsPassword: 'STREAMINFER_NATS_PASSWORD',
  natsPasswordFile: 'STREAMINFER_NATS_PASSWORD_FILE',
  natsToken: 'STREAMINFER_NATS_TOKEN',
  natsTokenFile: 'STREAMINFER_NATS_TOKEN_FILE',
  natsNkeyFile: 'STREAMINFER_NATS_NKEY_FILE',
  natsCreds: 'STREAMINFER_NATS_CREDS',
  natsTlsCa: 'STREAMINFER_NATS_TLS_CA',
  natsTlsCert: 'STREAMINFER_NATS_TLS_CERT',
  natsTlsKey: 'STREAMINFER_NATS_TLS_KEY',
  natsTlsFirst: 'STREAMINFER_NATS_TLS_FIRST',
  clusterReplicas: 'STREAMINFER_CLUSTER_REPLICAS',
  fleet: 'STREAMINFER_FLEET',
  hostId: 'STREAMINFER_HOST_ID',
  advertiseUrl: 'STREAMINFER_ADVERTISE_URL',
  trustedKeysFile: 'STREAMINFER_TRUSTED_KEYS',
};
