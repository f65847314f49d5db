import {
  type CounterSample,
  disagreementCheck,
  errorRateCheck,
  p99RatioCheck,
  proportionDifference,
  quantileBounds,
  SampleWindow,
  type VersionCounters,
  valueAtRank,
  type WindowTotals,
  wilson,
} from './index';

const BOUNDS = [0.001, 0.0025, 0.005, 0.01, Number.POSITIVE_INFINITY];

/** A version's counters with `n` answers, `errors` of them server errors, every latency in bucket `bucket`. */
function version(n: number, errors = 0, bucket = 0): VersionCounters {
  return { requests: n, errors, latency: BOUNDS.map((_, i) => (i >= bucket ? n : 0)) };
}

function totals(partial: Partial<WindowTotals>): WindowTotals {
  return {
    spanMs: 10000,
    stable: version(0),
    candidate: version(0),
    shadow: { agree: 0, disagree: 0 },
    ...partial,
  };
}

describe('statistics', () => {
  test('Wilson bounds: textbook values, clamped to [0, 1], and a zero count', () => {
    const w = wilson(10, 100);
    // 10/100 at z = 1.645: [0.0607, 0.1604]
    expect(w.lower).toBeCloseTo(0.0607, 3);
    expect(w.upper).toBeCloseTo(0.1604, 3);
    expect(wilson(0, 100).lower).toBe(0);
    expect(wilson(0, 100).upper).toBeCloseTo(0.0264, 3);
    expect(wilson(5, 5).upper).toBe(1);
    expect(wilson(0, 0)).toEqual({ lower: 0, upper: 1 });
  });

  test('Newcombe difference: contains the estimate, narrows with n, handles zero errors', () => {
    const small = proportionDifference(5, 100, 2, 100);
    const large = proportionDifference(500, 10000, 200, 10000);
    expect(small.estimate).toBeCloseTo(0.03);
    expect(small.lower).toBeLessThan(0.03);
    expect(small.upper).toBeGreaterThan(0.03);
    expect(large.upper - large.lower).toBeLessThan((small.upper - small.lower) / 5);
    const zero = proportionDifference(0, 300, 0, 3000);
    expect(zero.estimate).toBe(0);
    expect(zero.upper).toBeLessThan(0.01);
    expect(zero.lower).toBeLessThan(0);
  });

  test('valueAtRank interpolates inside a bucket; the +Inf bucket gives Infinity or the last finite bound', () => {
    const cumulative = [0, 10, 10, 20, 20];
    expect(valueAtRank(BOUNDS, cumulative, 5, 'infinity')).toBeCloseTo(0.00175);
    expect(valueAtRank(BOUNDS, cumulative, 15, 'infinity')).toBeCloseTo(0.0075);
    expect(valueAtRank(BOUNDS, [0, 0, 0, 0, 4], 2, 'infinity')).toBe(Number.POSITIVE_INFINITY);
    expect(valueAtRank(BOUNDS, [0, 0, 0, 0, 4], 2, 'last_finite')).toBe(0.01);
    expect(valueAtRank(BOUNDS, [0, 0, 0, 0, 0], 1, 'infinity')).toBe(0);
  });

  test('p99 bounds: no upper bound below ~268 samples, one above', () => {
    const few = quantileBounds(BOUNDS, version(200).latency, 0.99);
    expect(few.upper).toBe(Number.POSITIVE_INFINITY);
    const enough = quantileBounds(BOUNDS, version(400).latency, 0.99);
    expect(enough.upper).toBeLessThanOrEqual(0.001);
    expect(enough.lower).toBeGreaterThan(0);
    expect(enough.estimate).toBeLessThanOrEqual(enough.upper);
  });
});

describe('checks', () => {
  test('error rate: too few samples → insufficient whatever the rate', () => {
    const result = errorRateCheck(
      totals({ candidate: version(20, 20), stable: version(1000) }),
      { maxIncrease: 0.01 },
      50,
    );
    expect(result.verdict).toBe('insufficient');
    expect(result.value).toBe(1);
    expect(result.detail).toMatch(/needs 50/);
    expect(errorRateCheck(undefined, { maxIncrease: 0.01 }, 50)).toMatchObject({
      verdict: 'insufficient',
      value: null,
    });
  });

  test('error rate: a clearly worse candidate fails, an equal one passes, a close call is insufficient', () => {
    const plan = { maxIncrease: 0.01 };
    expect(
      errorRateCheck(totals({ candidate: version(200, 20), stable: version(2000, 2) }), plan, 50).verdict,
    ).toBe('fail');
    expect(
      errorRateCheck(totals({ candidate: version(2000), stable: version(20000) }), plan, 50).verdict,
    ).toBe('pass');
    // 2 % vs 0.5 %: above the margin as an estimate, but 100 answers cannot tell.
    expect(
      errorRateCheck(totals({ candidate: version(100, 2), stable: version(2000, 10) }), plan, 50).verdict,
    ).toBe('insufficient');
    // zero errors but only 100 answers: the upper bound (~2.6 %) is above the 1 % margin.
    expect(errorRateCheck(totals({ candidate: version(100), stable: version(2000) }), plan, 50).verdict).toBe(
      'insufficient',
    );
  });

  test("error rate: the candidate's failures on mirrored copies count (a shadow phase sees an erroring candidate)", () => {
    const shadowOnly = totals({
      candidate: version(0),
      stable: version(2000),
      shadow: { agree: 60, disagree: 0, candidateErrors: 40 },
    });
    const result = errorRateCheck(shadowOnly, { maxIncrease: 0.01 }, 50);
    expect(result).toMatchObject({ verdict: 'fail', candidateSamples: 100, value: 0.4 });
    // compared copies alone are answers without errors
    expect(
      errorRateCheck(
        totals({ stable: version(20000), shadow: { agree: 3000, disagree: 20 } }),
        { maxIncrease: 0.01 },
        50,
      ).verdict,
    ).toBe('pass');
  });

  test('p99 ratio: slow candidate fails, same latency passes, few samples insufficient', () => {
    const plan = { max: 1.5, floorMs: 1 };
    const slow = p99RatioCheck(
      totals({ candidate: version(100, 0, 3), stable: version(1000, 0, 0) }),
      BOUNDS,
      plan,
      50,
    );
    expect(slow.verdict).toBe('fail');
    expect(slow.value).toBeGreaterThan(5);
    const same = p99RatioCheck(totals({ candidate: version(400), stable: version(4000) }), BOUNDS, plan, 50);
    expect(same.verdict).toBe('pass');
    expect(same.value).toBe(1);
    // enough for a fail verdict, not enough to bound the p99 from above
    expect(
      p99RatioCheck(totals({ candidate: version(100), stable: version(1000) }), BOUNDS, plan, 50).verdict,
    ).toBe('insufficient');
    expect(
      p99RatioCheck(totals({ candidate: version(10, 0, 4), stable: version(1000) }), BOUNDS, plan, 50)
        .verdict,
    ).toBe('insufficient');
  });

  test('p99 ratio: the floor keeps sub-millisecond noise from failing', () => {
    // stable all under 1 ms, candidate all between 1 and 2.5 ms: ratio ≤ 2.5 at a 1 ms floor.
    const plan = { max: 3, floorMs: 1 };
    const result = p99RatioCheck(
      totals({ candidate: version(1000, 0, 1), stable: version(1000, 0, 0) }),
      BOUNDS,
      plan,
      50,
    );
    expect(result.verdict).toBe('pass');
    expect(result.value).toBeLessThanOrEqual(2.5);
  });

  test('disagreement: fail on the lower bound, pass on the upper, insufficient between and below min', () => {
    const plan = { max: 0.05 };
    const at = (agree: number, disagree: number) =>
      disagreementCheck(totals({ shadow: { agree, disagree } }), plan, 50);
    expect(at(30, 10).verdict).toBe('insufficient'); // 40 < 50 comparisons
    expect(at(80, 20)).toMatchObject({ verdict: 'fail', value: 0.2, candidateSamples: 100 });
    expect(at(990, 10).verdict).toBe('pass');
    expect(at(95, 5).verdict).toBe('insufficient'); // 5 % of 100: either side of 5 %
    // v1 vs v2 of digits disagree on 2.67 %: against a 0.1 % threshold, 150 comparisons fail it.
    expect(
      disagreementCheck(totals({ shadow: { agree: 146, disagree: 4 } }), { max: 0.001 }, 50).verdict,
    ).toBe('fail');
  });
});

describe('SampleWindow', () => {
  const sample = (at: number, stable: number, candidate: number, agree = 0, disagree = 0): CounterSample => ({
    at,
    stable: version(stable),
    candidate: version(candidate),
    shadow: { agree, disagree },
  });

  test('totals are newest minus the baseline at or before the window start', () => {
    const window = new SampleWindow(10000, BOUNDS);
    expect(window.add(sample(0, 0, 0))).toEqual({ candidateRequests: 0, comparisons: 0, reset: false });
    expect(window.totals()).toBeUndefined();
    expect(window.add(sample(5000, 100, 10, 9, 1))).toEqual({
      candidateRequests: 10,
      comparisons: 10,
      reset: false,
    });
    window.add(sample(10000, 200, 20, 18, 2));
    window.add(sample(15000, 300, 30, 27, 3));
    const t = window.totals()!;
    // baseline is the sample at 5000 (= 15000 − 10000)
    expect(t.spanMs).toBe(10000);
    expect(t.stable.requests).toBe(200);
    expect(t.candidate.requests).toBe(20);
    expect(t.shadow).toEqual({ agree: 18, disagree: 2, candidateErrors: 0 });
    expect(window.size).toBe(3);
  });

  test('a counter going down (node restart) starts the window again', () => {
    const window = new SampleWindow(60000, BOUNDS);
    window.add(sample(0, 100, 10));
    window.add(sample(1000, 200, 20));
    expect(window.add(sample(2000, 5, 1))).toEqual({ candidateRequests: 0, comparisons: 0, reset: true });
    expect(window.totals()).toBeUndefined();
    window.add(sample(3000, 25, 3));
    expect(window.totals()!.candidate.requests).toBe(2);
  });

  test('a sample from the past is ignored; mismatched buckets are refused', () => {
    const window = new SampleWindow(60000, BOUNDS);
    window.add(sample(1000, 0, 0));
    expect(window.add(sample(500, 10, 10)).candidateRequests).toBe(0);
    expect(window.size).toBe(1);
    expect(() =>
      window.add({ ...sample(2000, 0, 0), stable: { requests: 0, errors: 0, latency: [0] } }),
    ).toThrow(RangeError);
  });
});
