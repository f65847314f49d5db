import { recoverySeconds } from '../scenarios/sweep';
import { poissonSchedule } from './poisson';

describe('poissonSchedule', () => {
  it('offers each phase its rate with exponential gaps (coefficient of variation ≈ 1)', () => {
    const { at, phase } = poissonSchedule(
      [
        { label: 'low', rate: 200, durationMs: 20_000 },
        { label: 'high', rate: 1000, durationMs: 20_000 },
      ],
      3,
    );
    const low = at.filter((_, i) => phase[i] === 0);
    const high = at.filter((_, i) => phase[i] === 1);
    expect(low.length / 20).toBeGreaterThan(190);
    expect(low.length / 20).toBeLessThan(210);
    expect(high.length / 20).toBeGreaterThan(980);
    expect(high.length / 20).toBeLessThan(1020);
    expect(Math.max(...low)).toBeLessThan(20_000);
    expect(Math.min(...high)).toBeGreaterThanOrEqual(20_000);
    const gaps = high.slice(1).map((t, i) => t - high[i]!);
    const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
    const sd = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / gaps.length);
    // a fixed-interval schedule would give 0
    expect(sd / mean).toBeGreaterThan(0.9);
    expect(sd / mean).toBeLessThan(1.1);
  });

  it('is reproducible for a seed', () => {
    const plan = [{ label: 'x', rate: 100, durationMs: 1000 }];
    expect(poissonSchedule(plan, 5).at).toEqual(poissonSchedule(plan, 5).at);
    expect(poissonSchedule(plan, 5).at).not.toEqual(poissonSchedule(plan, 6).at);
  });
});

describe('recoverySeconds', () => {
  const s = (...p99: number[]) => p99.map((p) => ({ p99: p }));
  it('counts the seconds until every later second is under the objective', () => {
    expect(recoverySeconds(s(90, 80, 70), 150)).toBe(0);
    expect(recoverySeconds(s(400, 200, 120, 100), 150)).toBe(2);
    // a relapse later in the phase moves the recovery past it
    expect(recoverySeconds(s(400, 100, 300, 100), 150)).toBe(3);
    expect(recoverySeconds(s(400, 300, 200), 150)).toBeUndefined();
    expect(recoverySeconds(s(400, Number.NaN, 100), 150)).toBe(1);
  });
});
