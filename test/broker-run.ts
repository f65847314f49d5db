/**
 * What the global setups of the main run and the 2.9 compatibility run do (test/broker-setup*.ts). They also set
 * STREAMINFER_TEST_NATS_RUN (`current` or `2.9`) for broker-kit.test.ts to know which release to expect.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { redactNatsUrls } from '../libs/nats-auth';
import {
  type Broker,
  type BrokerRun,
  brokerInfo,
  chooseNatsServer,
  natsServerVersion,
  startBroker,
} from './integration/broker-kit';

const STARTED = Symbol.for('streaminfer.test-broker');
const RUN_TMP = Symbol.for('streaminfer.test-run-tmp');
type WithBroker = typeof globalThis & {
  [STARTED]?: Broker;
  [RUN_TMP]?: { dir: string; was: string | undefined };
};

const say = (line: string) => process.stderr.write(`[test broker] ${line}\n`);

function loudly(line: string): void {
  const bar = '!'.repeat(100);
  process.stderr.write(`\n${bar}\n[test broker] WARNING: ${line}\n${bar}\n\n`);
}

/**
 * Every temporary file of the run (the tests' and the processes they start: model dirs, state dirs, broker stores)
 * goes under one directory, removed at teardown: os.tmpdir() follows TMPDIR, and the workers and their children
 * inherit it. A run killed before its teardown leaves that one directory behind.
 */
function useRunTmp(run: BrokerRun): void {
  const holder = globalThis as WithBroker;
  if (holder[RUN_TMP]) return;
  const was = process.env['TMPDIR'];
  const dir = mkdtempSync(path.join(os.tmpdir(), `streaminfer-test-${run}-`));
  holder[RUN_TMP] = { dir, was };
  process.env['TMPDIR'] = dir;
}

function dropRunTmp(): void {
  const holder = globalThis as WithBroker;
  const tmp = holder[RUN_TMP];
  if (!tmp) return;
  holder[RUN_TMP] = undefined;
  if (tmp.was === undefined) delete process.env['TMPDIR'];
  else process.env['TMPDIR'] = tmp.was;
  rmSync(tmp.dir, { recursive: true, force: true, maxRetries: 3 });
}

export async function setUpBrokers(run: BrokerRun): Promise<void> {
  useRunTmp(run);
  // The main run takes a binary given for the servers tests start; the 2.9 run is always Debian's.
  const given = run === 'current' ? process.env['STREAMINFER_TEST_NATS_SERVER'] : undefined;
  const choice = given ? { binary: given } : chooseNatsServer(run);
  if ('warning' in choice && choice.warning) loudly(choice.warning);
  const version = natsServerVersion(choice.binary);
  if (run === '2.9' && !version.startsWith('v2.9.'))
    loudly(`the 2.9 compatibility run got ${choice.binary} ${version}`);
  process.env['STREAMINFER_TEST_NATS_SERVER'] = choice.binary;
  process.env['STREAMINFER_TEST_NATS_RUN'] = run;

  const urlVariable = run === 'current' ? 'STREAMINFER_TEST_NATS' : 'STREAMINFER_TEST_NATS_COMPAT';
  const existing = process.env[urlVariable];
  if (existing) {
    // The URL may carry credentials: only its redacted form is printed.
    const shown = redactNatsUrls(existing);
    const info = await brokerInfo(existing).catch((err: Error) => {
      throw new Error(`the test broker given (${urlVariable}=${shown}) does not answer: ${err.message}`);
    });
    process.env['STREAMINFER_TEST_NATS'] = existing;
    say(
      `${run} run: using the broker given at ${shown} (nats-server v${info.version}); servers of the tests' own: ${choice.binary} ${version}`,
    );
    if (run === '2.9' && !info.version.startsWith('2.9.'))
      loudly(`the 2.9 compatibility run's broker is v${info.version}`);
    return;
  }
  const broker = await startBroker(choice.binary);
  (globalThis as WithBroker)[STARTED] = broker;
  process.env['STREAMINFER_TEST_NATS'] = broker.url;
  say(
    `${run} run: started nats-server ${broker.version} -js at ${broker.url} (pid ${broker.pid}, store ${broker.storeDir})`,
  );
}

export async function tearDownBrokers(): Promise<void> {
  const holder = globalThis as WithBroker;
  const broker = holder[STARTED];
  holder[STARTED] = undefined;
  await broker?.stop();
  dropRunTmp();
}
