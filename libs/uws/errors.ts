/** uWebSockets.js loaded its pure-JS fallback instead of its native binary: the server refuses to start. */
export class UwsFallbackError extends Error {
  readonly code = 'ERR_UWS_FALLBACK';
  constructor(message: string) {
    super(message);
    this.name = 'UwsFallbackError';
  }
}
