import { LIVE_SETTINGS, livePayloadCeiling, planConfigChange } from './live';
import { resolveConfig } from './resolve';
import { SETTING_KEYS } from './settings';

const started = resolveConfig({ file: { port: 8000, nodes: 2 } });

describe('configuration reload: live settings and settings that need a restart', () => {
  test('every live setting is applied, and only the changed ones are named', () => {
    const wanted = resolveConfig({
      file: {
        port: 8000,
        nodes: 2,
        rateLimitRps: 5,
        maxPayloadBytes: 4096,
        batchSize: 4,
        batchTimeoutMs: 7,
        batchPolicy: 'fixed',
        sloP99Ms: 80,
        maxInflightPerClient: 3,
        maxModelQueue: 99,
        requestTimeoutMs: 1234,
        adminToken: 'a-long-enough-admin-token',
        logLevel: 'debug',
        trustForwardedFor: true,
        trustedProxies: '10.0.0.0/8',
        rateLimitKey: 'ip',
        maxConnections: 5,
        maxConnectionsPerIp: 2,
        maxProtocolErrorsPerSecond: 7,
        errorCoalesceMs: 0,
        shutdownTimeoutMs: 10,
        reloadStepTimeoutMs: 5000,
        defaultModel: 'upper',
      },
    });
    const change = planConfigChange(started, wanted, started);
    expect(change.restartRequired).toEqual([]);
    expect(new Set(change.applied)).toEqual(
      new Set([
        'defaultModel',
        'batchSize',
        'batchTimeoutMs',
        'batchPolicy',
        'sloP99Ms',
        'maxInflightPerClient',
        'rateLimitRps',
        'rateLimitBurst', // follows the rate while unset
        'maxModelQueue',
        'trustForwardedFor',
        'trustedProxies',
        'rateLimitKey',
        'maxConnections',
        'maxConnectionsPerIp',
        'maxProtocolErrorsPerSecond',
        'errorCoalesceMs',
        'maxPayloadBytes',
        'requestTimeoutMs',
        'adminToken',
        'shutdownTimeoutMs',
        'reloadStepTimeoutMs',
        'logLevel',
      ]),
    );
    expect(change.next).toMatchObject({
      rateLimitRps: 5,
      rateLimitBurst: 5,
      maxPayloadBytes: 4096,
      logLevel: 'debug',
      sloP99Ms: 80,
    });
  });

  test('settings that need a restart are named and keep their running value', () => {
    const wanted = resolveConfig({
      file: {
        port: 9001,
        host: '127.0.0.1',
        nodes: 3,
        workers: 2,
        device: 'auto',
        intraOpThreads: 2,
        ringBytes: 16 * 1024 * 1024,
        modelsDir: '/elsewhere',
        stateDir: '/var/lib/other',
        slowConsumerWarnBytes: 2048,
        slowConsumerCloseBytes: 4096,
        rateLimitRps: 7,
      },
    });
    const change = planConfigChange(started, wanted, started);
    expect(change.applied).toEqual(['rateLimitRps', 'rateLimitBurst']);
    expect(change.restartRequired).toEqual([
      'port',
      'host',
      'nodes',
      'workers',
      'device',
      'modelsDir',
      'slowConsumerWarnBytes',
      'slowConsumerCloseBytes',
      'intraOpThreads',
      'ringBytes',
      'stateDir',
    ]);
    expect(change.next).toMatchObject({ port: 8000, nodes: 2, device: 'cpu', workers: 1, rateLimitRps: 7 });
    expect(change.next.devices).toBe(started.devices);
  });

  test('nothing changed: nothing applied, nothing to restart', () => {
    const change = planConfigChange(started, started, started);
    expect(change).toEqual({ applied: [], restartRequired: [], next: { ...started } });
  });

  test('a payload limit above what the running rings and WebSocket layer take needs a restart', () => {
    // Started with 1 MiB payloads and 8 MiB rings: the rings cap records at 4 MiB.
    expect(livePayloadCeiling(started)).toBe(4 * 1024 * 1024);
    const fits = resolveConfig({ file: { nodes: 2, maxPayloadBytes: 4 * 1024 * 1024 } });
    expect(planConfigChange(started, fits, started).applied).toEqual(['maxPayloadBytes']);
    // Valid on its own (with bigger rings), but the running rings were sized at start.
    const tooBig = resolveConfig({
      file: { nodes: 2, maxPayloadBytes: 8 * 1024 * 1024, ringBytes: 16 * 1024 * 1024 },
    });
    const change = planConfigChange(started, tooBig, started);
    expect(change.applied).toEqual([]);
    expect(change.restartRequired).toEqual(['maxPayloadBytes', 'ringBytes']);
    expect(change.next.maxPayloadBytes).toBe(1024 * 1024);
  });

  test('the live list names only real settings', () => {
    for (const key of LIVE_SETTINGS) expect(SETTING_KEYS).toContain(key);
  });
});
