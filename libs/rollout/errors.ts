/**
 * A rollout plan or operation that cannot be accepted. `code` is stable: `invalid_plan` (a field out of its
 * bounds, `field` names it: `steps[2]`, `checks.p99_ratio.max`), `invalid_state` (pause, resume or abort asked
 * of a rollout whose state does not allow it), `invalid_record` (a persisted record that cannot be read back).
 */
export type RolloutErrorCode = 'invalid_plan' | 'invalid_state' | 'invalid_record';

export class RolloutError extends Error {
  readonly code: RolloutErrorCode;
  readonly field: string | undefined;

  constructor(code: RolloutErrorCode, message: string, field?: string) {
    super(message);
    this.name = 'RolloutError';
    this.code = code;
    this.field = field;
  }
}
