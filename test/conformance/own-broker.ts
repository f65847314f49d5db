/**
 * A nats-server of a test's own (JetStream, a free port, its own store directory) that the test can stop and
 * start again on the same port and store: "the broker is down" without touching the shared dev brokers.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CURRENT_NATS, DEBIAN_NATS, freePort } from '../integration/nats-auth-kit';
import { waitFor } from '../integration/pipeline-kit';

/**
 * The nats-server binary of the release under test: Debian's 2.9 when the dev broker (STREAMINFER_TEST_NATS)
 * is a 2.9, else the current release — so the run on each dev broker checks its own release.
 */
export function brokerBinaryLike(version: string): { name: string; binary: string } {
  if (!version.startsWith('2.9.') && existsSync(CURRENT_NATS)) return { name: version, binary: CURRENT_NATS };
  return { name: '2.9', binary: existsSync(DEBIAN_NATS) ? DEBIAN_NATS : 'nats-server' };
}

export interface OwnBroker {
  url: string;
  port: number;
  start(): Promise<void>;
  /** SIGKILL: a broker that goes away, as in a crash or a partition. */
  kill(): Promise<void>;
  /** Stops it (if running) and deletes its store. */
  dispose(): Promise<void>;
}

export async function ownBroker(binary: string): Promise<OwnBroker> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'own-broker-'));
  const conf = path.join(dir, 'nats.conf');
  writeFileSync(conf, `listen: 127.0.0.1:${port}\njetstream { store_dir: "${path.join(dir, 'store')}" }\n`);
  let child: ChildProcess | undefined;
  let log = '';
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const broker: OwnBroker = {
    url: `nats://127.0.0.1:${port}`,
    port,
    async start() {
      const c = spawn(binary, ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
      child = c;
      c.stdout!.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-20_000)));
      c.stderr!.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-20_000)));
      await waitFor(
        'nats-server ready',
        () => log.includes('Server is ready') || c.exitCode !== null,
        15_000,
      );
      if (c.exitCode !== null) throw new Error(`nats-server exited:\n${log}`);
    },
    async kill() {
      const c = child;
      if (!c || !running()) return;
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
      log = '';
    },
    async dispose() {
      await broker.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await broker.start();
  return broker;
}
