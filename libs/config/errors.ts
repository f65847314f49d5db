/** Where a setting's value came from, highest precedence first. */
export type ConfigSource = 'flag' | 'env' | 'file' | 'default';

/** Invalid configuration. `setting` is the camelCase key (or the unknown file key); `source` the layer at fault. */
export class ConfigError extends Error {
  readonly code = 'invalid_config' as const;
  readonly setting: string;
  readonly source: ConfigSource;

  constructor(message: string, setting: string, source: ConfigSource) {
    super(message);
    this.name = 'ConfigError';
    this.setting = setting;
    this.source = source;
  }
}
