import { formatRollout, parseSeconds, rolloutBody } from './rollout';

describe('models rollout flags', () => {
  test('durations', () => {
    expect(parseSeconds('60')).toBe(60);
    expect(parseSeconds('60s')).toBe(60);
    expect(parseSeconds('1.5m')).toBe(90);
    expect(parseSeconds('500ms')).toBe(0.5);
    expect(parseSeconds('2h')).toBe(7200);
    expect(parseSeconds('soon')).toBeUndefined();
    expect(parseSeconds('-3s')).toBeUndefined();
  });

  test('the body the API takes', () => {
    expect(
      rolloutBody({
        url: '',
        version: '2',
        steps: '5, 10,25,50',
        dwell: '30s',
        minRequests: '200',
        interval: '2s',
        shadow: true,
        shadowDwell: '1m',
        maxDisagreement: '0.02',
        maxP99Ratio: '2',
      }),
    ).toEqual({
      body: {
        version: '2',
        steps: [5, 10, 25, 50],
        dwell_s: 30,
        min_requests: 200,
        interval_s: 2,
        shadow: { dwell_s: 60 },
        checks: { disagreement: { max: 0.02 }, p99_ratio: { max: 2 } },
      },
    });
    expect(rolloutBody({ url: '', version: '2' })).toEqual({ body: { version: '2' } });
  });

  test('wrong flags are named', () => {
    expect(rolloutBody({ url: '' })).toEqual({ error: '--version is required' });
    expect(rolloutBody({ url: '', version: '2', steps: '5,x' })).toMatchObject({
      error: expect.stringMatching(/--steps/),
    });
    expect(rolloutBody({ url: '', version: '2', dwell: 'long' })).toMatchObject({
      error: expect.stringMatching(/--dwell/),
    });
    expect(rolloutBody({ url: '', version: '2', maxP99Ratio: 'x' })).toMatchObject({
      error: expect.stringMatching(/--max-p99-ratio/),
    });
  });

  test('the human view', () => {
    const text = formatRollout({
      model: 'digits',
      stable: '1',
      candidate: '2',
      state: 'rolled_back',
      step: 0,
      share: 0,
      steps: [5, 10],
      step_started_at: '2026-01-01T00:00:00.000Z',
      checks: [
        {
          name: 'disagreement',
          value: 0.0267,
          threshold: 0.001,
          verdict: 'fail',
          candidate_samples: 300,
          stable_samples: 300,
          consecutive_failures: 3,
        },
      ],
      reason: 'disagreement failed 3 evaluations in a row',
      transitions: [
        { at: '2026-01-01T00:00:05.000Z', from: 'step_0', to: 'rolled_back', reason: 'failed_disagreement' },
      ],
    });
    expect(text).toContain('digits: 2 over 1 — rolled_back, step 1/2, candidate share 0%');
    expect(text).toContain('disagreement fail');
    expect(text).toContain('failed 3 in a row');
    expect(text).toContain('step_0 → rolled_back (failed_disagreement)');
  });
});
