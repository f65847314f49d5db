/** uWebSockets.js loaded its pure-JS fallback instead of its native binary: the server refuses to start. */
export class UwsFallbackError extends Error {
  readonly code = 'uws_fallback';
  constructor(message: string) {
    super(message);
    this.name = 'UwsFallbackError';
  }
}
