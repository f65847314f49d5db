/**
 * Admin API access (`/api/*`, and `/metrics` on the admin listener), decided from a request's headers before
 * its body is read: who may call it (the token, when one is configured) and, against a web page in a browser on
 * the host (CSRF, DNS rebinding), what a call must look like. No caller is trusted for its address: behind a
 * TLS terminator, a sidecar, `kubectl port-forward` or socat every connection comes from loopback.
 */
import { bearerToken, sameToken } from './token';

/** Proxy headers of an admin request, as received ('' or undefined when absent). */
export interface ProxyHeaders {
  forwardedFor?: string;
  forwarded?: string;
}

/**
 * With a token configured, a matching `Authorization: Bearer <token>` is required of every caller, whatever
 * its address. Without one the listener is loopback or a unix socket (libs/config refuses anything else) and
 * trusts its callers — except a request carrying `X-Forwarded-For` or `Forwarded`: a local reverse proxy
 * relays other machines' callers, so it is refused.
 */
export function authorizeAdmin(
  token: string | undefined,
  authorization: string,
  proxy: ProxyHeaders = {},
): { ok: true } | { ok: false; reason: string } {
  if (token) {
    if (sameToken(token, bearerToken(authorization))) return { ok: true };
    return {
      ok: false,
      reason:
        'admin endpoints need "Authorization: Bearer <token>" (the admin token: adminTokenFile or STREAMINFER_ADMIN_TOKEN)',
    };
  }
  if (proxy.forwardedFor || proxy.forwarded) {
    return {
      ok: false,
      reason:
        'admin request came through a proxy (X-Forwarded-For or Forwarded header): a proxied caller is not trusted; configure an admin token (adminTokenFile) and send "Authorization: Bearer <token>"',
    };
  }
  return { ok: true };
}

/** What decides an admin request (the configuration's admin settings). */
export interface AdminPolicy {
  /** Unset: the listener's callers are trusted (it is loopback or a unix socket), with a loopback Host. */
  token?: string | undefined;
  /** Origins (`scheme://host[:port]`, lower case) whose pages may call the admin API; empty: none. */
  allowedOrigins: readonly string[];
}

/** The headers of an admin request that decide it (absent or '' when not sent). */
export interface AdminRequestHead {
  method: string;
  authorization: string;
  forwardedFor?: string;
  forwarded?: string;
  host?: string;
  origin?: string;
  contentType?: string;
}

export type AdminDecision =
  | { ok: true }
  | { ok: false; code: 'unauthorized' | 'forbidden' | 'unsupported_media_type'; reason: string };

const IPV4_LOOPBACK =
  /^127\.(25[0-5]|2[0-4]\d|1?\d?\d)\.(25[0-5]|2[0-4]\d|1?\d?\d)\.(25[0-5]|2[0-4]\d|1?\d?\d)$/;
const PORT = /^\d{1,5}$/;

/** A `Host` header that names this machine by a loopback name: localhost, 127.0.0.0/8, [::1]; optional port. */
export function isLoopbackHost(host: string): boolean {
  const value = host.trim().toLowerCase();
  let name = value;
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    if (end < 0) return false;
    name = value.slice(0, end + 1);
    const rest = value.slice(end + 1);
    if (rest !== '' && !(rest.startsWith(':') && PORT.test(rest.slice(1)))) return false;
    return name === '[::1]';
  }
  const colon = value.indexOf(':');
  if (colon >= 0) {
    name = value.slice(0, colon);
    if (!PORT.test(value.slice(colon + 1))) return false;
  }
  return name === 'localhost' || IPV4_LOOPBACK.test(name);
}

/** `application/json`, with or without parameters (`; charset=utf-8`). */
function isJsonContentType(contentType: string): boolean {
  const type = contentType.split(';', 1)[0]!.trim().toLowerCase();
  return type === 'application/json';
}

/** The `adminAllowedOrigins` setting as a list (comma-separated origins, compared in lower case). */
export function parseAllowedOrigins(setting: string | undefined): string[] {
  if (setting === undefined) return [];
  return setting
    .split(',')
    .map((origin) => origin.trim().toLowerCase())
    .filter((origin) => origin.length > 0);
}

/**
 * One admin request, in this order: authenticated (401 `unauthorized`, see authorizeAdmin); without a token
 * a loopback `Host` (403 `forbidden`: a DNS-rebound page reaches 127.0.0.1 under its own name); no
 * `Origin` unless allowed (403 `forbidden`: a page's cross-origin request) on mutating requests, and on every
 * request without a token; a mutating request (anything but GET and HEAD) is `application/json` (415
 * `unsupported_media_type`: a page can send text/plain, form and multipart bodies without a CORS preflight,
 * never JSON). Headers only: it is decided before a body is read.
 */
export function checkAdminRequest(policy: AdminPolicy, request: AdminRequestHead): AdminDecision {
  const auth = authorizeAdmin(policy.token, request.authorization, {
    forwardedFor: request.forwardedFor,
    forwarded: request.forwarded,
  });
  if (!auth.ok) return { ok: false, code: 'unauthorized', reason: auth.reason };
  const host = request.host ?? '';
  const rawOrigin = request.origin ?? '';
  const contentType = request.contentType ?? '';
  const loopbackTrust = !policy.token;
  if (loopbackTrust && !isLoopbackHost(host))
    return {
      ok: false,
      code: 'forbidden',
      reason: `without an admin token, admin endpoints trust callers only when they name a loopback host (localhost, 127.0.0.1, [::1]); Host "${printable(host)}" is not one (configure an admin token to call them by another name)`,
    };
  const mutating = request.method !== 'GET' && request.method !== 'HEAD';
  const origin = rawOrigin.trim().toLowerCase();
  if (origin !== '' && (mutating || loopbackTrust) && !policy.allowedOrigins.includes(origin))
    return {
      ok: false,
      code: 'forbidden',
      reason: `admin requests from a web page (Origin "${printable(rawOrigin)}") are refused unless the origin is in adminAllowedOrigins (STREAMINFER_ADMIN_ALLOWED_ORIGINS)`,
    };
  if (mutating && !isJsonContentType(contentType))
    return {
      ok: false,
      code: 'unsupported_media_type',
      reason: `admin ${request.method} requests must send "Content-Type: application/json"${contentType ? ` (got "${printable(contentType)}")` : ''}`,
    };
  return { ok: true };
}

/** A header value quoted in an answer: bounded, printable ASCII only. */
function printable(value: string): string {
  const shown = value.slice(0, 100).replace(/[^\x20-\x7e]/g, '?');
  return value.length > 100 ? `${shown}…` : shown;
}
