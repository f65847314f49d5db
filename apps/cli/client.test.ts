/** Where the CLI finds the admin listener and its token (adminTarget), first source first. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { adminTarget } from './client';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'cli-admin-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string): string {
  const at = path.join(dir, name);
  writeFileSync(at, content, { mode: 0o600 });
  return at;
}

test('default: http://127.0.0.1:8001 with no token', () => {
  expect(adminTarget({}, {})).toEqual({ url: 'http://127.0.0.1:8001' });
});

test('--url, then STREAMINFER_ADMIN_URL, then the socket, then the settings', () => {
  const config = file(
    'a.json',
    JSON.stringify({ adminHost: '0.0.0.0', adminPort: 9101, adminTokenFile: '/t' }),
  );
  const env = {
    STREAMINFER_ADMIN_URL: 'https://admin.example:8443',
    STREAMINFER_ADMIN_SOCKET: '/run/s.sock',
  };
  expect(adminTarget({ url: 'unix:/x.sock', config, token: 't' }, env).url).toBe('unix:/x.sock');
  expect(adminTarget({ config, token: 't' }, env).url).toBe('https://admin.example:8443');
  expect(adminTarget({ config, token: 't' }, { STREAMINFER_ADMIN_SOCKET: '/run/s.sock' }).url).toBe(
    'unix:/run/s.sock',
  );
  expect(adminTarget({ adminSocket: '/run/flag.sock', config, token: 't' }, {}).url).toBe(
    'unix:/run/flag.sock',
  );
  // A listener on every address is reached on loopback; a certificate means https.
  expect(adminTarget({ config, token: 't' }, {}).url).toBe('http://127.0.0.1:9101');
  const tls = file('b.json', JSON.stringify({ adminTlsCert: '/c', adminTlsKey: '/k', adminHost: '::1' }));
  expect(adminTarget({ config: tls }, {}).url).toBe('https://[::1]:8001');
  expect(adminTarget({}, { STREAMINFER_ADMIN_PORT: '9200' }).url).toBe('http://127.0.0.1:9200');
  expect(() => adminTarget({}, { STREAMINFER_ADMIN_PORT: '0' })).toThrow(/adminPort is 0/);
});

test('the token: --token-file, --token, STREAMINFER_ADMIN_TOKEN, the config file adminTokenFile', () => {
  const fromFlagFile = file('flag-token', 'from-flag-file-0123456789\n');
  const fromConfigFile = file('config-token', 'from-config-file-0123456789\n');
  const config = file('c.json', JSON.stringify({ adminTokenFile: fromConfigFile }));
  const env = { STREAMINFER_ADMIN_TOKEN: 'from-env-0123456789' };
  expect(adminTarget({ tokenFile: fromFlagFile, token: 'x', config }, {}).token).toBe(
    'from-flag-file-0123456789',
  );
  expect(adminTarget({ token: 'from-flag', config }, {}).token).toBe('from-flag');
  expect(adminTarget({}, env).token).toBe('from-env-0123456789');
  expect(adminTarget({ config }, {}).token).toBe('from-config-file-0123456789');
  expect(() => adminTarget({ tokenFile: path.join(dir, 'missing') }, {})).toThrow(
    /admin token file .*ENOENT/,
  );
});
