export type { ExecutionProviderName, GpuProviderName, ProviderAttempt, ProviderPlan } from './device';
export {
  DeviceError,
  defaultIntraOpThreads,
  planProviders,
  providerLabel,
} from './device';
export type { LoadedSession, SessionOptions } from './session';
export { availableBackends, compareSignature, loadSession, ort, ortMessage } from './session';
