import { ArrivalRateEstimator } from './arrival-rate';

describe('ArrivalRateEstimator', () => {
  it('knows nothing before two records', () => {
    const estimator = new ArrivalRateEstimator();
    expect(estimator.ratePerMs()).toBe(0);
    estimator.record(50, 0); // the first record only starts the clock
    expect(estimator.ratePerMs()).toBe(0);
  });

  it('measures a steady rate over irregular intervals', () => {
    const estimator = new ArrivalRateEstimator(1000);
    estimator.record(0, 0);
    let t = 0;
    for (let i = 0; i < 2000; i++) {
      const dt = i % 3 === 0 ? 0.5 : 2; // irregular sampling
      t += dt;
      estimator.record(3 * dt, t);
    }
    expect(estimator.ratePerMs()).toBeCloseTo(3, 5);
  });

  it('decays after arrivals stop', () => {
    const estimator = new ArrivalRateEstimator(100);
    estimator.record(0, 0);
    for (let t = 1; t <= 1000; t++) estimator.record(2, t);
    expect(estimator.ratePerMs()).toBeCloseTo(2, 5);
    estimator.record(0, 1100); // one time constant of silence
    expect(estimator.ratePerMs()).toBeCloseTo(2 * Math.exp(-1), 2);
    estimator.record(0, 3000);
    expect(estimator.ratePerMs()).toBeLessThan(1e-6);
  });

  it('adds arrivals reported at the same instant', () => {
    const estimator = new ArrivalRateEstimator(1000, 10);
    estimator.record(0, 0);
    estimator.record(5, 100);
    const rate = estimator.ratePerMs();
    estimator.record(5, 100);
    // arrivals at `now` itself count in full; the first five were spread over the elapsed 100 ms
    expect(estimator.ratePerMs()).toBeCloseTo(rate + 5 / (1000 * (1 - Math.exp(-0.1))), 10);
  });

  it('errs low until the minimum window has elapsed', () => {
    const estimator = new ArrivalRateEstimator(1000, 10);
    estimator.record(0, 0);
    estimator.record(2, 1);
    expect(estimator.ratePerMs()).toBeCloseTo(0.2, 2);
  });

  it('ignores negative, non-finite counts and a clock going backwards', () => {
    const estimator = new ArrivalRateEstimator(1000, 1);
    estimator.record(0, 0);
    estimator.record(-5, 10);
    estimator.record(Number.NaN, 20);
    expect(estimator.ratePerMs()).toBe(0);
    estimator.record(10, 15); // backwards: counted, no time added
    expect(estimator.ratePerMs()).toBeGreaterThan(0);
  });
});
