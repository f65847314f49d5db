/**
 * The NATS 2.9 compatibility run (`npm test` runs it after the main run): the suites that use the shared broker
 * for the stream pipeline and the fleet store, again, against Debian's nats-server 2.9 (test/broker-setup-2.9.ts).
 * Chosen by duration to add about a minute on 2 cores; README "NATS versions" says which suites are left out.
 */
const base = require('./jest.config');

const SUITES = [
  'stream-io',
  'stream-checkpoints',
  'stream-leases',
  'stream-lease-thread',
  'stream-pipeline',
  'stream-process',
  'fleet-membership',
  'fleet-record',
  'rollout-fleet',
  'cluster-store',
  'cluster-replicas',
  'pull-cache',
  'broker-kit',
];

module.exports = {
  ...base,
  displayName: 'nats-2.9',
  testMatch: SUITES.map((name) => `<rootDir>/dist/test/integration/${name}.test.js`),
  globalSetup: '<rootDir>/dist/test/broker-setup-2.9.js',
};
