import { quantileSorted } from '../harness/quantile';
import {
  freshnessOf,
  freshnessParts,
  inEventWindow,
  type LagSample,
  lagFigures,
  lagOf,
  lagStable,
  perSecondP95,
  receivedRate,
  recoveredAt,
  roundRate,
  settledAt,
  slope,
  type ZeroLossInput,
  zeroLoss,
} from './analysis';

const sample = (tMs: number, pending: number, received = 0, ackPending = 0): LagSample => ({
  tMs,
  pending,
  ackPending,
  held: 0,
  received,
  predictions: 0,
  paused: false,
});

describe('freshness from stored times', () => {
  it('nearest-rank percentiles of stored − event time', () => {
    const preds = Array.from({ length: 100 }, (_, i) => ({ eventMs: 1000 * i, storedMs: 1000 * i + i + 1 }));
    expect(freshnessOf(preds)).toEqual({ count: 100, p50: 50, p95: 95, p99: 99, max: 100 });
    expect(quantileSorted([], 0.5)).toBeNaN();
    expect(freshnessOf([]).count).toBe(0);
  });

  it('splits freshness into publisher delay and pipeline time where the input was read back', () => {
    const parts = freshnessParts([
      { eventMs: 0, inStoredMs: 30, storedMs: 100 },
      { eventMs: 0, storedMs: 5000 },
    ]);
    expect(parts.publisher).toMatchObject({ count: 1, p50: 30 });
    expect(parts.pipeline).toMatchObject({ count: 1, p50: 70 });
  });

  it('keeps only events inside the measured window (the ramp is excluded)', () => {
    const preds = [0, 4999, 5000, 9999, 10_000].map((t) => ({ eventMs: t, storedMs: t + 10 }));
    expect(inEventWindow(preds, 5000, 10_000).map((p) => p.eventMs)).toEqual([5000, 9999]);
  });

  it('per-second p95 buckets by stored time', () => {
    const preds = [
      { eventMs: 0, storedMs: 100 },
      { eventMs: 0, storedMs: 900 },
      { eventMs: 1000, storedMs: 3500 },
    ];
    expect(perSecondP95(preds, 0)).toEqual([
      [0, 900],
      [3, 2500],
    ]);
  });
});

describe('lag', () => {
  it("acks held for a checkpoint are processed events, not lag (never below the broker's pending)", () => {
    expect(lagOf({ ...sample(0, 10, 0, 5000), held: 4990 })).toBe(20);
    // held counted a moment after the broker's figure: clamped, not negative
    expect(lagOf({ ...sample(0, 10, 0, 100), held: 300 })).toBe(10);
    expect(lagOf(sample(0, 10, 0, 100))).toBe(110);
  });
  it('a lag that builds up is growing; one that jitters is not', () => {
    const growing = Array.from({ length: 21 }, (_, i) => sample(i * 1000, i * 500));
    const f = lagFigures(growing, 0, 20_000);
    expect(f.growthPerS).toBeCloseTo(500);
    expect(f.maxLag).toBe(10_000);
    expect(lagStable(f, 3000, 20)).toBe(false);
    const jitter = Array.from({ length: 21 }, (_, i) => sample(i * 1000, i % 2 ? 300 : 0));
    expect(lagStable(lagFigures(jitter, 0, 20_000), 3000, 20)).toBe(true);
  });

  it('lag counts unacked messages too', () => {
    expect(lagFigures([sample(0, 10, 0, 90)], 0, 1).maxLag).toBe(100);
  });

  it('settles when under the threshold for `hold` samples in a row', () => {
    const s = [sample(0, 5000), sample(500, 100), sample(1000, 4000), sample(1500, 10), sample(2000, 20)];
    expect(settledAt(s, 0, 1000)).toBe(1500);
    expect(settledAt(s, 0, 1000, 1)).toBe(500);
    expect(settledAt(s, 0, 5)).toBeUndefined();
  });

  it('freshness recovers when it stays under the limit', () => {
    const series: [number, number][] = [
      [10, 4000],
      [11, 300],
      [12, 900],
      [13, 200],
      [14, 100],
      [15, 120],
    ];
    expect(recoveredAt(series, 10, 500)).toBe(13);
    expect(recoveredAt(series, 10, 50)).toBeUndefined();
  });

  it('processing rate is the slope of received', () => {
    const s = Array.from({ length: 11 }, (_, i) => sample(i * 500, 0, i * 3000));
    expect(receivedRate(s, 0, 5000)).toBeCloseTo(6000);
    expect(slope([[1, 1]])).toBeUndefined();
    expect(roundRate(2449)).toBe(2400);
    expect(roundRate(10)).toBe(100);
  });
});

describe('zero loss', () => {
  const clean: ZeroLossInput = {
    stored: 1000,
    counts: {
      received: 1000,
      duplicates: 0,
      invalid: 0,
      late: 0,
      dead_letters: 0,
      predictions: 950,
      notReady: 50,
    },
    pendingEnd: 0,
    ackPendingEnd: 0,
    firstInStream: 950,
    distinctFirstInStream: 950,
    eventsInStream: 1000,
    unpredicted: 50,
  };

  it('a clean drained run is lossless', () => {
    expect(zeroLoss(clean)).toEqual({
      ok: true,
      processed: 1000,
      accounted: 1000,
      unpredicted: 50,
      republished: 0,
      reasons: [],
    });
  });

  it('effects published again after a redelivery (deduplicated by the broker) are not a loss', () => {
    const z = zeroLoss({ ...clean, counts: { ...clean.counts, received: 1020, predictions: 970 } });
    expect(z.ok).toBe(true);
    expect(z.republished).toBe(20);
  });

  it('without the read-back, first predictions + not-ready must cover the stored events', () => {
    const { eventsInStream: _e, unpredicted: _u, ...noIds } = clean;
    expect(zeroLoss(noIds).ok).toBe(true);
    expect(zeroLoss({ ...noIds, counts: { ...clean.counts, notReady: 49 } }).reasons.join()).toMatch(
      /accounted 999 < stored 1000/,
    );
  });

  it('acks held for the next checkpoint are processed events, not loss', () => {
    expect(zeroLoss({ ...clean, ackPendingEnd: 40, heldEnd: 40 }).ok).toBe(true);
  });

  it.each<[string, Partial<ZeroLossInput> | { counts: Partial<ZeroLossInput['counts']> }, RegExp]>([
    ['an undrained consumer', { ackPendingEnd: 3 }, /not drained/],
    ['unacked beyond the held acks', { ackPendingEnd: 5, heldEnd: 3 }, /2 not processed/],
    ['fewer processed than stored', { counts: { received: 990 } }, /processed 990 < stored 1000/],
    ['a dead letter', { counts: { dead_letters: 1, invalid: 1, received: 1001 } }, /dead letters/],
    [
      'more first predictions stored than counted',
      { counts: { predictions: 940 } },
      /more than the 940 counted/,
    ],
    ['an event predicted twice', { distinctFirstInStream: 949 }, /two first predictions/],
    ['a stored event neither predicted nor not-ready', { unpredicted: 51 }, /51 stored events without/],
    ['an event missing from the input read-back', { eventsInStream: 999 }, /999 events read back/],
  ])('%s is a loss', (_name, change, reason) => {
    const input = {
      ...clean,
      ...change,
      counts: { ...clean.counts, ...('counts' in change ? change.counts : {}) },
    } as ZeroLossInput;
    const z = zeroLoss(input);
    expect(z.ok).toBe(false);
    expect(z.reasons.join('; ')).toMatch(reason);
  });
});
