export { createBatchPolicy } from './create';
export { BatchingError } from './errors';
export {
  BATCH_POLICY_NAMES,
  validateBatchPolicyOptions,
} from './options';
export type {
  BatchDecision,
  BatchPolicy,
  BatchPolicyName,
  BatchPolicyOptions,
  BatchPolicyState,
  CostPrior,
  QueueSnapshot,
} from './types';
