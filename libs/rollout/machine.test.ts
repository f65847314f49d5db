import {
  abortRollout,
  desiredRouting,
  evaluateRollout,
  MAX_TRANSITIONS,
  parseRecord,
  pauseRollout,
  RolloutError,
  type RolloutRecord,
  resumeRollout,
  rolloutView,
  serializeRecord,
  shareOf,
  startRollout,
  type VersionCounters,
  validatePlan,
  type WindowTotals,
} from './index';

const BOUNDS = [0.001, 0.0025, 0.005, 0.01, Number.POSITIVE_INFINITY];
const version = (n: number, errors = 0, bucket = 0): VersionCounters => ({
  requests: n,
  errors,
  latency: BOUNDS.map((_, i) => (i >= bucket ? n : 0)),
});

/** Window totals: healthy unless told otherwise. */
function totals(
  options: { candidate?: VersionCounters; stable?: VersionCounters; agree?: number; disagree?: number } = {},
): WindowTotals {
  return {
    spanMs: 60000,
    stable: options.stable ?? version(20000),
    candidate: options.candidate ?? version(2000),
    shadow: { agree: options.agree ?? 5000, disagree: options.disagree ?? 0 },
  };
}
const healthy = totals();
const failing = totals({ agree: 800, disagree: 200 });
const unknown = totals({ candidate: version(5), agree: 5, disagree: 0 });

const plan = (body: Record<string, unknown> = {}) =>
  validatePlan(
    { version: '2', steps: [5, 10, 50, 100], dwell_s: 10, min_requests: 20, interval_s: 5, ...body },
    { classifier: true },
  );

function start(body: Record<string, unknown> = {}, now = 0): RolloutRecord {
  return startRollout({ model: 'digits', stable: '1', candidate: '2', plan: plan(body), now }).record;
}

function step(
  record: RolloutRecord,
  now: number,
  t: WindowTotals | undefined,
  requests = 50,
  comparisons = 50,
) {
  return evaluateRollout(record, {
    totals: t,
    bounds: BOUNDS,
    delta: { candidateRequests: requests, comparisons, reset: false },
    now,
  });
}

describe('rollout state machine', () => {
  test('starts at step 0 (5 %) with shadow mirroring on for the disagreement check', () => {
    const record = start();
    expect(record).toMatchObject({ state: 'progressing', step: 0, stepRequests: 0 });
    expect(record.transitions).toEqual([{ at: 0, from: 'none', to: 'step_0', reason: 'started' }]);
    expect(desiredRouting(record)).toEqual({
      kind: 'canary',
      candidate: '2',
      canaryPercent: 5,
      shadow: true,
    });
    expect(record.checks.map((check) => check.name)).toEqual(['error_rate', 'p99_ratio', 'disagreement']);
    // without the disagreement check nothing is mirrored
    expect(desiredRouting(start({ checks: { error_rate: {} } }))).toMatchObject({ shadow: false });
  });

  test('healthy: steps after dwell and min requests, then promotes (a last 100 is the promotion)', () => {
    let record = start();
    // before the dwell: held even though every check passes
    let out = step(record, 5000, healthy);
    expect(out.transitions).toEqual([]);
    expect(out.record.checks.every((check) => check.verdict === 'pass')).toBe(true);
    record = out.record;
    out = step(record, 10000, healthy);
    expect(out.transitions).toEqual([{ at: 10000, from: 'step_0', to: 'step_1', reason: 'step_passed' }]);
    record = out.record;
    expect(record).toMatchObject({ step: 1, stepStartedAt: 10000, stepRequests: 0 });
    expect(shareOf(record)).toBe(10);
    record = step(record, 20000, healthy).record;
    expect(shareOf(record)).toBe(50);
    out = step(record, 30000, healthy);
    expect(out.transitions[0]).toMatchObject({ from: 'step_2', to: 'promoted', reason: 'all_steps_passed' });
    expect(out.record).toMatchObject({ state: 'promoted', step: 3 });
    expect(shareOf(out.record)).toBe(100);
    expect(desiredRouting(out.record)).toEqual({ kind: 'promote', candidate: '2' });
    // finished: further evaluations change nothing
    expect(step(out.record, 40000, failing).record).toBe(out.record);
  });

  test('too few candidate requests in a step holds it past the dwell', () => {
    let record = start({ min_requests: 200 });
    for (let t = 5000; t <= 20000; t += 5000) {
      const out = step(record, t, healthy, 40);
      expect(out.transitions).toEqual([]);
      record = out.record;
    }
    expect(record.stepRequests).toBe(160);
    expect(step(record, 25000, healthy, 40).transitions[0]?.reason).toBe('step_passed');
  });

  test('too few samples: every check insufficient, no progress and no rollback', () => {
    let record = start();
    for (let t = 5000; t <= 60000; t += 5000) {
      const out = step(record, t, unknown);
      expect(out.transitions).toEqual([]);
      record = out.record;
    }
    expect(record.checks.map((check) => check.verdict)).toEqual([
      'insufficient',
      'insufficient',
      'insufficient',
    ]);
    expect(record.checks.every((check) => check.consecutiveFailures === 0)).toBe(true);
    expect(record.state).toBe('progressing');
    // no window yet at all: nothing judged, nothing moves
    const first = step(start(), 5000, undefined);
    expect(first.record.checks[0]).toMatchObject({ verdict: 'insufficient', value: null });
    expect(first.results).toEqual([]);
    expect(first.record.stepRequests).toBe(50);
  });

  test('a check failing N evaluations in a row rolls back, with the reason and no traffic', () => {
    let record = start();
    record = step(record, 5000, failing).record;
    record = step(record, 10000, failing).record;
    expect(record.checks.find((check) => check.name === 'disagreement')!.consecutiveFailures).toBe(2);
    expect(record.state).toBe('progressing');
    const out = step(record, 15000, failing);
    expect(out.record.state).toBe('rolled_back');
    expect(out.transitions).toEqual([
      { at: 15000, from: 'step_0', to: 'rolled_back', reason: 'failed_disagreement' },
    ]);
    expect(out.record.reason).toMatch(/^disagreement failed 3 evaluations in a row: disagreement 200\/1000/);
    expect(desiredRouting(out.record)).toEqual({
      kind: 'canary',
      candidate: '2',
      canaryPercent: 0,
      shadow: false,
    });
    expect(shareOf(out.record)).toBe(0);
  });

  test('each check can roll back on its own', () => {
    const errors = totals({ candidate: version(2000, 400) });
    const slow = totals({ candidate: version(2000, 0, 4) });
    for (const [t, reason] of [
      [errors, 'failed_error_rate'],
      [slow, 'failed_p99_ratio'],
    ] as const) {
      let record = start({ failures_to_rollback: 1 });
      record = step(record, 5000, t).record;
      expect(record.state).toBe('rolled_back');
      expect(record.transitions[record.transitions.length - 1]!.reason).toBe(reason);
    }
  });

  test('flapping (fail, pass, fail, insufficient, fail …) never rolls back', () => {
    let record = start({ dwell_s: 1000, deadline_s: 2000 });
    const pattern = [failing, failing, healthy, failing, failing, unknown, failing, failing, healthy];
    pattern.forEach((t, i) => {
      record = step(record, (i + 1) * 5000, t).record;
    });
    for (let i = 0; i < 20; i++)
      record = step(record, 100000 + i * 5000, i % 3 === 2 ? healthy : failing).record;
    expect(record.state).toBe('progressing');
    expect(record.transitions).toHaveLength(1);
  });

  test('a step whose checks stay insufficient rolls back at its deadline, naming them', () => {
    let record = start({ deadline_s: 60 });
    for (let t = 5000; t < 60000; t += 5000) {
      const out = step(record, t, unknown);
      expect(out.transitions).toEqual([]);
      record = out.record;
    }
    const out = step(record, 60000, unknown);
    expect(out.record.state).toBe('rolled_back');
    expect(out.transitions).toEqual([
      expect.objectContaining({ from: 'step_0', to: 'rolled_back', reason: 'deadline' }),
    ]);
    expect(out.record.reason).toMatch(/^step 0 \(5 %\) did not pass within 60 s: .*insufficient/);
    expect(desiredRouting(out.record)).toMatchObject({ canaryPercent: 0, shadow: false });
  });

  test('the deadline: a step passing at it passes; paused time does not count; deadline_s > dwell_s', () => {
    const passing = step(start({ deadline_s: 20 }), 20000, healthy);
    expect(passing.record.step).toBe(1);
    let record = start({ deadline_s: 30 });
    record = pauseRollout(record, 5000).record;
    record = step(record, 100000, unknown).record;
    expect(record.state).toBe('paused');
    record = resumeRollout(record, 100000).record;
    expect(step(record, 125000, unknown).record.state).toBe('progressing');
    expect(step(record, 130000, unknown).record.state).toBe('rolled_back');
    expect(() => plan({ deadline_s: 10 })).toThrow(/deadline_s: must be longer than dwell_s/);
    expect(() => plan({ deadline_s: 20, shadow: { dwell_s: 20 } })).toThrow(/shadow.dwell_s/);
  });

  test('one check failing while the others pass does not advance the step', () => {
    let record = start();
    const out = step(record, 20000, failing);
    expect(out.transitions).toEqual([]);
    record = out.record;
    expect(record.step).toBe(0);
  });

  test('shadow phase: 0 % served, mirrored; passes on dwell, comparisons and disagreement alone', () => {
    let record = start({ shadow: { dwell_s: 5, min_requests: 100 } });
    expect(record).toMatchObject({ state: 'shadow', step: -1 });
    expect(desiredRouting(record)).toEqual({
      kind: 'canary',
      candidate: '2',
      canaryPercent: 0,
      shadow: true,
    });
    // the candidate serves nothing in shadow: its p99 stays insufficient and does not block
    const shadowOnly = totals({ candidate: version(0) });
    let out = step(record, 5000, shadowOnly, 0, 60);
    expect(out.transitions).toEqual([]); // 60 < 100 comparisons
    record = out.record;
    out = step(record, 10000, shadowOnly, 0, 60);
    expect(out.transitions).toEqual([{ at: 10000, from: 'shadow', to: 'step_0', reason: 'shadow_passed' }]);
    // latency has no candidate samples in shadow (copies are not served); the error rate sees the copies
    expect(out.record.checks.find((check) => check.name === 'p99_ratio')!.verdict).toBe('insufficient');
    expect(out.record.checks.find((check) => check.name === 'error_rate')!.verdict).toBe('pass');
    expect(out.record).toMatchObject({ state: 'progressing', step: 0, stepRequests: 0 });
  });

  test('shadow phase with a disagreeing candidate rolls back before any traffic moves', () => {
    let record = start({ shadow: true, failures_to_rollback: 2 });
    record = step(record, 5000, failing).record;
    record = step(record, 10000, failing).record;
    expect(record.state).toBe('rolled_back');
    expect(record.transitions.map((t) => `${t.from}>${t.to}`)).toEqual(['none>shadow', 'shadow>rolled_back']);
  });

  test('shadow phase with an erroring candidate rolls back on the error rate', () => {
    let record = start({ shadow: true, failures_to_rollback: 2 });
    const erroring = totals({ candidate: version(0), agree: 100, disagree: 0 });
    erroring.shadow.candidateErrors = 100;
    record = step(record, 5000, erroring).record;
    record = step(record, 10000, erroring).record;
    expect(record.state).toBe('rolled_back');
    expect(record.transitions.at(-1)).toMatchObject({ from: 'shadow', reason: 'failed_error_rate' });
  });

  test('pause holds the share but not the safety; resume continues where it was', () => {
    let record = start();
    record = pauseRollout(record, 1000).record;
    expect(record).toMatchObject({ state: 'paused', pausedFrom: 'progressing' });
    expect(shareOf(record)).toBe(5);
    // healthy and past the dwell: still no progress while paused
    expect(step(record, 20000, healthy).transitions).toEqual([]);
    // failing while paused: rolls back
    let paused = record;
    for (const t of [5000, 10000, 15000]) paused = step(paused, t, failing).record;
    expect(paused.state).toBe('rolled_back');
    expect(paused.pausedFrom).toBeUndefined();
    const resumed = resumeRollout(record, 2000);
    expect(resumed.transition).toEqual({ at: 2000, from: 'paused', to: 'step_0', reason: 'resumed' });
    expect(step(resumed.record, 20000, healthy).transitions[0]?.reason).toBe('step_passed');
    // a paused shadow phase resumes to shadow
    const shadow = pauseRollout(start({ shadow: true }), 1).record;
    expect(desiredRouting(shadow)).toMatchObject({ canaryPercent: 0, shadow: true });
    expect(resumeRollout(shadow, 2).record.state).toBe('shadow');
  });

  test('abort = rollback by hand; operations in the wrong state are refused (invalid_state)', () => {
    const aborted = abortRollout(start(), 3000, { reason: 'aborted', detail: 'aborted by the operator' });
    expect(aborted.record).toMatchObject({ state: 'aborted', reason: 'aborted by the operator' });
    expect(aborted.transition).toMatchObject({ from: 'step_0', to: 'aborted', reason: 'aborted' });
    expect(desiredRouting(aborted.record)).toMatchObject({ canaryPercent: 0, shadow: false });
    const expectRefused = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        expect(error).toBeInstanceOf(RolloutError);
        expect((error as RolloutError).code).toBe('invalid_state');
        return;
      }
      throw new Error('not refused');
    };
    expectRefused(() => abortRollout(aborted.record, 1, { reason: 'aborted', detail: '' }));
    expectRefused(() => pauseRollout(aborted.record, 1));
    expectRefused(() => resumeRollout(start(), 1));
    expectRefused(() => pauseRollout(pauseRollout(start(), 1).record, 2));
  });

  test('the transitions kept are bounded', () => {
    let record = start();
    for (let i = 0; i < 100; i++) record = (i % 2 ? resumeRollout : pauseRollout)(record, i).record;
    expect(record.transitions).toHaveLength(MAX_TRANSITIONS);
  });

  test('resume after a restart: the persisted record reads back equal and carries on at its step', () => {
    let record = start({ shadow: true });
    record = step(record, 5000, healthy, 0, 200).record;
    record = step(record, 10000, healthy, 0, 200).record; // still shadow: its default dwell is 30 s
    expect(record.state).toBe('shadow');
    record = step(record, 35000, healthy, 0, 200).record;
    expect(record.state).toBe('progressing');
    record = step(record, 40000, failing).record; // one failure counted
    const restored = parseRecord(JSON.parse(JSON.stringify(serializeRecord(record))));
    expect(restored).toEqual(record);
    expect(restored.checks.find((check) => check.name === 'disagreement')!.consecutiveFailures).toBe(1);
    // a fresh window after the restart: first evaluation has no totals yet, the step and its clock stay
    const first = step(restored, 45000, undefined, 0);
    expect(first.record).toMatchObject({ state: 'progressing', step: 0, stepStartedAt: 35000 });
    // the failure counted before the restart is kept, not forgiven by the empty window
    expect(first.record.checks.find((check) => check.name === 'disagreement')!.consecutiveFailures).toBe(1);
    expect(step(first.record, 50000, healthy).transitions[0]?.reason).toBe('step_passed');
  });

  test('a corrupt persisted record is refused with invalid_record', () => {
    const good = serializeRecord(start());
    for (const bad of [
      null,
      [],
      { ...good, format: 9 },
      { ...good, state: 'flying' },
      { ...good, step: 9 },
      { ...good, model: 3 },
      { ...good, plan: { version: '2', steps: [50, 10] } },
      { ...good, state: 'paused' },
      { ...good, checks: [{ name: 'x', verdict: 'pass' }] },
      { ...good, transitions: [{ at: 'x' }] },
    ]) {
      expect(() => parseRecord(bad)).toThrow(RolloutError);
    }
  });

  test('the API view follows the contract', () => {
    const record = step(start(), 5000, failing).record;
    const view = rolloutView(record);
    expect(view).toMatchObject({
      model: 'digits',
      stable: '1',
      candidate: '2',
      state: 'progressing',
      step: 0,
      share: 5,
      steps: [5, 10, 50, 100],
      started_at: '1970-01-01T00:00:00.000Z',
      step_started_at: '1970-01-01T00:00:00.000Z',
      updated_at: '1970-01-01T00:00:05.000Z',
      reason: null,
      transitions: [{ at: '1970-01-01T00:00:00.000Z', from: 'none', to: 'step_0', reason: 'started' }],
    });
    expect((view.checks as unknown[])[2]).toEqual({
      name: 'disagreement',
      value: 0.2,
      threshold: 0.05,
      verdict: 'fail',
      candidate_samples: 1000,
      stable_samples: 1000,
      consecutive_failures: 1,
    });
  });
});
