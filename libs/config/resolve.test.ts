import { ENV, errorOf } from './config.test-util';
import { DEFAULTS } from './defaults';
import type { ServerConfig, SettingKey } from './index';
import { describeSettings, resolveConfig, resolveConfigDetailed } from './index';

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
