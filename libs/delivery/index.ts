/** The reference workload (food-delivery events): schema, validation, contract shapes, model features. */
export * from './contract';
export * from './decider';
export * from './features';
export * from './geo';
export * from './schema';
export * from './simulator';
export { type KeyText, SnapshotJob } from './snapshot-job';
