export { describeSettings, type SettingDescription } from './describe';
export {
  type DeviceTarget,
  devicesPerNode,
  formatDeviceList,
  formatDeviceTarget,
  parseDeviceEntry,
  parseDeviceList,
} from './device';
export { ConfigError, type ConfigSource } from './errors';
export { type ConfigChange, planConfigChange } from './live';
export { requirePositiveInt } from './options';
export {
  type ConfigSources,
  type ResolvedConfig,
  redactConfig,
  resolveConfig,
  resolveConfigDetailed,
} from './resolve';
export type { LogLevel, RateLimitKey, ServerConfig, SettingKey } from './server-config';
export { RATE_LIMIT_KEYS } from './server-config';
export { ADMIN_PORT } from './settings';
export {
  checkTlsMaterial,
  TLS_EXPIRY_WARNING_MS,
  type TlsFilesText,
  type TlsFileText,
  type TlsMaterial,
  type TlsSettingKey,
} from './tls';
