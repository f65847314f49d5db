/**
 * A loaded NatsAuth as nats.js connection options (its own user/pass, token, authenticators and TLS), and how
 * a NATS failure reads: a refusal (credentials, permissions, TLS) is not "unreachable" and must not be retried
 * forever. No I/O.
 */
import { type ConnectionOptions, credsAuthenticator, nkeyAuthenticator } from '@nats-io/nats-core';
import type { NatsAuth } from './load';
import { redactNatsUrls } from './redact';

/** The part of nats.js's ConnectionOptions that says where to connect and as whom. */
export type NatsIdentityOptions = Pick<
  ConnectionOptions,
  'servers' | 'user' | 'pass' | 'token' | 'authenticator' | 'tls'
>;

export function natsConnectionOptions(auth: NatsAuth): NatsIdentityOptions {
  const options: NatsIdentityOptions = { servers: auth.servers };
  const encode = (text: string) => new TextEncoder().encode(text);
  if (auth.mode === 'user') {
    options.user = auth.user!;
    options.pass = auth.pass!;
  } else if (auth.mode === 'token') options.token = auth.token!;
  else if (auth.mode === 'nkey') options.authenticator = nkeyAuthenticator(encode(auth.seed!));
  else if (auth.mode === 'creds') options.authenticator = credsAuthenticator(encode(auth.creds!));
  if (auth.tls) {
    const tls: NonNullable<ConnectionOptions['tls']> = {};
    if (auth.tls.ca !== undefined) tls.ca = auth.tls.ca;
    if (auth.tls.cert !== undefined) tls.cert = auth.tls.cert;
    if (auth.tls.key !== undefined) tls.key = auth.tls.key;
    if (auth.tls.handshakeFirst) tls.handshakeFirst = true;
    options.tls = tls;
  }
  return options;
}

export type NatsRefusal = 'authentication' | 'expired' | 'tls';

// Node's certificate verification failures (tls.connect's err.code).
const TLS_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * Why the server refused us, when it did: bad or expired credentials, or a TLS mismatch (a server that wants
 * TLS or refuses it, a certificate that does not verify). Undefined: it did not answer (retrying can help).
 */
export function natsRefusal(error: unknown): NatsRefusal | undefined {
  if (!(error instanceof Error)) return undefined;
  if (error.name === 'AuthorizationError' || /authorization violation/i.test(error.message))
    return 'authentication';
  if (error.name === 'UserAuthenticationExpiredError') return 'expired';
  const code = (error as NodeJS.ErrnoException).code;
  if (
    typeof code === 'string' &&
    (TLS_CODES.has(code) || code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_'))
  )
    return 'tls';
  if (error.name === 'ConnectionError' && /\btls\b/i.test(error.message)) return 'tls';
  return undefined;
}

const REFUSAL_TEXT: Record<NatsRefusal, string> = {
  authentication: 'refused the credentials (check the NATS user, password, token, nkey or .creds)',
  expired: 'refused the credentials as expired (renew the user JWT)',
  tls: 'failed the TLS handshake (check tls:// and the CA, certificate, key and tls-first settings)',
};

/** `NATS at <servers> refused the credentials (…): Authorization Violation`; secrets redacted. */
export function describeRefusal(refusal: NatsRefusal, shown: string, error: unknown): string {
  return `NATS at ${shown} ${REFUSAL_TEXT[refusal]}: ${redactNatsUrls(String((error as Error)?.message ?? error))}`;
}

/** A status event of a live connection that an operator must see: a refused publish or subscribe, expired creds. */
export function describeStatusProblem(status: { type: string; error?: unknown }): string | undefined {
  if (status.type !== 'error' || !(status.error instanceof Error)) return undefined;
  const error = status.error as Error & { operation?: string; subject?: string };
  if (error.name === 'PermissionViolationError')
    return `NATS permissions violation: this account may not ${error.operation ?? 'use'} "${error.subject ?? '?'}" (${error.message})`;
  if (error.name === 'UserAuthenticationExpiredError') return `NATS credentials expired: ${error.message}`;
  if (error.name === 'AuthorizationError') return `NATS refused the credentials: ${error.message}`;
  return undefined;
}
