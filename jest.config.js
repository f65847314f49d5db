/**
 * Tests are written in TypeScript and compiled by `npm run build`; jest runs the compiled output. The global
 * setup gives the run its shared NATS broker, the current nats-server release (test/broker-setup.ts);
 * jest.nats-2.9.config.js runs the pipeline and fleet suites again against Debian's 2.9; jest.alone.config.js
 * runs the latency-isolation suites with nothing beside them (left out here).
 */
const { ALONE } = require('./jest.suites');

module.exports = {
  testEnvironment: '<rootDir>/test/node-realm-environment.js',
  roots: ['<rootDir>/dist'],
  testMatch: ['**/*.test.js'],
  testPathIgnorePatterns: [
    '/node_modules/',
    ...ALONE.map((name) => `/dist/test/integration/${name}\\.test\\.js$`),
  ],
  testTimeout: 30000,
  maxWorkers: 2,
  globalSetup: '<rootDir>/dist/test/broker-setup.js',
  globalTeardown: '<rootDir>/dist/test/broker-teardown.js',
};
