/**
 * nats-servers in each authentication mode for the NATS auth tests: each on a free port with its own store
 * directory and config file, and what a client of that mode passes (flags, environment, pipeline.json
 * `nats`). Certificates come from a private CA made with openssl; nkeys and operator/account/user JWTs from
 * @nats-io/nkeys (via nats-core) and @nats-io/jwt. The accounts mode runs deploy/nats-server.conf itself.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { encodeAccount, encodeOperator, encodeUser, fmtCreds } from '@nats-io/jwt';
import { nkeys } from '@nats-io/nats-core';
import { CURRENT_NATS_SERVER, DEBIAN_NATS_SERVER, testNatsServer } from './broker-kit';
import { REPO_ROOT } from './harness';

/** Debian's 2.9: the TLS mode upgraded after the greeting runs on it, the way 2.9 clients connect. */
export const DEBIAN_NATS = DEBIAN_NATS_SERVER;
/** The current release (tls_first needs ≥ 2.10.4; the shipped config's sync_interval is unknown to 2.9). */
export const CURRENT_NATS = CURRENT_NATS_SERVER;

/** How a client of one mode connects: CLI flags, environment, pipeline.json `nats` section. */
export interface NatsClient {
  url: string;
  args: string[];
  env: Record<string, string>;
  pipeline: Record<string, unknown>;
}

export interface AuthServer {
  mode: string;
  binary: string;
  port: number;
  /** The fleet's client, the pipeline's, a producer's (the same but in the accounts mode). */
  fleet: NatsClient;
  pipeline: NatsClient;
  producer: NatsClient;
  /** Every secret of this mode: none may appear in anything a test captures. */
  secrets: string[];
  log(): string;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function greets(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('error', () => done(false));
    // A TLS-first server sends nothing until the handshake: an open port is enough there.
    socket.on('connect', () => done(true));
  });
}

/** A private CA, a server certificate for 127.0.0.1 and a client certificate, made now with openssl. */
export interface Certificates {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** Another CA: a client trusting only it must fail the handshake. */
  otherCa: string;
}

export function makeCertificates(dir: string): Certificates {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  ssl(
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '2',
    '-subj',
    '/CN=nats-test-ca',
  );
  ssl('req', '-x509', ...ec, '-keyout', 'other.key', '-out', 'other.pem', '-days', '2', '-subj', '/CN=other');
  writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    'server.ext',
    '-out',
    'server.pem',
  );
  ssl('req', ...ec, '-keyout', 'client.key', '-out', 'client.csr', '-subj', '/CN=streaminfer');
  ssl(
    'x509',
    '-req',
    '-in',
    'client.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-out',
    'client.pem',
  );
  const at = (name: string) => path.join(dir, name);
  return {
    ca: at('ca.pem'),
    serverCert: at('server.pem'),
    serverKey: at('server.key'),
    clientCert: at('client.pem'),
    clientKey: at('client.key'),
    otherCa: at('other.pem'),
  };
}

async function startServer(
  mode: string,
  binary: string,
  dir: string,
  config: (port: number, store: string) => string,
  env: Record<string, string> = {},
  clients: (port: number) => Omit<AuthServer, 'mode' | 'binary' | 'port' | 'log' | 'stop'>,
): Promise<AuthServer> {
  if (!existsSync(binary))
    throw new Error(
      `nats-server for the ${mode} mode is missing at ${binary} (the current release: run .ci/run once, or set STREAMINFER_NATS_SERVER_CURRENT)`,
    );
  const port = await freePort();
  const store = path.join(dir, `${mode}-store`);
  mkdirSync(store, { recursive: true });
  const file = path.join(dir, `${mode}.conf`);
  writeFileSync(file, config(port, store));
  let out = '';
  const child: ChildProcess = spawn(binary, ['-c', file], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-50_000)));
  child.stderr!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-50_000)));
  const deadline = Date.now() + 10_000;
  while (!(await greets(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`nats-server (${mode}) did not start on ${port}:\n${out}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    mode,
    binary,
    port,
    ...clients(port),
    log: () => out,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

const same = (client: NatsClient) => ({ fleet: client, pipeline: client, producer: client });

export async function userPasswordServer(dir: string): Promise<AuthServer> {
  const password = `pw-${Math.random().toString(36).slice(2)}-Secret`;
  const passwordFile = path.join(dir, 'user.password');
  writeFileSync(passwordFile, `${password}\n`);
  return startServer(
    'user',
    testNatsServer(),
    dir,
    (port, store) =>
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${store}" }\n` +
      `authorization { users: [ { user: streaminfer, password: "${password}" } ] }\n`,
    {},
    (port) => ({
      ...same({
        url: `nats://127.0.0.1:${port}`,
        args: ['--nats-user', 'streaminfer', '--nats-password-file', passwordFile],
        env: {},
        pipeline: { user: 'streaminfer', passwordFile },
      }),
      // The producer passes the credentials in the URL: accepted, and redacted wherever it is printed.
      producer: {
        url: `nats://streaminfer:${encodeURIComponent(password)}@127.0.0.1:${port}`,
        args: [],
        env: {},
        pipeline: {},
      },
      secrets: [password],
    }),
  );
}

export async function tokenServer(dir: string): Promise<AuthServer> {
  const token = `tok-${Math.random().toString(36).slice(2)}-Secret`;
  const tokenFile = path.join(dir, 'nats.token');
  writeFileSync(tokenFile, `${token}\n`);
  return startServer(
    'token',
    testNatsServer(),
    dir,
    (port, store) =>
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${store}" }\nauthorization { token: "${token}" }\n`,
    {},
    (port) => ({
      ...same({
        url: `nats://127.0.0.1:${port}`,
        args: ['--nats-token-file', tokenFile],
        env: {},
        pipeline: { tokenFile },
      }),
      // The pipeline has it in its URL (shown redacted in /api/pipeline), the producer in its environment.
      pipeline: { url: `nats://${token}@127.0.0.1:${port}`, args: [], env: {}, pipeline: {} },
      producer: {
        url: `nats://127.0.0.1:${port}`,
        args: [],
        env: { STREAMINFER_NATS_TOKEN: token },
        pipeline: {},
      },
      secrets: [token],
    }),
  );
}

export async function nkeyServer(dir: string): Promise<AuthServer> {
  const user = nkeys.createUser();
  const seed = new TextDecoder().decode(user.getSeed());
  const nkeyFile = path.join(dir, 'user.nk');
  writeFileSync(nkeyFile, `${seed}\n`);
  return startServer(
    'nkey',
    testNatsServer(),
    dir,
    (port, store) =>
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${store}" }\n` +
      `authorization { users: [ { nkey: ${user.getPublicKey()} } ] }\n`,
    {},
    (port) => ({
      ...same({
        url: `nats://127.0.0.1:${port}`,
        args: ['--nats-nkey-file', nkeyFile],
        env: {},
        pipeline: { nkeyFile },
      }),
      secrets: [seed],
    }),
  );
}

/**
 * TLS with a client certificate (`verify: true`). `first`: the server wants the handshake before its greeting
 * (`handshake_first`, nats-server ≥ 2.10.4: the current release); else the Debian 2.9 server upgrades after it.
 */
export async function tlsServer(dir: string, certs: Certificates, first: boolean): Promise<AuthServer> {
  const key = readFileSync(certs.clientKey, 'utf8');
  // A line from the middle of the client key's PEM body: enough to find it anywhere.
  const keyLine = key.split('\n').filter((l) => l && !l.startsWith('-----'))[0]!;
  const firstArgs = first ? ['--nats-tls-first'] : [];
  return startServer(
    first ? 'tls-first' : 'tls',
    first ? CURRENT_NATS : DEBIAN_NATS,
    dir,
    (port, store) =>
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${store}" }\n` +
      `tls { cert_file: "${certs.serverCert}", key_file: "${certs.serverKey}", ca_file: "${certs.ca}", verify: true${first ? ', handshake_first: true' : ''} }\n`,
    {},
    (port) => ({
      ...same({
        url: `tls://127.0.0.1:${port}`,
        args: [
          '--nats-tls-ca',
          certs.ca,
          '--nats-tls-cert',
          certs.clientCert,
          '--nats-tls-key',
          certs.clientKey,
          ...firstArgs,
        ],
        env: {},
        pipeline: {
          tls: { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey, handshakeFirst: first },
        },
      }),
      // The producer sets TLS through the environment.
      producer: {
        url: `tls://127.0.0.1:${port}`,
        args: [],
        env: {
          STREAMINFER_NATS_TLS_CA: certs.ca,
          STREAMINFER_NATS_TLS_CERT: certs.clientCert,
          STREAMINFER_NATS_TLS_KEY: certs.clientKey,
          STREAMINFER_NATS_TLS_FIRST: String(first),
        },
        pipeline: {},
      },
      secrets: [keyLine],
    }),
  );
}

/** deploy/nats-server.conf as shipped, but for its listen address and store directory. */
export function deployConfig(port: number, store: string): string {
  const shipped = readFileSync(path.join(REPO_ROOT, 'deploy', 'nats-server.conf'), 'utf8');
  const listen = /^listen: .*$/m;
  const storeDir = /^(\s*)store_dir: .*$/m;
  if (!listen.test(shipped) || !storeDir.test(shipped))
    throw new Error('deploy/nats-server.conf: no listen or store_dir line to point at the test server');
  return shipped.replace(listen, `listen: 127.0.0.1:${port}`).replace(storeDir, `$1store_dir: "${store}"`);
}

export async function accountsServer(dir: string): Promise<AuthServer> {
  const secret = (who: string) => `${who}-${Math.random().toString(36).slice(2)}-Secret`;
  const passwords = { fleet: secret('fleet'), pipeline: secret('pipeline'), producer: secret('producer') };
  const files = Object.fromEntries(
    Object.entries(passwords).map(([who, password]) => {
      const file = path.join(dir, `${who}.password`);
      writeFileSync(file, password);
      return [who, file];
    }),
  ) as Record<keyof typeof passwords, string>;
  const client = (port: number, who: keyof typeof passwords): NatsClient => ({
    url: `nats://127.0.0.1:${port}`,
    args: ['--nats-user', who, '--nats-password-file', files[who]],
    env: {},
    pipeline: { user: who, passwordFile: files[who] },
  });
  // The shipped file asks for sync_interval, which 2.9 does not know: it runs on the current release.
  return startServer(
    'accounts',
    CURRENT_NATS,
    dir,
    deployConfig,
    {
      STREAMINFER_NATS_FLEET_PASSWORD: passwords.fleet,
      STREAMINFER_NATS_PIPELINE_PASSWORD: passwords.pipeline,
      STREAMINFER_NATS_PRODUCER_PASSWORD: passwords.producer,
    },
    (port) => ({
      fleet: client(port, 'fleet'),
      pipeline: client(port, 'pipeline'),
      producer: client(port, 'producer'),
      secrets: Object.values(passwords),
    }),
  );
}

/** Operator mode with the memory resolver: operator, system and app accounts, one user's .creds. */
export async function credsServer(dir: string): Promise<AuthServer> {
  const operator = nkeys.createOperator();
  const system = nkeys.createAccount();
  const account = nkeys.createAccount();
  const user = nkeys.createUser();
  const unlimited = {
    subs: -1,
    data: -1,
    payload: -1,
    imports: -1,
    exports: -1,
    wildcards: true,
    conn: -1,
    leaf: -1,
    mem_storage: -1,
    disk_storage: -1,
    streams: -1,
    consumer: -1,
  };
  const operatorJwt = await encodeOperator('streaminfer-test', operator, {
    system_account: system.getPublicKey(),
  });
  const systemJwt = await encodeAccount('SYS', system, {}, { signer: operator });
  const accountJwt = await encodeAccount('STREAMINFER', account, { limits: unlimited }, { signer: operator });
  const userJwt = await encodeUser('streaminfer', user, account, {});
  const credsFile = path.join(dir, 'streaminfer.creds');
  writeFileSync(credsFile, fmtCreds(userJwt, user));
  const seed = new TextDecoder().decode(user.getSeed());
  return startServer(
    'creds',
    testNatsServer(),
    dir,
    (port, store) =>
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${store}" }\noperator: ${operatorJwt}\n` +
      `system_account: ${system.getPublicKey()}\nresolver: MEMORY\nresolver_preload: {\n` +
      `  ${account.getPublicKey()}: ${accountJwt}\n  ${system.getPublicKey()}: ${systemJwt}\n}\n`,
    {},
    (port) => ({
      ...same({
        url: `nats://127.0.0.1:${port}`,
        args: ['--nats-creds', credsFile],
        env: {},
        pipeline: { creds: credsFile },
      }),
      secrets: [seed],
    }),
  );
}
