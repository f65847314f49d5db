/**
 * The shared test broker is the release the run is for: the current one in the main run (jest.config.js), Debian's
 * 2.9 in the compatibility run (jest.nats-2.9.config.js); the binary choice falls back to 2.9 only with a warning.
 */
import { existsSync } from 'node:fs';
import {
  type BrokerRun,
  brokerInfo,
  CURRENT_NATS_SERVER,
  CURRENT_NATS_VERSION,
  chooseNatsServer,
  DEBIAN_NATS_SERVER,
  natsServerVersion,
  startBroker,
  TEST_NATS_URL,
  testNatsServer,
} from './broker-kit';

const RUN = (process.env['STREAMINFER_TEST_NATS_RUN'] ?? 'current') as BrokerRun;

test(`the shared broker runs the release of this run (${RUN}) with JetStream`, async () => {
  const info = await brokerInfo(TEST_NATS_URL);
  expect(info.jetstream).toBe(true);
  const expected = natsServerVersion(testNatsServer());
  expect(`v${info.version}`).toBe(expected);
  if (RUN === '2.9') expect(expected).toMatch(/^v2\.9\./);
  if (RUN === 'current' && existsSync(CURRENT_NATS_SERVER)) expect(expected).toBe(CURRENT_NATS_VERSION);
});

test('the main run takes the current release when built, else Debian 2.9 with a warning; the 2.9 run Debian', () => {
  const built = chooseNatsServer('current', () => true);
  expect(built).toEqual({ binary: CURRENT_NATS_SERVER });
  const fallback = chooseNatsServer('current', (file) => file === DEBIAN_NATS_SERVER);
  expect(fallback.binary).toBe(DEBIAN_NATS_SERVER);
  expect(fallback.warning).toContain('scripts/nats-server.sh');
  expect(fallback.warning).toContain('NOT tested');
  expect(chooseNatsServer('2.9', () => true)).toEqual({ binary: DEBIAN_NATS_SERVER });
  expect(() => chooseNatsServer('2.9', () => false)).toThrow(/apt-get install nats-server/);
  expect(() => chooseNatsServer('current', () => false)).toThrow(/no nats-server/);
});

test('startBroker: a JetStream server on a port of its own, gone with its store after stop', async () => {
  const binary = testNatsServer();
  const broker = await startBroker(binary);
  try {
    expect(broker.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(broker.url).not.toBe(TEST_NATS_URL);
    expect(broker.version).toBe(natsServerVersion(binary));
    expect((await brokerInfo(broker.url)).jetstream).toBe(true);
  } finally {
    await broker.stop();
  }
  expect(existsSync(broker.storeDir)).toBe(false);
  expect(() => process.kill(broker.pid, 0)).toThrow();
  await expect(brokerInfo(broker.url, 500)).rejects.toThrow(/no NATS greeting/);
});
