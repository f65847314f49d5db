export type {
  CheckResult,
  CounterSample,
  SampleDelta,
  ShadowCounters,
  Verdict,
  VersionCounters,
  WindowTotals,
} from './analysis';
export { disagreementCheck, errorRateCheck, p99RatioCheck, runChecks, SampleWindow } from './analysis';
export type { RolloutErrorCode } from './errors';
export { RolloutError } from './errors';
export type { Judged, JudgedRoute } from './judge';
export { JUDGED, judgeAnswer, judgedByCode, ServiceTimes, VERSION_FAULT_CODES } from './judge';
export type {
  ActivePhase,
  CheckStatus,
  DesiredRouting,
  Evaluation,
  EvaluationInput,
  RolloutRecord,
  RolloutState,
  Transition,
  TransitionReason,
} from './machine';
export {
  abortRollout,
  desiredRouting,
  evaluateRollout,
  isActive,
  MAX_TRANSITIONS,
  parseRecord,
  pauseRollout,
  phaseOf,
  planBody,
  ROLLOUT_STATES,
  resumeRollout,
  rolloutView,
  serializeRecord,
  shareOf,
  startRollout,
} from './machine';
export type { CheckName, ChecksPlan, RolloutPlan } from './plan';
export { CHECK_NAMES, canarySteps, DEFAULT_STEPS, PLAN_BOUNDS, PLAN_DEFAULTS, validatePlan } from './plan';
export type { Interval } from './stats';
export { proportionDifference, quantileBounds, valueAtRank, wilson, Z_95_ONE_SIDED } from './stats';
