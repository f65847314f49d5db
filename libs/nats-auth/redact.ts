/**
 * Userinfo in a NATS URL (`nats://user:pass@host`, `nats://token@host`) is a secret: every server list that is
 * printed (log lines, error messages, answers) goes through these. Pure.
 */

/** What stands in for the userinfo of a URL. */
export const REDACTED = '<redacted>';

// scheme://userinfo@ (any scheme: a mistyped http://u:p@h is as secret): userinfo runs to the last '@'
// before the host, never across '/', ',' or whitespace.
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/,@]*(?:@[^\s/,@]*)*@/gi;

/** Any text (a URL, a comma list, an error message quoting one): `nats://a:b@host` → `nats://<redacted>@host`. */
export function redactNatsUrls(text: string): string {
  return text.replace(USERINFO, `$1${REDACTED}@`);
}

/** A server list (array or comma list) as one line safe to print. */
export function redactServers(servers: string | readonly string[]): string {
  return redactNatsUrls(typeof servers === 'string' ? servers : servers.join(','));
}
