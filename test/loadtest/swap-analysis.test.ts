import { quantile } from '../../loadtest/harness/quantile';
import {
  type AnswerRecord,
  type Commit,
  checkAfterCommits,
  checkConnectionOrder,
  countDisagreements,
  epochVersions,
  errorCounts,
  firstServedAfter,
  latencyStats,
  minMedianMax,
  overlaps,
  splitByIntervals,
  timelineBuckets,
  versionCounts,
  versionShare,
} from '../../loadtest/harness/swap-analysis';
import { argmaxRows } from '../../scripts/models/train-mlp';

let nextId = 0;
function ans(
  conn: number,
  sentMs: number,
  recvMs: number,
  version?: string,
  epoch?: number,
  error?: string,
): AnswerRecord {
  return {
    conn,
    id: nextId++,
    row: 0,
    sentMs,
    recvMs,
    ...(version !== undefined ? { version } : {}),
    ...(epoch !== undefined ? { epoch } : {}),
    ...(error !== undefined ? { error } : {}),
  };
}

describe('quantile / latencyStats / minMedianMax', () => {
  it('uses nearest rank', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantile(xs, 0.5)).toBe(50);
    expect(quantile(xs, 0.99)).toBe(99);
    expect(quantile(xs, 1)).toBe(100);
    expect(quantile(xs, 0)).toBe(1);
    expect(quantile([], 0.5)).toBeUndefined();
    expect(quantile([3, Number.NaN, 1], 1)).toBe(3);
  });

  it('summarises latencies', () => {
    expect(latencyStats([4, 1, 3, 2])).toEqual({ n: 4, p50: 2, p95: 4, p99: 4, max: 4, mean: 2.5 });
    expect(latencyStats([]).p99).toBeUndefined();
  });

  it('min / median / max', () => {
    expect(minMedianMax([5, 1, 3])).toEqual({ n: 3, min: 1, median: 3, max: 5 });
    expect(minMedianMax([4, 1, 3, 2])).toEqual({ n: 4, min: 1, median: 2.5, max: 4 });
    expect(minMedianMax([])).toBeUndefined();
  });
});

describe('splitByIntervals', () => {
  it('puts an answer in "during" when its [sent, received] overlaps a call', () => {
    expect(overlaps({ start: 0, end: 10 }, { start: 10, end: 20 })).toBe(true);
    expect(overlaps({ start: 0, end: 9 }, { start: 10, end: 20 })).toBe(false);
    const a = ans(0, 0, 5); // before
    const b = ans(0, 8, 12); // straddles the start
    const c = ans(0, 12, 14); // inside
    const d = ans(0, 19, 25); // straddles the end
    const e = ans(0, 21, 30); // after
    const f = ans(0, 5, 40); // spans the whole call
    const { during, steady } = splitByIntervals([a, b, c, d, e, f], [{ start: 10, end: 20 }]);
    expect(during).toEqual([b, c, d, f]);
    expect(steady).toEqual([a, e]);
  });

  it('everything is steady with no calls', () => {
    const xs = [ans(0, 0, 1), ans(1, 2, 3)];
    expect(splitByIntervals(xs, [])).toEqual({ during: [], steady: xs });
  });
});

describe('epochVersions / checkConnectionOrder', () => {
  const commits: Commit[] = [
    { epoch: 1, from: '2', to: '1', calledMs: 100, returnedMs: 110 },
    { epoch: 2, from: '1', to: '2', calledMs: 200, returnedMs: 230 },
  ];
  const epochs = epochVersions(0, '2', commits);

  it('maps each epoch to its stable version', () => {
    expect([...epochs]).toEqual([
      [0, '2'],
      [1, '1'],
      [2, '2'],
    ]);
  });

  it('accepts non-decreasing epochs with the right versions, per connection', () => {
    const xs = [
      ans(0, 0, 1, '2', 0),
      ans(0, 105, 108, '1', 1),
      ans(1, 100, 102, '2', 0), // other connection may still be on epoch 0
      ans(0, 220, 225, '2', 2),
      ans(0, 0, 1, undefined, undefined, 'overloaded'), // errors are ignored here
    ];
    const r = checkConnectionOrder(xs, epochs);
    expect(r).toMatchObject({
      answers: 4,
      connections: 2,
      epochDecreases: 0,
      wrongVersionForEpoch: 0,
      unknownEpoch: 0,
    });
  });

  it('orders by arrival time, not by the order records were pushed', () => {
    const xs = [ans(0, 105, 108, '1', 1), ans(0, 0, 1, '2', 0)];
    expect(checkConnectionOrder(xs, epochs).epochDecreases).toBe(0);
  });

  it('flags an older epoch after a newer one, and an old version after a new one', () => {
    const xs = [ans(0, 105, 108, '1', 1), ans(0, 109, 111, '2', 0)];
    const r = checkConnectionOrder(xs, epochs);
    expect(r.epochDecreases).toBe(1);
    expect(r.oldAfterNew).toBe(1);
    expect(r.examples[0]).toMatch(/epoch 0 after epoch 1/);
  });

  it('flags a version that is not its epoch’s stable, and unknown epochs', () => {
    const xs = [ans(0, 0, 1, '1', 0), ans(1, 0, 1, '1', 7)];
    const r = checkConnectionOrder(xs, epochs);
    expect(r.wrongVersionForEpoch).toBe(1);
    expect(r.unknownEpoch).toBe(1);
  });
});

describe('checkAfterCommits', () => {
  const commits: Commit[] = [
    { epoch: 1, from: '2', to: '1', calledMs: 100, returnedMs: 110 },
    { epoch: 2, from: '1', to: '2', calledMs: 200, returnedMs: 230 },
  ];
  const starts = [100, 150, 200]; // 150: a call that failed (no commit)

  it('passes when every request sent after a commit returned gets that epoch or later', () => {
    const xs = [
      ans(0, 50, 60, '2', 0), // before any commit: not checked
      ans(0, 111, 115, '1', 1),
      ans(0, 205, 228, '1', 1), // sent during the second call: epoch 1 still fine
      ans(0, 231, 240, '2', 2),
    ];
    expect(checkAfterCommits(xs, commits, starts)).toMatchObject({
      commits: 2,
      checked: 3,
      staleEpoch: 0,
      releasedVersion: 0,
    });
  });

  it('flags a stale epoch and the released version before the next call', () => {
    const xs = [ans(0, 112, 118, '2', 0)];
    const r = checkAfterCommits(xs, commits, starts);
    expect(r.staleEpoch).toBe(1);
    expect(r.releasedVersion).toBe(1);
    expect(r.examples).toHaveLength(2);
  });

  it('does not count the released version once a later reload call may bring it back', () => {
    // sent after call 3 started (200), version 2 is then the new target, epoch 1 is still allowed
    const xs = [ans(0, 201, 205, '1', 1)];
    expect(checkAfterCommits(xs, commits, starts)).toMatchObject({ staleEpoch: 0, releasedVersion: 0 });
  });
});

describe('timeline and counts', () => {
  it('buckets answers by arrival, versions and errors apart, empty buckets kept', () => {
    const xs = [
      ans(0, 1000, 1010, '1', 0),
      ans(0, 1010, 1240, '2', 1),
      ans(0, 1240, 1260, '2', 1),
      ans(1, 1000, 1800, undefined, undefined, 'internal'),
    ];
    const b = timelineBuckets(xs, 1000, 250);
    expect(b.map((x) => x.tMs)).toEqual([0, 250, 500, 750]);
    expect(b[0]).toEqual({ tMs: 0, byVersion: { '1': 1, '2': 1 }, errors: 0 });
    expect(b[1]).toEqual({ tMs: 250, byVersion: { '2': 1 }, errors: 0 });
    expect(b[2]!.byVersion).toEqual({});
    expect(b[3]!.errors).toBe(1);
    expect(timelineBuckets([], 0, 250, 1000)).toHaveLength(5);
  });

  it('counts versions, errors and the share of a version', () => {
    const xs = [
      ans(0, 0, 1, '1', 0),
      ans(0, 0, 1, '2', 0),
      ans(0, 0, 1, '2', 0),
      ans(0, 0, 1, undefined, undefined, 'x'),
    ];
    expect(versionCounts(xs)).toEqual({ '1': 1, '2': 2 });
    expect(errorCounts(xs)).toEqual({ x: 1 });
    expect(versionShare(xs, '2')).toBeCloseTo(2 / 3);
    expect(versionShare([], '2')).toBeUndefined();
  });
});

describe('offline comparison helpers', () => {
  it('argmax per row, first on ties', () => {
    expect(Array.from(argmaxRows([0.1, 0.7, 0.2, 0.5, 0.5, 0, 0, 0, 1], 3, 3))).toEqual([1, 0, 2]);
  });

  it('counts disagreements and refuses lists of different lengths', () => {
    expect(countDisagreements([1, 2, 3], [1, 0, 3])).toBe(1);
    expect(() => countDisagreements([1], [1, 2])).toThrow(/length/);
  });
});

describe('firstServedAfter', () => {
  it('takes the earliest arrival from the version among requests sent after the call', () => {
    const xs = [
      ans(0, 90, 105, '1', 3), // sent before the call: ignored
      ans(0, 101, 140, '1', 3),
      ans(1, 102, 120, '1', 3),
      ans(1, 100, 104, '2', 2),
      ans(2, 103, 106, undefined, undefined, 'internal'),
    ];
    const r = firstServedAfter(xs, 100, '1');
    expect(r?.ms).toBe(20);
    expect(r?.answer.conn).toBe(1);
    expect(firstServedAfter(xs, 100, '9')).toBeUndefined();
  });
});

describe('large inputs', () => {
  it('handles 500,000 answers without overflowing the stack', () => {
    const xs: AnswerRecord[] = Array.from({ length: 500_000 }, (_, i) => ({
      conn: i % 32,
      id: i,
      row: 0,
      sentMs: i * 10,
      recvMs: i * 10 + (i % 7),
      version: '1',
      epoch: 0,
    }));
    expect(latencyStats(xs.map((a) => a.recvMs - a.sentMs)).max).toBe(6);
    expect(timelineBuckets(xs, 0, 250_000)).toHaveLength(20);
    expect(checkConnectionOrder(xs, new Map([[0, '1']])).answers).toBe(500_000);
  });
});
