/**
 * The uWebSockets.js guard: refuse to start on the package's pure-JS fallback. Loads uWebSockets.js only when
 * asked, so importing it costs nothing.
 */
export { assertNativeUws, UwsFallbackError, usesNativeUws } from './native';
