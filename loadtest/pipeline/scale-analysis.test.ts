import { capacityAtSlo, cpuPct, instancesFor, lagVerdict, withinSlo } from './scale-analysis';

describe('stream-scale figures', () => {
  it('a lag that jitters is bounded; one that grows or ends high is not', () => {
    expect(
      lagVerdict(
        [
          [0, 100],
          [1, 300],
          [2, 50],
          [3, 200],
          [4, 100],
        ],
        1000,
      ).bounded,
    ).toBe(true);
    const growing = lagVerdict(
      [
        [0, 0],
        [1, 400],
        [2, 800],
        [3, 1200],
        [4, 1600],
      ],
      1000,
    );
    expect(growing.growthPerS).toBeCloseTo(400);
    expect(growing.bounded).toBe(false);
    expect(
      lagVerdict(
        [
          [0, 2500],
          [1, 2500],
        ],
        1000,
      ).bounded,
    ).toBe(false);
    expect(lagVerdict([], 1000)).toEqual({ growthPerS: undefined, end: 0, bounded: true });
  });

  it('capacity: the highest rate before the first step that missed the SLO', () => {
    const steps = [
      { rate: 400, p95Ms: 300, bounded: true },
      { rate: 1200, p95Ms: 2500, bounded: true },
      { rate: 800, p95Ms: 900, bounded: true },
      { rate: 1600, p95Ms: 1500, bounded: true }, // passes above a failure: not capacity
    ];
    expect(capacityAtSlo(steps, 2000)).toBe(800);
    expect(capacityAtSlo([{ rate: 400, p95Ms: 100, bounded: false }], 2000)).toBeUndefined();
    expect(withinSlo({ rate: 1, p95Ms: Number.NaN, bounded: true }, 2000)).toBe(false);
  });

  it('planning: instances = ceil(target / (utilisation × capacity))', () => {
    expect(instancesFor(3000, 0.75, 1000)).toBe(4);
    expect(instancesFor(3000, 0.75, 4000)).toBe(1);
    expect(instancesFor(3000, 0.75, 1333)).toBe(4); // 999.75 per instance: 3 is not enough
    expect(() => instancesFor(3000, 0.75, 0)).toThrow();
  });

  it('CPU % of one core', () => {
    expect(cpuPct(500, 1000)).toBe(50);
    expect(cpuPct(undefined, 1000)).toBeUndefined();
  });
});
