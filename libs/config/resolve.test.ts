import { DEFAULTS } from './defaults';
import type { ConfigSource, ServerConfig, SettingKey } from './index';
import { ConfigError, describeSettings, redactConfig, resolveConfig, resolveConfigDetailed } from './index';

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

const ENV: Record<SettingKey, string> = {
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

describe('defaults', () => {
  it('keeps the documented names and defaults', () => {
    expect(DEFAULTS).toEqual({
      port: 8000,
      host: '0.0.0.0',
      nodes: 1,
      workers: 1,
      device: 'cpu',
      devices: [{ kind: 'cpu' }],
      modelsDir: './models',
      defaultModel: 'echo',
      batchSize: 16,
      batchTimeoutMs: 50,
      batchPolicy: 'greedy',
      sloP99Ms: undefined,
      maxInflightPerClient: 1000,
      rateLimitRps: 100,
      rateLimitBurst: 100,
      modelErrorPenalty: 9,
      maxModelQueue: 4096,
      slowConsumerWarnBytes: 1048576,
      slowConsumerCloseBytes: 8388608,
      trustForwardedFor: false,
      trustedProxies: undefined,
      rateLimitKey: 'connection',
      maxConnections: 10000,
      maxConnectionsPerIp: 1000,
      maxProtocolErrorsPerSecond: 50,
      maxRateLimitedPerSecond: 2000,
      errorCoalesceMs: 1000,
      maxPayloadBytes: 1048576,
      requestTimeoutMs: 30000,
      adminToken: undefined,
      adminAllowedOrigins: undefined,
      apiKeysFile: undefined,
      adminHost: '127.0.0.1',
      adminPort: 8001,
      adminSocket: undefined,
      adminTokenFile: undefined,
      adminTlsCert: undefined,
      adminTlsKey: undefined,
      metricsOnDataPort: false,
      strictModels: false,
      intraOpThreads: undefined,
      ringBytes: 8388608,
      shutdownTimeoutMs: 30000,
      reloadStepTimeoutMs: 120000,
      logLevel: 'info',
      stateDir: './.state',
      cluster: undefined,
      natsUser: undefined,
      natsPassword: undefined,
      natsPasswordFile: undefined,
      natsToken: undefined,
      natsTokenFile: undefined,
      natsNkeyFile: undefined,
      natsCreds: undefined,
      natsTlsCa: undefined,
      natsTlsCert: undefined,
      natsTlsKey: undefined,
      natsTlsFirst: false,
      clusterReplicas: 1,
      fleet: 'default',
      hostId: undefined,
      advertiseUrl: undefined,
      trustedKeysFile: undefined,
    });
    expect(Object.isFrozen(DEFAULTS)).toBe(true);
    expect(resolveConfig({})).toEqual(DEFAULTS);
    expect(resolveConfig()).toEqual(DEFAULTS);
  });

  it('describes every setting with its environment variable', () => {
    const described = describeSettings();
    expect(described.map((s) => [s.key, s.env])).toEqual(Object.entries(ENV));
    const byKey = Object.fromEntries(described.map((s) => [s.key, s]));
    expect(byKey.batchSize).toMatchObject({ flag: '--batch-size', default: 16, defaultText: '16' });
    expect(byKey.defaultModel).toMatchObject({ env: 'STREAMINFER_MODEL_NAME', default: 'echo' });
    expect(byKey.adminToken!.default).toBeUndefined();
    expect(byKey.intraOpThreads!.defaultText).toMatch(/auto/);
    expect(byKey.rateLimitBurst!.defaultText).toMatch(/rateLimitRps/);
    for (const s of described) {
      expect(s.help.length).toBeGreaterThan(5);
      expect(s.expected.length).toBeGreaterThan(3);
    }
  });
});

/** Three distinct valid values per setting: [file, env, flag] and what each resolves to. */
const LAYERS: {
  [K in SettingKey]: [unknown, string, unknown, ServerConfig[K], ServerConfig[K], ServerConfig[K]];
} = {
  port: [9000, '9001', '9002', 9000, 9001, 9002],
  host: ['127.0.0.1', '::1', 'localhost', '127.0.0.1', '::1', 'localhost'],
  nodes: [2, '3', 4, 2, 3, 4],
  workers: [2, '3', '4', 2, 3, 4],
  device: ['auto', 'cuda', 'cuda:1', 'auto', 'cuda:0', 'cuda:1'],
  modelsDir: ['/srv/models', './m2', 'm3', '/srv/models', './m2', 'm3'],
  defaultModel: ['digits', 'upper', 'digits-v2', 'digits', 'upper', 'digits-v2'],
  batchSize: [32, '1', 4096, 32, 1, 4096],
  batchTimeoutMs: [0, '2.5', '100', 0, 2.5, 100],
  batchPolicy: ['fixed', 'adaptive', 'greedy', 'fixed', 'adaptive', 'greedy'],
  sloP99Ms: [250, '12.5', '3600000', 250, 12.5, 3600000],
  maxInflightPerClient: [10, '20', 30, 10, 20, 30],
  rateLimitRps: [5, '0.5', 1000, 5, 0.5, 1000],
  rateLimitBurst: [7, '8', '9.5', 7, 8, 9.5],
  modelErrorPenalty: [0, '4.5', 19, 0, 4.5, 19],
  maxModelQueue: [100, '200', 300, 100, 200, 300],
  slowConsumerWarnBytes: [2048, '4096', 8192, 2048, 4096, 8192],
  slowConsumerCloseBytes: [2097152, '4194304', 16777216, 2097152, 4194304, 16777216],
  trustForwardedFor: [true, 'no', 'TRUE', true, false, true],
  trustedProxies: [
    '10.0.0.0/8',
    '127.0.0.1, ::1',
    '2001:DB8::/32,192.168.0.0/16',
    '10.0.0.0/8',
    '127.0.0.1/32,::1/128',
    '2001:db8::/32,192.168.0.0/16',
  ],
  rateLimitKey: ['ip', 'CONNECTION', 'ip', 'ip', 'connection', 'ip'],
  maxConnections: [0, '5', 100, 0, 5, 100],
  maxConnectionsPerIp: [1, '0', '7', 1, 0, 7],
  maxProtocolErrorsPerSecond: [0, '10', 1000, 0, 10, 1000],
  maxRateLimitedPerSecond: [0, '300', 5000, 0, 300, 5000],
  errorCoalesceMs: [0, '250', 60000, 0, 250, 60000],
  maxPayloadBytes: [1024, '2048', 4096, 1024, 2048, 4096],
  requestTimeoutMs: [1000, '0.5', 3600000, 1000, 0.5, 3600000],
  tlsCert: ['/etc/si/cert.pem', 'c2.pem', './c3.pem', '/etc/si/cert.pem', 'c2.pem', './c3.pem'],
  tlsKey: ['/etc/si/key.pem', 'k2.pem', './k3.pem', '/etc/si/key.pem', 'k2.pem', './k3.pem'],
  tlsClientCa: ['/etc/si/ca.pem', 'ca2.pem', 'ca 3.pem', '/etc/si/ca.pem', 'ca2.pem', 'ca 3.pem'],
  adminToken: [
    'file-token-0123456789',
    'env-token-0123456789',
    'flag-token-012345678',
    'file-token-0123456789',
    'env-token-0123456789',
    'flag-token-012345678',
  ],
  adminAllowedOrigins: [
    ['https://a.example', 'HTTP://B.example:8080'],
    'https://c.example',
    'https://d.example:8443,http://[::1]:3000',
    'https://a.example,http://b.example:8080',
    'https://c.example',
    'https://d.example:8443,http://[::1]:3000',
  ],
  apiKeysFile: [
    '/a/keys.json',
    '/b/keys.json',
    '/c/keys.json',
    '/a/keys.json',
    '/b/keys.json',
    '/c/keys.json',
  ],
  adminHost: ['127.0.0.2', '::1', 'localhost', '127.0.0.2', '::1', 'localhost'],
  adminPort: [0, '8101', 65535, 0, 8101, 65535],
  adminSocket: ['/run/si/admin.sock', 'a.sock', '/tmp/x', '/run/si/admin.sock', 'a.sock', '/tmp/x'],
  adminTokenFile: ['/etc/si/token', './t2', 't3', '/etc/si/token', './t2', 't3'],
  adminTlsCert: ['/etc/si/a.crt', 'b.crt', 'c.crt', '/etc/si/a.crt', 'b.crt', 'c.crt'],
  adminTlsKey: ['/etc/si/a.key', 'b.key', 'c.key', '/etc/si/a.key', 'b.key', 'c.key'],
  metricsOnDataPort: [true, 'no', 'TRUE', true, false, true],
  strictModels: [true, 'no', 'TRUE', true, false, true],
  intraOpThreads: [2, 'auto', 4, 2, undefined, 4],
  ringBytes: [4096, '65536', 4194304, 4096, 65536, 4194304],
  shutdownTimeoutMs: [0, '1500', 60000, 0, 1500, 60000],
  reloadStepTimeoutMs: [100, '2500', 3600000, 100, 2500, 3600000],
  logLevel: ['debug', 'WARN', 'silent', 'debug', 'warn', 'silent'],
  stateDir: ['/var/lib/si', './s2', 's3', '/var/lib/si', './s2', 's3'],
  cluster: [
    'nats://10.0.0.1:4222',
    'nats://a:4222,nats://b:4222',
    'tls://c:4222',
    'nats://10.0.0.1:4222',
    'nats://a:4222,nats://b:4222',
    'tls://c:4222',
  ],
  natsUser: ['fleet', 'host-a', 'h@b', 'fleet', 'host-a', 'h@b'],
  natsPassword: ['p1', 'p 2', 'p3', 'p1', 'p 2', 'p3'],
  natsPasswordFile: ['/run/a', './b', 'c', '/run/a', './b', 'c'],
  natsToken: ['t1', 't2', 't3', 't1', 't2', 't3'],
  natsTokenFile: ['/run/a', './b', 'c', '/run/a', './b', 'c'],
  natsNkeyFile: ['/run/a.nk', './b.nk', 'c', '/run/a.nk', './b.nk', 'c'],
  natsCreds: ['/run/a.creds', './b.creds', 'c', '/run/a.creds', './b.creds', 'c'],
  natsTlsCa: ['/etc/ca.pem', './ca2.pem', 'c', '/etc/ca.pem', './ca2.pem', 'c'],
  natsTlsCert: ['/etc/c.pem', './c2.pem', 'c', '/etc/c.pem', './c2.pem', 'c'],
  natsTlsKey: ['/etc/k.pem', './k2.pem', 'k', '/etc/k.pem', './k2.pem', 'k'],
  natsTlsFirst: [true, 'false', 'yes', true, false, true],
  clusterReplicas: [3, '5', 1, 3, 5, 1],
  fleet: ['prod', 'eu-west_1', 'f', 'prod', 'eu-west_1', 'f'],
  hostId: ['h1', 'host-2', 'H_3', 'h1', 'host-2', 'H_3'],
  advertiseUrl: [
    'http://10.0.0.1:8000',
    'https://a.example:443',
    'http://b:8000/',
    'http://10.0.0.1:8000',
    'https://a.example:443',
    'http://b:8000/',
  ],
  trustedKeysFile: ['/etc/si/keys.pem', 'keys.pem', './k.pem', '/etc/si/keys.pem', 'keys.pem', './k.pem'],
};

describe('precedence: flags > env > file > defaults', () => {
  // ringBytes 4096 needs a payload limit of at most 2048, and several nodes need one device or one per node.
  const base = { maxPayloadBytes: 1024 };
  const keys = Object.keys(LAYERS) as SettingKey[];
  // A TLS file setting needs its partners (certificate and key together; a client CA with both).
  const companions: Partial<Record<SettingKey, Record<string, string>>> = {
    tlsCert: { tlsKey: 'k.pem' },
    tlsKey: { tlsCert: 'c.pem' },
    tlsClientCa: { tlsCert: 'c.pem', tlsKey: 'k.pem' },
    adminTlsCert: { adminTlsKey: 'k.pem' },
    adminTlsKey: { adminTlsCert: 'c.pem' },
  };

  it.each(keys)('%s', (key) => {
    const [fileValue, envValue, flagValue, fromFile, fromEnv, fromFlag] = LAYERS[key];
    const partners = companions[key] ?? {};
    const file =
      key === 'maxPayloadBytes' ? { [key]: fileValue } : { ...base, ...partners, [key]: fileValue };
    const env = { [ENV[key]]: envValue };
    const flags = { [key]: flagValue };
    const fileOnly = resolveConfigDetailed({ file });
    expect(fileOnly.config[key]).toEqual(fromFile);
    expect(fileOnly.origins[key]).toBe('file');
    const envOverFile = resolveConfigDetailed({ file, env });
    expect(envOverFile.config[key]).toEqual(fromEnv);
    expect(envOverFile.origins[key]).toBe('env');
    const flagOverAll = resolveConfigDetailed({ file, env, flags });
    expect(flagOverAll.config[key]).toEqual(fromFlag);
    expect(flagOverAll.origins[key]).toBe('flag');
    const flagOverDefault = resolveConfigDetailed({ flags, file: partners });
    expect(flagOverDefault.origins[key]).toBe('flag');
    const none = resolveConfigDetailed({});
    expect(none.origins[key]).toBe('default');
    expect(none.config[key]).toEqual(DEFAULTS[key]);
  });

  it('mixes layers per setting', () => {
    const { config, origins } = resolveConfigDetailed({
      file: { port: 1, batchSize: 2, logLevel: 'debug' },
      env: { STREAMINFER_BATCH_SIZE: '3', STREAMINFER_WORKERS: '4' },
      flags: { workers: 5 },
    });
    expect(config).toMatchObject({ port: 1, batchSize: 3, logLevel: 'debug', workers: 5, nodes: 1 });
    expect(origins).toMatchObject({
      port: 'file',
      batchSize: 'env',
      logLevel: 'file',
      workers: 'flag',
      nodes: 'default',
    });
  });
});

describe('unset values', () => {
  it('treats empty or blank environment variables as unset and trims the rest', () => {
    const { config, origins } = resolveConfigDetailed({
      env: { STREAMINFER_PORT: '', STREAMINFER_BATCH_SIZE: '   ', STREAMINFER_HOST: ' 127.0.0.1 ' },
      file: { port: 7000 },
    });
    expect(config.port).toBe(7000);
    expect(origins.batchSize).toBe('default');
    expect(config.host).toBe('127.0.0.1');
  });

  it('treats undefined and null as unset in flags and file', () => {
    const { origins } = resolveConfigDetailed({
      flags: { port: undefined, host: null },
      file: { batchSize: null },
      env: { STREAMINFER_PORT: undefined },
    });
    expect(origins).toMatchObject({ port: 'default', host: 'default', batchSize: 'default' });
  });

  it('ignores flags that are not settings (other commander options)', () => {
    expect(resolveConfig({ flags: { json: true, config: 'x.json', pidFile: '/run/x' } })).toEqual(DEFAULTS);
  });
});

describe('coercion', () => {
  it('accepts numbers and numeric strings from every layer', () => {
    expect(resolveConfig({ flags: { port: '8080' } }).port).toBe(8080);
    expect(resolveConfig({ flags: { port: 8080 } }).port).toBe(8080);
    expect(resolveConfig({ flags: { port: ' 8080 ' } }).port).toBe(8080);
    expect(resolveConfig({ file: { port: '8080' } }).port).toBe(8080);
    expect(resolveConfig({ env: { STREAMINFER_BATCH_TIMEOUT_MS: '1e1' } }).batchTimeoutMs).toBe(10);
    expect(resolveConfig({ env: { STREAMINFER_BATCH_TIMEOUT_MS: '.5' } }).batchTimeoutMs).toBe(0.5);
    expect(resolveConfig({ env: { STREAMINFER_BATCH_SIZE: '+8' } }).batchSize).toBe(8);
    expect(resolveConfig({ env: { STREAMINFER_BATCH_SIZE: '8.0' } }).batchSize).toBe(8);
  });

  it('normalizes case of choices and devices', () => {
    expect(resolveConfig({ env: { STREAMINFER_BATCH_POLICY: 'Adaptive' } }).batchPolicy).toBe('adaptive');
    expect(resolveConfig({ flags: { logLevel: 'DEBUG' } }).logLevel).toBe('debug');
    expect(resolveConfig({ flags: { device: ' CUDA:1 ' } }).device).toBe('cuda:1');
  });

  it('reads intraOpThreads "auto" and 0 as unset (auto)', () => {
    expect(resolveConfig({ env: { STREAMINFER_INTRA_OP_THREADS: 'AUTO' } }).intraOpThreads).toBeUndefined();
    expect(resolveConfig({ flags: { intraOpThreads: '0' } }).intraOpThreads).toBeUndefined();
    expect(resolveConfig({ flags: { intraOpThreads: '3' } }).intraOpThreads).toBe(3);
  });
});

describe('validation', () => {
  it('names the setting and the source in the message (environment)', () => {
    const error = errorOf(() => resolveConfig({ env: { STREAMINFER_BATCH_SIZE: 'abc' } }));
    expect(error.message).toBe(
      'invalid value "abc" for STREAMINFER_BATCH_SIZE (environment): expected an integer between 1 and 4096',
    );
    expect(error).toMatchObject({
      code: 'ERR_INVALID_CONFIG',
      setting: 'batchSize',
      source: 'env',
      name: 'ConfigError',
    });
  });

  it('names the flag and the file in messages', () => {
    const flag = errorOf(() => resolveConfig({ flags: { batchSize: '0' } }));
    expect(flag.message).toBe(
      'invalid value "0" for --batch-size (command-line flag): expected an integer between 1 and 4096',
    );
    expect(flag.source).toBe('flag');
    const renamed = errorOf(() =>
      resolveConfig({ flags: { defaultModel: '../x' }, flagNames: { defaultModel: '--model' } }),
    );
    expect(renamed.message).toMatch(/^invalid value "\.\.\/x" for --model \(command-line flag\)/);
    const file = errorOf(() =>
      resolveConfig({ file: { batchSize: 5000 }, filePath: '/etc/streaminfer.json' }),
    );
    expect(file.message).toBe(
      'invalid value 5000 for batchSize (config file /etc/streaminfer.json): expected an integer between 1 and 4096',
    );
    expect(file.source).toBe('file');
    expect(errorOf(() => resolveConfig({ file: { batchSize: 0 } })).message).toMatch(
      /for batchSize \(config file\)/,
    );
  });

  it('validates every layer that sets a value, even when a higher one overrides it', () => {
    const error = errorOf(() =>
      resolveConfig({ file: { port: 'http' }, env: { STREAMINFER_PORT: '9000' }, flags: { port: 9001 } }),
    );
    expect(error).toMatchObject({ setting: 'port', source: 'file' });
  });

  /** [setting, bad value] — every rule, checked through the environment and the file. */
  const INVALID: Array<[SettingKey, unknown]> = [
    ['port', '-1'],
    ['port', '65536'],
    ['port', '80.5'],
    ['port', 'eighty'],
    ['port', '0x50'],
    ['port', ''],
    ['port', true],
    ['port', [8000]],
    ['host', 'my host'],
    ['host', ''],
    ['host', 127001],
    ['nodes', '0'],
    ['nodes', '65'],
    ['workers', '0'],
    ['workers', '65'],
    ['workers', '1.5'],
    ['device', 'gpu'],
    ['device', 'cuda:'],
    ['device', 'cuda:0,'],
    ['device', 'tpu:0'],
    ['modelsDir', ''],
    ['modelsDir', 5],
    ['defaultModel', ''],
    ['defaultModel', '../etc'],
    ['defaultModel', 'a/b'],
    ['defaultModel', '.hidden'],
    ['defaultModel', 'x'.repeat(129)],
    ['batchSize', '0'],
    ['batchSize', '4097'],
    ['batchSize', '1.5'],
    ['batchTimeoutMs', '-1'],
    ['batchTimeoutMs', '60001'],
    ['batchTimeoutMs', 'NaN'],
    ['batchTimeoutMs', 'Infinity'],
    ['batchPolicy', 'lazy'],
    ['batchPolicy', 1],
    ['sloP99Ms', '0'],
    ['sloP99Ms', '-5'],
    ['sloP99Ms', '3600001'],
    ['sloP99Ms', 'fast'],
    ['sloP99Ms', 'Infinity'],
    ['maxInflightPerClient', '0'],
    ['maxInflightPerClient', '2.5'],
    ['rateLimitRps', '-1'],
    ['rateLimitRps', 'fast'],
    ['rateLimitBurst', '0'],
    ['rateLimitBurst', '0.5'],
    ['maxModelQueue', '0'],
    ['maxPayloadBytes', '0'],
    ['maxPayloadBytes', '1.5'],
    ['maxPayloadBytes', String(2 ** 30 + 1)],
    ['requestTimeoutMs', '0'],
    ['requestTimeoutMs', '3600001'],
    ['adminToken', ''],
    ['adminToken', 'two words'],
    ['adminAllowedOrigins', 'evil.example'],
    ['adminAllowedOrigins', 'https://a.example/path'],
    ['adminAllowedOrigins', 'https://a.example,'],
    ['adminAllowedOrigins', 'null'],
    ['intraOpThreads', '-1'],
    ['intraOpThreads', '1025'],
    ['intraOpThreads', 'many'],
    ['ringBytes', '1000000'],
    ['ringBytes', '2048'],
    ['ringBytes', String(2 ** 31)],
    ['shutdownTimeoutMs', '-5'],
    ['shutdownTimeoutMs', '3600001'],
    ['logLevel', 'verbose'],
    ['stateDir', ''],
    ['cluster', 'http://127.0.0.1:4222'],
    ['cluster', 'nats://a:4222,'],
    ['cluster', 'nats://a b'],
    ['natsUser', 'a b'],
    ['natsPasswordFile', ''],
    ['natsTlsFirst', 'maybe'],
    ['clusterReplicas', '0'],
    ['clusterReplicas', '6'],
    ['clusterReplicas', '2.5'],
    ['fleet', 'has.dot'],
    ['fleet', 'x'.repeat(33)],
    ['fleet', 'sp ace'],
    ['hostId', 'a.b'],
    ['hostId', 'h*'],
    ['advertiseUrl', 'ftp://x'],
    ['advertiseUrl', '10.0.0.1:8000'],
    ['trustedKeysFile', ''],
  ];

  it.each(INVALID)('rejects %s = %j', (key, value) => {
    const file = errorOf(() => resolveConfig({ file: { [key]: value } }));
    expect(file).toMatchObject({ setting: key, source: 'file', code: 'ERR_INVALID_CONFIG' });
    expect(file.message).toContain(`for ${key} (config file)`);
    if (typeof value === 'string' && value.trim() !== '') {
      const env = errorOf(() => resolveConfig({ env: { [ENV[key]]: value } }));
      expect(env).toMatchObject({ setting: key, source: 'env' });
      expect(env.message).toContain(`for ${ENV[key]} (environment): expected `);
    }
    const flag = errorOf(() => resolveConfig({ flags: { [key]: value } }));
    expect(flag).toMatchObject({ setting: key, source: 'flag' });
  });

  it('describes non-scalar values without dumping them', () => {
    expect(errorOf(() => resolveConfig({ file: { port: { n: 1 } } })).message).toMatch(
      /^invalid value an object for port/,
    );
    expect(errorOf(() => resolveConfig({ file: { port: [1] } })).message).toMatch(
      /^invalid value an array for port/,
    );
    expect(errorOf(() => resolveConfig({ flags: { port: true } })).message).toMatch(
      /^invalid value true for --port/,
    );
    expect(errorOf(() => resolveConfig({ flags: { batchTimeoutMs: '1e400' } })).setting).toBe(
      'batchTimeoutMs',
    );
    expect(errorOf(() => resolveConfig({ file: { batchTimeoutMs: Number.NaN } })).setting).toBe(
      'batchTimeoutMs',
    );
    const long = errorOf(() => resolveConfig({ env: { STREAMINFER_LOG_LEVEL: 'x'.repeat(200) } }));
    expect(long.message).not.toContain('x'.repeat(81));
    expect(long.message).toContain('..."');
  });

  it('never echoes the admin token', () => {
    const error = errorOf(() => resolveConfig({ env: { STREAMINFER_ADMIN_TOKEN: 'secret value' } }));
    expect(error.message).not.toContain('secret');
    expect(error.message).toContain('<redacted>');
  });

  it('accepts the range boundaries', () => {
    expect(
      resolveConfig({ flags: { port: 0, nodes: 64, workers: 64, batchSize: 4096, batchTimeoutMs: 60000 } }),
    ).toMatchObject({ port: 0, nodes: 64, workers: 64, batchSize: 4096, batchTimeoutMs: 60000 });
    expect(
      resolveConfig({ flags: { port: 65535, batchSize: 1, batchTimeoutMs: 0, rateLimitRps: 0 } }),
    ).toMatchObject({
      port: 65535,
      batchSize: 1,
      batchTimeoutMs: 0,
      rateLimitRps: 0,
    });
    expect(resolveConfig({ flags: { ringBytes: 2 ** 30, maxPayloadBytes: 2 ** 29 } }).ringBytes).toBe(
      2 ** 30,
    );
  });
});

describe('config file', () => {
  it('rejects unknown keys, naming them and suggesting the setting', () => {
    const typo = errorOf(() => resolveConfig({ file: { batchSzie: 8 }, filePath: 'si.json' }));
    expect(typo.message).toBe(
      'unknown setting "batchSzie" in config file si.json (did you mean "batchSize"?)',
    );
    expect(typo).toMatchObject({ setting: 'batchSzie', source: 'file' });
    const snake = errorOf(() => resolveConfig({ file: { batch_timeout_ms: 8 } }));
    expect(snake.message).toMatch(/did you mean "batchTimeoutMs"/);
    const envName = errorOf(() => resolveConfig({ file: { STREAMINFER_MODEL_NAME: 'x' } }));
    expect(envName.message).toMatch(/did you mean "defaultModel"/);
    const unrelated = errorOf(() => resolveConfig({ file: { colour: 'blue' } }));
    expect(unrelated.message).toBe('unknown setting "colour" in config file');
    expect(errorOf(() => resolveConfig({ file: { devices: [] } })).setting).toBe('devices');
  });

  it('must be an object', () => {
    for (const file of [null, [], 'port=1', 42]) {
      const error = errorOf(() => resolveConfig({ file, filePath: 'a.json' }));
      expect(error.message).toMatch(/^invalid config file a\.json: expected a JSON object of settings/);
      expect(error.source).toBe('file');
    }
  });

  it('allows a $schema key', () => {
    expect(resolveConfig({ file: { $schema: './schema.json', port: 1234 } }).port).toBe(1234);
  });

  it('takes the older name maxQueueSize for the per-client in-flight cap, but not both names', () => {
    expect(resolveConfig({ file: { maxQueueSize: 7 } }).maxInflightPerClient).toBe(7);
    expect(resolveConfig({ file: { maxInflightPerClient: 9 } }).maxInflightPerClient).toBe(9);
    const both = errorOf(() =>
      resolveConfig({ file: { maxQueueSize: 7, maxInflightPerClient: 9 }, filePath: 'c.json' }),
    );
    expect(both.message).toBe(
      'config file c.json sets both "maxQueueSize" and "maxInflightPerClient" (the same setting)',
    );
    expect(errorOf(() => resolveConfig({ file: { maxQueueSize: 0 } })).setting).toBe('maxInflightPerClient');
  });
});

describe('devices', () => {
  it('gives every node the single device', () => {
    const config = resolveConfig({ flags: { nodes: 3, device: 'cuda:1' } });
    expect(config.devices).toEqual([
      { kind: 'cuda', deviceId: 1 },
      { kind: 'cuda', deviceId: 1 },
      { kind: 'cuda', deviceId: 1 },
    ]);
    expect(Object.isFrozen(config.devices)).toBe(true);
  });

  it('gives each node its own device from a list', () => {
    const config = resolveConfig({ env: { STREAMINFER_DEVICE: 'cuda:0, cuda:1', STREAMINFER_NODES: '2' } });
    expect(config.device).toBe('cuda:0,cuda:1');
    expect(config.devices).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'cuda', deviceId: 1 },
    ]);
  });

  it('rejects a list that does not match the node count, naming both', () => {
    const error = errorOf(() =>
      resolveConfig({ flags: { device: 'cuda:0,cuda:1' }, env: { STREAMINFER_NODES: '3' } }),
    );
    expect(error).toMatchObject({ setting: 'device', source: 'flag' });
    expect(error.message).toBe(
      'invalid value "cuda:0,cuda:1" for --device (command-line flag): it lists 2 devices but nodes is 3 ' +
        '(STREAMINFER_NODES (environment)); give one device for all nodes or one per node',
    );
  });
});

describe('cross-setting rules', () => {
  it('derives the burst from the rate unless set', () => {
    expect(resolveConfig({ flags: { rateLimitRps: 250 } }).rateLimitBurst).toBe(250);
    expect(resolveConfig({ flags: { rateLimitRps: 0.2 } }).rateLimitBurst).toBe(1);
    expect(resolveConfig({ flags: { rateLimitRps: 250, rateLimitBurst: 10 } }).rateLimitBurst).toBe(10);
  });

  it('turns rate limiting off with rate 0 and says an explicit burst is ignored', () => {
    const off = resolveConfigDetailed({ env: { STREAMINFER_RATE_LIMIT_RPS: '0' } });
    expect(off.config).toMatchObject({ rateLimitRps: 0, rateLimitBurst: 0 });
    expect(off.warnings).toEqual([]);
    const ignored = resolveConfigDetailed({
      env: { STREAMINFER_RATE_LIMIT_RPS: '0', STREAMINFER_RATE_LIMIT_BURST: '5' },
    });
    expect(ignored.config.rateLimitBurst).toBe(0);
    expect(ignored.warnings).toEqual([
      'STREAMINFER_RATE_LIMIT_BURST (environment) is ignored: rate limiting is off',
    ]);
  });

  it('requires rings of at least twice the payload limit, blaming the setting that was changed', () => {
    const payload = errorOf(() =>
      resolveConfig({ env: { STREAMINFER_MAX_PAYLOAD_BYTES: String(8 * 1024 * 1024) } }),
    );
    expect(payload).toMatchObject({ setting: 'maxPayloadBytes', source: 'env' });
    expect(payload.message).toMatch(
      /ringBytes 8388608 \(ringBytes \(default\)\) must be at least 2 × maxPayloadBytes 8388608/,
    );
    const ring = errorOf(() => resolveConfig({ file: { ringBytes: 1048576 } }));
    expect(ring).toMatchObject({ setting: 'ringBytes', source: 'file' });
    expect(resolveConfig({ file: { ringBytes: 2097152 } }).ringBytes).toBe(2097152);
  });

  it('warns about odd but valid combinations', () => {
    const { warnings } = resolveConfigDetailed({
      env: { STREAMINFER_BATCHSIZE: '8', STREAMINFER_EMPTY: '', OTHER: 'x' },
      flags: { maxModelQueue: 8, batchSize: 16, adminToken: 'short' },
    });
    expect(warnings).toEqual([
      'maxModelQueue 8 is below batchSize 16: batches can never fill',
      'adminToken is shorter than 16 characters: use a long random token',
      'unknown environment variable STREAMINFER_BATCHSIZE is ignored',
    ]);
  });
});

describe('redactConfig', () => {
  it('hides the admin token only', () => {
    const config = resolveConfig({ flags: { adminToken: 'a-very-long-secret-token' } });
    expect(redactConfig(config)).toEqual({ ...config, adminToken: '<redacted>' });
    expect(redactConfig(DEFAULTS)).toBe(DEFAULTS);
  });

  it('hides the NATS password and token, and credentials in the cluster URLs', () => {
    const config = resolveConfig({
      env: {
        STREAMINFER_CLUSTER: 'nats://fleet:pw-in-url@a:4222,tls://tok-in-url@b:4222',
        STREAMINFER_NATS_PASSWORD: 'pw-in-env',
        STREAMINFER_NATS_TOKEN: 'tok-in-env',
      },
    });
    const shown = JSON.stringify(redactConfig(config));
    for (const secret of ['pw-in-url', 'tok-in-url', 'pw-in-env', 'tok-in-env'])
      expect(shown).not.toContain(secret);
    expect(redactConfig(config).cluster).toBe('nats://<redacted>@a:4222,tls://<redacted>@b:4222');
  });

  it('never echoes credentials of a cluster URL it refuses', () => {
    const error = errorOf(() => resolveConfig({ env: { STREAMINFER_CLUSTER: 'nats://u:hunter2@a:4222,x' } }));
    expect(error.message).toContain('"nats://<redacted>@a:4222,x"');
    expect(error.message).not.toContain('hunter2');
  });
});

describe('origins', () => {
  it('reports the layer of every setting', () => {
    const { origins } = resolveConfigDetailed({
      flags: { port: 1 },
      env: { STREAMINFER_HOST: 'h' },
      file: { nodes: 2 },
    });
    const expected: Partial<Record<SettingKey, ConfigSource>> = {
      port: 'flag',
      host: 'env',
      nodes: 'file',
      workers: 'default',
    };
    expect(origins).toMatchObject(expected);
    expect(Object.keys(origins)).toEqual(Object.keys(ENV));
  });
});

describe('slow-consumer thresholds', () => {
  it('refuses a close threshold at or below the warning threshold, naming the setting', () => {
    expect(() => resolveConfig({ env: { STREAMINFER_SLOW_CONSUMER_CLOSE_BYTES: '1048576' } })).toThrow(
      /STREAMINFER_SLOW_CONSUMER_CLOSE_BYTES/,
    );
  });
  it('reads trustForwardedFor words', () => {
    expect(resolveConfig({ env: { STREAMINFER_TRUST_FORWARDED_FOR: 'yes' } }).trustForwardedFor).toBe(true);
    expect(() => resolveConfig({ env: { STREAMINFER_TRUST_FORWARDED_FOR: 'maybe' } })).toThrow(
      /STREAMINFER_TRUST_FORWARDED_FOR/,
    );
  });
});

describe('trusted proxies and the per-frame guards', () => {
  it('keeps trustedProxies in canonical form and names a bad entry', () => {
    expect(
      resolveConfig({ env: { STREAMINFER_TRUSTED_PROXIES: ' ::ffff:10.0.0.1 , fe80::/10' } }).trustedProxies,
    ).toBe('10.0.0.1/32,fe80::/10');
    for (const bad of ['10.0.0.1/8', '10.0.0.0/33', 'proxy.example', '10.0.0.0/8,', '*'])
      expect(() => resolveConfig({ file: { trustedProxies: bad } })).toThrow(
        /trustedProxies \(config file\): expected a comma list of IPv4\/IPv6 addresses or prefixes/,
      );
    expect(() => resolveConfig({ file: { trustedProxies: ['10.0.0.0/8'] } })).toThrow(/trustedProxies/);
  });

  it('warns that trustForwardedFor is deprecated, and ignored next to trustedProxies', () => {
    const legacy = resolveConfigDetailed({ env: { STREAMINFER_TRUST_FORWARDED_FOR: 'true' } });
    expect(legacy.warnings.join('\n')).toMatch(/STREAMINFER_TRUST_FORWARDED_FOR .* is deprecated/);
    const both = resolveConfigDetailed({ file: { trustForwardedFor: true, trustedProxies: '10.0.0.0/8' } });
    expect(both.warnings.join('\n')).toMatch(/trustForwardedFor .* is ignored: trustedProxies is set/);
  });

  it('refuses a rate-limit key other than connection or ip', () => {
    expect(() => resolveConfig({ env: { STREAMINFER_RATE_LIMIT_KEY: 'user' } })).toThrow(
      /STREAMINFER_RATE_LIMIT_KEY \(environment\): expected one of connection, ip/,
    );
  });
});

describe('the admin listener settings', () => {
  it('refuse a listener other machines reach without a token, naming adminHost and where it was set', () => {
    for (const host of ['0.0.0.0', '10.0.0.5', '::', 'admin.example']) {
      const error = errorOf(() => resolveConfig({ flags: { adminHost: host } }));
      expect(error.setting).toBe('adminHost');
      expect(error.message).toContain(`"${host}" (--admin-host (command-line flag))`);
      expect(error.message).toMatch(/no admin token is set: give adminTokenFile/);
    }
    expect(errorOf(() => resolveConfig({ env: { STREAMINFER_ADMIN_HOST: '0.0.0.0' } })).source).toBe('env');
  });

  it('take a non-loopback listener with a token (env or file), and loopback or a unix socket without', () => {
    expect(resolveConfig({ flags: { adminHost: '0.0.0.0', adminTokenFile: '/t' } }).adminHost).toBe(
      '0.0.0.0',
    );
    expect(
      resolveConfig({ flags: { adminHost: '10.0.0.5' }, env: { STREAMINFER_ADMIN_TOKEN: 'x'.repeat(32) } })
        .adminHost,
    ).toBe('10.0.0.5');
    expect(resolveConfig({ flags: { adminHost: '0.0.0.0', adminSocket: '/run/a.sock' } }).adminSocket).toBe(
      '/run/a.sock',
    );
    for (const host of ['127.0.0.1', '127.9.9.9', '::1', 'localhost', '::ffff:127.0.0.1'])
      expect(resolveConfig({ flags: { adminHost: host } }).adminHost).toBe(host);
  });

  it('refuse a token given two ways, and a certificate without its key', () => {
    const both = errorOf(() =>
      resolveConfig({ flags: { adminTokenFile: '/t' }, env: { STREAMINFER_ADMIN_TOKEN: 'y'.repeat(32) } }),
    );
    expect(both.message).toMatch(/adminToken .* and adminTokenFile .* are both set/);
    expect(both.message).not.toContain('y'.repeat(32));
    expect(errorOf(() => resolveConfig({ flags: { adminTlsCert: 'c.pem' } })).message).toMatch(
      /--admin-tls-cert \(command-line flag\) needs adminTlsKey too/,
    );
    expect(errorOf(() => resolveConfig({ file: { adminTlsKey: 'k.pem' } })).setting).toBe('adminTlsKey');
  });

  it('refuse a socket path longer than a unix socket takes', () => {
    expect(errorOf(() => resolveConfig({ flags: { adminSocket: `/${'s'.repeat(107)}` } })).setting).toBe(
      'adminSocket',
    );
  });
});
