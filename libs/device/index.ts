/**
 * Where a model runs: the execution-provider plan for a `device` setting and the default intra-op threads.
 * Pure and free of ONNX Runtime, so a node's main thread can size its workers without loading it;
 * libs/inference follows the plan when it opens a session.
 */

export { DeviceError } from './errors';
export type { ExecutionProviderName, GpuProviderName, ProviderAttempt, ProviderPlan } from './providers';
export { defaultIntraOpThreads, planProviders, providerLabel } from './providers';
