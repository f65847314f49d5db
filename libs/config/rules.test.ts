/** The checks of single values (validation) and of settings against each other, and how values are echoed. */

import { ENV, errorOf } from './config.test-util';
import { DEFAULTS } from './defaults';
import type { ConfigSource, SettingKey } from './index';
import { redactConfig, resolveConfig, resolveConfigDetailed } from './index';

describe('validation', () => {
  it('names the setting and the source in the message (environment)', () => {
    const error = errorOf(() => resolveConfig({ env: { STREAMINFER_BATCH_SIZE: 'abc' } }));
    expect(error.message).toBe(
      'invalid value "abc" for STREAMINFER_BATCH_SIZE (environment): expected an integer between 1 and 4096',
    );
    expect(error).toMatchObject({
      code: 'invalid_config',
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
    expect(file).toMatchObject({ setting: key, source: 'file', code: 'invalid_config' });
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
