/**
 * TLS on the data port, against the real server with certificates made at test time (scripts/tls-kit.ts): https and
 * wss answers, a plain-text client refused, mutual TLS, bad files refused at start by name, and certificate
 * reloads (SIGHUP) that reach new connections while open ones keep being served.
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import * as https from 'node:https';
import * as net from 'node:net';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { CertKit, fingerprintOf, type PemPair } from '../../scripts/tls-kit';
import { runCliToExit, type ServerHandle, sleep, startServer, WsClient } from './harness';

jest.setTimeout(90_000);

const kit = new CertKit();
const ca = kit.ca('ca');
const otherCa = kit.ca('other-ca');
const caPem = readFileSync(ca.cert);

interface ClientCert {
  cert?: Buffer;
  key?: Buffer;
}

function clientCert(pair: PemPair): ClientCert {
  return { cert: readFileSync(pair.cert), key: readFileSync(pair.key) };
}

/** One HTTPS request trusting only the test CA; rejects on a refused handshake. */
function httpsCall(
  url: string,
  method: 'GET' | 'POST',
  body?: unknown,
  client: ClientCert = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = https.request(
      url,
      { method, ca: caPem, ...client, agent: false, headers: { 'content-type': 'application/json' } },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    request.on('error', reject);
    request.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The SHA-256 fingerprint of the certificate a new TLS connection to the port is given. */
function peerFingerprint(port: number, client: ClientCert = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    // A port nobody accepts on (every node stopped) holds the connection in its backlog: fail, do not hang.
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no TLS handshake on port ${port} within 10 s`));
    }, 10_000);
    const socket = tls.connect(
      { host: '127.0.0.1', port, ca: caPem, servername: 'localhost', ...client },
      () => {
        clearTimeout(timer);
        const fingerprint = socket.getPeerCertificate().fingerprint256;
        socket.end();
        resolve(fingerprint);
      },
    );
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** The fingerprints `count` new connections are given (two nodes share the port: several, to reach both). */
async function fingerprintsSeen(port: number, count = 6): Promise<Set<string>> {
  const seen = new Set<string>();
  for (let i = 0; i < count; i++) seen.add(await peerFingerprint(port));
  return seen;
}

/** How many configuration reloads the supervisor has logged as committed. */
function reloadsLogged(server: ServerHandle): number {
  return server
    .logs()
    .split('\n')
    .filter((line) => line.includes('"msg":"reload committed')).length;
}

async function sighupAndWait(server: ServerHandle): Promise<void> {
  const before = reloadsLogged(server);
  process.kill(server.pid, 'SIGHUP');
  const deadline = Date.now() + 30_000;
  while (reloadsLogged(server) === before) {
    if (Date.now() > deadline) throw new Error(`no reload after SIGHUP:\n${server.logs().slice(-3000)}`);
    await sleep(50);
  }
}

afterAll(() => kit.cleanup());

describe('TLS on the data port', () => {
  const live = { cert: path.join(kit.dir, 'live.crt'), key: path.join(kit.dir, 'live.key') };
  let first: PemPair;
  let server: ServerHandle;

  beforeAll(async () => {
    first = kit.issue('first', ca);
    copyFileSync(first.cert, live.cert);
    copyFileSync(first.key, live.key);
    // The admin listener speaks TLS too, on a pair of its own (never swapped here): the CLI reaches it over https.
    const admin = kit.issue('admin', ca);
    server = await startServer({
      models: ['echo'],
      tls: true,
      args: [
        ...['--nodes', '2', '--tls-cert', live.cert, '--tls-key', live.key],
        ...['--admin-tls-cert', admin.cert, '--admin-tls-key', admin.key],
      ],
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('answers HTTP over TLS: inference, /health and /v2/health/*', async () => {
    const predict = await httpsCall(`${server.url}/predict`, 'POST', { id: 7, model: 'echo', input: [1, 2] });
    expect(predict.status).toBe(200);
    expect(JSON.parse(predict.body)).toMatchObject({ id: 7, result: [1, 2] });
    expect((await httpsCall(`${server.url}/health`, 'GET')).status).toBe(200);
    expect((await httpsCall(`${server.url}/v2/health/ready`, 'GET')).status).toBe(200);
    expect(await peerFingerprint(server.port)).toBe(fingerprintOf(first.cert));
  });

  it('answers a WebSocket over TLS (wss)', async () => {
    const client = await WsClient.connect(server.wsUrl, { ca: caPem });
    const answer = await client.request({ id: 1, model: 'echo', input: [3.5] });
    expect(answer).toMatchObject({ id: 1, result: [3.5] });
    client.close();
  });

  it('gives a plain-text client no answer: the connection is closed', async () => {
    const received = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(server.port, '127.0.0.1', () =>
        socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'),
      );
      let data = '';
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error('the plain-text connection stayed open'));
      }, 10_000);
      const done = (): void => {
        clearTimeout(timer);
        resolve(data);
      };
      socket.on('data', (chunk: Buffer) => (data += chunk.toString('latin1')));
      socket.on('close', done);
      socket.on('error', done);
    });
    expect(received).not.toMatch(/HTTP\/1\.1/);
    await expect(fetch(`http://127.0.0.1:${server.port}/health`)).rejects.toThrow();
  });

  it('serves a certificate swapped on disk to new connections after SIGHUP; open ones keep answering', async () => {
    const old = await WsClient.connect(server.wsUrl, { ca: caPem });
    expect(await old.request({ id: 'before', model: 'echo', input: [1] })).toMatchObject({ result: [1] });
    const second = kit.issue('second', ca, { certPath: live.cert, keyPath: live.key });
    await sighupAndWait(server);
    expect(await fingerprintsSeen(server.port)).toEqual(new Set([fingerprintOf(second.cert)]));
    expect(fingerprintOf(second.cert)).not.toBe(fingerprintOf(first.cert));
    // The connection made before the swap is still served, several times over.
    for (let i = 0; i < 3; i++)
      expect(await old.request({ id: `after-${i}`, model: 'echo', input: [i] })).toMatchObject({
        result: [i],
      });
    const fresh = await WsClient.connect(server.wsUrl, { ca: caPem });
    expect(await fresh.request({ id: 'new', model: 'echo', input: [2] })).toMatchObject({ result: [2] });
    expect(server.logs()).toContain('TLS certificate reloaded');
    old.close();
    fresh.close();
  });

  it('takes new files on a rolling `reload --config`, the CLI over https trusting the CA through NODE_EXTRA_CA_CERTS', async () => {
    const third = kit.issue('third', ca, { certPath: live.cert, keyPath: live.key });
    const configFile = path.join(kit.dir, 'reload.json');
    writeFileSync(configFile, '{}\n');
    const reload = [
      'reload',
      '--config',
      configFile,
      '--strategy',
      'rolling',
      '--url',
      server.adminUrl,
      '--json',
    ];
    const untrusted = await runCliToExit(reload);
    expect(untrusted.code).not.toBe(0);
    expect(untrusted.out).toContain('set NODE_EXTRA_CA_CERTS');
    const trusted = await runCliToExit(reload, { NODE_EXTRA_CA_CERTS: ca.cert });
    expect(trusted.code).toBe(0);
    // Each node stopped listening for its roll and listened again: on the new certificate, every one.
    expect(await fingerprintsSeen(server.port)).toEqual(new Set([fingerprintOf(third.cert)]));
    const predict = await httpsCall(`${server.url}/predict`, 'POST', { id: 9, model: 'echo', input: [9] });
    expect(predict.status).toBe(200);
  });

  it('keeps serving the certificate it has when the swapped files do not pass, and says so', async () => {
    const serving = await peerFingerprint(server.port);
    const stray = kit.issue('stray', ca);
    // A certificate whose key is not the one on disk: the pair does not match.
    copyFileSync(stray.cert, live.cert);
    await sighupAndWait(server);
    expect(await fingerprintsSeen(server.port)).toEqual(new Set([serving]));
    expect(server.logs()).toMatch(/TLS certificate not reloaded: invalid tlsKey file .*does not match/);
    const predict = await httpsCall(`${server.url}/predict`, 'POST', { id: 8, model: 'echo', input: [5] });
    expect(predict.status).toBe(200);
    // A file that is no certificate at all: the same.
    writeFileSync(live.cert, 'not a certificate\n');
    await sighupAndWait(server);
    expect(await peerFingerprint(server.port)).toBe(serving);
    expect(server.child.exitCode).toBeNull();
  });
});

/**
 * The error a TLS connection to the port ends with (presenting `client`, or no certificate), '' when it is
 * served: with TLS 1.3 the server's verdict on a client certificate comes just after the client's handshake.
 */
function handshakeError(port: number, client: ClientCert = {}): Promise<string> {
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: caPem, servername: 'localhost', ...client });
    socket.on('secureConnect', () => socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'));
    socket.on('data', () => {
      socket.destroy();
      resolve('');
    });
    socket.on('error', (error) => resolve(error.message));
    socket.on('close', () => resolve('closed'));
  });
}

/** What a raw TCP client gets for `bytes`: the bytes answered, and whether the server closed the connection. */
function rawExchange(port: number, bytes: Buffer): Promise<{ answer: string; closed: boolean }> {
  return new Promise((resolve) => {
    let answer = '';
    const socket = net.connect(port, '127.0.0.1', () => socket.write(bytes));
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ answer, closed: false });
    }, 3000);
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ answer, closed: true });
    });
  });
}

/** A PROXY protocol v2 header (TCP over IPv6) with this 16-byte source: what the relay sends, forged. */
function proxyV2(source: Buffer): Buffer {
  const header = Buffer.alloc(52);
  Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1').copy(header, 0);
  header[12] = 0x21;
  header[13] = 0x21;
  header.writeUInt16BE(36, 14);
  source.copy(header, 16);
  return header;
}

/** The nodes' relays as their log lines say (node index, pid, inner port), the latest per node. */
function relays(server: ServerHandle): Map<number, { pid: number; innerPort: number }> {
  const found = new Map<number, { pid: number; innerPort: number }>();
  for (const line of server.logs().split('\n')) {
    if (!line.includes('relaying to the inner port')) continue;
    const entry = JSON.parse(line) as { node: number; pid: number; innerPort: number };
    found.set(entry.node, { pid: entry.pid, innerPort: entry.innerPort });
  }
  return found;
}

async function waitFor(what: string, check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('mutual TLS (--tls-client-ca): node:tls requires a client certificate', () => {
  const live = { cert: path.join(kit.dir, 'mtls-live.crt'), key: path.join(kit.dir, 'mtls-live.key') };
  let server: ServerHandle;
  let firstFingerprint: string;
  let good: PemPair;
  let foreign: PemPair;

  beforeAll(async () => {
    firstFingerprint = fingerprintOf(
      kit.issue('mtls-server', ca, { certPath: live.cert, keyPath: live.key }).cert,
    );
    good = kit.issue('good-client', ca);
    foreign = kit.issue('foreign-client', otherCa);
    server = await startServer({
      models: ['echo'],
      tls: true,
      args: ['--nodes', '2', '--tls-cert', live.cert, '--tls-key', live.key, '--tls-client-ca', ca.cert],
      env: { STREAMINFER_MAX_CONNECTIONS_PER_IP: '2' },
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('serves a client with a certificate signed by the client CA, over HTTP and wss, on both nodes', async () => {
    // Each node logs its relay as it listens; the lines may reach the output just after "ready".
    await waitFor('both nodes to log their relay', () => relays(server).size === 2, 10_000);
    expect([...relays(server).keys()].sort()).toEqual([0, 1]);
    const answer = await httpsCall(
      `${server.url}/predict`,
      'POST',
      { id: 1, model: 'echo', input: [1] },
      clientCert(good),
    );
    expect(answer.status).toBe(200);
    const client = await WsClient.connect(server.wsUrl, { ca: caPem, ...clientCert(good) });
    expect(await client.request({ id: 2, model: 'echo', input: [2] })).toMatchObject({ result: [2] });
    client.close();
    expect(server.logs()).not.toContain('cannot require');
  });

  it('refuses a client that presents no certificate, at the handshake, over HTTP and wss', async () => {
    expect(await handshakeError(server.port)).toMatch(/certificate required/);
    await expect(
      httpsCall(`${server.url}/predict`, 'POST', { id: 3, model: 'echo', input: [3] }),
    ).rejects.toThrow();
    await expect(WsClient.connect(server.wsUrl, { ca: caPem })).rejects.toThrow();
  });

  it('refuses a client whose certificate another CA signed, at the handshake', async () => {
    // node:tls verifies the chain right after the handshake and cuts the connection before it reads a byte.
    expect(await handshakeError(server.port, clientCert(foreign))).not.toBe('');
    await expect(
      httpsCall(`${server.url}/predict`, 'POST', { id: 3, model: 'echo', input: [3] }, clientCert(foreign)),
    ).rejects.toThrow();
    await expect(WsClient.connect(server.wsUrl, { ca: caPem, ...clientCert(foreign) })).rejects.toThrow();
  });

  it('answers nothing on the inner 127.0.0.1 port: not plain HTTP, not a forged PROXY header', async () => {
    const get = Buffer.from('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    const upgrade = Buffer.from(
      'GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
        'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
    );
    const predict = Buffer.from(
      'POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n' +
        '{"id":1,"model":"echo","input":[1,2]}\n',
    );
    expect(relays(server).size).toBe(2);
    for (const { innerPort } of relays(server).values()) {
      for (const request of [get, upgrade, predict]) {
        expect(await rawExchange(innerPort, request)).toEqual({ answer: '', closed: true });
        const forged = Buffer.concat([proxyV2(randomBytes(16)), request]);
        expect(await rawExchange(innerPort, forged)).toEqual({ answer: '', closed: true });
      }
    }
  });

  it('keys connection limits by the real client address, not the relay', async () => {
    // 127.0.0.2 and 127.0.0.3 are clients of their own here: the relay itself always comes from 127.0.0.1.
    const from = (localAddress: string) =>
      WsClient.connect(server.wsUrl, { ca: caPem, ...clientCert(good), localAddress });
    const open: WsClient[] = [];
    let refusal = '';
    // Two per node and address (STREAMINFER_MAX_CONNECTIONS_PER_IP=2), two nodes: the fifth is refused.
    for (let i = 0; i < 5 && refusal === ''; i++)
      await from('127.0.0.2').then(
        (client) => open.push(client),
        (error: Error) => (refusal = error.message),
      );
    expect(refusal).toMatch(/429/);
    expect(open.length).toBeGreaterThanOrEqual(2);
    const other = await from('127.0.0.3');
    expect(await other.request({ id: 'other', model: 'echo', input: [1] })).toMatchObject({ result: [1] });
    for (const client of [...open, other]) client.close();
  });

  it('serves a certificate swapped on disk to new connections after SIGHUP; an open wss keeps answering', async () => {
    const old = await WsClient.connect(server.wsUrl, { ca: caPem, ...clientCert(good) });
    expect(await old.request({ id: 'before', model: 'echo', input: [1] })).toMatchObject({ result: [1] });
    const second = kit.issue('mtls-second', ca, { certPath: live.cert, keyPath: live.key });
    await sighupAndWait(server);
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) seen.add(await peerFingerprint(server.port, clientCert(good)));
    expect(seen).toEqual(new Set([fingerprintOf(second.cert)]));
    expect(fingerprintOf(second.cert)).not.toBe(firstFingerprint);
    for (let i = 0; i < 3; i++)
      expect(await old.request({ id: `after-${i}`, model: 'echo', input: [i] })).toMatchObject({
        result: [i],
      });
    expect(await handshakeError(server.port)).toMatch(/certificate required/);
    old.close();
  });

  it('accepts again on every node after a rolling reload and after a crash restart', async () => {
    const third = kit.issue('mtls-third', ca, { certPath: live.cert, keyPath: live.key });
    // The admin listener (plain, loopback) drives the roll; the data port only serves inference.
    const roll = await fetch(`${server.adminUrl}/api/reload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ config: {}, strategy: 'rolling' }),
    });
    expect(roll.status).toBe(200);
    // Each node in turn is the only one accepting (the other stopped): it must take the connection.
    const servedBy = async (node: number): Promise<void> => {
      const others = [...relays(server)].filter(([index]) => index !== node).map(([, relay]) => relay.pid);
      for (const pid of others) process.kill(pid, 'SIGSTOP');
      try {
        expect(await peerFingerprint(server.port, clientCert(good))).toBe(fingerprintOf(third.cert));
      } finally {
        for (const pid of others) process.kill(pid, 'SIGCONT');
      }
    };
    await servedBy(0);
    await servedBy(1);
    const crashed = relays(server).get(0)!.pid;
    process.kill(crashed, 'SIGKILL');
    await waitFor('node 0 restarted', () => relays(server).get(0)!.pid !== crashed);
    await waitFor('node 0 ready', () => server.logs().includes('"msg":"node restarted"'));
    await servedBy(0);
    const predict = await httpsCall(
      `${server.url}/predict`,
      'POST',
      { id: 9, model: 'echo', input: [9] },
      clientCert(good),
    );
    expect(predict.status).toBe(200);
  });
});

describe('bad TLS settings stop the start (exit 2), naming the file', () => {
  const serve = (args: string[]) => runCliToExit(['serve', '--port', '0', '--host', '127.0.0.1', ...args]);

  it('a key that does not match the certificate', async () => {
    const a = kit.issue('pair-a', ca);
    const b = kit.issue('pair-b', ca);
    const { code, out } = await serve(['--tls-cert', a.cert, '--tls-key', b.key]);
    expect(code).toBe(2);
    expect(out).toContain(
      `invalid tlsKey file ${b.key}: the key does not match the certificate in tlsCert file ${a.cert}`,
    );
  });

  it('a missing file', async () => {
    const a = kit.issue('pair-c', ca);
    const missing = path.join(kit.dir, 'missing.key');
    const { code, out } = await serve(['--tls-cert', a.cert, '--tls-key', missing]);
    expect(code).toBe(2);
    expect(out).toContain(`cannot read tlsKey file ${missing}: ENOENT`);
  });

  it('an expired certificate', async () => {
    const expired = kit.issue('expired', ca, { days: -1 });
    const { code, out } = await serve(['--tls-cert', expired.cert, '--tls-key', expired.key]);
    expect(code).toBe(2);
    expect(out).toContain(`invalid tlsCert file ${expired.cert}: the certificate expired`);
  });

  it('a certificate without its key', async () => {
    const a = kit.issue('pair-d', ca);
    const { code, out } = await serve(['--tls-cert', a.cert]);
    expect(code).toBe(2);
    expect(out).toContain('--tls-cert (command-line flag) is set but tlsKey is not');
  });
});
