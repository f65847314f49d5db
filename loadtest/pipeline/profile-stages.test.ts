import { type CpuProfile, stageCosts } from './profile-stages';

const D = '/repo/dist';
function profile(): CpuProfile {
  // root → runner → process (partition-messages) → ingest (decider) → parseEvent (schema) → JSON.parse
  //                                                                → computeFeaturesSorted (features)
  //      → publish (sink) → publish (@nats-io) ; → (garbage collector) ; → (idle)
  const nodes = [
    { id: 1, callFrame: { functionName: '(root)', url: '' }, children: [2, 8, 9] },
    {
      id: 2,
      callFrame: { functionName: 'run', url: `file://${D}/apps/pipeline/runner.js` },
      children: [3, 6],
    },
    {
      id: 3,
      callFrame: { functionName: 'process', url: `file://${D}/apps/pipeline/partition-messages.js` },
      children: [4],
    },
    {
      id: 4,
      callFrame: { functionName: 'ingest', url: `file://${D}/libs/delivery/decider.js` },
      children: [5, 10],
    },
    {
      id: 5,
      callFrame: { functionName: 'parseEvent', url: `file://${D}/libs/delivery/schema.js` },
      children: [11],
    },
    {
      id: 6,
      callFrame: { functionName: 'publish', url: `file://${D}/apps/pipeline/io/sink.js` },
      children: [7],
    },
    {
      id: 7,
      callFrame: { functionName: 'publish', url: 'file:///repo/node_modules/@nats-io/nats-core/x.js' },
    },
    { id: 8, callFrame: { functionName: '(garbage collector)', url: '' } },
    { id: 9, callFrame: { functionName: '(idle)', url: '' } },
    {
      id: 10,
      callFrame: { functionName: 'computeFeaturesSorted', url: `file://${D}/libs/delivery/features.js` },
    },
    { id: 11, callFrame: { functionName: 'parse', url: '' } },
  ];
  // One sample per ms: 3 in JSON.parse, 4 in features, 2 in the NATS publish, 1 GC, 5 idle.
  const samples = [11, 11, 11, 10, 10, 10, 10, 7, 7, 8, 9, 9, 9, 9, 9];
  return { nodes, startTime: 0, endTime: 15_000, samples, timeDeltas: samples.map(() => 1000) };
}

test('a sample goes to the first stage of its stack in STAGES order, in ms and µs per event', () => {
  const costs = Object.fromEntries(stageCosts(profile(), 10).map((c) => [c.stage, c]));
  expect(costs['decode']).toMatchObject({ ms: 3, usPerEvent: 300 });
  expect(costs['decide']).toMatchObject({ ms: 4, usPerEvent: 400 });
  expect(costs['publish']).toMatchObject({ ms: 2 });
  expect(costs['gc']).toMatchObject({ ms: 1 });
  // The last sample has no next one: its time is not known, so it counts nothing.
  expect(costs['idle']).toMatchObject({ ms: 4, pct: 0 });
  expect(costs['decide']!.pct).toBe(40);
});
