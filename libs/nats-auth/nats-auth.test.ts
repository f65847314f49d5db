import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { encodeUser, fmtCreds } from '@nats-io/jwt';
import { nkeys } from '@nats-io/nats-core';
import {
  describeStatusProblem,
  loadNatsAuth,
  mergeNatsSettings,
  type NatsAuthError,
  type NatsAuthSettings,
  natsConnectionOptions,
  natsRefusal,
  natsSettingsFromEnv,
  redactNatsUrls,
  redactServers,
} from './index';

let dir: string;
const file = (name: string, text: string) => {
  const at = path.join(dir, name);
  writeFileSync(at, text);
  return at;
};
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

function refusal(settings: NatsAuthSettings): NatsAuthError {
  try {
    loadNatsAuth(settings);
  } catch (error) {
    expect((error as Error).name).toBe('NatsAuthError');
    return error as NatsAuthError;
  }
  throw new Error(`accepted ${JSON.stringify(settings)}`);
}

let userSeed: string;
let creds: string;
let certs: { ca: string; cert: string; key: string; otherKey: string };

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'nats-auth-test-'));
  const user = nkeys.createUser();
  userSeed = text(user.getSeed());
  const account = nkeys.createAccount();
  creds = text(fmtCreds(await encodeUser('u', user, account), user));
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=t-ca');
  ssl('req', ...ec, '-keyout', 'c.key', '-out', 'c.csr', '-subj', '/CN=client');
  ssl(
    'x509',
    '-req',
    '-in',
    'c.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'c.pem',
  );
  certs = {
    ca: path.join(dir, 'ca.pem'),
    cert: path.join(dir, 'c.pem'),
    key: path.join(dir, 'c.key'),
    otherKey: path.join(dir, 'ca.key'),
  };
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('redaction', () => {
  it('replaces the userinfo of every NATS URL in any text', () => {
    expect(redactNatsUrls('nats://alice:s3cret@h:4222')).toBe('nats://<redacted>@h:4222');
    expect(redactNatsUrls('tls://tok@h1:4222,nats://u:p@w@h2')).toBe(
      'tls://<redacted>@h1:4222,nats://<redacted>@h2',
    );
    expect(redactNatsUrls('connect nats://h:4222 failed for bob@example')).toBe(
      'connect nats://h:4222 failed for bob@example',
    );
    expect(redactServers(['nats://a:b@x', 'nats://y'])).toBe('nats://<redacted>@x,nats://y');
  });
});

describe('loadNatsAuth', () => {
  it('takes user:password and a token from the URLs, and shows them redacted', () => {
    const user = loadNatsAuth({ servers: 'nats://alice:s%40cret@h1:4222,nats://h2:4222' });
    expect(user).toEqual({
      servers: ['nats://h1:4222', 'nats://h2:4222'],
      shown: 'nats://<redacted>@h1:4222,nats://h2:4222',
      mode: 'user',
      user: 'alice',
      pass: 's@cret',
    });
    const token = loadNatsAuth({ servers: ['tls://t0k3n@h:4222'] });
    expect(token).toMatchObject({ mode: 'token', token: 't0k3n', servers: ['tls://h:4222'] });
    expect(token.tls).toEqual({ handshakeFirst: false });
    expect(refusal({ servers: 'nats://a:1@h,nats://b:2@h' }).message).toMatch(/different credentials/);
    const bad = refusal({ servers: 'http://u:hunter2@h' });
    expect(bad.message).not.toContain('hunter2');
  });

  it('reads the password and token files (first line) and names the setting and file when it cannot', () => {
    const pw = file('pw', 'pa ss\nignored\n');
    expect(loadNatsAuth({ servers: 'nats://h', user: 'u', passwordFile: pw })).toMatchObject({
      mode: 'user',
      user: 'u',
      pass: 'pa ss',
    });
    expect(loadNatsAuth({ servers: 'nats://h', tokenFile: file('tok', 'abc\n') }).token).toBe('abc');
    const missing = refusal({ servers: 'nats://h', user: 'u', passwordFile: path.join(dir, 'nope') });
    expect(missing.message).toMatch(
      /^--nats-password-file \(STREAMINFER_NATS_PASSWORD_FILE\): cannot read .*nope: no such file/,
    );
    expect(refusal({ servers: 'nats://h', tokenFile: file('empty', '\n') }).message).toMatch(/is empty/);
    expect(refusal({ servers: 'nats://h', user: 'u' }).message).toMatch(/a user without a password/);
    expect(refusal({ servers: 'nats://h', password: 'p' }).message).toMatch(/a password without a user/);
    expect(refusal({ servers: 'nats://h', user: 'u', password: 'p', passwordFile: pw }).message).toMatch(
      /give the password once/,
    );
  });

  it('refuses two identities at once, naming both', () => {
    const nk = file('u.nk', `${userSeed}\n`);
    const cases: NatsAuthSettings[] = [
      { servers: 'nats://h', user: 'u', password: 'p', token: 't' },
      { servers: 'nats://u:p@h', token: 't' },
      { servers: 'nats://h', nkeyFile: nk, creds: file('c.creds', creds) },
      { servers: 'nats://tok@h', nkeyFile: nk },
    ];
    for (const settings of cases) expect(refusal(settings).message).toMatch(/one identity per connection/);
  });

  it('checks an nkey seed file: a user seed, nothing else', () => {
    const auth = loadNatsAuth({ servers: 'nats://h', nkeyFile: file('ok.nk', `# comment\n${userSeed}\n`) });
    expect(auth).toMatchObject({ mode: 'nkey', seed: userSeed });
    const account = text(nkeys.createAccount().getSeed());
    expect(refusal({ servers: 'nats://h', nkeyFile: file('acc.nk', account) }).message).toMatch(
      /holds no nkey user seed/,
    );
    expect(refusal({ servers: 'nats://h', nkeyFile: file('junk.nk', 'hello') }).message).toMatch(
      /^--nats-nkey-file .*junk\.nk holds no nkey user seed/,
    );
    // A seed with a broken checksum has the right shape but is not a seed.
    const broken = `${userSeed.slice(0, -2)}${userSeed.endsWith('AA') ? 'BB' : 'AA'}`;
    expect(refusal({ servers: 'nats://h', nkeyFile: file('bad.nk', broken) }).message).toMatch(
      /not a valid nkey seed/,
    );
  });

  it('checks a .creds file: a user JWT and its seed', () => {
    expect(loadNatsAuth({ servers: 'nats://h', creds: file('ok.creds', creds) })).toMatchObject({
      mode: 'creds',
      creds,
    });
    const seedOnly = creds.slice(creds.indexOf('************************* IMPORTANT'));
    expect(refusal({ servers: 'nats://h', creds: file('nojwt.creds', seedOnly) }).message).toMatch(
      /holds no user JWT/,
    );
    const jwtOnly = creds.slice(0, creds.indexOf('************************* IMPORTANT'));
    expect(refusal({ servers: 'nats://h', creds: file('noseed.creds', jwtOnly) }).message).toMatch(
      /a JWT but no nkey seed/,
    );
  });

  it('reads the TLS files: a CA, a certificate with its own key', () => {
    const auth = loadNatsAuth({
      servers: 'nats://h',
      tls: { ca: certs.ca, cert: certs.cert, key: certs.key, handshakeFirst: true },
    });
    expect(auth.tls).toMatchObject({ handshakeFirst: true });
    expect(auth.tls?.ca).toContain('BEGIN CERTIFICATE');
    expect(auth.tls?.key).toContain('PRIVATE KEY');
    expect(refusal({ servers: 'nats://h', tls: { cert: certs.cert } }).message).toMatch(
      /^--nats-tls-cert .*a client certificate without its key/,
    );
    expect(refusal({ servers: 'nats://h', tls: { key: certs.key } }).message).toMatch(
      /a key without its client/,
    );
    expect(refusal({ servers: 'nats://h', tls: { cert: certs.cert, key: certs.otherKey } }).message).toMatch(
      /^--nats-tls-key .*is not the key of the certificate/,
    );
    expect(refusal({ servers: 'nats://h', tls: { ca: file('ca.txt', 'not pem') } }).message).toMatch(
      /^--nats-tls-ca .*is not a PEM certificate/,
    );
    expect(refusal({ servers: 'nats://h', tls: { ca: path.join(dir, 'gone.pem') } }).message).toMatch(
      /no such file/,
    );
  });
});

describe('natsConnectionOptions', () => {
  it("maps each identity onto nats.js's own options", () => {
    expect(natsConnectionOptions(loadNatsAuth({ servers: 'nats://u:p@h:1' }))).toEqual({
      servers: ['nats://h:1'],
      user: 'u',
      pass: 'p',
    });
    expect(natsConnectionOptions(loadNatsAuth({ servers: 'nats://t@h:1' }))).toEqual({
      servers: ['nats://h:1'],
      token: 't',
    });
    const nkey = natsConnectionOptions(
      loadNatsAuth({ servers: 'nats://h', nkeyFile: file('o.nk', userSeed) }),
    );
    expect(typeof nkey.authenticator).toBe('function');
    const tls = natsConnectionOptions(
      loadNatsAuth({ servers: 'tls://h', tls: { ca: certs.ca, handshakeFirst: true } }),
    );
    expect(tls.tls).toMatchObject({ handshakeFirst: true, ca: expect.stringContaining('BEGIN') });
  });
});

describe('settings layers', () => {
  it('reads STREAMINFER_NATS_* and lets flags win over the environment', () => {
    const env = natsSettingsFromEnv({
      STREAMINFER_NATS_USER: 'env-user',
      STREAMINFER_NATS_PASSWORD: ' keeps spaces ',
      STREAMINFER_NATS_TLS_CA: '/env/ca.pem',
      STREAMINFER_NATS_TLS_FIRST: 'yes',
      STREAMINFER_NATS_TOKEN: '',
    });
    expect(env).toEqual({
      user: 'env-user',
      password: ' keeps spaces ',
      tls: { ca: '/env/ca.pem', handshakeFirst: true },
    });
    expect(mergeNatsSettings('nats://h', { user: 'flag-user', tls: { cert: '/c' } }, env)).toEqual({
      servers: 'nats://h',
      user: 'flag-user',
      password: ' keeps spaces ',
      tls: { ca: '/env/ca.pem', cert: '/c', handshakeFirst: true },
    });
    expect(() => natsSettingsFromEnv({ STREAMINFER_NATS_TLS_FIRST: 'maybe' })).toThrow(
      /STREAMINFER_NATS_TLS_FIRST/,
    );
  });
});

describe('failures', () => {
  it('tells a refusal (credentials, TLS) from a server that did not answer', () => {
    const named = (name: string, message: string, code?: string) =>
      Object.assign(Object.assign(new Error(message), { name }), code ? { code } : {});
    expect(natsRefusal(named('AuthorizationError', 'Authorization Violation'))).toBe('authentication');
    expect(natsRefusal(named('UserAuthenticationExpiredError', 'expired'))).toBe('expired');
    expect(natsRefusal(named('Error', 'unable to verify', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE'))).toBe('tls');
    expect(natsRefusal(named('Error', 'wrong version', 'ERR_SSL_WRONG_VERSION_NUMBER'))).toBe('tls');
    expect(natsRefusal(named('ConnectionError', "server does not support 'tls'"))).toBe('tls');
    expect(natsRefusal(named('ConnectionError', 'connection refused'))).toBeUndefined();
    expect(natsRefusal(named('TimeoutError', 'timeout'))).toBeUndefined();
    const violation = Object.assign(new Error('Permissions Violation for Publish to "x.y"'), {
      name: 'PermissionViolationError',
      operation: 'publish',
      subject: 'x.y',
    });
    expect(describeStatusProblem({ type: 'error', error: violation })).toMatch(
      /^NATS permissions violation: this account may not publish "x\.y"/,
    );
    expect(describeStatusProblem({ type: 'disconnect' })).toBeUndefined();
  });
});
