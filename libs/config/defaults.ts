import { resolveConfig } from './resolve';
import type { ServerConfig } from './server-config';

/** The configuration when nothing is set. */
export const DEFAULTS: Readonly<ServerConfig> = resolveConfig({});
