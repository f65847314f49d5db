/**
 * The uWebSockets.js package silently falls back to a slow pure-JS implementation when its native binary does
 * not load. Refuse to run on it: the whole point of the gateway is the native server.
 */
import { UwsFallbackError } from './errors';

export function usesNativeUws(): boolean {
  require('uWebSockets.js');
  return Object.keys(require.cache).some((file) => /uws_[a-z0-9]+_[a-z0-9]+_\d+\.node$/.test(file));
}

export function assertNativeUws(): void {
  if (
    process.env.UWS_USE_FALLBACK &&
    !['0', 'false', ''].includes(process.env.UWS_USE_FALLBACK.toLowerCase())
  ) {
    throw new UwsFallbackError(
      'UWS_USE_FALLBACK is set: StreamInfer refuses to run on the pure-JS uWebSockets.js fallback',
    );
  }
  if (!usesNativeUws()) {
    throw new UwsFallbackError(
      `uWebSockets.js could not load its native binary for ${process.platform}-${process.arch} (Node ABI ${process.versions.modules}) and fell back to pure JS; ` +
        'StreamInfer refuses to run on the fallback. Use Node.js 20 on glibc Linux, or reinstall with `npm ci`.',
    );
  }
}
