/**
 * The admin plane apart from the data plane. `/api/*` and `/metrics` are served by the
 * supervisor's own admin listener; the data port answers them 404. Through a relay on loopback (a TLS
 * terminator, a sidecar, `kubectl port-forward`, socat) no caller is an admin without the token; on a unix
 * socket (mode 0600) the admin calls work; a listener other machines reach without a token refuses to start;
 * the token comes from a file and never shows in a log or an answer; TLS on the admin listener serves a
 * swapped certificate to new connections after SIGHUP while open ones keep theirs.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';
import type { ServerHandle } from './harness';
import { runCliToExit, sleep, startServer } from './harness';

const TOKEN = 'admin-plane-test-token-7f3a9c2e5b1d4068';

/** The test's own relay on loopback, piping every connection to `target` (what a terminator does). */
function relay(target: number): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
        close: () => {
          for (const socket of sockets) socket.destroy();
          return new Promise((done) => server.close(() => done()));
        },
      }),
    ),
  );
}

/** Every kind of admin call: reads, writes, rollouts, the fleet, test hooks. */
const ADMIN_CALLS: Array<[string, string, unknown]> = [
  ['GET', '/api/models', undefined],
  ['GET', '/api/reload', undefined],
  ['POST', '/api/reload', {}],
  ['GET', '/api/fleet', undefined],
  ['POST', '/api/fleet/hosts/h1/exclude', {}],
  ['POST', '/api/models/echo/canary', { percent: 0 }],
  ['GET', '/api/models/echo/rollout', undefined],
  ['POST', '/api/debug/block-node', { node: 7, ms: 1 }],
];

async function call(
  base: string,
  method: string,
  route: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const response = await fetch(`${base}${route}`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, text: await response.text() };
}

describe('a token on the admin listener: a relay does not make callers admins', () => {
  let server: ServerHandle;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-admin-'));
    const tokenFile = path.join(dir, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    server = await startServer({ models: ['echo'], args: ['--admin-token-file', tokenFile] });
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('through a loopback relay every /api/* call and /metrics without the token is 401; with it, served', async () => {
    const hop = await relay(server.adminPort);
    try {
      const bearer = { authorization: `Bearer ${TOKEN}` };
      for (const [method, route, body] of ADMIN_CALLS) {
        const without = await call(hop.url, method, route, body);
        expect([method, route, without.status, JSON.parse(without.text).code]).toEqual([
          method,
          route,
          401,
          'unauthorized',
        ]);
        const wrong = await call(hop.url, method, route, body, { authorization: `Bearer ${TOKEN}x` });
        expect([route, wrong.status]).toEqual([route, 401]);
        const right = await call(hop.url, method, route, body, bearer);
        expect([method, route, right.status === 401 || right.status === 403]).toEqual([method, route, false]);
        expect(right.text).not.toContain(TOKEN);
      }
      expect((await call(hop.url, 'GET', '/api/models', undefined, bearer)).status).toBe(200);
      expect((await fetch(`${hop.url}/metrics`)).status).toBe(401);
      const metrics = await fetch(`${hop.url}/metrics`, { headers: bearer });
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toMatch(/^streaminfer_admin_refused_total\{code="unauthorized"\} [1-9]/m);
      // Probes stay open on the admin listener too.
      expect((await fetch(`${hop.url}/health`)).status).toBe(200);
    } finally {
      await hop.close();
    }
  });

  test('the data port answers 404 for /api/* and /metrics, even through a relay', async () => {
    const hop = await relay(server.port);
    try {
      for (const base of [server.url, hop.url]) {
        for (const [method, route, body] of ADMIN_CALLS) {
          const answer = await call(base, method, route, body, { authorization: `Bearer ${TOKEN}` });
          expect([route, answer.status, JSON.parse(answer.text).code]).toEqual([route, 404, 'not_found']);
        }
        expect((await fetch(`${base}/metrics`)).status).toBe(404);
        expect((await fetch(`${base}/health`)).status).toBe(200);
        expect((await fetch(`${base}/v2/health/ready`)).status).toBe(200);
      }
    } finally {
      await hop.close();
    }
  });

  test('the CLI finds the token in its file; the token shows in no log line', async () => {
    const list = await runCliToExit([
      'models',
      'list',
      '--url',
      server.adminUrl,
      '--token-file',
      path.join(dir, 'token'),
    ]);
    expect([list.code, list.out]).toEqual([0, expect.stringContaining('echo (default model)')]);
    const refused = await runCliToExit(['models', 'list', '--url', server.adminUrl], {
      STREAMINFER_ADMIN_TOKEN: '',
    });
    expect(refused.code).toBe(1);
    expect(server.logs()).not.toContain(TOKEN);
    expect(list.out + refused.out).not.toContain(TOKEN);
  });
});

describe('the admin listener on a unix socket', () => {
  let server: ServerHandle;
  let dir: string;
  let socket: string;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-sock-'));
    socket = path.join(dir, 'admin.sock');
    // A socket file left by a killed process: removed at start (it is a socket, and nobody listens).
    const stale = spawn(process.execPath, [
      '-e',
      `require('net').createServer().listen(${JSON.stringify(socket)}, () => process.kill(process.pid, 'SIGKILL'))`,
    ]);
    await new Promise((resolve) => stale.on('exit', resolve));
    expect(statSync(socket).isSocket()).toBe(true);
    server = await startServer({
      models: ['echo'],
      args: ['--admin-socket', socket, '--metrics-on-data-port'],
    });
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  function viaSocket(
    method: string,
    route: string,
    body?: unknown,
  ): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const request = http.request(
        { socketPath: socket, method, path: route, headers: { 'content-type': 'application/json' } },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => (text += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
        },
      );
      request.on('error', reject);
      request.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  test('the socket is mode 0600 and admin calls work through it, the CLI included', async () => {
    expect(server.adminUrl).toBe(`unix:${socket}`);
    expect(statSync(socket).mode & 0o777).toBe(0o600);
    expect((await viaSocket('GET', '/api/models')).status).toBe(200);
    const reload = await viaSocket('POST', '/api/reload', { model: 'echo' });
    expect([reload.status, JSON.parse(reload.text).ok]).toEqual([200, true]);
    expect((await viaSocket('GET', '/metrics')).text).toContain('streaminfer_requests_total');
    const list = await runCliToExit(['models', 'list', '--admin-socket', socket]);
    expect([list.code, list.out]).toEqual([0, expect.stringContaining('echo (default model)')]);
    const status = await runCliToExit(['reload', '--url', `unix:${socket}`, '--json']);
    expect(status.code).toBe(0);
  });

  test('--metrics-on-data-port keeps /metrics on the data port; /api/* stays 404 there', async () => {
    const metrics = await fetch(`${server.url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('streaminfer_requests_total');
    expect((await fetch(`${server.url}/api/models`)).status).toBe(404);
  });

  test('the socket file is gone after a clean stop', async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
    expect(existsSync(socket)).toBe(false);
  });
});

test('a listener other machines reach, without a token, refuses to start (exit 2), as do unusable files', async () => {
  const open = await runCliToExit(['serve', '--port', '0', '--admin-host', '0.0.0.0'], {
    STREAMINFER_ADMIN_TOKEN: '',
  });
  expect(open.code).toBe(2);
  expect(open.out).toMatch(/admin listener on "0\.0\.0\.0" .* no admin token is set/);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-admin-bad-'));
  try {
    const empty = path.join(dir, 'empty-token');
    writeFileSync(empty, '\n');
    const bad = await runCliToExit(['serve', '--port', '0', '--admin-token-file', empty]);
    expect(bad.code).toBe(2);
    expect(bad.out).toContain(`the admin token file ${empty} must hold one token`);
    const missing = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--admin-token-file',
      path.join(dir, 'nope'),
    ]);
    expect([missing.code, missing.out]).toEqual([
      2,
      expect.stringContaining(`${path.join(dir, 'nope')}: ENOENT`),
    ]);
    const garbage = path.join(dir, 'garbage.pem');
    writeFileSync(garbage, 'not a certificate');
    const cert = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--admin-tls-cert',
      garbage,
      '--admin-tls-key',
      garbage,
    ]);
    expect([cert.code, cert.out]).toEqual([
      2,
      expect.stringContaining(`TLS certificate ${garbage} with key`),
    ]);
    const flagToken = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--admin-token',
      'x'.repeat(40),
      '--model',
      'nope',
    ]);
    expect(flagToken.out).toContain('--admin-token puts the token in the command line');
    expect(flagToken.out).not.toContain('x'.repeat(40));
    // The pipeline's admin endpoint has the same rule.
    const pipeline = path.join(dir, 'pipeline.json');
    writeFileSync(pipeline, JSON.stringify({ admin: { host: '0.0.0.0', port: 0 } }));
    const started = await runCliToExit(['pipeline', '--config', pipeline], { STREAMINFER_ADMIN_TOKEN: '' });
    expect([started.code, started.out]).toEqual([
      2,
      expect.stringMatching(/"0\.0\.0\.0" \(admin\.host\).*no token/),
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A private CA and leaf certificates for 127.0.0.1 made with openssl. */
function makeCa(dir: string): { ca: string; leaf: (name: string) => { cert: string; key: string } } {
  const ca = path.join(dir, 'ca.crt');
  const caKey = path.join(dir, 'ca.key');
  const run = (args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(['req', '-x509', ...ec, '-keyout', caKey, '-out', ca, '-days', '1', '-subj', '/CN=admin-test-ca']);
  return {
    ca,
    leaf: (name) => {
      const key = path.join(dir, `${name}.key`);
      const csr = path.join(dir, `${name}.csr`);
      const cert = path.join(dir, `${name}.crt`);
      const ext = path.join(dir, `${name}.ext`);
      writeFileSync(ext, 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
      run(['req', ...ec, '-keyout', key, '-out', csr, '-subj', `/CN=${name}`]);
      run([
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        ca,
        '-CAkey',
        caKey,
        '-CAcreateserial',
        '-out',
        cert,
        '-days',
        '1',
        '-extfile',
        ext,
      ]);
      chmodSync(key, 0o600);
      return { cert, key };
    },
  };
}

describe('TLS on the admin listener', () => {
  let server: ServerHandle;
  let dir: string;
  let ca: Buffer;
  let second: { cert: string; key: string };
  let certFile: string;
  let keyFile: string;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-admin-tls-'));
    const authority = makeCa(dir);
    const first = authority.leaf('first');
    second = authority.leaf('second');
    ca = execFileSync('cat', [authority.ca]);
    certFile = path.join(dir, 'admin.crt');
    keyFile = path.join(dir, 'admin.key');
    copyFileSync(first.cert, certFile);
    copyFileSync(first.key, keyFile);
    server = await startServer({
      models: ['echo'],
      args: ['--admin-tls-cert', certFile, '--admin-tls-key', keyFile],
    });
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A TLS connection to the admin listener: the certificate it got, and one GET over it. */
  function connect(): Promise<{ socket: tls.TLSSocket; subject: string }> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect(
        { port: server.adminPort, host: '127.0.0.1', ca, servername: 'localhost' },
        () => resolve({ socket, subject: socket.getPeerCertificate().subject.CN as string }),
      );
      socket.once('error', reject);
    });
  }

  function get(socket: tls.TLSSocket, route: string): Promise<string> {
    return new Promise((resolve) => {
      let data = '';
      const onData = (chunk: Buffer): void => {
        data += chunk.toString();
        const end = data.indexOf('\r\n\r\n');
        const length = /content-length: (\d+)/i.exec(data)?.[1];
        if (end >= 0 && length !== undefined && data.length >= end + 4 + Number(length)) {
          socket.off('data', onData);
          resolve(data.split('\r\n')[0]!);
        }
      };
      socket.on('data', onData);
      socket.write(`GET ${route} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    });
  }

  test('https answers with the CA; plain HTTP does not; a swapped certificate + SIGHUP reaches new connections only', async () => {
    expect(server.adminUrl).toBe(`https://127.0.0.1:${server.adminPort}`);
    const old = await connect();
    expect(old.subject).toBe('first');
    expect(await get(old.socket, '/api/models')).toBe('HTTP/1.1 200 OK');
    await expect(fetch(`http://127.0.0.1:${server.adminPort}/api/models`)).rejects.toThrow();
    copyFileSync(second.cert, certFile);
    copyFileSync(second.key, keyFile);
    process.kill(server.pid, 'SIGHUP');
    let seen = 'first';
    for (let i = 0; i < 100 && seen !== 'second'; i++) {
      await sleep(100);
      const fresh = await connect();
      seen = fresh.subject;
      fresh.socket.destroy();
    }
    expect(seen).toBe('second');
    // The connection opened before the swap keeps working, on its first certificate.
    expect(await get(old.socket, '/api/reload')).toBe('HTTP/1.1 200 OK');
    old.socket.destroy();
    // The CLI over https, trusting the CA through NODE_EXTRA_CA_CERTS.
    const list = await runCliToExit(['models', 'list', '--url', server.adminUrl], {
      NODE_EXTRA_CA_CERTS: path.join(dir, 'ca.crt'),
    });
    expect([list.code, list.out]).toEqual([0, expect.stringContaining('echo')]);
    expect(server.logs()).not.toMatch(/BEGIN (EC )?PRIVATE KEY/);
  });
});
