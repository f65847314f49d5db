/**
 * Certificates made at test time with `openssl` (EC P-256, fast): a private CA and leaves it signs, in a temp
 * dir of their own. Any suite that needs TLS (data port, admin listener, NATS) can make its files here.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** A certificate and its private key, as PEM files. */
export interface PemPair {
  cert: string;
  key: string;
}

export interface IssueOptions {
  /** Days of validity from now; negative: already expired (notAfter before now). Default 30. */
  days?: number;
  /** Names the certificate is for (DNS names or IP addresses). Default localhost and 127.0.0.1. */
  hosts?: string[];
  /** Where to write the files (default `<dir>/<name>.crt|.key`). */
  certPath?: string;
  keyPath?: string;
}

const IP = /^[\d.]+$|:/;

export class CertKit {
  readonly dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-tls-'));

  private openssl(args: string[]): void {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  }

  private newKey(keyPath: string): void {
    this.openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', keyPath]);
  }

  /** A self-signed CA (basicConstraints CA:TRUE), valid for `days`. */
  ca(name: string, days = 30): PemPair {
    const pair = { cert: path.join(this.dir, `${name}.crt`), key: path.join(this.dir, `${name}.key`) };
    this.newKey(pair.key);
    this.openssl([
      'req',
      '-x509',
      '-new',
      '-key',
      pair.key,
      '-out',
      pair.cert,
      '-days',
      String(days),
      '-subj',
      `/CN=${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    return pair;
  }

  /** A leaf signed by `ca`, good for both server and client authentication. */
  issue(name: string, ca: PemPair, options: IssueOptions = {}): PemPair {
    const pair = {
      cert: options.certPath ?? path.join(this.dir, `${name}.crt`),
      key: options.keyPath ?? path.join(this.dir, `${name}.key`),
    };
    const csr = path.join(this.dir, `${name}.csr`);
    const ext = path.join(this.dir, `${name}.ext`);
    const hosts = options.hosts ?? ['localhost', '127.0.0.1'];
    const san = hosts.map((host) => (IP.test(host) ? `IP:${host}` : `DNS:${host}`)).join(',');
    execFileSync('sh', [
      '-c',
      `printf '%s\\n' 'subjectAltName=${san}' 'extendedKeyUsage=serverAuth,clientAuth' 'basicConstraints=CA:FALSE' > '${ext}'`,
    ]);
    this.newKey(pair.key);
    this.openssl(['req', '-new', '-key', pair.key, '-out', csr, '-subj', `/CN=${name}`]);
    this.openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.cert,
      '-CAkey',
      ca.key,
      '-set_serial',
      `0x${randomBytes(8).toString('hex')}`,
      '-days',
      String(options.days ?? 30),
      '-extfile',
      ext,
      '-out',
      pair.cert,
    ]);
    return pair;
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** SHA-256 fingerprint of a PEM certificate file, as node:tls reports a peer's (`AA:BB:…`). */
export function fingerprintOf(certPath: string): string {
  return new X509Certificate(readFileSync(certPath)).fingerprint256;
}
