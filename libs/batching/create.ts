import { AdaptivePolicy } from './adaptive';
import { FixedPolicy } from './fixed';
import { GreedyPolicy } from './greedy';
import { validateBatchPolicyOptions } from './options';
import type { BatchPolicy, BatchPolicyOptions } from './types';

/** Validates `options` (throws BatchingError naming the bad option) and builds the policy. */
export function createBatchPolicy(options: BatchPolicyOptions): BatchPolicy {
  const valid = validateBatchPolicyOptions(options);
  switch (valid.policy) {
    case 'fixed':
      return new FixedPolicy(valid);
    case 'greedy':
      return new GreedyPolicy(valid);
    case 'adaptive':
      return new AdaptivePolicy(valid);
  }
}
