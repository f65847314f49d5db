/**
 * Result codes. Plain frozen objects plus union types (no `enum`): the values are the strings themselves, so a
 * result can be compared, logged or put on the wire without a lookup, and returning one allocates nothing.
 */

export const AdmissionCode = Object.freeze({
  Admit: 'admit',
  RateLimited: 'rate_limited',
  ClientQueueFull: 'client_queue_full',
  ModelQueueFull: 'model_queue_full',
} as const);
export type AdmissionCode = (typeof AdmissionCode)[keyof typeof AdmissionCode];
/** Same as AdmissionCode (the name used in the issue). */
export type AdmissionResult = AdmissionCode;

/** Wire error code for each rejection (`model_queue_full` is answered `overloaded`, HTTP 429 + Retry-After). */
export const ADMISSION_ERROR_CODES = Object.freeze({
  rate_limited: 'rate_limited',
  client_queue_full: 'client_queue_full',
  model_queue_full: 'overloaded',
} as const);

export const ConsumerSignal = Object.freeze({
  /** Nothing to do. */
  Ok: 'ok',
  /** First crossing of the warning level in this episode: send the warning now. */
  Warn: 'warn',
  /** Close the connection with SLOW_CONSUMER_CLOSE_CODE. Sticky: every later call says `close` too. */
  Close: 'close',
} as const);
export type ConsumerSignal = (typeof ConsumerSignal)[keyof typeof ConsumerSignal];

/** WebSocket close code for a consumer that does not read its answers ("Try Again Later"). */
export const SLOW_CONSUMER_CLOSE_CODE = 1013;

/** Code of the warning message sent to a client that falls behind (in-flight or unsent bytes). */
export const CONSUMER_FALLING_BEHIND = 'consumer_falling_behind';

/**
 * Queue priorities, lowest first. `shadow` is for internal shadow traffic (never accepted from clients);
 * `low`, `normal`, `high` are the protocol's priorities.
 */
export const QUEUE_PRIORITIES = Object.freeze(['shadow', 'low', 'normal', 'high'] as const);
export type QueuePriority = (typeof QUEUE_PRIORITIES)[number];
