import { performance } from 'node:perf_hooks';

/**
 * Milliseconds since the Unix epoch, sub-millisecond resolution. `performance.now()` alone counts
 * from each thread's own start, so its readings cannot be compared across the gateway and its
 * worker threads; the times written into ring records (enqueue, deadline) must be, hence the origin.
 */
export const sharedClock = (): number => performance.timeOrigin + performance.now();
