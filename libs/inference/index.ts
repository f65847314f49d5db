export type { DeviceRequest, ExecutionProviderName, ProviderAttempt, ProviderPlan } from './device';
export {
  DeviceError,
  defaultIntraOpThreads,
  devicesForNodes,
  formatDevice,
  parseDevice,
  planProviders,
} from './device';
export type { LoadedSession, SessionOptions } from './session';
export { availableBackends, compareSignature, loadSession, ort } from './session';
