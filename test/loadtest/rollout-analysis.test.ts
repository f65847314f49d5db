import {
  exposure,
  exposureBound,
  failedChecks,
  finalView,
  firstFailure,
  maxShare,
  observedShareSeries,
  parseRolloutView,
  percentOfThreshold,
  type RolloutCheck,
  type RolloutSample,
  type RolloutView,
  RolloutViewError,
  rolloutBody,
  rolloutDeadlineS,
  rolloutMetricLines,
  rolloutSeries,
  rolloutTimings,
  servedAfter,
  sharesVisited,
  terminalAt,
  transitionMarkers,
  visitedEveryStep,
  wallToBenchMs,
} from '../../loadtest/harness/rollout-analysis';
import type { AnswerRecord } from '../../loadtest/harness/swap-analysis';
import {
  closingLine,
  type RolloutRunPlan,
  RolloutSettingsError,
  rolloutChart,
  rolloutFigures,
  rolloutPlans,
  sampleOf,
  withSettings,
} from '../../loadtest/scenarios/rollout';

/** The bench clock's origin on the wall clock (performance.timeOrigin in a real run). */
const ORIGIN = Date.parse('2026-12-01T06:00:00.000Z');
const iso = (benchMs: number): string => new Date(ORIGIN + benchMs).toISOString();

function check(
  name: string,
  value: number | null,
  threshold: number,
  verdict: RolloutCheck['verdict'],
  consecutive = 0,
  candidate = 100,
): RolloutCheck {
  return {
    name,
    value,
    threshold,
    verdict,
    candidate_samples: candidate,
    stable_samples: 2000,
    consecutive_failures: consecutive,
  };
}

function view(over: Partial<RolloutView>): RolloutView {
  return {
    model: 'digits',
    stable: '2',
    candidate: '3',
    state: 'progressing',
    step: 0,
    share: 5,
    steps: [5, 10, 25, 50, 100],
    started_at: iso(10_040),
    step_started_at: iso(10_040),
    updated_at: iso(10_040),
    checks: [],
    reason: null,
    transitions: [{ at: iso(10_040), from: 'none', to: 'progressing', reason: 'started' }],
    ...over,
  };
}

const sample = (atMs: number, v: RolloutView): RolloutSample => ({ atMs, status: 200, view: v });

// ---- fixture: the "errs on a class" candidate (3) rolled back on disagreement
const okChecks = (d: RolloutCheck): RolloutCheck[] => [
  check('error_rate', 0, 0.01, 'pass'),
  check('p99_ratio', 1.1, 1.5, 'pass'),
  d,
];
const ROLLED_BACK_TRANSITIONS = [
  { at: iso(10_040), from: 'none', to: 'progressing', reason: 'started' },
  {
    at: iso(13_410),
    from: 'progressing',
    to: 'rolled_back',
    reason: 'disagreement 0.099 > 0.05 in 2 consecutive evaluations',
  },
];
const rollbackSamples: RolloutSample[] = [
  { atMs: 9_900, status: 404 },
  sample(10_500, view({ checks: okChecks(check('disagreement', null, 0.05, 'insufficient', 0, 20)) })),
  sample(11_000, view({ checks: okChecks(check('disagreement', null, 0.05, 'insufficient', 0, 45)) })),
  sample(
    11_500,
    view({ updated_at: iso(11_400), checks: okChecks(check('disagreement', 0.098, 0.05, 'fail', 1)) }),
  ),
  sample(
    12_000,
    view({ updated_at: iso(11_400), checks: okChecks(check('disagreement', 0.098, 0.05, 'fail', 1)) }),
  ),
  sample(
    12_500,
    view({ updated_at: iso(12_400), checks: okChecks(check('disagreement', 0.099, 0.05, 'fail', 2)) }),
  ),
  { atMs: 13_000, status: 0, error: 'timeout' },
  ...[13_500, 14_000].map((t) =>
    sample(
      t,
      view({
        state: 'rolled_back',
        share: 0,
        updated_at: iso(13_410),
        reason: ROLLED_BACK_TRANSITIONS[1]!.reason,
        transitions: ROLLED_BACK_TRANSITIONS,
        checks: okChecks(check('disagreement', 0.099, 0.05, 'fail', 2)),
      }),
    ),
  ),
];

/** Rows 0..9: true label = row; the stable (v2) is wrong on row 9 (answers 8). */
const TRUTH = Int32Array.from({ length: 10 }, (_, i) => i);
const STABLE_LABELS = Int32Array.from({ length: 10 }, (_, i) => (i === 9 ? 8 : i));

let nextId = 0;
function answer(sentMs: number, version: string, row: number, label?: number, error?: string): AnswerRecord {
  return {
    conn: 0,
    id: nextId++,
    row,
    sentMs,
    recvMs: sentMs + 2,
    ...(error ? { error } : { version, label: String(label ?? STABLE_LABELS[row]) }),
  };
}

/** Stable answers every `stableEveryMs` over [9 000, 16 000); the candidate (3) every 100 ms over [10 100, 13 400]. */
function rollbackAnswers(stableEveryMs = 10): AnswerRecord[] {
  const out: AnswerRecord[] = [];
  for (let t = 9_000; t < 16_000; t += stableEveryMs) out.push(answer(t, '2', (t / stableEveryMs) % 10));
  for (let t = 10_100; t <= 13_400; t += 100) {
    const row = (t / 100) % 10;
    out.push(answer(t, '3', row, row === 7 ? 1 : STABLE_LABELS[row]));
  }
  return out;
}

const CALL = { calledMs: 10_000, returnedMs: 10_050 };

describe('parseRolloutView', () => {
  const raw = view({ checks: [check('p99_ratio', null, 1.5, 'insufficient')] });

  it('reads {"rollout": view} and a bare view; versions given as numbers become text', () => {
    expect(parseRolloutView({ rollout: raw })).toEqual(raw);
    expect(parseRolloutView(raw)).toEqual(raw);
    expect(parseRolloutView({ rollout: { ...raw, stable: 2, candidate: 3 } }).candidate).toBe('3');
  });

  it('names the field that is wrong', () => {
    expect(() => parseRolloutView({ rollout: { ...raw, state: 'exploded' } })).toThrow(
      /rollout\.state: expected shadow \| progressing/,
    );
    expect(() =>
      parseRolloutView({ rollout: { ...raw, checks: [{ ...raw.checks[0], verdict: 'maybe' }] } }),
    ).toThrow(/rollout\.checks\[0\]\.verdict/);
    expect(() => parseRolloutView({ rollout: { ...raw, steps: [5, 'x'] } })).toThrow(/rollout\.steps/);
    expect(() => parseRolloutView('nope')).toThrow(RolloutViewError);
    try {
      parseRolloutView({ rollout: { ...raw, transitions: [{ at: 1 }] } });
    } catch (e) {
      expect((e as RolloutViewError).code).toBe('bad_rollout_view');
      expect((e as Error).message).toMatch(/rollout\.transitions\[0\]\.at: expected a string, got 1/);
    }
  });

  it('a sample is a view only for a 200 that parses', () => {
    const at = { calledMs: 1, returnedMs: 2 };
    expect(sampleOf({ ...at, status: 404, body: { code: 'not_found' } })).toEqual({ atMs: 2, status: 404 });
    expect(sampleOf({ ...at, status: 0, body: {}, error: 'ECONNREFUSED' }).error).toBe('ECONNREFUSED');
    expect(sampleOf({ ...at, status: 200, body: { rollout: raw } }).view?.state).toBe('progressing');
    expect(sampleOf({ ...at, status: 200, body: { rollout: {} } }).error).toMatch(/rollout\.checks/);
  });
});

describe('rolloutBody / plans', () => {
  it('sends every setting explicitly; shadow only when asked', () => {
    const [errs, slow, good] = rolloutPlans(false);
    expect(rolloutBody(errs!.spec)).toEqual({
      version: '3',
      steps: [5, 10, 25, 50, 100],
      dwell_s: 20,
      deadline_s: 120,
      min_requests: 100,
      interval_s: 2,
      failures_to_rollback: 3,
      checks: {
        error_rate: { max_increase: 0.01 },
        p99_ratio: { max: 1.5 },
        disagreement: { max: 0.05 },
      },
    });
    expect(slow!.expectCheck).toBe('p99_ratio');
    expect(rolloutBody(good!.spec)['shadow']).toEqual({ dwell_s: 10, min_requests: 100 });
    expect(rolloutPlans(false, true).every((p) => p.spec.shadow !== undefined)).toBe(true);
  });

  it('fits the time budget: full at most 5 min, quick at most 1 min of rollouts (a step deadline included)', () => {
    const total = (quick: boolean): number =>
      rolloutPlans(quick)
        .map((p) => (p.expect === 'promoted' ? rolloutDeadlineS(p.spec, 0) : p.spec.dwell_s))
        .reduce((a, b) => a + b, 0);
    expect(total(false)).toBeLessThanOrEqual(300);
    expect(total(true)).toBeLessThanOrEqual(60);
    expect(rolloutPlans(true)[2]!.spec.steps).toEqual([5, 25, 100]);
  });
});

describe('BENCH_ROLLOUT_SETTINGS', () => {
  const plans = rolloutPlans(false);

  it('lays the settings over every run; unset leaves the plans as they are', () => {
    expect(withSettings(plans, undefined)).toEqual(plans);
    expect(withSettings(plans, ' ')).toEqual(plans);
    const out = withSettings(
      plans,
      '{"min_requests":30,"interval_s":1,"steps":[10,100],"shadow":{"dwell_s":5,"min_requests":20},"checks":{"p99_ratio":{"max":2}}}',
    );
    for (const p of out) {
      expect(p.spec).toMatchObject({ min_requests: 30, interval_s: 1, steps: [10, 100], dwell_s: 20 });
      expect(p.spec.checks).toEqual({
        error_rate: { max_increase: 0.01 },
        p99_ratio: { max: 2 },
        disagreement: { max: 0.05 },
      });
    }
    // the shadow settings apply to the runs that have a shadow stage; null removes it
    expect(out.map((p) => p.spec.shadow)).toEqual([undefined, undefined, { dwell_s: 5, min_requests: 20 }]);
    expect(withSettings(plans, '{"shadow":null}').every((p) => p.spec.shadow === undefined)).toBe(true);
    // the originals are untouched
    expect(plans[2]!.spec.shadow).toEqual({ dwell_s: 10, min_requests: 100 });
  });

  it.each([
    ['{', /not JSON/],
    ['[1]', /expected a JSON object/],
    ['{"dwell":5}', /unknown setting "dwell"/],
    ['{"dwell_s":0}', /dwell_s must be a positive number, got 0/],
    ['{"steps":[50,10,100]}', /steps must rise to 100/],
    ['{"steps":[5,50]}', /steps must rise to 100/],
    ['{"shadow":{"dwell_s":5}}', /shadow must be/],
    ['{"checks":{"latency":{"max":1}}}', /unknown check "latency"/],
    ['{"checks":{"p99_ratio":{"max_increase":1}}}', /checks\.p99_ratio\.max must be a number/],
  ])('refuses %s with a message that names the setting', (json, message) => {
    expect(() => withSettings(plans, json)).toThrow(RolloutSettingsError);
    expect(() => withSettings(plans, json)).toThrow(message);
  });
});

describe('a rollback', () => {
  it('finds the first failing evaluation by updated_at, the terminal transition, the failed checks', () => {
    expect(wallToBenchMs(iso(123), ORIGIN)).toBe(123);
    expect(wallToBenchMs('not a date', ORIGIN)).toBeNaN();
    expect(firstFailure(rollbackSamples, ORIGIN)).toEqual({
      atMs: 11_400,
      checks: ['disagreement'],
      sampleAtMs: 11_500,
    });
    expect(terminalAt(rollbackSamples, ORIGIN)).toEqual({
      atMs: 13_410,
      state: 'rolled_back',
      reason: 'disagreement 0.099 > 0.05 in 2 consecutive evaluations',
    });
    expect(failedChecks(rollbackSamples)).toEqual(['disagreement']);
    expect(maxShare(rollbackSamples)).toBe(5);
    expect(sharesVisited(rollbackSamples)).toEqual([5]);
    expect(finalView(rollbackSamples)?.state).toBe('rolled_back');
  });

  it('an updated_at after the sample arrived (clock skew) falls back to the arrival', () => {
    const skewed = rollbackSamples.map((s) =>
      s.view && s.atMs === 11_500 ? { ...s, view: { ...s.view, updated_at: iso(11_900) } } : s,
    );
    expect(firstFailure(skewed, ORIGIN)?.atMs).toBe(11_500);
  });

  it('times the outcome and the candidate going to 0 requests', () => {
    const t = rolloutTimings(rollbackSamples, rollbackAnswers(), '3', CALL, ORIGIN);
    expect(t.startedMs).toBe(10_040);
    expect(t.timeToOutcomeMs).toBe(3_370);
    expect(t.timeToFirstFailureMs).toBe(1_360);
    expect(t.failureToOutcomeMs).toBe(2_010);
    expect(t.lastCandidate).toEqual({ sentMs: 13_400, recvMs: 13_402 });
    expect(t.failureToZeroMs).toBe(2_002);
    expect(t.candidateAfterOutcome).toBe(0);
  });

  it('without a failing evaluation there is no failure timing; without a terminal view no outcome', () => {
    const running = rollbackSamples.slice(0, 3);
    const t = rolloutTimings(running, rollbackAnswers(), '3', CALL, ORIGIN);
    expect(t.terminal).toBeUndefined();
    expect(t.firstFailure).toBeUndefined();
    expect(t.failureToZeroMs).toBeUndefined();
    // no view at all: started = the POST's return
    expect(rolloutTimings([], [], '3', CALL, ORIGIN).startedMs).toBe(10_050);
  });

  it('counts exposure: answers from the candidate, those it changed, those wrong; failures apart', () => {
    const answers = [...rollbackAnswers(), answer(12_000, '2', 0, undefined, 'overloaded')];
    const e = exposure(answers, '2', '3', TRUTH, STABLE_LABELS);
    // candidate: 34 answers (10 100 … 13 400 by 100), rows (t/100) % 10; row 7 at 10 700, 11 700, 12 700
    expect(e.exposed).toBe(34);
    expect(e.exposedChanged).toBe(3);
    // wrong vs truth: the 3 changed rows + row 9 (the stable's own mistake, kept) at 10 900, 11 900, 12 900
    expect(e.exposedWrong).toBe(6);
    expect(e.stableAnswers).toBe(700);
    expect(e.stableChanged).toBe(0);
    expect(e.stableWrong).toBe(70);
    expect(e.errors).toBe(1);
    expect(e.errorCodes).toEqual({ overloaded: 1 });
    expect(e.ok).toBe(734);
    expect(e.exposedShare).toBeCloseTo(34 / 734, 10);
    expect(servedAfter(answers, '3', 13_000)).toBe(5);
    expect(exposure([], '2', '3', TRUTH, STABLE_LABELS).exposedShare).toBeUndefined();
  });

  it('bounds exposure by the share plus 3σ', () => {
    expect(exposureBound(10_000, 5)).toBeCloseTo(500 + 3 * Math.sqrt(10_000 * 0.05 * 0.95), 9);
    expect(exposureBound(100, 0)).toBe(0);
    expect(exposureBound(100, 100)).toBe(100);
  });

  it('judges the run: every done-when check passes, and the closing line quotes the figures', () => {
    const plan = rolloutPlans(true)[0]!;
    const run = {
      call: { ...CALL, status: 200, body: {} },
      samples: rollbackSamples.map((s) =>
        s.view
          ? {
              ...s,
              view: { ...s.view, steps: plan.spec.steps, share: s.view.share ? plan.spec.steps[0]! : 0 },
            }
          : s,
      ),
      // the candidate's 34 answers are ~5 % of those sent while active
      answers: rollbackAnswers(5),
      timedOut: false,
      unmatched: 0,
      closes: 0,
    };
    const f = rolloutFigures(plan, run, TRUTH, STABLE_LABELS, ORIGIN);
    expect(f.state).toBe('rolled_back');
    expect(f.checks.map((c) => [c.name.replace(/^.*: /, ''), c.pass])).toEqual([
      ['outcome', true],
      ['failing check', true],
      ['reason recorded', true],
      ['within its evaluation window', true],
      ['first failing evaluation → candidate serving 0 requests', true],
      ['client failures', true],
      ['wrong answers only where the canary share exposed', true],
    ]);
    // exposure while active: requests sent in [10 040, 13 410)
    expect(f.activeExposure.exposed).toBe(34);
    const line = closingLine(f);
    expect(line).toContain('rolled_back after 3.37 s');
    expect(line).toContain('first failing evaluation at 1.36 s');
    expect(line).toContain('2.00 s later');
    expect(line).toContain('exposed 34 of');
    expect(line).toContain('reason: disagreement 0.099 > 0.05');
    const chart = rolloutChart(plan, { ...run, stopMs: 16_000 }, f, ORIGIN);
    expect(chart.file).toBe('rollout-errs.svg');
    expect(chart.svg).toContain('share % (server)');
    expect(chart.svg).toContain('disagreement (% of max)');
    expect(chart.svg).toContain('fail: disagreement');
    expect(chart.svg.startsWith('<svg')).toBe(true);
  });

  it('a rollout that vanished (404) before an outcome is reported as such', () => {
    const plan = rolloutPlans(true)[0]!;
    const gone = [...rollbackSamples.slice(0, 4), { atMs: 12_500, status: 404 }];
    const f = rolloutFigures(
      plan,
      {
        call: { ...CALL, status: 200, body: {} },
        samples: gone,
        answers: rollbackAnswers(),
        timedOut: false,
        vanished: true,
        unmatched: 0,
        closes: 0,
      },
      TRUTH,
      STABLE_LABELS,
      ORIGIN,
    );
    expect(f.state).toBe('gone (404) while progressing');
    expect(f.checks[0]!.pass).toBe(false);
  });

  it('flags a bad candidate that was not rolled back, and client failures', () => {
    const plan = rolloutPlans(true)[0]!;
    const promoted = rollbackSamples.map((s) =>
      s.view && s.view.state === 'rolled_back'
        ? { ...s, view: { ...s.view, state: 'promoted' as const } }
        : s,
    );
    const answers = [...rollbackAnswers(), answer(12_000, '2', 0, undefined, 'client_timeout')];
    const f = rolloutFigures(
      plan,
      {
        call: { ...CALL, status: 200, body: {} },
        samples: promoted,
        answers,
        timedOut: false,
        unmatched: 0,
        closes: 0,
      },
      TRUTH,
      STABLE_LABELS,
      ORIGIN,
    );
    const byName = Object.fromEntries(f.checks.map((c) => [c.name.replace(/^.*: /, ''), c]));
    expect(byName['outcome']!.pass).toBe(false);
    expect(byName['client failures']!.pass).toBe(false);
    expect(byName['client failures']!.detail).toContain('client_timeout');
  });
});

describe('a promotion', () => {
  const steps = [5, 25, 100];
  const v = (over: Partial<RolloutView>): RolloutView => view({ candidate: '5', steps, ...over });
  const promotedView = v({
    state: 'promoted',
    stable: '5',
    step: 2,
    share: 100,
    reason: 'promoted after every step',
    transitions: [
      { at: iso(10_040), from: 'none', to: 'shadow', reason: 'started' },
      { at: iso(13_000), from: 'shadow', to: 'progressing', reason: 'shadow passed' },
      { at: iso(31_100), from: 'progressing', to: 'promoted', reason: 'promoted after every step' },
    ],
  });
  const samples: RolloutSample[] = [
    sample(10_500, v({ state: 'shadow', step: -1, share: 0 })),
    sample(13_500, v({ step: 0, share: 5, checks: [check('p99_ratio', 1.2, 1.5, 'pass')] })),
    sample(14_000, v({ step: 0, share: 5, checks: [check('p99_ratio', 1.7, 1.5, 'fail', 1)] })),
    sample(20_000, v({ step: 1, share: 25, checks: [check('p99_ratio', 1.0, 1.5, 'pass')] })),
    sample(26_000, v({ step: 2, share: 100, checks: [check('p99_ratio', 1.0, 1.5, 'pass')] })),
    sample(31_500, promotedView),
  ];

  it('visits every step (the last may be missed by the sampling when it ends in a promotion)', () => {
    expect(sharesVisited(samples)).toEqual([5, 25, 100]);
    expect(visitedEveryStep(samples, steps)).toBe(true);
    expect(
      visitedEveryStep(
        samples.filter((s) => s.atMs !== 26_000),
        steps,
      ),
    ).toBe(true);
    expect(
      visitedEveryStep(
        samples.filter((s) => s.atMs !== 20_000),
        steps,
      ),
    ).toBe(false);
    expect(visitedEveryStep(samples.slice(0, 4), steps)).toBe(false);
    expect(maxShare(samples)).toBe(100);
    // a check that failed once without rolling back is still listed
    expect(failedChecks(samples)).toEqual(['p99_ratio']);
  });

  it('charts share and checks; markers at the transitions', () => {
    const series = rolloutSeries(samples, 10_000);
    expect(series.map((s) => s.name)).toEqual(['share % (server)', 'p99_ratio (% of max)']);
    expect(series[0]!.points).toEqual([
      [0.5, 0],
      [3.5, 5],
      [4, 5],
      [10, 25],
      [16, 100],
      [21.5, 100],
    ]);
    const p99 = series[1]!.points;
    expect(p99[0]![1]).toBeNaN();
    expect(p99[1]![1]).toBeCloseTo(80, 9);
    expect(p99[2]![1]).toBeCloseTo(113.333, 3);
    expect(transitionMarkers(samples, 10_000, ORIGIN)).toEqual([
      { x: 0.04, label: 'shadow' },
      { x: 3, label: 'progressing' },
      { x: 21.1, label: 'promoted' },
    ]);
    expect(percentOfThreshold({ value: null, threshold: 1 })).toBeUndefined();
    expect(percentOfThreshold({ value: 0, threshold: 0 })).toBe(0);
    expect(percentOfThreshold({ value: 0.02, threshold: 0 })).toBeUndefined();
  });

  it('judges the run: promoted through every step, the new stable serves, no failures', () => {
    const plan: RolloutRunPlan = rolloutPlans(true)[2]!;
    const answers: AnswerRecord[] = [];
    for (let t = 9_000; t < 34_000; t += 10)
      answers.push(answer(t, t >= 31_100 || (t >= 13_000 && t % 100 === 0) ? '5' : '2', (t / 10) % 10));
    const f = rolloutFigures(
      plan,
      {
        call: { ...CALL, status: 200, body: {} },
        samples,
        answers,
        timedOut: false,
        unmatched: 0,
        closes: 0,
      },
      TRUTH,
      STABLE_LABELS,
      ORIGIN,
    );
    expect(f.checks.map((c) => [c.name.replace(/^.*: /, ''), c.pass])).toEqual([
      ['outcome', true],
      ['every step', true],
      ['time to promote', true],
      ['client failures', true],
      ['the new stable serves', true],
    ]);
    expect(f.timings.timeToOutcomeMs).toBe(21_060);
    expect(plan.spec.steps).toEqual(steps);
    expect(closingLine(f)).toContain('promoted after 21.06 s through 5 → 25 → 100 %');
  });
});

describe('observed share and metrics', () => {
  it('is the candidate share of ok answers per bucket, by arrival; empty buckets skipped', () => {
    const answers = [
      answer(0, '2', 0),
      answer(10, '3', 0),
      answer(20, '3', 0, undefined, 'overloaded'),
      answer(2_100, '2', 0),
    ];
    expect(observedShareSeries(answers, '3', 0, 1000)).toEqual([
      [0.5, 50],
      [2.5, 0],
    ]);
    expect(observedShareSeries([], '3', 0, 1000, 2500)).toEqual([]);
  });

  it('lists the rollout samples of the model', () => {
    expect(
      rolloutMetricLines(
        [
          { name: 'streaminfer_rollout_share', labels: { model: 'digits' }, value: 5 },
          { name: 'streaminfer_rollout_share', labels: { model: 'echo' }, value: 1 },
          { name: 'streaminfer_requests_total', labels: { model: 'digits' }, value: 9 },
          {
            name: 'streaminfer_rollout_transitions_total',
            labels: { model: 'digits', from: 'progressing', to: 'rolled_back', reason: 'disagreement' },
            value: 1,
          },
        ],
        'digits',
      ),
    ).toEqual([
      'streaminfer_rollout_share{model="digits"} 5',
      'streaminfer_rollout_transitions_total{model="digits",from="progressing",to="rolled_back",reason="disagreement"} 1',
    ]);
  });
});
