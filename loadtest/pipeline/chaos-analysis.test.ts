import {
  checkpointsByPartition,
  compareOutputs,
  counterDelta,
  firstBelow,
  histogramDelta,
  histogramQuantile,
  type OutputRecord,
  parseProm,
  partitionOfSubject,
  processedCount,
  promHistogram,
  promValue,
  recoveryAfter,
  replayArithmetic,
  splitByWindows,
  unprocessedLag,
} from './chaos-analysis';

const rec = (id: string, risk: number, over: Partial<OutputRecord> = {}): OutputRecord => ({
  decisionId: id,
  msgId: id,
  risk,
  revision: 0,
  eventId: id,
  eventMs: 0,
  storedMs: 0,
  ...over,
});

describe('victim output vs reference, decision by decision', () => {
  it('equal outputs in another order: nothing to report', () => {
    const c = compareOutputs([rec('a', 0.1), rec('b', 0.2)], [rec('b', 0.2), rec('a', 0.1)]);
    expect(c).toMatchObject({ duplicates: [], lost: [], extra: [], mismatches: [], msgIdMismatches: 0 });
    expect(c.referenceCount).toBe(2);
    expect(c.victimCount).toBe(2);
  });

  it('finds a duplicate, a loss, an extra id and a changed risk', () => {
    const c = compareOutputs(
      [rec('a', 0.1), rec('b', 0.2), rec('c', 0.3)],
      [rec('a', 0.1), rec('a', 0.1), rec('c', 0.31), rec('z', 0.5)],
    );
    expect(c.duplicates).toEqual(['a']);
    expect(c.lost).toEqual(['b']);
    expect(c.extra).toEqual(['z']);
    expect(c.mismatches).toEqual([{ id: 'c', reference: 0.3, victim: 0.31 }]);
  });

  it('a Msg-Id that is not the decision id is counted, and so are duplicates in the reference', () => {
    const c = compareOutputs([rec('a', 0.1), rec('a', 0.1)], [rec('a', 0.1, { msgId: undefined })]);
    expect(c.msgIdMismatches).toBe(1);
    expect(c.referenceDuplicates).toEqual(['a']);
  });
});

const PROM = `# HELP streaminfer_stream_checkpoint_duration_seconds x
# TYPE streaminfer_stream_checkpoint_duration_seconds histogram
streaminfer_stream_checkpoint_duration_seconds_bucket{le="0.1"} 2
streaminfer_stream_checkpoint_duration_seconds_bucket{le="0.5"} 7
streaminfer_stream_checkpoint_duration_seconds_bucket{le="1"} 9
streaminfer_stream_checkpoint_duration_seconds_bucket{le="+Inf"} 10
streaminfer_stream_checkpoint_duration_seconds_sum 4.5
streaminfer_stream_checkpoint_duration_seconds_count 10
streaminfer_stream_replayed_events_total 1234
streaminfer_stream_events_total{outcome="ok"} 5
streaminfer_stream_events_total{outcome="dup"} 2
`;

describe('Prometheus text', () => {
  it('reads plain and labelled samples (summed)', () => {
    const m = parseProm(PROM);
    expect(promValue(m, 'streaminfer_stream_replayed_events_total')).toBe(1234);
    expect(promValue(m, 'streaminfer_stream_events_total')).toBe(7);
    expect(promValue(m, 'streaminfer_stream_missing')).toBeUndefined();
  });

  it('histogram quantiles are bucket bounds; +Inf says beyond the largest bound', () => {
    const h = promHistogram(parseProm(PROM), 'streaminfer_stream_checkpoint_duration_seconds')!;
    expect(h.count).toBe(10);
    expect(h.sum).toBe(4.5);
    expect(histogramQuantile(h, 0.5)).toEqual({ value: 0.5, beyond: false });
    expect(histogramQuantile(h, 0.9)).toEqual({ value: 1, beyond: false });
    expect(histogramQuantile(h, 1)).toEqual({ value: 1, beyond: true });
    expect(Number.isNaN(histogramQuantile({ buckets: [], count: 0, sum: 0 }, 0.5).value)).toBe(true);
  });

  it('the difference of two scrapes holds only what came between', () => {
    const h = promHistogram(parseProm(PROM), 'streaminfer_stream_checkpoint_duration_seconds')!;
    const before = {
      buckets: h.buckets.map(([le, c]) => [le, Math.min(c, 2)] as [number, number]),
      count: 2,
      sum: 0.1,
    };
    const d = histogramDelta(h, before);
    expect(d.count).toBe(8);
    expect(d.buckets[0]![1]).toBe(0);
    expect(histogramQuantile(d, 0.5)).toEqual({ value: 0.5, beyond: false });
  });
});

describe('lag and replay arithmetic', () => {
  it('processed = checkpoint position + held acks, never below what the same process showed before', () => {
    expect(processedCount(1000, 250)).toBe(1250);
    // a checkpoint in progress: held handed over, position not yet moved
    expect(processedCount(1000, 10, 1250)).toBe(1250);
    expect(unprocessedLag(1500, 1250)).toBe(250);
    expect(unprocessedLag(1000, 1250)).toBe(0);
  });

  it('replay measured against time since checkpoint × rate', () => {
    const r = replayArithmetic(4.5, 1500, 16_000, 9_200);
    expect(r.expected).toBe(6750);
    expect(r.measured).toBe(6800);
    expect(r.ratio).toBeCloseTo(6800 / 6750);
    expect(replayArithmetic(0, 1500, 10, 10).ratio).toBeUndefined();
  });

  it('splits predictions by event time into recovery windows and the rest', () => {
    const preds = [0, 5, 10, 15, 20, 25].map((t) => ({ eventMs: t * 1000, storedMs: t * 1000 + 50 }));
    const { inside, outside } = splitByWindows(preds, [[9_000, 16_000]], 4_000, 25_000);
    expect(inside.map((p) => p.eventMs)).toEqual([10_000, 15_000]);
    expect(outside.map((p) => p.eventMs)).toEqual([5_000, 20_000]);
  });

  it('caught up: the first time the lag stays below the limit for `hold` samples', () => {
    const series = [900, 400, 800, 300, 200, 100].map((value, i) => ({ tMs: i * 500, value }));
    expect(firstBelow(series, 0, 500)).toBe(1500);
    expect(firstBelow(series, 0, 50)).toBeUndefined();
  });
});

describe('partitioned pipelines', () => {
  it('reads the partition token of an event subject', () => {
    expect(partitionOfSubject('r.delivery.events.3.D-1', 'r.delivery.events')).toBe(3);
    expect(partitionOfSubject('r.delivery.events.x.D-1', 'r.delivery.events')).toBeUndefined();
    expect(partitionOfSubject('other.delivery.events.3.D-1', 'r.delivery.events')).toBeUndefined();
  });

  it('recovery: owned again, replay done, then lag below the limit on two samples', () => {
    const s = (t: number, lag: number, covered: number, replaying: number) => ({
      tMs: t,
      lag,
      covered,
      replaying,
    });
    const samples = [
      s(0, 10, 4, 0), // before the kill
      s(1000, 900, 2, 0), // killed: two partitions unowned
      s(2000, 1800, 4, 2), // restarted, replaying
      s(3000, 700, 4, 1),
      s(4000, 300, 4, 0), // replay done, lag not yet below 200
      s(5000, 100, 4, 0),
      s(6000, 400, 4, 0), // a blip: 5000 does not hold
      s(7000, 50, 4, 0),
      s(8000, 40, 4, 0),
    ];
    expect(recoveryAfter(samples, 500, 4, 200)).toEqual({
      ownedAt: 2000,
      replayDoneAt: 4000,
      recoveredAt: 7000,
    });
    expect(recoveryAfter(samples.slice(0, 3), 500, 4, 200)).toEqual({ ownedAt: 2000 });
    expect(recoveryAfter(samples.slice(0, 2), 500, 4, 200)).toEqual({});
  });

  it('checkpoint duration and size per partition, the last size the latest', () => {
    const out = checkpointsByPartition([
      { partition: 1, bytes: 100, ms: 30 },
      { partition: 0, bytes: 50, ms: 10 },
      { partition: 1, bytes: 300, ms: 10 },
      { partition: 1, bytes: 200, ms: 20 },
    ]);
    expect(out).toEqual([
      { partition: 0, count: 1, p50Ms: 10, maxMs: 10, meanMs: 10, lastBytes: 50, maxBytes: 50 },
      { partition: 1, count: 3, p50Ms: 20, maxMs: 30, meanMs: 20, lastBytes: 200, maxBytes: 300 },
    ]);
  });

  it('a per-process counter over instances: growth of surviving pids, all of a new pid', () => {
    const before = new Map([
      [10, 100],
      [11, 50],
    ]);
    const after = new Map([
      [10, 130],
      [12, 70],
    ]);
    expect(counterDelta(before, after)).toBe(100);
  });
});
