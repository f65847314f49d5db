import { isPastDeadline, remainingMs, resolveDeadline } from './index';

describe('deadlines', () => {
  it('uses the request deadline, capped at the maximum', () => {
    expect(resolveDeadline(250, 30_000, 60_000, 1000)).toBe(1250);
    expect(resolveDeadline(0.5, 30_000, 60_000, 1000)).toBe(1000.5);
    expect(resolveDeadline(90_000, 30_000, 60_000, 1000)).toBe(61_000);
    expect(resolveDeadline(60_000, 30_000, 60_000, 1000)).toBe(61_000);
    expect(resolveDeadline(Number.POSITIVE_INFINITY, 30_000, 60_000, 0)).toBe(60_000);
  });

  it('falls back to the server default, itself capped', () => {
    expect(resolveDeadline(undefined, 30_000, 60_000, 1000)).toBe(31_000);
    expect(resolveDeadline(Number.NaN, 30_000, 60_000, 1000)).toBe(31_000);
    expect(resolveDeadline(undefined, 30_000, 10_000, 1000)).toBe(11_000);
  });

  it('treats an infinite maximum as no cap and a negative budget as already due', () => {
    expect(resolveDeadline(3_600_000, 30_000, Number.POSITIVE_INFINITY, 5)).toBe(3_600_005);
    expect(resolveDeadline(-10, 30_000, 60_000, 1000)).toBe(1000);
  });

  it('counts the deadline instant itself as past', () => {
    expect(isPastDeadline(1250, 1249.9)).toBe(false);
    expect(isPastDeadline(1250, 1250)).toBe(true);
    expect(isPastDeadline(1250, 2000)).toBe(true);
    expect(remainingMs(1250, 1000)).toBe(250);
    expect(remainingMs(1250, 1300)).toBe(0);
  });
});
