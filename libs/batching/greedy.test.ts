import type { QueueSnapshot } from './index';
import { createBatchPolicy } from './index';

const q = (length: number, oldestEnqueuedAt = 0, inFlightBatches = 0): QueueSnapshot => ({
  length,
  oldestEnqueuedAt,
  inFlightBatches,
});

describe('greedy policy', () => {
  const policy = createBatchPolicy({ policy: 'greedy', maxBatchSize: 8, maxQueueDelayMs: 10 });

  it('is idle on an empty queue', () => {
    expect(policy.decide(q(0), 5)).toEqual({ kind: 'idle' });
  });

  it('takes everything queued at once when idle (minBatchSize 1 never waits)', () => {
    expect(policy.decide(q(1, 100), 100)).toEqual({ kind: 'dispatch', size: 1 });
    expect(policy.decide(q(5, 100), 101)).toEqual({ kind: 'dispatch', size: 5 });
    expect(policy.state()).toEqual({ targetBatchSize: 8, waitMs: 0 });
  });

  it('caps at maxBatchSize', () => {
    expect(policy.decide(q(30, 100), 100)).toEqual({ kind: 'dispatch', size: 8 });
  });

  it('dispatches a full batch even with one in flight', () => {
    expect(policy.decide(q(8, 100, 1), 100)).toEqual({ kind: 'dispatch', size: 8 });
  });

  it('holds a partial batch while one is in flight, until the budget ends', () => {
    expect(policy.decide(q(3, 100, 1), 102)).toEqual({ kind: 'wait', untilMs: 110 });
    expect(policy.state().waitMs).toBe(8);
    expect(policy.decide(q(3, 100, 1), 110)).toEqual({ kind: 'dispatch', size: 3 });
    // Once the running batch completes, the worker asks again with inFlightBatches 0.
    expect(policy.decide(q(3, 100, 0), 104)).toEqual({ kind: 'dispatch', size: 3 });
  });

  describe('with minBatchSize', () => {
    const min = createBatchPolicy({
      policy: 'greedy',
      maxBatchSize: 8,
      maxQueueDelayMs: 10,
      minBatchSize: 4,
    });

    it('waits while the batch is small and the budget allows', () => {
      expect(min.decide(q(3, 100), 100)).toEqual({ kind: 'wait', untilMs: 110 });
      expect(min.decide(q(3, 100), 109.5)).toEqual({ kind: 'wait', untilMs: 110 });
    });

    it('dispatches when the budget is spent (exactly at the deadline)', () => {
      expect(min.decide(q(3, 100), 110)).toEqual({ kind: 'dispatch', size: 3 });
      expect(min.decide(q(1, 100), 200)).toEqual({ kind: 'dispatch', size: 1 });
    });

    it('dispatches as soon as minBatchSize is reached', () => {
      expect(min.decide(q(4, 100), 101)).toEqual({ kind: 'dispatch', size: 4 });
      expect(min.decide(q(6, 100), 101)).toEqual({ kind: 'dispatch', size: 6 });
    });
  });

  it('dispatches immediately with delay 0', () => {
    const eager = createBatchPolicy({
      policy: 'greedy',
      maxBatchSize: 8,
      maxQueueDelayMs: 0,
      minBatchSize: 8,
    });
    expect(eager.decide(q(2, 50, 1), 50)).toEqual({ kind: 'dispatch', size: 2 });
  });

  describe('with preferred sizes', () => {
    const preferred = createBatchPolicy({
      policy: 'greedy',
      maxBatchSize: 16,
      maxQueueDelayMs: 10,
      preferredBatchSizes: [4, 8],
    });

    it('sends the largest preferred size that fits', () => {
      expect(preferred.decide(q(10, 0), 1)).toEqual({ kind: 'dispatch', size: 8 });
      expect(preferred.decide(q(5, 0), 1)).toEqual({ kind: 'dispatch', size: 4 });
    });

    it('never waits for a preferred size: sends everything when none fits', () => {
      expect(preferred.decide(q(3, 0), 1)).toEqual({ kind: 'dispatch', size: 3 });
    });

    it('applies them on timeout too', () => {
      expect(preferred.decide(q(6, 0, 1), 10)).toEqual({ kind: 'dispatch', size: 4 });
    });

    it('a full batch is always sent whole', () => {
      expect(preferred.decide(q(20, 0), 1)).toEqual({ kind: 'dispatch', size: 16 });
    });
  });

  it('ignores observations', () => {
    policy.observe(4, 3, 0);
    expect(policy.state().targetBatchSize).toBe(8);
  });
});
