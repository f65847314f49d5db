import { isLoopbackName } from '../address';
import { devicesPerNode, parseDeviceList } from './device';
import { ConfigError, type ConfigSource } from './errors';
import type { ServerConfig, SettingKey, SettingSpec } from './server-config';
import { SETTING_KEYS, SETTINGS } from './settings';

export interface ConfigSources {
  /** Parsed command-line options keyed by setting (camelCase); strings or numbers. Other keys are ignored. */
  flags?: Record<string, unknown>;
  /** Usually process.env. Values are trimmed; an empty value counts as unset. */
  env?: Record<string, string | undefined>;
  /** The parsed JSON config file: an object of settings (camelCase keys). Unknown keys are an error. */
  file?: unknown;
  /** Where the file came from, for messages. */
  filePath?: string;
  /** How the command line spells a setting's flag, for messages (default `--kebab-case` of the key). */
  flagNames?: Record<string, string>;
}

export interface ResolvedConfig {
  config: ServerConfig;
  /** The layer each setting's value came from. */
  origins: Readonly<Record<SettingKey, ConfigSource>>;
  /** Things worth logging that are not errors (unknown STREAMINFER_* variables, odd combinations). */
  warnings: string[];
}

const ENV_PREFIX = 'STREAMINFER_';
/** File keys that are not settings but are allowed (editor schema hints). */
const FILE_META_KEYS = new Set(['$schema']);
/** Older names a config file may still use: the per-client in-flight cap was once called a queue size. */
const FILE_KEY_ALIASES: Readonly<Record<string, SettingKey>> = { maxQueueSize: 'maxInflightPerClient' };
const SHORT_TOKEN = 16;

const SOURCE_NAMES: Record<ConfigSource, string> = {
  flag: 'command-line flag',
  env: 'environment',
  file: 'config file',
  default: 'default',
};

export function flagName(key: string): string {
  return `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function render(value: unknown, secret: boolean | undefined, redact?: (text: string) => string): string {
  if (secret) return '<redacted>';
  if (typeof value === 'string') {
    const shown = redact ? redact(value) : value;
    return JSON.stringify(shown.length > 80 ? `${shown.slice(0, 77)}...` : shown);
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      current.push(Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/** The setting an unknown file key was probably meant to be. */
function suggest(unknown: string): SettingKey | undefined {
  const byEnv = SETTING_KEYS.find((key) => SETTINGS[key].env === unknown.toUpperCase());
  if (byEnv) return byEnv;
  const folded = unknown.replace(/[-_]/g, '').toLowerCase();
  let best: SettingKey | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const key of SETTING_KEYS) {
    const distance = editDistance(folded, key.toLowerCase());
    if (distance < bestDistance) {
      best = key;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(folded.length / 4)) ? best : undefined;
}

class Resolver {
  private readonly flags: Record<string, unknown>;
  private readonly env: Record<string, string | undefined>;
  private readonly file: Record<string, unknown>;
  private readonly fileLabel: string;
  private readonly flagNames: Record<string, string>;

  constructor(sources: ConfigSources) {
    this.flags = isRecord(sources.flags) ? sources.flags : {};
    this.env = isRecord(sources.env) ? (sources.env as Record<string, string | undefined>) : {};
    this.fileLabel = sources.filePath ? `config file ${sources.filePath}` : 'config file';
    this.flagNames = sources.flagNames ?? {};
    this.file = this.checkFile(sources.file);
  }

  /** How a setting is named in a given layer, with the layer: `STREAMINFER_PORT (environment)`. */
  label(key: SettingKey, source: ConfigSource): string {
    switch (source) {
      case 'flag':
        return `${this.flagNames[key] ?? flagName(key)} (${SOURCE_NAMES.flag})`;
      case 'env':
        return `${SETTINGS[key].env} (${SOURCE_NAMES.env})`;
      case 'file':
        return `${key} (${this.fileLabel})`;
      case 'default':
        return `${key} (${SOURCE_NAMES.default})`;
    }
  }

  private checkFile(file: unknown): Record<string, unknown> {
    if (file === undefined) return {};
    if (!isRecord(file)) {
      throw new ConfigError(
        `invalid ${this.fileLabel}: expected a JSON object of settings, got ${render(file, false)}`,
        '(file)',
        'file',
      );
    }
    const named: Record<string, unknown> = { ...file };
    for (const [alias, key] of Object.entries(FILE_KEY_ALIASES)) {
      if (!Object.hasOwn(named, alias)) continue;
      if (Object.hasOwn(named, key))
        throw new ConfigError(
          `${this.fileLabel} sets both "${alias}" and "${key}" (the same setting)`,
          key,
          'file',
        );
      named[key] = named[alias];
      delete named[alias];
    }
    for (const key of Object.keys(named)) {
      if (key in SETTINGS || FILE_META_KEYS.has(key)) continue;
      const guess = suggest(key);
      throw new ConfigError(
        `unknown setting "${key}" in ${this.fileLabel}${guess ? ` (did you mean "${guess}"?)` : ''}`,
        key,
        'file',
      );
    }
    return named;
  }

  /** Raw value of a setting in one layer, or undefined when that layer leaves it unset. */
  private raw(key: SettingKey, source: Exclude<ConfigSource, 'default'>): unknown {
    let value: unknown;
    if (source === 'flag') value = Object.hasOwn(this.flags, key) ? this.flags[key] : undefined;
    else if (source === 'env') value = this.env[SETTINGS[key].env];
    else value = Object.hasOwn(this.file, key) ? this.file[key] : undefined;
    if (value === null || value === undefined) return undefined;
    if (typeof value === 'string') {
      const trimmed = value.trim();
      if (source === 'env' && trimmed === '') return undefined;
      return trimmed;
    }
    return value;
  }

  /** Validates the setting in every layer that sets it (so a broken file is reported even when overridden). */
  resolve<K extends SettingKey>(key: K): { value: ServerConfig[K]; origin: ConfigSource } {
    const spec = SETTINGS[key] as SettingSpec<ServerConfig[K]>;
    let chosen: { value: ServerConfig[K]; origin: ConfigSource } | undefined;
    for (const source of ['flag', 'env', 'file'] as const) {
      const raw = this.raw(key, source);
      if (raw === undefined) continue;
      const parsed = spec.parse(raw);
      if (parsed === undefined) {
        throw new ConfigError(
          `invalid value ${render(raw, spec.secret, spec.redact)} for ${this.label(key, source)}: expected ${spec.expected}`,
          key,
          source,
        );
      }
      chosen ??= { value: parsed.value, origin: source };
    }
    return chosen ?? { value: spec.default, origin: 'default' };
  }

  unknownEnvNames(): string[] {
    const known = new Set(SETTING_KEYS.map((key) => SETTINGS[key].env));
    return Object.keys(this.env).filter(
      (name) => name.startsWith(ENV_PREFIX) && !known.has(name) && (this.env[name] ?? '').trim() !== '',
    );
  }
}

/** Like resolveConfig, also telling where each value came from and what looked odd. Throws ConfigError. */
export function resolveConfigDetailed(sources: ConfigSources = {}): ResolvedConfig {
  const resolver = new Resolver(sources);
  const values: Partial<Record<SettingKey, unknown>> = {};
  const origins = {} as Record<SettingKey, ConfigSource>;
  for (const key of SETTING_KEYS) {
    const { value, origin } = resolver.resolve(key);
    values[key] = value;
    origins[key] = origin;
  }
  const config = values as Omit<ServerConfig, 'devices'>;
  const warnings: string[] = [];

  // device: a single entry for every node, or exactly one per node.
  const targets = parseDeviceList(config.device)!;
  const devices = devicesPerNode(targets, config.nodes);
  if (devices === undefined) {
    const nodesFrom = resolver.label('nodes', origins.nodes);
    throw new ConfigError(
      `invalid value "${config.device}" for ${resolver.label('device', origins.device)}: it lists ${targets.length} ` +
        `devices but nodes is ${config.nodes} (${nodesFrom}); give one device for all nodes or one per node`,
      'device',
      origins.device,
    );
  }

  // rate limiting: burst follows the rate unless set; with the rate at 0 (unlimited) it is unused.
  let rateLimitBurst = config.rateLimitBurst;
  if (config.rateLimitRps === 0) {
    if (origins.rateLimitBurst !== 'default') {
      warnings.push(
        `${resolver.label('rateLimitBurst', origins.rateLimitBurst)} is ignored: rate limiting is off`,
      );
    }
    rateLimitBurst = 0;
  } else if (origins.rateLimitBurst === 'default') {
    rateLimitBurst = Math.max(1, config.rateLimitRps);
  }

  // rings must hold the largest record, including wrap-around padding.
  if (config.ringBytes < 2 * config.maxPayloadBytes) {
    const blameRing = origins.ringBytes !== 'default' || origins.maxPayloadBytes === 'default';
    const key: SettingKey = blameRing ? 'ringBytes' : 'maxPayloadBytes';
    throw new ConfigError(
      `invalid configuration: ringBytes ${config.ringBytes} (${resolver.label('ringBytes', origins.ringBytes)}) ` +
        `must be at least 2 × maxPayloadBytes ${config.maxPayloadBytes} ` +
        `(${resolver.label('maxPayloadBytes', origins.maxPayloadBytes)}); raise the ring size or lower the payload limit`,
      key,
      origins[key],
    );
  }

  if (config.slowConsumerCloseBytes <= config.slowConsumerWarnBytes) {
    const key: SettingKey =
      origins.slowConsumerCloseBytes !== 'default' ? 'slowConsumerCloseBytes' : 'slowConsumerWarnBytes';
    throw new ConfigError(
      `invalid configuration: slowConsumerCloseBytes ${config.slowConsumerCloseBytes} (${resolver.label('slowConsumerCloseBytes', origins.slowConsumerCloseBytes)}) ` +
        `must be above slowConsumerWarnBytes ${config.slowConsumerWarnBytes} (${resolver.label('slowConsumerWarnBytes', origins.slowConsumerWarnBytes)})`,
      key,
      origins[key],
    );
  }

  if (config.trustForwardedFor) {
    warnings.push(
      config.trustedProxies !== undefined
        ? `${resolver.label('trustForwardedFor', origins.trustForwardedFor)} is ignored: trustedProxies is set`
        : `${resolver.label('trustForwardedFor', origins.trustForwardedFor)} is deprecated: it trusts any peer as a proxy; set trustedProxies to your proxies' addresses`,
    );
  }

  // TLS: a certificate goes with its key; client certificates are asked for only on a TLS port.
  if ((config.tlsCert === undefined) !== (config.tlsKey === undefined)) {
    const [set, missing]: [SettingKey, SettingKey] =
      config.tlsCert === undefined ? ['tlsKey', 'tlsCert'] : ['tlsCert', 'tlsKey'];
    throw new ConfigError(
      `invalid configuration: ${resolver.label(set, origins[set])} is set but ${missing} is not; give both the certificate and its key, or neither`,
      missing,
      origins[set],
    );
  }
  if (config.tlsClientCa !== undefined && config.tlsCert === undefined) {
    throw new ConfigError(
      `invalid configuration: ${resolver.label('tlsClientCa', origins.tlsClientCa)} needs tlsCert and tlsKey (client certificates are asked for only on a TLS port)`,
      'tlsClientCa',
      origins.tlsClientCa,
    );
  }
  if (config.maxModelQueue < config.batchSize) {
    warnings.push(
      `maxModelQueue ${config.maxModelQueue} is below batchSize ${config.batchSize}: batches can never fill`,
    );
  }
  checkAdminListener(config, origins, resolver);
  if (config.adminToken !== undefined && config.adminToken.length < SHORT_TOKEN) {
    warnings.push(`adminToken is shorter than ${SHORT_TOKEN} characters: use a long random token`);
  }
  for (const name of resolver.unknownEnvNames())
    warnings.push(`unknown environment variable ${name} is ignored`);

  const result: ServerConfig = {
    ...config,
    rateLimitBurst,
    devices: Object.freeze(devices.map((device) => Object.freeze(device))),
  };
  return { config: Object.freeze(result), origins: Object.freeze(origins), warnings };
}

/**
 * The admin listener's settings together: one token source; certificate and key as a pair; and a token
 * whenever the listener is reachable from other machines (not loopback, not a unix socket): without one its
 * every caller would be an admin.
 */
function checkAdminListener(
  config: Omit<ServerConfig, 'devices'>,
  origins: Record<SettingKey, ConfigSource>,
  resolver: Resolver,
): void {
  if (config.adminToken !== undefined && config.adminTokenFile !== undefined)
    throw new ConfigError(
      `invalid configuration: adminToken (${resolver.label('adminToken', origins.adminToken)}) and adminTokenFile ` +
        `(${resolver.label('adminTokenFile', origins.adminTokenFile)}) are both set; give the token one way (adminTokenFile is safer)`,
      'adminTokenFile',
      origins.adminTokenFile,
    );
  if ((config.adminTlsCert === undefined) !== (config.adminTlsKey === undefined)) {
    const given: SettingKey = config.adminTlsCert !== undefined ? 'adminTlsCert' : 'adminTlsKey';
    const missing: SettingKey = given === 'adminTlsCert' ? 'adminTlsKey' : 'adminTlsCert';
    throw new ConfigError(
      `invalid configuration: ${resolver.label(given, origins[given])} needs ${missing} too (TLS takes a certificate and its key)`,
      given,
      origins[given],
    );
  }
  const token = config.adminToken !== undefined || config.adminTokenFile !== undefined;
  if (config.adminSocket === undefined && !token && !isLoopbackName(config.adminHost))
    throw new ConfigError(
      `invalid configuration: the admin listener on "${config.adminHost}" (${resolver.label('adminHost', origins.adminHost)}) ` +
        'is reachable from other machines, and no admin token is set: give adminTokenFile (--admin-token-file, ' +
        'STREAMINFER_ADMIN_TOKEN_FILE) or STREAMINFER_ADMIN_TOKEN, or keep adminHost on loopback or use adminSocket',
      'adminHost',
      origins.adminHost,
    );
}

/**
 * Merges command-line flags > environment (STREAMINFER_*) > config file > defaults, validating every value
 * that is set in any layer. Throws ConfigError naming the setting and the layer. Pure: the caller reads the
 * file and passes process.env.
 */
export function resolveConfig(sources: ConfigSources = {}): ServerConfig {
  return resolveConfigDetailed(sources).config;
}

/** A copy safe to log or answer: every secret setting replaced, credentials in a URL redacted. */
export function redactConfig(config: ServerConfig): ServerConfig {
  let copy: Record<string, unknown> | undefined;
  for (const key of SETTING_KEYS) {
    const spec = SETTINGS[key] as SettingSpec<unknown>;
    const value = config[key];
    if (typeof value !== 'string') continue;
    const shown = spec.secret ? '<redacted>' : spec.redact ? spec.redact(value) : value;
    if (shown === value) continue;
    copy ??= { ...config };
    copy[key] = shown;
  }
  return (copy as unknown as ServerConfig | undefined) ?? config;
}
