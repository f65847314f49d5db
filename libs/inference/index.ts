export type { ExecutionProviderName, ProviderAttempt, ProviderPlan } from './device';
export {
  DeviceError,
  defaultIntraOpThreads,
  planProviders,
} from './device';
export type { LoadedSession, SessionOptions } from './session';
export { availableBackends, compareSignature, loadSession, ort } from './session';
