/**
 * Which NATS the tests run against, in one place:
 * - `TEST_NATS_URL`: the shared test broker, STREAMINFER_TEST_NATS. Jest's global setup (test/broker-setup.ts)
 *   sets it to a private broker of its own when it is not given (nats://127.0.0.1:4222 outside jest).
 * - `testNatsServer()`: the binary for tests that start nats-servers of their own, STREAMINFER_TEST_NATS_SERVER
 *   (the global setup sets it to the run's: the current release, or Debian's 2.9 in the compatibility run);
 *   else the current release when it is built, else Debian's.
 * - `CURRENT_NATS_SERVER`, `DEBIAN_NATS_SERVER`: for tests that need one release in particular.
 * `startBroker` starts one JetStream server on a random port with a store directory of its own.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** The release scripts/nats-server.sh builds (its STREAMINFER_NATS_SERVER_VERSION override included). */
export const CURRENT_NATS_VERSION = process.env['STREAMINFER_NATS_SERVER_VERSION'] || 'v2.15.2';

/** The current release: STREAMINFER_NATS_SERVER_CURRENT (.ci/run sets it), else scripts/nats-server.sh's cache. */
export const CURRENT_NATS_SERVER =
  process.env['STREAMINFER_NATS_SERVER_CURRENT'] ||
  path.join(
    process.env['XDG_CACHE_HOME'] || path.join(os.homedir(), '.cache'),
    `streaminfer/nats-server-${CURRENT_NATS_VERSION}/nats-server`,
  );

/** Debian's package (2.9.10 on bookworm): the compatibility run's server. */
export const DEBIAN_NATS_SERVER = process.env['STREAMINFER_NATS_SERVER'] || '/usr/sbin/nats-server';

export const TEST_NATS_URL = process.env['STREAMINFER_TEST_NATS'] || 'nats://127.0.0.1:4222';

/** Which run: the main one on the current release, or the compatibility run on Debian's 2.9. */
export type BrokerRun = 'current' | '2.9';

export interface BinaryChoice {
  binary: string;
  /** Set when the run cannot have what it asked for (said loudly by the global setup). */
  warning?: string;
}

/** The binary a run's brokers use; `exists` is injectable for the tests of this choice. */
export function chooseNatsServer(
  run: BrokerRun,
  exists: (file: string) => boolean = existsSync,
): BinaryChoice {
  if (run === '2.9') {
    if (!exists(DEBIAN_NATS_SERVER))
      throw new Error(
        `the NATS 2.9 compatibility run needs Debian's nats-server at ${DEBIAN_NATS_SERVER} ` +
          '(apt-get install nats-server, or STREAMINFER_NATS_SERVER=<path>)',
      );
    return { binary: DEBIAN_NATS_SERVER };
  }
  if (exists(CURRENT_NATS_SERVER)) return { binary: CURRENT_NATS_SERVER };
  if (!exists(DEBIAN_NATS_SERVER))
    throw new Error(
      `no nats-server: neither the current release at ${CURRENT_NATS_SERVER} (scripts/nats-server.sh builds it) ` +
        `nor Debian's at ${DEBIAN_NATS_SERVER}`,
    );
  return {
    binary: DEBIAN_NATS_SERVER,
    warning:
      `nats-server ${CURRENT_NATS_VERSION} is not built at ${CURRENT_NATS_SERVER} (scripts/nats-server.sh needs Go ` +
      `and the module proxy): this run uses Debian's ${DEBIAN_NATS_SERVER} instead, and the current release is NOT tested`,
  };
}

/** The binary for tests that start nats-servers of their own. */
export function testNatsServer(): string {
  return process.env['STREAMINFER_TEST_NATS_SERVER'] || chooseNatsServer('current').binary;
}

/** `vX.Y.Z` of a nats-server binary. */
export function natsServerVersion(binary: string): string {
  const out = execFileSync(binary, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  const version = /v\d+\.\d+\.\d+\S*/.exec(out)?.[0];
  if (!version) throw new Error(`${binary} --version said ${JSON.stringify(out.trim())}`);
  return version;
}

/** The INFO a NATS server greets a plain TCP client with (`version`, `jetstream`); rejects when none comes. */
export function brokerInfo(url: string, timeoutMs = 3000): Promise<{ version: string; jetstream?: boolean }> {
  const first = url.split(',')[0] ?? url;
  const { hostname, port } = new URL(first.includes('://') ? first : `nats://${first}`);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port || 4222), hostname);
    let text = '';
    const fail = (err: Error) => {
      socket.destroy();
      reject(new Error(`no NATS greeting from ${hostname}:${port}: ${err.message}`));
    };
    socket.setTimeout(timeoutMs, () => fail(new Error(`nothing within ${timeoutMs} ms`)));
    socket.on('error', fail);
    socket.on('data', (chunk) => {
      text += chunk.toString();
      const end = text.indexOf('\r\n');
      if (end < 0) return;
      socket.destroy();
      if (!text.startsWith('INFO ')) return fail(new Error(`it sent ${JSON.stringify(text.slice(0, 40))}`));
      try {
        resolve(JSON.parse(text.slice(5, end)));
      } catch (err) {
        fail(err as Error);
      }
    });
  });
}

export interface Broker {
  url: string;
  binary: string;
  version: string;
  storeDir: string;
  pid: number;
  /** SIGTERM (SIGKILL after 5 s), then removes the store directory. Idempotent. */
  stop(): Promise<void>;
}

/** A JetStream nats-server on 127.0.0.1, a random port (`-p -1`) and a temporary store of its own. */
export async function startBroker(binary: string, timeoutMs = 10_000): Promise<Broker> {
  const storeDir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-test-nats-'));
  const child: ChildProcess = spawn(binary, ['-a', '127.0.0.1', '-p', '-1', '-js', '-sd', storeDir], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  let exited = child.exitCode !== null;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  // A jest run that dies between setup and teardown must not leave the server behind.
  const reap = () => child.kill('SIGKILL');
  process.once('exit', reap);
  const stop = async () => {
    process.removeListener('exit', reap);
    if (!exited) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exit;
      clearTimeout(timer);
    }
    rmSync(storeDir, { recursive: true, force: true });
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no "Server is ready" within ${timeoutMs} ms`)),
        timeoutMs,
      );
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`it exited with ${code}`));
      });
      child.stderr?.on('data', (chunk: Buffer) => {
        log = (log + chunk.toString()).slice(-20_000);
        const listening = /Listening for client connections on [\d.]+:(\d+)/.exec(log);
        if (listening && log.includes('Server is ready')) {
          clearTimeout(timer);
          resolve(Number(listening[1]));
        }
      });
    });
    const url = `nats://127.0.0.1:${port}`;
    const info = await brokerInfo(url);
    return { url, binary, version: `v${info.version}`, storeDir, pid: child.pid ?? 0, stop };
  } catch (err) {
    await stop();
    throw new Error(`${binary} did not start: ${(err as Error).message}\n${log}`);
  }
}
