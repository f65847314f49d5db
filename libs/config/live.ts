/**
 * What a configuration reload (SIGHUP, `streaminfer reload --config`) can change on a running server, and what
 * needs a restart. Pure: the supervisor resolves the new configuration, asks planConfigChange what to apply,
 * applies that through the epoch barrier and reports the rest by name.
 */
import type { ServerConfig, SettingKey } from './server-config';

/** Settings a running server applies on a configuration reload; every other setting needs a restart. */
export const LIVE_SETTINGS: ReadonlySet<SettingKey> = new Set<SettingKey>([
  'defaultModel',
  'batchSize',
  'batchTimeoutMs',
  'batchPolicy',
  'sloP99Ms',
  'maxInflightPerClient',
  'rateLimitRps',
  'rateLimitBurst',
  'modelErrorPenalty',
  'maxModelQueue',
  'trustForwardedFor',
  'trustedProxies',
  'rateLimitKey',
  'maxConnections',
  'maxConnectionsPerIp',
  'maxProtocolErrorsPerSecond',
  'maxRateLimitedPerSecond',
  'errorCoalesceMs',
  'maxPayloadBytes',
  'requestTimeoutMs',
  'tlsCert',
  'tlsKey',
  'tlsClientCa',
  'adminToken',
  'adminAllowedOrigins',
  'apiKeysFile',
  'adminTokenFile',
  'shutdownTimeoutMs',
  'reloadStepTimeoutMs',
  'logLevel',
  'trustedKeysFile',
]);

const MIB = 1024 * 1024;
const TLS_SETTINGS: ReadonlySet<SettingKey> = new Set<SettingKey>(['tlsCert', 'tlsKey', 'tlsClientCa']);

/**
 * The largest payload limit a running server can take without a restart: its rings (sized at start) hold
 * records of at most half their size, and the WebSocket layer cuts frames above max(4 × the start limit,
 * 16 MiB) (apps/node/gateway.ts, fixed when the routes are made).
 */
export function livePayloadCeiling(started: ServerConfig): number {
  return Math.min(started.ringBytes / 2, Math.max(4 * started.maxPayloadBytes, 16 * MIB));
}

export interface ConfigChange {
  /** Changed settings the reload applies. */
  applied: SettingKey[];
  /** Changed settings that take effect only after a restart; until then their running value stays. */
  restartRequired: SettingKey[];
  /** What runs after the reload: the applied values from `wanted`, everything else from `running`. */
  next: ServerConfig;
}

/**
 * Splits the difference between the running configuration and the wanted one. `started` is the configuration
 * the processes were started with (it fixes the payload ceiling). A live setting whose new value the running
 * processes cannot take (a payload limit above the ceiling, TLS or mutual TLS turned on or off) is reported as needing a
 * restart, not applied.
 */
export function planConfigChange(
  running: ServerConfig,
  wanted: ServerConfig,
  started: ServerConfig,
): ConfigChange {
  const applied: SettingKey[] = [];
  const restartRequired: SettingKey[] = [];
  const next: Record<string, unknown> = { ...running };
  for (const key of Object.keys(wanted) as Array<keyof ServerConfig>) {
    if (key === 'devices' || wanted[key] === running[key]) continue;
    // New certificate files are taken live; turning TLS or mutual TLS on or off changes the listener: a restart.
    const live =
      LIVE_SETTINGS.has(key) &&
      (key !== 'maxPayloadBytes' || wanted.maxPayloadBytes <= livePayloadCeiling(started)) &&
      (!TLS_SETTINGS.has(key) ||
        ((wanted.tlsCert === undefined) === (running.tlsCert === undefined) &&
          (wanted.tlsClientCa === undefined) === (running.tlsClientCa === undefined)));
    if (live) {
      applied.push(key);
      next[key] = wanted[key];
    } else restartRequired.push(key);
  }
  return { applied, restartRequired, next: next as unknown as ServerConfig };
}
