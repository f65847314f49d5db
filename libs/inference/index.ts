export type { BatchSpeed, BenchModelOptions, BenchModelResult } from './model-speed';
export { benchModel } from './model-speed';
export type { LoadedSession, SessionOptions } from './session';
export { availableBackends, compareSignature, loadSession, ort, ortMessage } from './session';
