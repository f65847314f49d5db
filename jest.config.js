/** Tests are written in TypeScript and compiled by `npm run build`; jest runs the compiled output. */
module.exports = {
  testEnvironment: '<rootDir>/test/node-realm-environment.js',
  roots: ['<rootDir>/dist'],
  testMatch: ['**/*.test.js'],
  testTimeout: 30000,
  maxWorkers: 2,
};
