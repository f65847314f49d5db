/**
 * The uWebSockets.js guard: refuse to start on the package's pure-JS fallback. Loads uWebSockets.js only when
 * asked, so importing it costs nothing.
 */

export { UwsFallbackError } from './errors';
export { assertNativeUws, usesNativeUws } from './native';
