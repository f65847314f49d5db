/** The admin listener's secrets on disk: the token file and the TLS certificate and key, checked when read. */
import { readFileSync, statSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { AdminSetupError } from './errors';

const TOKEN = /^[^\s\0]{1,4096}$/;

function read(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new AdminSetupError(`cannot read the ${what} ${file}: ${code}`);
  }
}

/**
 * The admin token in `file`: its one line (a trailing newline is dropped), no whitespace inside. `warn` hears
 * when other users may read the file (mode bits for group or others).
 */
export function readTokenFile(file: string, warn: (message: string) => void = () => {}): string {
  const token = read(file, 'admin token file')
    .toString('utf8')
    .replace(/\r?\n$/, '');
  if (!TOKEN.test(token))
    throw new AdminSetupError(
      `the admin token file ${file} must hold one token (1-4096 characters, no whitespace) on one line`,
    );
  try {
    if ((statSync(file).mode & 0o077) !== 0)
      warn(`the admin token file ${file} is readable by other users: chmod 600 it`);
  } catch {
    // read above: a file that vanished since is read again on the next reload
  }
  return token;
}

/** A certificate chain and its key as read from disk, and the files they came from. */
export interface TlsPair {
  cert: Buffer;
  key: Buffer;
  certFile: string;
  keyFile: string;
}

/** Reads and checks a certificate and key (PEM): each parses, and the key is the certificate's. */
export function readTlsPair(certFile: string, keyFile: string): TlsPair {
  const cert = read(certFile, 'TLS certificate');
  const key = read(keyFile, 'TLS key');
  try {
    createSecureContext({ cert, key });
  } catch (error) {
    throw new AdminSetupError(
      `TLS certificate ${certFile} with key ${keyFile} is unusable: ${(error as Error).message}`,
    );
  }
  return { cert, key, certFile, keyFile };
}

/** What an admin listener authenticates with: its token and its TLS pair, each when configured. */
export interface AdminSecrets {
  token?: string;
  tls?: TlsPair;
}

/**
 * Reads what an admin listener's settings name (at start, and on every reload): the token from its file (else the
 * token given inline), the TLS pair from its files. Throws AdminSetupError naming the file.
 */
export function readAdminSecrets(
  files: { tokenFile?: string | undefined; token?: string | undefined; tlsCert?: string; tlsKey?: string },
  warn: (message: string) => void,
): AdminSecrets {
  const token = files.tokenFile !== undefined ? readTokenFile(files.tokenFile, warn) : files.token;
  const tls =
    files.tlsCert !== undefined && files.tlsKey !== undefined
      ? readTlsPair(files.tlsCert, files.tlsKey)
      : undefined;
  return { ...(token !== undefined ? { token } : {}), ...(tls ? { tls } : {}) };
}
