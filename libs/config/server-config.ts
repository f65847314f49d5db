/**
 * The server configuration's shape: every resolved key (ServerConfig), the keys that can be set, and what a
 * setting's spec says (SettingSpec). The settings themselves are settings.ts.
 */
import type { BatchPolicyName } from '../batching';
import type { Parser } from './coerce';
import type { DeviceTarget } from './device';

export const LOG_LEVELS = Object.freeze([
  'fatal',
  'error',
  'warn',
  'info',
  'debug',
  'trace',
  'silent',
] as const);
export type LogLevel = (typeof LOG_LEVELS)[number];

export const RATE_LIMIT_KEYS = Object.freeze(['connection', 'ip'] as const);
export type RateLimitKey = (typeof RATE_LIMIT_KEYS)[number];

/** The resolved server configuration. Every key is present; two are optional by nature (undefined = unset). */
export interface ServerConfig {
  port: number;
  host: string;
  nodes: number;
  workers: number;
  /** Canonical device text, e.g. 'cpu', 'auto', 'cuda:0', 'webgpu:0' or 'cuda:0,cuda:1'. */
  device: string;
  /** The device setting parsed: one entry per node (length = nodes). Derived, not a setting of its own. */
  devices: readonly DeviceTarget[];
  modelsDir: string;
  defaultModel: string;
  batchSize: number;
  batchTimeoutMs: number;
  batchPolicy: BatchPolicyName;
  /** Unset: each model's own objective (`slo_p99_ms` in its config.json); set: every model's. */
  sloP99Ms: number | undefined;
  maxInflightPerClient: number;
  /** Per-client token rate; 0 disables rate limiting. */
  rateLimitRps: number;
  /** Per-client bucket size; defaults to max(1, rateLimitRps), 0 when rate limiting is disabled. */
  rateLimitBurst: number;
  /** Extra rate-limit tokens a `model_error` answer costs its client (0 = none). */
  modelErrorPenalty: number;
  maxModelQueue: number;
  /** Per WebSocket client: unsent bytes that earn a warning, and that close the connection (1013). */
  slowConsumerWarnBytes: number;
  slowConsumerCloseBytes: number;
  /**
   * Deprecated (use trustedProxies): trust the socket's peer as the one proxy and key clients by the
   * rightmost X-Forwarded-For hop. Ignored when trustedProxies is set.
   */
  trustForwardedFor: boolean;
  /**
   * Canonical CIDR list of reverse proxies whose X-Forwarded-For is believed: the client is the rightmost
   * hop that is not one of them. Unset: the socket's peer is the client.
   */
  trustedProxies: string | undefined;
  /** What a rate limit and in-flight cap belong to: each WebSocket connection, or each client address. */
  rateLimitKey: RateLimitKey;
  /** Per node: open WebSocket connections (upgrades past it are refused 503); 0 = no cap. */
  maxConnections: number;
  /** Per node and client address: open WebSocket connections (refused 429); 0 = no cap. */
  maxConnectionsPerIp: number;
  /** A connection with more protocol errors than this in one second is closed with 1008; 0 = never. */
  maxProtocolErrorsPerSecond: number;
  /** A connection refused `rate_limited` more often than this in one second is closed with 1008; 0 = never. */
  maxRateLimitedPerSecond: number;
  /** Identical id-less errors on one connection within this window are answered once (ms); 0 = each. */
  errorCoalesceMs: number;
  maxPayloadBytes: number;
  requestTimeoutMs: number;
  /** PEM certificate (chain) of the data port; with tlsKey the port speaks only TLS (https, wss). */
  tlsCert: string | undefined;
  /** PEM private key of tlsCert (unencrypted). */
  tlsKey: string | undefined;
  /** PEM CA certificate(s): a client certificate presented on the data port must be signed by one. */
  tlsClientCa: string | undefined;
  /** Unset: admin endpoints accept loopback clients only. */
  adminToken: string | undefined;
  /** Web origins allowed to call the admin API (comma-separated, lower case); unset: none. */
  adminAllowedOrigins: string | undefined;
  /** The API keys file (tenants, libs/tenants); unset: anonymous clients. Re-read on every configuration reload. */
  apiKeysFile: string | undefined;
  /** The admin listener (/api/*, /metrics, /health): its address and port, or a unix socket instead. */
  adminHost: string;
  adminPort: number;
  adminSocket: string | undefined;
  /** A file holding the admin token (read at start and on every configuration reload). */
  adminTokenFile: string | undefined;
  /** TLS on the admin listener: certificate chain and key files (PEM), re-read on every configuration reload. */
  adminTlsCert: string | undefined;
  adminTlsKey: string | undefined;
  /** Also serve /metrics on the data port (compatibility; unauthenticated there). */
  metricsOnDataPort: boolean;
  /** Refuse to start when any model or version of the repository fails to load (default: serve the rest). */
  strictModels: boolean;
  /** Unset: auto ((cores - nodes) / (nodes × workers), at least 1). */
  intraOpThreads: number | undefined;
  ringBytes: number;
  shutdownTimeoutMs: number;
  /** How long the supervisor waits for one node's answer to a reload step before counting it as failed. */
  reloadStepTimeoutMs: number;
  logLevel: LogLevel;
  stateDir: string;
  /** NATS URL(s) of the fleet's JetStream; unset: the host works alone (local state dir). */
  cluster: string | undefined;
  /** The fleet's NATS identity and TLS (libs/nats-auth; files read and checked at start). Unset: none. */
  natsUser: string | undefined;
  /** Secret: from the environment or the config file, never a flag. */
  natsPassword: string | undefined;
  natsPasswordFile: string | undefined;
  /** Secret: from the environment or the config file, never a flag. */
  natsToken: string | undefined;
  natsTokenFile: string | undefined;
  natsNkeyFile: string | undefined;
  natsCreds: string | undefined;
  natsTlsCa: string | undefined;
  natsTlsCert: string | undefined;
  natsTlsKey: string | undefined;
  natsTlsFirst: boolean;
  /** Copies JetStream keeps of each fleet bucket and object store this host creates (1; 3 on a NATS cluster). */
  clusterReplicas: number;
  /** The fleet this host joins (with `cluster`): names its buckets and subjects. */
  fleet: string;
  /** This host's name in its fleet; unset: `<hostname>-<port>`. */
  hostId: string | undefined;
  /** How other hosts and operators reach this host; unset: http://<host, or the hostname>:<port>. */
  advertiseUrl: string | undefined;
  /** PEM file of Ed25519 public keys model artifacts pulled from the fleet must be signed by; unset: checksum only. */
  trustedKeysFile: string | undefined;
}

/** Keys that can be set (everything but derived values). */
export type SettingKey = Exclude<keyof ServerConfig, 'devices'>;

export interface SettingSpec<T> {
  env: string;
  default: T;
  /** Default as shown to people when the raw value says little (unset, derived). */
  defaultText?: string;
  help: string;
  /** What a valid value looks like, completing "expected …". */
  expected: string;
  parse: Parser<T>;
  /** Never echo the value in messages. */
  secret?: boolean;
  /** Echo the value only through this (a URL's credentials removed). */
  redact?: (text: string) => string;
}
