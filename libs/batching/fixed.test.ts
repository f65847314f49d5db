import type { QueueSnapshot } from './index';
import { createBatchPolicy } from './index';

const q = (length: number, oldestEnqueuedAt = 0, inFlightBatches = 0): QueueSnapshot => ({
  length,
  oldestEnqueuedAt,
  inFlightBatches,
});

describe('fixed policy', () => {
  const policy = createBatchPolicy({ policy: 'fixed', maxBatchSize: 8, maxQueueDelayMs: 10 });

  it('is idle on an empty queue', () => {
    expect(policy.decide(q(0, 123), 1000)).toEqual({ kind: 'idle' });
    expect(policy.state()).toEqual({ targetBatchSize: 8, waitMs: 0 });
  });

  it('dispatches a full batch at once, even with batches in flight', () => {
    expect(policy.decide(q(8, 100), 100)).toEqual({ kind: 'dispatch', size: 8 });
    expect(policy.decide(q(20, 100, 1), 100)).toEqual({ kind: 'dispatch', size: 8 });
  });

  it('waits until the oldest item has waited maxQueueDelayMs', () => {
    expect(policy.decide(q(3, 100), 104)).toEqual({ kind: 'wait', untilMs: 110 });
    expect(policy.state()).toEqual({ targetBatchSize: 8, waitMs: 6 });
    expect(policy.decide(q(3, 100, 1), 109.999)).toEqual({ kind: 'wait', untilMs: 110 });
  });

  it('flushes everything exactly at the deadline and after it', () => {
    expect(policy.decide(q(3, 100), 110)).toEqual({ kind: 'dispatch', size: 3 });
    expect(policy.state().waitMs).toBe(0);
    expect(policy.decide(q(7, 100), 500)).toEqual({ kind: 'dispatch', size: 7 });
  });

  it('treats an oldest item from the future as just queued', () => {
    expect(policy.decide(q(1, 105), 100)).toEqual({ kind: 'wait', untilMs: 115 });
  });

  it('with delay 0 dispatches whatever is queued immediately', () => {
    const eager = createBatchPolicy({ policy: 'fixed', maxBatchSize: 8, maxQueueDelayMs: 0 });
    expect(eager.decide(q(2, 50), 50)).toEqual({ kind: 'dispatch', size: 2 });
  });

  it('uses the largest preferred size that fits on timeout', () => {
    const preferred = createBatchPolicy({
      policy: 'fixed',
      maxBatchSize: 16,
      maxQueueDelayMs: 10,
      preferredBatchSizes: [8, 4],
    });
    expect(preferred.decide(q(7, 0), 10)).toEqual({ kind: 'dispatch', size: 4 });
    expect(preferred.decide(q(15, 0), 10)).toEqual({ kind: 'dispatch', size: 8 });
    expect(preferred.decide(q(8, 0), 10)).toEqual({ kind: 'dispatch', size: 8 });
    expect(preferred.decide(q(3, 0), 10)).toEqual({ kind: 'dispatch', size: 3 });
    // Before the timeout, preferred sizes do not trigger a dispatch; a full batch still does.
    expect(preferred.decide(q(8, 0), 5)).toEqual({ kind: 'wait', untilMs: 10 });
    expect(preferred.decide(q(40, 0), 5)).toEqual({ kind: 'dispatch', size: 16 });
  });

  it('floors a fractional length', () => {
    expect(policy.decide(q(2.7, 0), 10)).toEqual({ kind: 'dispatch', size: 2 });
    expect(policy.decide(q(0.5, 0), 10)).toEqual({ kind: 'idle' });
  });

  it('ignores observations', () => {
    policy.observe(8, 12, 0);
    expect(policy.state()).toEqual({ targetBatchSize: 8, waitMs: 0 });
  });
});

describe('maxBatchSize 1 disables batching for every policy', () => {
  it.each(['fixed', 'greedy', 'adaptive'] as const)('%s dispatches single items immediately', (name) => {
    const policy = createBatchPolicy({ policy: name, maxBatchSize: 1, maxQueueDelayMs: 50 });
    expect(policy.decide(q(1, 0), 0)).toEqual({ kind: 'dispatch', size: 1 });
    expect(policy.decide(q(5, 0, 1), 0)).toEqual({ kind: 'dispatch', size: 1 });
    expect(policy.decide(q(0, 0), 0)).toEqual({ kind: 'idle' });
  });
});
