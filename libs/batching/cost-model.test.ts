import { CostModel } from './cost-model';
import { seededRandom } from './sim.test-util';

const fresh = (max = 32) => new CostModel({ priorInterceptMs: 1, priorPerItemMs: 0.1, maxBatchSize: max });

describe('CostModel', () => {
  it('answers with the prior before any observation', () => {
    const model = fresh();
    expect(model.intercept).toBe(1);
    expect(model.perItem).toBe(0.1);
    expect(model.predict(10)).toBeCloseTo(2);
    expect(model.sampleCount).toBe(0);
    expect(model.errorScale).toBe(0);
  });

  it('converges to the true line on noise-free data', () => {
    const model = fresh();
    const random = seededRandom(1);
    for (let i = 0; i < 200; i++) {
      const n = 1 + Math.floor(random() * 32);
      model.observe(n, 4 + 0.25 * n);
    }
    expect(model.intercept).toBeCloseTo(4, 1);
    expect(model.perItem).toBeCloseTo(0.25, 2);
    expect(model.errorScale).toBeLessThan(0.05);
  });

  it('converges on noisy data (±10% multiplicative noise)', () => {
    const model = fresh(64);
    const random = seededRandom(2);
    for (let i = 0; i < 400; i++) {
      const n = 1 + Math.floor(random() * 64);
      model.observe(n, (12 + 0.5 * n) * (0.9 + 0.2 * random()));
    }
    expect(Math.abs(model.intercept - 12) / 12).toBeLessThan(0.15);
    expect(Math.abs(model.perItem - 0.5) / 0.5).toBeLessThan(0.15);
  });

  it('is usable after a handful of samples of a single size', () => {
    const model = fresh();
    model.observe(8, 6);
    model.observe(8, 6);
    model.observe(8, 6);
    expect(Number.isFinite(model.intercept)).toBe(true);
    expect(Number.isFinite(model.perItem)).toBe(true);
    expect(model.predict(8)).toBeGreaterThan(5.5);
    expect(model.predict(8)).toBeLessThan(6.1);
  });

  it('resists a one-off outlier', () => {
    const model = fresh();
    const random = seededRandom(3);
    for (let i = 0; i < 100; i++) {
      const n = 1 + Math.floor(random() * 32);
      model.observe(n, 3 + 0.2 * n);
    }
    const before = model.predict(16);
    model.observe(16, 200);
    expect(Math.abs(model.predict(16) - before) / before).toBeLessThan(0.05);
  });

  it('follows a lasting change of cost', () => {
    const model = fresh();
    const random = seededRandom(4);
    for (let i = 0; i < 100; i++) {
      const n = 1 + Math.floor(random() * 32);
      model.observe(n, 3 + 0.2 * n);
    }
    for (let i = 0; i < 150; i++) {
      const n = 1 + Math.floor(random() * 32);
      model.observe(n, 6 + 0.4 * n);
    }
    expect(model.intercept).toBeCloseTo(6, 0);
    expect(model.perItem).toBeCloseTo(0.4, 1);
  });

  it('keeps intercept and slope non-negative', () => {
    const falling = fresh();
    for (let i = 0; i < 50; i++) for (const n of [1, 8, 16]) falling.observe(n, 10 - 0.5 * n);
    expect(falling.perItem).toBe(0);
    expect(falling.intercept).toBeGreaterThan(0);
    const steep = fresh();
    for (let i = 0; i < 50; i++) for (const n of [4, 8, 16]) steep.observe(n, 2 * n - 5);
    expect(steep.intercept).toBe(0);
    expect(steep.perItem).toBeGreaterThan(1.5);
  });

  it('ignores unusable samples', () => {
    const model = fresh();
    expect(model.observe(0, 5)).toBe(false);
    expect(model.observe(4, -1)).toBe(false);
    expect(model.observe(Number.NaN, 1)).toBe(false);
    expect(model.observe(4, Number.POSITIVE_INFINITY)).toBe(false);
    expect(model.sampleCount).toBe(0);
    expect(model.observe(4, 2)).toBe(true);
    expect(model.sampleCount).toBe(1);
  });

  it('works with maxBatchSize 1', () => {
    const model = fresh(1);
    for (let i = 0; i < 20; i++) model.observe(1, 3);
    expect(model.predict(1)).toBeCloseTo(3, 1);
  });
});
