export { ClientState } from './client-state';
export { ClientTable } from './client-table';
export type { AdmissionResult, QueuePriority } from './codes';
export {
  ADMISSION_ERROR_CODES,
  AdmissionCode,
  CONSUMER_FALLING_BEHIND,
  ConsumerSignal,
  QUEUE_PRIORITIES,
  SLOW_CONSUMER_CLOSE_CODE,
} from './codes';
export { isPastDeadline, remainingMs, resolveDeadline } from './deadline';
export { BackpressureError } from './errors';
export { ErrorCoalescer, ProtocolViolations } from './frame-guard';
export { ModelQueueGuard } from './model-queue';
export type { BackpressureOptions, ResolvedBackpressureOptions } from './options';
export { validateBackpressureOptions } from './options';
