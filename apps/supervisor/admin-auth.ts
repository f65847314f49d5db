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
