import { quantileSorted } from './quantile';

describe('quantileSorted', () => {
  it('is nearest rank', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantileSorted(xs, 0.99)).toBe(99);
    expect(quantileSorted(xs, 0.5)).toBe(50);
    expect(quantileSorted([], 0.5)).toBeNaN();
  });
});
