/**
 * The admin listener, shared by the server's supervisor and the stream pipeline: a node:http(s) listener on a
 * TCP address or a unix socket (mode 0600), the token file and TLS files it reads, and the rules an admin
 * request must pass (token compared by digest, CSRF and DNS-rebinding checks). Not a pure lib: it does I/O
 * (listens, reads files); auth.ts and token.ts alone are pure.
 */
export {
  type AdminDecision,
  type AdminPolicy,
  type AdminRequestHead,
  authorizeAdmin,
  checkAdminRequest,
  isLoopbackHost,
  type ProxyHeaders,
  parseAllowedOrigins,
} from './auth';
export { AdminSetupError } from './errors';
export {
  type AdminSecrets,
  readAdminSecrets,
  readTlsPair,
  readTokenFile,
  type TlsPair,
} from './files';
export { readRequestBody, requestHead, sendText } from './http';
export { type AdminAddress, type AdminEndpoint, type AdminHandler, AdminListener } from './listener';
export { bearerToken, sameToken } from './token';
