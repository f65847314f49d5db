/**
 * The NATS 2.9 compatibility run (`npm test` runs it after the main run): the suites that use the shared broker
 * for the pipeline and the fleet store, and fleet.test.ts (its own nats-server, STREAMINFER_TEST_NATS_SERVER),
 * again, against Debian's nats-server 2.9 (test/broker-setup-2.9.ts). Chosen by duration to add about 90 s on
 * 2 cores; README "Supported NATS versions" says which suites are left out and why. The whole conformance suite
 * (test/conformance) runs here too: where 2.9 lacks a feature (subject transforms: the broker cannot place
 * `delivery.events.<delivery_id>`), its case checks what the pipeline does on 2.9 instead.
 */
const base = require('./jest.config');

const SUITES = [
  'pipeline-io',
  'pipeline-ackwait',
  'pipeline-checkpoints',
  'pipeline-leases',
  'pipeline-lease-thread',
  'pipeline',
  'pipeline-process',
  'fleet',
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
  testMatch: [
    ...SUITES.map((name) => `<rootDir>/dist/test/integration/${name}.test.js`),
    // The stream pipeline's public contract (test/conformance/README.md): every file, each case on what 2.9 does.
    '<rootDir>/dist/test/conformance/*.test.js',
  ],
  globalSetup: '<rootDir>/dist/test/broker-setup-2.9.js',
  // Always on workers: with 20 files or fewer jest runs in band when the only durations it has cached are short
  // (a single quick file run before), which serialised this run to twice its time. Set, this option turns that
  // guess off; at 2 GB a worker is practically never recycled.
  workerIdleMemoryLimit: '2GB',
};
