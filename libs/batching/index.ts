export { createBatchPolicy } from './create';
export { BatchingError } from './errors';
export {
  BATCH_POLICY_NAMES,
  DEFAULT_COST_PRIOR,
  DEFAULT_SLO_FACTOR,
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
