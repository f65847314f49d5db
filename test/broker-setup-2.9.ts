/**
 * Jest global setup of the NATS 2.9 compatibility run (jest.nats-2.9.config.js): the pipeline and fleet suites
 * again, against Debian's nats-server 2.9. STREAMINFER_TEST_NATS_COMPAT names an existing 2.9 broker; otherwise
 * a private one is started on a random port. Either way STREAMINFER_TEST_NATS and STREAMINFER_TEST_NATS_SERVER
 * are set to the 2.9 ones for the workers (a STREAMINFER_TEST_NATS given for the main run does not leak in).
 */
import { setUpBrokers } from './broker-run';

export default async function setup(): Promise<void> {
  await setUpBrokers('2.9');
}
