import { planBody, RolloutError, validatePlan } from './index';

const classifier = { classifier: true };

function refusal(body: unknown, options = classifier): RolloutError {
  try {
    validatePlan(body, options);
  } catch (error) {
    if (error instanceof RolloutError) return error;
    throw error;
  }
  throw new Error('accepted');
}

describe('validatePlan', () => {
  test('defaults: 5 → 10 → 25 → 50 → 100, 60 s, 100 requests, 5 s, 3 failures, every check for a classifier', () => {
    const plan = validatePlan({ version: '2' }, classifier);
    expect(plan).toMatchObject({
      version: '2',
      steps: [5, 10, 25, 50, 100],
      dwellMs: 60000,
      minRequests: 100,
      intervalMs: 5000,
      failuresToRollback: 3,
      minSamples: 50,
      windowMs: 60000,
      checks: {
        errorRate: { maxIncrease: 0.01 },
        p99Ratio: { max: 1.5, floorMs: 1 },
        disagreement: { max: 0.05 },
      },
    });
    expect(plan.shadow).toBeUndefined();
    expect(validatePlan({ version: 2 }, { classifier: false }).checks.disagreement).toBeUndefined();
  });

  test('the full contract body, and planBody reads back equal', () => {
    const body = {
      version: '3',
      steps: [5, 10, 25, 50, 100],
      dwell_s: 2,
      min_requests: 20,
      interval_s: 0.5,
      failures_to_rollback: 2,
      shadow: { dwell_s: 1, min_requests: 30 },
      checks: { error_rate: { max_increase: 0.02 }, p99_ratio: { max: 2 }, disagreement: { max: 0.001 } },
    };
    const plan = validatePlan(body, classifier);
    expect(plan.shadow).toEqual({ dwellMs: 1000, minRequests: 30 });
    expect(plan.intervalMs).toBe(500);
    expect(validatePlan(planBody(plan), { classifier: false })).toEqual(plan);
  });

  test('named checks only; true takes a check with its defaults', () => {
    const plan = validatePlan({ version: '2', checks: { disagreement: true } }, classifier);
    expect(plan.checks).toEqual({ disagreement: { max: 0.05 } });
  });

  test.each([
    [[], 'body'],
    [{}, 'version'],
    [{ version: '' }, 'version'],
    [{ version: '2', stepz: [1] }, 'stepz'],
    [{ version: '2', steps: [] }, 'steps'],
    [{ version: '2', steps: [10, 5] }, 'steps[1]'],
    [{ version: '2', steps: [0] }, 'steps[0]'],
    [{ version: '2', steps: [101] }, 'steps[0]'],
    [{ version: '2', steps: [100] }, 'steps'],
    [{ version: '2', steps: ['5'] }, 'steps[0]'],
    [{ version: '2', steps: Array.from({ length: 21 }, (_, i) => i + 1) }, 'steps'],
    [{ version: '2', dwell_s: -1 }, 'dwell_s'],
    [{ version: '2', dwell_s: Number.NaN }, 'dwell_s'],
    [{ version: '2', min_requests: 1.5 }, 'min_requests'],
    [{ version: '2', interval_s: 0 }, 'interval_s'],
    [{ version: '2', failures_to_rollback: 0 }, 'failures_to_rollback'],
    [{ version: '2', min_samples: 5 }, 'min_samples'],
    [{ version: '2', window_s: 1, interval_s: 5 }, 'window_s'],
    [{ version: '2', checks: [] }, 'checks'],
    [{ version: '2', checks: {} }, 'checks'],
    [{ version: '2', checks: { latency: {} } }, 'checks.latency'],
    [{ version: '2', checks: { error_rate: { max_increase: 2 } } }, 'checks.error_rate.max_increase'],
    [{ version: '2', checks: { p99_ratio: { max: 0.5 } } }, 'checks.p99_ratio.max'],
    [{ version: '2', checks: { p99_ratio: { mx: 2 } } }, 'checks.p99_ratio.mx'],
    [{ version: '2', checks: { disagreement: { max: -0.1 } } }, 'checks.disagreement.max'],
    [{ version: '2', shadow: 'yes' }, 'shadow'],
    [{ version: '2', shadow: { dwell: 3 } }, 'shadow.dwell'],
    [{ version: '2', shadow: true, checks: { error_rate: {} } }, 'shadow'],
  ])('refuses %j naming %s', (body, field) => {
    const error = refusal(body);
    expect(error.code).toBe('invalid_plan');
    expect(error.field).toBe(field);
    expect(error.message).toContain(field);
  });

  test('a shadow phase without the disagreement check is refused for a non-classifier by default', () => {
    expect(refusal({ version: '2', shadow: true }, { classifier: false }).field).toBe('shadow');
  });
});
