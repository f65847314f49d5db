/**
 * Jest global setup of the main run (jest.config.js): the shared test broker is the current nats-server release.
 * STREAMINFER_TEST_NATS, when given, names an existing broker and is used as is; otherwise a private one is
 * started on a random port (test/integration/broker-kit.ts) and STREAMINFER_TEST_NATS is set for the workers.
 * STREAMINFER_TEST_NATS_SERVER (the binary of the servers tests start themselves) follows the same choice.
 * Without the current release built, Debian's 2.9 stands in and the setup says so loudly.
 */
import { setUpBrokers } from './broker-run';

export default async function setup(): Promise<void> {
  await setUpBrokers('current');
}
