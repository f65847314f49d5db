/**
 * Suites that measure one client's latency against another's attack: on 2 cores a neighbouring suite's
 * processes stall the victim as much as the attack does, so beside others they measured the neighbour (3 CI
 * runs of 3 failed there; alone they pass). jest.config.js leaves them out; jest.alone.config.js runs them
 * after the main run with nothing beside them.
 */
module.exports = { ALONE: ['noisy-neighbour'] };
