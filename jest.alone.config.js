/** The latency-isolation suites (jest.suites.js), after the main run, one at a time with nothing beside them. */
const { testPathIgnorePatterns: _leftOut, ...base } = require('./jest.config');
const { ALONE } = require('./jest.suites');

module.exports = {
  ...base,
  displayName: 'alone',
  testMatch: ALONE.map((name) => `<rootDir>/dist/test/integration/${name}.test.js`),
  maxWorkers: 1,
};
