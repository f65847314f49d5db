/**
 * TLS on the data port, against the real server with certificates made at test time (tls-kit.ts): https and
 * wss answers, a plain-text client refused, mutual TLS, bad files refused at start by name, and certificate
 * reloads (SIGHUP) that reach new connections while open ones keep being served.
 */
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import * as https from 'node:https';
import * as net from 'node:net';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { runCliToExit, type ServerHandle, sleep, startServer, WsClient } from './harness';
import { CertKit, fingerprintOf, type PemPair } from './tls-kit';

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
function peerFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: caPem, servername: 'localhost' }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      socket.end();
      resolve(fingerprint);
    });
    socket.on('error', reject);
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

describe('mutual TLS (--tls-client-ca)', () => {
  let server: ServerHandle;
  let good: PemPair;
  let foreign: PemPair;

  beforeAll(async () => {
    const leaf = kit.issue('mtls-server', ca);
    good = kit.issue('good-client', ca);
    foreign = kit.issue('foreign-client', otherCa);
    server = await startServer({
      models: ['echo'],
      tls: true,
      args: ['--tls-cert', leaf.cert, '--tls-key', leaf.key, '--tls-client-ca', ca.cert],
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('serves a client with a certificate signed by the client CA, over HTTP and wss', async () => {
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
  });

  it('refuses a client whose certificate another CA signed, at the handshake', async () => {
    await expect(
      httpsCall(`${server.url}/predict`, 'POST', { id: 3, model: 'echo', input: [3] }, clientCert(foreign)),
    ).rejects.toThrow(/unknown ca|alert/i);
    await expect(WsClient.connect(server.wsUrl, { ca: caPem, ...clientCert(foreign) })).rejects.toThrow();
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
