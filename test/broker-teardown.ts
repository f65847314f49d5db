/** Jest global teardown of both runs: stops the broker the global setup started, if it started one. */
import { tearDownBrokers } from './broker-run';

export default async function teardown(): Promise<void> {
  await tearDownBrokers();
}
