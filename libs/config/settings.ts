import { formatCidrList, parseCidrList } from '../address';
import { BATCH_POLICY_NAMES, type BatchPolicyName } from '../batching';
import { redactNatsUrls } from '../nats-auth';
import { decimal, flag, integer, oneOf, type Parser, powerOfTwo, text } from './coerce';
import { type DeviceTarget, formatDeviceList, parseDeviceList } from './device';

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

/** The admin listener's port unless set (the CLI's default address too). */
export const ADMIN_PORT = 8001;

const KIB = 1024;
const MIB = 1024 * KIB;
const GIB = 1024 * MIB;
const HOUR_MS = 3_600_000;

const SAFE_TEXT = /^[^\s\0]+$/;
const PATH_TEXT = /^[^\0]+$/;
const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const NATS_URLS = /^(nats|tls):\/\/[^\s,]+(,(nats|tls):\/\/[^\s,]+)*$/;
const NATS_USER = /^[^\s\0]{1,256}$/;
// Fleet names go into bucket names and subjects; host ids into KV keys and subjects.
const FLEET_NAME = /^[A-Za-z0-9_-]{1,32}$/;
const HOST_ID = /^[A-Za-z0-9_-]{1,64}$/;
const HTTP_URL = /^https?:\/\/[^\s]+$/;
/** A web origin as browsers send it: scheme://host[:port], nothing after. */
const ORIGIN = /^https?:\/\/[a-z0-9.-]+(?::\d{1,5})?$|^https?:\/\/\[[0-9a-f:.]+\](?::\d{1,5})?$/;

/** Origins, comma-separated (a file may give an array): written back lower case, one comma between. */
const originsParser: Parser<string | undefined> = (raw) => {
  const items = Array.isArray(raw) ? raw : typeof raw === 'string' ? raw.split(',') : undefined;
  if (!items || items.length === 0 || items.length > 64) return undefined;
  const origins: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') return undefined;
    const origin = item.trim().toLowerCase();
    if (!ORIGIN.test(origin)) return undefined;
    origins.push(origin);
  }
  return { value: origins.join(',') };
};

const deviceParser: Parser<string> = (raw) => {
  if (typeof raw !== 'string') return undefined;
  const targets = parseDeviceList(raw);
  return targets === undefined ? undefined : { value: formatDeviceList(targets) };
};

/** A comma list of IPv4/IPv6 prefixes or addresses, kept in canonical form (`10.0.0.0/8,::1/128`). */
const proxiesParser: Parser<string> = (raw) => {
  if (typeof raw !== 'string' || raw.length > 16_384) return undefined;
  const parsed = parseCidrList(raw);
  return parsed.ok ? { value: formatCidrList(parsed.cidrs) } : undefined;
};

const intraOpParser: Parser<number | undefined> = (raw) => {
  if (typeof raw === 'string' && raw.toLowerCase() === 'auto') return { value: undefined };
  const parsed = integer(0, 1024)(raw);
  if (parsed === undefined) return undefined;
  return { value: parsed.value === 0 ? undefined : parsed.value };
};

/** The settings, in display order. Names and defaults are part of the public interface: keep them. */
export const SETTINGS: { readonly [K in SettingKey]: SettingSpec<ServerConfig[K]> } = {
  port: {
    env: 'STREAMINFER_PORT',
    default: 8000,
    help: 'data port for WebSocket, HTTP inference and health (0 = pick a free port)',
    expected: 'an integer between 0 and 65535',
    parse: integer(0, 65535),
  },
  host: {
    env: 'STREAMINFER_HOST',
    default: '0.0.0.0',
    help: 'address to listen on',
    expected: 'a host name or IP address',
    parse: text(SAFE_TEXT, 255),
  },
  nodes: {
    env: 'STREAMINFER_NODES',
    default: 1,
    help: 'gateway processes sharing the data port',
    expected: 'an integer between 1 and 64',
    parse: integer(1, 64),
  },
  workers: {
    env: 'STREAMINFER_WORKERS',
    default: 1,
    help: 'inference worker threads per node (Piscina pool size)',
    expected: 'an integer between 1 and 64',
    parse: integer(1, 64),
  },
  device: {
    env: 'STREAMINFER_DEVICE',
    default: 'cpu',
    help: 'cpu | auto | cuda[:N] | webgpu[:N], or one per node as a comma list (cuda:0,cuda:1)',
    expected: 'cpu, auto, cuda[:N], webgpu[:N], or a comma list, one entry per node',
    parse: deviceParser,
  },
  modelsDir: {
    env: 'STREAMINFER_MODELS_DIR',
    default: './models',
    help: 'model repository directory',
    expected: 'a directory path',
    parse: text(PATH_TEXT, 4096),
  },
  defaultModel: {
    env: 'STREAMINFER_MODEL_NAME',
    default: 'echo',
    help: 'model used by requests that name none',
    expected: 'a model name (letters, digits, ".", "_", "-"; not starting with "." "_" or "-")',
    parse: text(MODEL_NAME, 128),
  },
  batchSize: {
    env: 'STREAMINFER_BATCH_SIZE',
    default: 16,
    help: 'default max items per model run (1 = no batching)',
    expected: 'an integer between 1 and 4096',
    parse: integer(1, 4096),
  },
  batchTimeoutMs: {
    env: 'STREAMINFER_BATCH_TIMEOUT_MS',
    default: 50,
    help: 'default max wait (ms) for a batch to fill, from the oldest item',
    expected: 'a number between 0 and 60000',
    parse: decimal(0, 60_000),
  },
  batchPolicy: {
    env: 'STREAMINFER_BATCH_POLICY',
    default: 'greedy',
    help: 'default batch policy: fixed | greedy | adaptive',
    expected: `one of ${BATCH_POLICY_NAMES.join(', ')}`,
    parse: oneOf(BATCH_POLICY_NAMES),
  },
  sloP99Ms: {
    env: 'STREAMINFER_SLO_P99_MS',
    default: undefined,
    defaultText: "unset (each model's slo_p99_ms)",
    help: 'p99 latency objective (ms) for every model, overriding their own; a model with one batches adaptively',
    expected: 'a number greater than 0 and at most 3600000',
    parse: decimal(0, HOUR_MS, { exclusiveMin: true }),
  },
  maxInflightPerClient: {
    env: 'STREAMINFER_MAX_QUEUE_SIZE',
    default: 1000,
    help: 'per-client cap on requests in flight (warning at 80%)',
    expected: 'an integer between 1 and 1000000',
    parse: integer(1, 1_000_000),
  },
  rateLimitRps: {
    env: 'STREAMINFER_RATE_LIMIT_RPS',
    default: 100,
    help: 'per-client request rate (token bucket refill per second; 0 = unlimited)',
    expected: 'a number between 0 and 1000000 (0 = unlimited)',
    parse: decimal(0, 1_000_000),
  },
  rateLimitBurst: {
    env: 'STREAMINFER_RATE_LIMIT_BURST',
    default: 100,
    defaultText: 'max(1, rateLimitRps)',
    help: 'per-client token bucket size (default: the rate, at least 1)',
    expected: 'a number between 1 and 10000000',
    parse: decimal(1, 10_000_000),
  },
  modelErrorPenalty: {
    env: 'STREAMINFER_MODEL_ERROR_PENALTY',
    default: 9,
    help: 'extra rate-limit tokens a model_error answer costs its client (9: a client whose every request fails the model gets 1/10 of the rate; 0 = none)',
    expected: 'a number between 0 and 1000000',
    parse: decimal(0, 1_000_000),
  },
  maxModelQueue: {
    env: 'STREAMINFER_MAX_MODEL_QUEUE',
    default: 4096,
    help: 'per-model queue bound; requests beyond it are shed with 429',
    expected: 'an integer between 1 and 10000000',
    parse: integer(1, 10_000_000),
  },
  slowConsumerWarnBytes: {
    env: 'STREAMINFER_SLOW_CONSUMER_WARN_BYTES',
    default: MIB,
    help: 'a WebSocket client whose unsent answers pass this many bytes is warned (it is not reading)',
    expected: 'an integer between 1024 and 1073741824',
    parse: integer(KIB, GIB),
  },
  slowConsumerCloseBytes: {
    env: 'STREAMINFER_SLOW_CONSUMER_CLOSE_BYTES',
    default: 8 * MIB,
    help: 'a WebSocket client whose unsent answers pass this many bytes is closed with 1013',
    expected: 'an integer between 1024 and 1073741824',
    parse: integer(KIB, GIB),
  },
  trustForwardedFor: {
    env: 'STREAMINFER_TRUST_FORWARDED_FOR',
    default: false,
    help: 'deprecated, use trustedProxies: trust any peer as the one proxy (client = rightmost X-Forwarded-For hop)',
    expected: 'true or false',
    parse: flag,
  },
  trustedProxies: {
    env: 'STREAMINFER_TRUSTED_PROXIES',
    default: undefined,
    defaultText: 'unset (the socket peer is the client)',
    help: 'reverse proxies (CIDRs) whose X-Forwarded-For is believed: client = rightmost hop not among them',
    expected: 'a comma list of IPv4/IPv6 addresses or prefixes (10.0.0.0/8,::1), host bits clear',
    parse: proxiesParser,
  },
  rateLimitKey: {
    env: 'STREAMINFER_RATE_LIMIT_KEY',
    default: 'connection',
    help: 'what the rate limit and in-flight cap belong to: connection (each WebSocket) | ip (each client address)',
    expected: `one of ${RATE_LIMIT_KEYS.join(', ')}`,
    parse: oneOf(RATE_LIMIT_KEYS),
  },
  maxConnections: {
    env: 'STREAMINFER_MAX_CONNECTIONS',
    default: 10_000,
    help: 'per node: open WebSocket connections; upgrades past it get 503 overloaded (0 = no cap)',
    expected: 'an integer between 0 and 10000000 (0 = no cap)',
    parse: integer(0, 10_000_000),
  },
  maxConnectionsPerIp: {
    env: 'STREAMINFER_MAX_CONNECTIONS_PER_IP',
    default: 1000,
    help: 'per node and client address: open WebSocket connections; past it 429 rate_limited (0 = no cap)',
    expected: 'an integer between 0 and 10000000 (0 = no cap)',
    parse: integer(0, 10_000_000),
  },
  maxProtocolErrorsPerSecond: {
    env: 'STREAMINFER_MAX_PROTOCOL_ERRORS_PER_SECOND',
    default: 50,
    help: 'a WebSocket with more malformed / unknown-model / bad requests in one second is closed 1008 (0 = never)',
    expected: 'an integer between 0 and 1000000 (0 = never close)',
    parse: integer(0, 1_000_000),
  },
  maxRateLimitedPerSecond: {
    env: 'STREAMINFER_MAX_RATE_LIMITED_PER_SECOND',
    default: 2000,
    help: 'a WebSocket refused rate_limited more often than this in one second (it ignores retry_after_ms) is closed 1008 (0 = never)',
    expected: 'an integer between 0 and 10000000 (0 = never close)',
    parse: integer(0, 10_000_000),
  },
  errorCoalesceMs: {
    env: 'STREAMINFER_ERROR_COALESCE_MS',
    default: 1000,
    help: 'identical errors to id-less frames on one WebSocket within this window are answered once (0 = each)',
    expected: 'a number between 0 and 60000 (0 = answer each)',
    parse: decimal(0, 60_000),
  },
  maxPayloadBytes: {
    env: 'STREAMINFER_MAX_PAYLOAD_BYTES',
    default: MIB,
    help: 'largest WebSocket frame or HTTP body (bytes)',
    expected: 'an integer between 1 and 1073741824',
    parse: integer(1, GIB),
  },
  requestTimeoutMs: {
    env: 'STREAMINFER_REQUEST_TIMEOUT_MS',
    default: 30_000,
    help: 'default request deadline (ms)',
    expected: 'a number greater than 0 and at most 3600000',
    parse: decimal(0, HOUR_MS, { exclusiveMin: true }),
  },
  tlsCert: {
    env: 'STREAMINFER_TLS_CERT',
    default: undefined,
    defaultText: 'unset (plain http and ws)',
    help: 'PEM certificate (chain) file for the data port: with tlsKey it speaks only https and wss; re-read on reload',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  tlsKey: {
    env: 'STREAMINFER_TLS_KEY',
    default: undefined,
    defaultText: 'unset',
    help: 'PEM private key file of tlsCert (unencrypted; keep it mode 0600)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  tlsClientCa: {
    env: 'STREAMINFER_TLS_CLIENT_CA',
    default: undefined,
    defaultText: 'unset (no client certificates asked)',
    help: "PEM CA file (mutual TLS): every client must present a certificate this CA signed; none, or another CA's, is refused at the handshake",
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  adminToken: {
    env: 'STREAMINFER_ADMIN_TOKEN',
    default: undefined,
    defaultText: 'unset (the admin listener must be loopback or a unix socket)',
    help: 'bearer token for the admin listener (prefer adminTokenFile: a flag is visible in ps); unset = every caller of a loopback or unix-socket listener is trusted',
    expected: 'a non-empty token without whitespace',
    parse: text(SAFE_TEXT, 4096),
    secret: true,
  },
  adminAllowedOrigins: {
    env: 'STREAMINFER_ADMIN_ALLOWED_ORIGINS',
    default: undefined,
    defaultText: 'unset (no web page may call the admin API)',
    help: 'web origins (https://host[:port], comma-separated) whose pages may call the admin API; any other Origin is refused',
    expected: 'http:// or https:// origins (scheme://host[:port]) separated by commas',
    parse: originsParser,
  },
  apiKeysFile: {
    env: 'STREAMINFER_API_KEYS_FILE',
    default: undefined,
    defaultText: 'unset (anonymous clients, no keys)',
    help: 'API keys file (JSON: tenants, the SHA-256 of each key, limits): clients send Authorization: Bearer <key>; re-read on SIGHUP',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  adminHost: {
    env: 'STREAMINFER_ADMIN_HOST',
    default: '127.0.0.1',
    help: 'address of the admin listener (/api/*, /metrics, /health); not loopback: an admin token is required',
    expected: 'a host name or IP address',
    parse: text(SAFE_TEXT, 255),
  },
  adminPort: {
    env: 'STREAMINFER_ADMIN_PORT',
    default: ADMIN_PORT,
    help: 'port of the admin listener (0 = pick a free port)',
    expected: 'an integer between 0 and 65535',
    parse: integer(0, 65535),
  },
  adminSocket: {
    env: 'STREAMINFER_ADMIN_SOCKET',
    default: undefined,
    defaultText: 'unset (adminHost:adminPort)',
    help: 'serve the admin listener on this unix socket (mode 0600) instead of adminHost:adminPort',
    expected: 'a socket path of at most 107 bytes',
    parse: text(PATH_TEXT, 107),
  },
  adminTokenFile: {
    env: 'STREAMINFER_ADMIN_TOKEN_FILE',
    default: undefined,
    defaultText: 'unset',
    help: 'file holding the admin token (one line; re-read on SIGHUP and reload --config)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  adminTlsCert: {
    env: 'STREAMINFER_ADMIN_TLS_CERT',
    default: undefined,
    defaultText: 'unset (plain HTTP)',
    help: 'TLS certificate chain (PEM) of the admin listener, with adminTlsKey; re-read on SIGHUP and reload --config',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  adminTlsKey: {
    env: 'STREAMINFER_ADMIN_TLS_KEY',
    default: undefined,
    defaultText: 'unset (plain HTTP)',
    help: 'TLS private key (PEM) of the admin listener, with adminTlsCert',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  metricsOnDataPort: {
    env: 'STREAMINFER_METRICS_ON_DATA_PORT',
    default: false,
    help: 'also serve /metrics on the data port, without a token (compatibility with scrapers of the old address)',
    expected: 'true or false',
    parse: flag,
  },
  strictModels: {
    env: 'STREAMINFER_STRICT_MODELS',
    default: false,
    help: 'refuse to start when any model or version fails to load (default: serve the rest, mark those unavailable)',
    expected: 'true or false',
    parse: flag,
  },
  intraOpThreads: {
    env: 'STREAMINFER_INTRA_OP_THREADS',
    default: undefined,
    defaultText: 'auto ((cores - nodes) / (nodes × workers), at least 1)',
    help: 'ONNX Runtime intra-op threads per session (auto or 0: each gateway keeps a core, workers share the rest)',
    expected: 'an integer between 1 and 1024, 0 or "auto"',
    parse: intraOpParser,
  },
  ringBytes: {
    env: 'STREAMINFER_RING_BYTES',
    default: 8 * MIB,
    help: 'bytes per request/response ring (power of two, at least 2 × maxPayloadBytes)',
    expected: 'a power of two between 4096 and 1073741824',
    parse: powerOfTwo(4 * KIB, GIB),
  },
  shutdownTimeoutMs: {
    env: 'STREAMINFER_SHUTDOWN_TIMEOUT_MS',
    default: 30_000,
    help: 'how long a graceful shutdown waits for admitted requests (ms)',
    expected: 'a number between 0 and 3600000',
    parse: decimal(0, HOUR_MS),
  },
  reloadStepTimeoutMs: {
    env: 'STREAMINFER_RELOAD_STEP_TIMEOUT_MS',
    default: 120_000,
    help: 'a node silent this long in a reload step (prepare, commit, roll) counts as failed (ms)',
    expected: 'a number between 100 and 3600000',
    parse: decimal(100, HOUR_MS),
  },
  logLevel: {
    env: 'STREAMINFER_LOG_LEVEL',
    default: 'info',
    help: `log level: ${LOG_LEVELS.join(' | ')}`,
    expected: `one of ${LOG_LEVELS.join(', ')}`,
    parse: oneOf(LOG_LEVELS),
  },
  stateDir: {
    env: 'STREAMINFER_STATE_DIR',
    default: './.state',
    help: 'directory for persisted registry state (aliases, canary, shadow)',
    expected: 'a directory path',
    parse: text(PATH_TEXT, 4096),
  },
  cluster: {
    env: 'STREAMINFER_CLUSTER',
    default: undefined,
    defaultText: 'unset (this host works alone)',
    help: 'NATS URL(s) of the fleet (nats://host:4222[,nats://…]): registry, epochs and artifacts shared in JetStream',
    expected: 'nats:// or tls:// URLs separated by commas',
    parse: text(NATS_URLS, 4096),
    // nats://user:password@host: the userinfo never appears in a message.
    redact: redactNatsUrls,
  },
  natsUser: {
    env: 'STREAMINFER_NATS_USER',
    default: undefined,
    defaultText: 'unset',
    help: 'NATS user of the fleet connection (with a password)',
    expected: 'a user name without whitespace',
    parse: text(NATS_USER, 256),
  },
  natsPassword: {
    env: 'STREAMINFER_NATS_PASSWORD',
    default: undefined,
    defaultText: 'unset',
    help: 'NATS password (environment or config file only; prefer natsPasswordFile)',
    expected: 'a non-empty password',
    parse: text(/^[^\0\n]+$/, 4096),
    secret: true,
  },
  natsPasswordFile: {
    env: 'STREAMINFER_NATS_PASSWORD_FILE',
    default: undefined,
    defaultText: 'unset',
    help: 'file holding the NATS password (its first line)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsToken: {
    env: 'STREAMINFER_NATS_TOKEN',
    default: undefined,
    defaultText: 'unset',
    help: 'NATS token (environment or config file only; prefer natsTokenFile)',
    expected: 'a non-empty token',
    parse: text(/^[^\0\n]+$/, 4096),
    secret: true,
  },
  natsTokenFile: {
    env: 'STREAMINFER_NATS_TOKEN_FILE',
    default: undefined,
    defaultText: 'unset',
    help: 'file holding the NATS token (its first line)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsNkeyFile: {
    env: 'STREAMINFER_NATS_NKEY_FILE',
    default: undefined,
    defaultText: 'unset',
    help: 'file holding an nkey user seed (SU…)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsCreds: {
    env: 'STREAMINFER_NATS_CREDS',
    default: undefined,
    defaultText: 'unset',
    help: 'NATS .creds file (user JWT and seed; operator mode)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsTlsCa: {
    env: 'STREAMINFER_NATS_TLS_CA',
    default: undefined,
    defaultText: "unset (the system's CAs)",
    help: "PEM CA file that verifies the NATS server's certificate",
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsTlsCert: {
    env: 'STREAMINFER_NATS_TLS_CERT',
    default: undefined,
    defaultText: 'unset',
    help: 'PEM client certificate for NATS (with natsTlsKey)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsTlsKey: {
    env: 'STREAMINFER_NATS_TLS_KEY',
    default: undefined,
    defaultText: 'unset',
    help: 'PEM private key of the NATS client certificate',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
  natsTlsFirst: {
    env: 'STREAMINFER_NATS_TLS_FIRST',
    default: false,
    help: 'TLS handshake before the NATS greeting (a server with handshake_first; nats-server 2.10.4 or later)',
    expected: 'true or false',
    parse: flag,
  },
  clusterReplicas: {
    env: 'STREAMINFER_CLUSTER_REPLICAS',
    default: 1,
    help: 'replicas of each fleet bucket and object store this host creates (3 on a 3-node NATS cluster; checked against the server at connect)',
    expected: 'an integer from 1 to 5',
    parse: integer(1, 5),
  },
  fleet: {
    env: 'STREAMINFER_FLEET',
    default: 'default',
    help: 'the fleet this host joins (with --cluster)',
    expected: '1-32 letters, digits, _ or -',
    parse: text(FLEET_NAME, 32),
  },
  hostId: {
    env: 'STREAMINFER_HOST_ID',
    default: undefined,
    defaultText: '<hostname>-<port>',
    help: "this host's name in its fleet",
    expected: '1-64 letters, digits, _ or -',
    parse: text(HOST_ID, 64),
  },
  advertiseUrl: {
    env: 'STREAMINFER_ADVERTISE_URL',
    default: undefined,
    defaultText: 'http://<host, or the hostname>:<port>',
    help: 'how other hosts and operators reach this host (the fleet view lists it)',
    expected: 'an http:// or https:// URL',
    parse: text(HTTP_URL, 4096),
  },
  trustedKeysFile: {
    env: 'STREAMINFER_TRUSTED_KEYS',
    default: undefined,
    defaultText: 'unset (artifacts pulled from the fleet are checked by checksum only)',
    help: 'PEM file of Ed25519 public keys: a model version pulled from the fleet must be signed by one (re-read on SIGHUP)',
    expected: 'a file path',
    parse: text(PATH_TEXT, 4096),
  },
};

export const SETTING_KEYS = Object.freeze(Object.keys(SETTINGS) as SettingKey[]);
