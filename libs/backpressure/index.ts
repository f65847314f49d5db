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
export { ModelQueueGuard } from './model-queue';
export type { BackpressureOptions, ResolvedBackpressureOptions } from './options';
export {
  DEFAULT_DRAIN_RATE_WINDOW_MS,
  DEFAULT_HIGH_PRIORITY_HEADROOM_FRACTION,
  DEFAULT_INFLIGHT_RESET_FRACTION,
  DEFAULT_LOW_PRIORITY_QUEUE_FRACTION,
  DEFAULT_MAX_RETRY_AFTER_MS,
  DEFAULT_MIN_RETRY_AFTER_MS,
  DEFAULT_RETRY_AFTER_MS,
  DEFAULT_SLOW_CONSUMER_CLOSE_BYTES,
  DEFAULT_SLOW_CONSUMER_WARN_BYTES,
  DEFAULT_WARN_INFLIGHT_FRACTION,
  validateBackpressureOptions,
} from './options';
