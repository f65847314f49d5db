import type { BatchDecision } from './types';

export const IDLE: BatchDecision = Object.freeze({ kind: 'idle' });

export function dispatch(size: number): BatchDecision {
  return { kind: 'dispatch', size };
}

export function waitUntil(untilMs: number): BatchDecision {
  return { kind: 'wait', untilMs };
}

/** Items that can be claimed now: the queue length (floored, never negative) capped at maxBatchSize. */
export function claimable(length: number, maxBatchSize: number): number {
  return Math.max(0, Math.min(Math.floor(length), maxBatchSize));
}

/**
 * Size to dispatch when `available` items go out short of a full batch: the largest preferred size that fits,
 * or everything available when no preferred size fits (or none is configured). `preferred` is sorted ascending.
 */
export function pickSize(available: number, preferred: readonly number[] | undefined): number {
  if (preferred !== undefined) {
    for (let i = preferred.length - 1; i >= 0; i--) {
      const size = preferred[i]!;
      if (size <= available) return size;
    }
  }
  return available;
}
