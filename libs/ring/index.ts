export { sharedClock } from './clock';
export { Doorbell } from './doorbell';
export type { RingErrorCode, RingErrorLike } from './errors';
export { isRingError, RingError, RingRangeError, RingTypeError } from './errors';
export type { RingVisitor, RingWaitResult } from './ring';
export { RingBuffer } from './ring';
