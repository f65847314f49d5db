import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  ConfigError,
  checkTlsMaterial,
  planConfigChange,
  resolveConfig,
  resolveConfigDetailed,
  type TlsFilesText,
} from '../../libs/config';
import { CertKit, fingerprintOf, type PemPair } from '../../scripts/tls-kit';

const kit = new CertKit();
let ca: PemPair;
let server: PemPair;
let other: PemPair;
let expired: PemPair;

beforeAll(() => {
  ca = kit.ca('ca');
  server = kit.issue('server', ca);
  other = kit.issue('other', ca);
  expired = kit.issue('expired', ca, { days: -1 });
});
afterAll(() => kit.cleanup());

function files(pair: PemPair, key = pair.key, clientCa?: string): TlsFilesText {
  const read = (file: string) => ({ path: file, text: readFileSync(file, 'utf8') });
  return clientCa
    ? { cert: read(pair.cert), key: read(key), clientCa: read(clientCa) }
    : { cert: read(pair.cert), key: read(key) };
}

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('checkTlsMaterial', () => {
  it('accepts a certificate with its key, and a CA; gives their fingerprints', () => {
    const material = checkTlsMaterial(files(server, server.key, ca.cert), Date.now());
    expect(material.certFingerprint).toBe(fingerprintOf(server.cert));
    expect(material.clientCaFingerprint).toBe(fingerprintOf(ca.cert));
    expect(material.warnings).toEqual([]);
  });

  it('refuses a key that does not match the certificate, naming both files', () => {
    const error = errorOf(() => checkTlsMaterial(files(server, other.key), Date.now()));
    expect(error.setting).toBe('tlsKey');
    expect(error.message).toContain(other.key);
    expect(error.message).toContain(server.cert);
    expect(error.message).toMatch(/does not match/);
  });

  it('refuses an expired certificate, naming the file', () => {
    const error = errorOf(() => checkTlsMaterial(files(expired), Date.now()));
    expect(error.setting).toBe('tlsCert');
    expect(error.message).toContain(expired.cert);
    expect(error.message).toMatch(/expired/);
  });

  it('warns about a certificate that expires soon or is not valid yet', () => {
    const notAfter = Date.parse(new X509Certificate(readFileSync(server.cert)).validTo);
    const soon = checkTlsMaterial(files(server), notAfter - 3_600_000);
    expect(soon.warnings.join('\n')).toMatch(/expires on/);
    const early = checkTlsMaterial(files(server), Date.now() - 3_600_000);
    expect(early.warnings.join('\n')).toMatch(/not valid before/);
  });

  it('refuses a file that is no certificate, and a key that is none, without echoing the key', () => {
    const notPem = errorOf(() =>
      checkTlsMaterial({ cert: { path: '/x/cert.pem', text: 'hello' }, key: files(server).key }, Date.now()),
    );
    expect(notPem.setting).toBe('tlsCert');
    expect(notPem.message).toContain('/x/cert.pem');
    const secret = '-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n';
    const badKey = errorOf(() =>
      checkTlsMaterial({ cert: files(server).cert, key: { path: '/x/key.pem', text: secret } }, Date.now()),
    );
    expect(badKey.setting).toBe('tlsKey');
    expect(badKey.message).toContain('/x/key.pem');
    expect(badKey.message).not.toContain('c2VjcmV0');
  });

  it('refuses a client CA that is a leaf, not a CA', () => {
    const error = errorOf(() => checkTlsMaterial(files(server, server.key, other.cert), Date.now()));
    expect(error.setting).toBe('tlsClientCa');
    expect(error.message).toContain(other.cert);
    expect(error.message).toMatch(/not a CA/);
  });

  it('names the layer that set the file', () => {
    const error = errorOf(() => checkTlsMaterial(files(expired), Date.now(), { tlsCert: 'env' }));
    expect(error.source).toBe('env');
  });
});

describe('TLS settings', () => {
  it('come from flags, STREAMINFER_TLS_* and the file', () => {
    const config = resolveConfig({
      env: { STREAMINFER_TLS_CERT: '/e/cert.pem', STREAMINFER_TLS_KEY: '/e/key.pem' },
      file: { tlsClientCa: '/f/ca.pem' },
    });
    expect(config).toMatchObject({ tlsCert: '/e/cert.pem', tlsKey: '/e/key.pem', tlsClientCa: '/f/ca.pem' });
    expect(resolveConfig({})).toMatchObject({
      tlsCert: undefined,
      tlsKey: undefined,
      tlsClientCa: undefined,
    });
  });

  it('refuse a certificate without its key and a key without its certificate', () => {
    const noKey = errorOf(() => resolveConfig({ flags: { tlsCert: 'c.pem' } }));
    expect(noKey.setting).toBe('tlsKey');
    expect(noKey.message).toMatch(/--tls-cert \(command-line flag\) is set but tlsKey is not/);
    const noCert = errorOf(() => resolveConfig({ env: { STREAMINFER_TLS_KEY: 'k.pem' } }));
    expect(noCert.setting).toBe('tlsCert');
    expect(noCert.message).toContain('STREAMINFER_TLS_KEY');
  });

  it('refuse a client CA on a plain port; a client CA needs no warning (a certificate is required)', () => {
    const error = errorOf(() => resolveConfig({ file: { tlsClientCa: 'ca.pem' } }));
    expect(error.setting).toBe('tlsClientCa');
    expect(error.message).toMatch(/needs tlsCert and tlsKey/);
    const { warnings } = resolveConfigDetailed({
      flags: { tlsCert: 'c.pem', tlsKey: 'k.pem', tlsClientCa: 'ca.pem' },
    });
    expect(warnings.join('\n')).not.toMatch(/tlsClientCa/);
  });

  it('reload live with new files; turning TLS or mutual TLS on or off needs a restart', () => {
    const plain = resolveConfig({});
    const tls = resolveConfig({ flags: { tlsCert: 'c.pem', tlsKey: 'k.pem' } });
    const mutual = resolveConfig({ flags: { tlsCert: 'c.pem', tlsKey: 'k.pem', tlsClientCa: 'ca.pem' } });
    const renewed = resolveConfig({ flags: { tlsCert: 'c2.pem', tlsKey: 'k2.pem', tlsClientCa: 'ca2.pem' } });
    expect(planConfigChange(mutual, renewed, mutual)).toMatchObject({
      applied: ['tlsCert', 'tlsKey', 'tlsClientCa'],
      restartRequired: [],
    });
    // node:tls relays for mutual TLS, uWS SSLApp serves plain TLS: another listener, so a restart.
    expect(planConfigChange(tls, mutual, tls)).toMatchObject({
      applied: [],
      restartRequired: ['tlsClientCa'],
    });
    expect(planConfigChange(mutual, tls, mutual)).toMatchObject({
      applied: [],
      restartRequired: ['tlsClientCa'],
    });
    expect(planConfigChange(plain, tls, plain)).toMatchObject({
      applied: [],
      restartRequired: ['tlsCert', 'tlsKey'],
    });
    const off = planConfigChange(tls, plain, tls);
    expect(off.restartRequired).toEqual(['tlsCert', 'tlsKey']);
    expect(off.next.tlsCert).toBe('c.pem');
  });
});
