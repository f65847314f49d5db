/**
 * Admin API access (`/api/*`), pure: who may call it (token, or loopback trust) and, against a web page in a
 * browser on the host (CSRF, DNS rebinding), what a call must look like. The node decides with these before it
 * reads a body (apps/node/http-exchange.ts forwardControl); the supervisor checks again (admin-api.ts).
 */
import { timingSafeEqual } from 'node:crypto';

/** Loopback in every spelling uWS may report (IPv4, IPv6, IPv4-mapped IPv6, expanded IPv6). */
export function isLoopbackAddress(address: string): boolean {
  const value = address.toLowerCase();
  if (value.startsWith('127.') || value === '::1' || value === 'localhost') return true;
  if (value.startsWith('::ffff:127.')) return true;
  if (/^(0{1,4}:){7}0{0,3}1$/.test(value)) return true;
  // uWS prints IPv4-mapped addresses expanded: 0000:0000:0000:0000:0000:ffff:7f00:0001
  return /^(0{1,4}:){5}ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(value);
}

/** Proxy headers of an admin request, as received ('' or undefined when absent). */
export interface ProxyHeaders {
  forwardedFor?: string;
  forwarded?: string;
}

/**
 * Admin endpoints: with a token configured, a matching `Authorization: Bearer <token>` is required from every
 * client; without one, only loopback clients are served — and a request carrying `X-Forwarded-For` or
 * `Forwarded` is not one: behind a local reverse proxy every caller's connection comes from loopback, so the
 * address proves nothing and the request is refused.
 */
export function authorizeAdmin(
  token: string | undefined,
  remoteAddress: string,
  authorization: string,
  proxy: ProxyHeaders = {},
): { ok: true } | { ok: false; reason: string } {
  if (token) {
    const presented = /^Bearer\s+(.+)$/i.exec(authorization.trim())?.[1] ?? '';
    const expected = Buffer.from(token);
    const given = Buffer.from(presented);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true };
    return {
      ok: false,
      reason: 'admin endpoints need "Authorization: Bearer <token>" (STREAMINFER_ADMIN_TOKEN)',
    };
  }
  if (proxy.forwardedFor || proxy.forwarded) {
    return {
      ok: false,
      reason:
        'admin request came through a proxy (X-Forwarded-For or Forwarded header): a proxied caller is not a loopback client; configure an admin token (STREAMINFER_ADMIN_TOKEN) and send "Authorization: Bearer <token>"',
    };
  }
  if (isLoopbackAddress(remoteAddress)) return { ok: true };
  return {
    ok: false,
    reason: 'admin endpoints accept loopback clients only unless an admin token is configured',
  };
}

/** What the node and the supervisor need to decide an admin request (the configuration's admin settings). */
export interface AdminPolicy {
  /** Unset: loopback trust (no token; loopback clients only, with a loopback Host). */
  token?: string | undefined;
  /** Origins (`scheme://host[:port]`, lower case) whose pages may call the admin API; empty: none. */
  allowedOrigins: readonly string[];
}

/** The headers of an admin request that decide it (absent or '' when not sent): a ControlRequest is one. */
export interface AdminRequestHead {
  method: string;
  remoteAddress: string;
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
 * One admin request, in this order: authenticated (401 `unauthorized`, see authorizeAdmin); under loopback
 * trust a loopback `Host` (403 `forbidden`: a DNS-rebound page reaches 127.0.0.1 under its own name); no
 * `Origin` unless allowed (403 `forbidden`: a page's cross-origin request) on mutating requests, and on every
 * request under loopback trust; a mutating request (anything but GET and HEAD) is `application/json` (415
 * `unsupported_media_type`: a page can send text/plain, form and multipart bodies without a CORS preflight,
 * never JSON). Headers only: it is decided before a body is read.
 */
export function checkAdminRequest(policy: AdminPolicy, request: AdminRequestHead): AdminDecision {
  const auth = authorizeAdmin(policy.token, request.remoteAddress, request.authorization, {
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
      reason: `admin endpoints trust loopback clients only when they name a loopback host (localhost, 127.0.0.1, [::1]); Host "${printable(host)}" is not one (configure an admin token to call them by another name)`,
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
