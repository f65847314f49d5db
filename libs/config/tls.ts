/**
 * The data port's TLS material, checked before anything listens: the certificate parses, the key parses and
 * matches it, the certificate is in date, the client CA (if any) is a CA. Pure: the caller reads the files
 * (apps/node/tls-files.ts) and passes their text and the clock; node:crypto does the parsing.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import { ConfigError, type ConfigSource } from './errors';

export type TlsSettingKey = 'tlsCert' | 'tlsKey' | 'tlsClientCa';

/** One file as read: its path (for messages) and its content. */
export interface TlsFileText {
  path: string;
  text: string;
}

export interface TlsFilesText {
  cert: TlsFileText;
  key: TlsFileText;
  clientCa?: TlsFileText;
}

export interface TlsMaterial {
  /** SHA-256 fingerprint of the certificate (the leaf): what a client sees, and what a reload compares. */
  certFingerprint: string;
  clientCaFingerprint?: string;
  /** The certificate's end of validity (ms since the epoch). */
  notAfter: number;
  /** Worth logging, not fatal: a certificate not valid yet, or expiring soon. */
  warnings: string[];
}

/** A certificate this close to its end of validity earns a warning at every start and reload. */
export const TLS_EXPIRY_WARNING_MS = 14 * 24 * 3_600_000;

const PEM_CERTIFICATE = '-----BEGIN CERTIFICATE-----';

function parseCertificate(
  file: TlsFileText,
  setting: TlsSettingKey,
  source: ConfigSource,
  what: string,
): X509Certificate {
  if (!file.text.includes(PEM_CERTIFICATE))
    throw new ConfigError(
      `invalid ${setting} file ${file.path}: no PEM ${what} in it (expected "${PEM_CERTIFICATE}")`,
      setting,
      source,
    );
  try {
    return new X509Certificate(file.text);
  } catch (error) {
    throw new ConfigError(
      `invalid ${setting} file ${file.path}: not a readable PEM ${what} (${(error as Error).message})`,
      setting,
      source,
    );
  }
}

function parseKey(file: TlsFileText, source: ConfigSource): KeyObject {
  try {
    return createPrivateKey(file.text);
  } catch (error) {
    // node:crypto's reason names the format problem, never the key's bytes.
    throw new ConfigError(
      `invalid tlsKey file ${file.path}: not an unencrypted PEM private key (${(error as Error).message})`,
      'tlsKey',
      source,
    );
  }
}

function validity(
  certificate: X509Certificate,
  file: TlsFileText,
  setting: TlsSettingKey,
  source: ConfigSource,
  now: number,
  warnings: string[],
): number {
  const notBefore = Date.parse(certificate.validFrom);
  const notAfter = Date.parse(certificate.validTo);
  if (!(notAfter > now))
    throw new ConfigError(
      `invalid ${setting} file ${file.path}: the certificate expired on ${certificate.validTo} (subject ${certificate.subject.replace(/\n/g, ', ')})`,
      setting,
      source,
    );
  if (notBefore > now)
    warnings.push(
      `${setting} file ${file.path}: the certificate is not valid before ${certificate.validFrom}; clients refuse it until then`,
    );
  else if (notAfter - now < TLS_EXPIRY_WARNING_MS)
    warnings.push(
      `${setting} file ${file.path}: the certificate expires on ${certificate.validTo}; replace it and reload`,
    );
  return notAfter;
}

/**
 * Checks the data port's certificate, key and client CA. Throws ConfigError naming the setting and the file;
 * `sources` says which layer set each setting (for the error's source; default: a flag).
 */
export function checkTlsMaterial(
  files: TlsFilesText,
  now: number,
  sources: Partial<Record<TlsSettingKey, ConfigSource>> = {},
): TlsMaterial {
  const warnings: string[] = [];
  const certificate = parseCertificate(files.cert, 'tlsCert', sources.tlsCert ?? 'flag', 'certificate');
  const key = parseKey(files.key, sources.tlsKey ?? 'flag');
  if (!certificate.checkPrivateKey(key))
    throw new ConfigError(
      `invalid tlsKey file ${files.key.path}: the key does not match the certificate in tlsCert file ${files.cert.path}`,
      'tlsKey',
      sources.tlsKey ?? 'flag',
    );
  const notAfter = validity(certificate, files.cert, 'tlsCert', sources.tlsCert ?? 'flag', now, warnings);
  const material: TlsMaterial = { certFingerprint: certificate.fingerprint256, notAfter, warnings };
  if (files.clientCa) {
    const source = sources.tlsClientCa ?? 'flag';
    const ca = parseCertificate(files.clientCa, 'tlsClientCa', source, 'CA certificate');
    if (!ca.ca)
      throw new ConfigError(
        `invalid tlsClientCa file ${files.clientCa.path}: the certificate is not a CA (no basicConstraints CA:TRUE), it cannot sign client certificates`,
        'tlsClientCa',
        source,
      );
    validity(ca, files.clientCa, 'tlsClientCa', source, now, warnings);
    material.clientCaFingerprint = ca.fingerprint256;
  }
  return material;
}
