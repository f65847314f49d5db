import { flagName } from './resolve';
import { SETTING_KEYS, SETTINGS } from './settings';

export interface SettingDescription {
  key: string;
  env: string;
  /** Conventional flag spelling (`--batch-size`); the CLI may spell some differently. */
  flag: string;
  /** Raw default (undefined for unset settings). */
  default: unknown;
  /** The default as people should read it. */
  defaultText: string;
  help: string;
  /** What a valid value looks like. */
  expected: string;
}

/** One entry per setting, in a stable order, for --help text and documentation. */
export function describeSettings(): SettingDescription[] {
  return SETTING_KEYS.map((key) => {
    const spec = SETTINGS[key];
    return {
      key,
      env: spec.env,
      flag: flagName(key),
      default: spec.default,
      defaultText: spec.defaultText ?? JSON.stringify(spec.default),
      help: spec.help,
      expected: spec.expected,
    };
  });
}
