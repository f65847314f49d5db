import { LoadStats, type MergeMeta, mergePartials, type PartialResult } from '../../loadtest/harness/stats';

const META: MergeMeta = {
  url: 'ws://127.0.0.1:1/ws',
  body: 'echo-floats',
  requestsPerConnection: 10,
  inFlightPerConnection: 1,
  ratePerConnection: null,
  warmupPerConnection: 0,
};

function partial(
  stats: LoadStats,
  start: number,
  end: number,
  over: Partial<PartialResult> = {},
): PartialResult {
  return {
    ...stats.toPartial({
      connections: 2,
      connectionsOpened: 2,
      connectFailures: [],
      closes: [],
      startEpochMs: start,
      endEpochMs: end,
      stoppedBy: 'completed',
      cpuPct: 42.4,
    }),
    ...over,
  };
}

describe('LoadStats + mergePartials', () => {
  it('aggregates counts, codes, versions, throughput and latency percentiles', () => {
    const start = 1_000_000;
    const s = new LoadStats(1000, true);
    s.startEpochMs = start;
    // 100 ok answers with latencies 1..100 ms, versions 1 and 2
    for (let i = 1; i <= 100; i++) s.recordOk(i * 1000, i <= 75 ? '1' : '2', start + i * 9);
    s.recordError('overloaded', start + 500);
    s.recordError('overloaded', start + 1500);
    s.recordError('rate_limited', start + 1600);
    s.recordError('client_timeout', start + 1999);
    s.recordWarning('consumer_falling_behind');
    s.sent = 104;
    s.unmatched = 1;
    const r = mergePartials([partial(s, start, start + 2000)], META);

    expect(r.ok).toBe(100);
    expect(r.errors).toEqual({ overloaded: 2, rate_limited: 1, client_timeout: 1 });
    expect(r.errorCount).toBe(4);
    expect(r.completed).toBe(103); // client-side timeouts are not answers
    expect(r.warnings).toEqual({ consumer_falling_behind: 1 });
    expect(r.warningCount).toBe(1);
    expect(r.unmatched).toBe(1);
    expect(r.versions).toEqual({ '1': 75, '2': 25 });
    expect(r.durationMs).toBe(2000);
    expect(r.throughputRps).toBe(50);
    expect(r.completedRps).toBe(51.5);
    expect(r.latencyMs.count).toBe(100);
    expect(r.latencyMs.p50).toBeCloseTo(50, 0);
    expect(r.latencyMs.p90).toBeCloseTo(90, 0);
    expect(r.latencyMs.p99).toBeCloseTo(99, 0);
    expect(r.latencyMs.max).toBeCloseTo(100, 0);
    expect(r.latencyMs.min).toBeCloseTo(1, 1);
    expect(r.latencyMs.mean).toBeCloseTo(50.5, 0);
    expect(r.loadgenCpuPct).toEqual([42]);
    expect(r.stoppedBy).toBe('completed');

    // timeline: bucket 0 has 100 ok + 1 error, bucket 1 has 3 errors
    expect(r.timeline.bucketMs).toBe(1000);
    expect(r.timeline.points).toEqual([
      { tMs: 0, ok: 100, errors: 1, byVersion: { '1': 75, '2': 25 } },
      { tMs: 1000, ok: 0, errors: 3, byVersion: {} },
    ]);
    // samples are relative to the start, sorted, errors marked with '!'
    expect(r.samples?.[0]).toEqual([9, '1']);
    expect(r.samples).toContainEqual([500, '!overloaded']);
    expect(r.samples).toHaveLength(104);
  });

  it('merges several load-generator processes', () => {
    const a = new LoadStats(100);
    a.startEpochMs = 5000;
    const b = new LoadStats(100);
    b.startEpochMs = 5010;
    for (let i = 0; i < 50; i++) a.recordOk(1000, '1', 5000 + i);
    for (let i = 0; i < 50; i++) b.recordOk(9000, '2', 5010 + i);
    b.recordError('overloaded', 5100);
    a.sent = 50;
    b.sent = 51;
    const pa = partial(a, 5000, 6000, {
      closes: [{ conn: 0, code: 1013, reason: 'slow', atMs: 100, pending: 2 }],
    });
    const pb = partial(b, 5010, 6010, {
      connectionsOpened: 1,
      connectFailures: [{ conn: 3, message: 'ECONNREFUSED' }],
      stoppedBy: 'time_limit',
    });
    const r = mergePartials([pa, pb], META);
    expect(r.loadgenProcesses).toBe(2);
    expect(r.connections).toBe(4);
    expect(r.connectionsOpened).toBe(3);
    expect(r.connectFailures).toEqual([{ conn: 3, message: 'ECONNREFUSED' }]);
    expect(r.sent).toBe(101);
    expect(r.ok).toBe(100);
    expect(r.versions).toEqual({ '1': 50, '2': 50 });
    expect(r.durationMs).toBe(1010);
    expect(r.latencyMs.count).toBe(100);
    expect(r.latencyMs.p50).toBeCloseTo(1, 1);
    expect(r.latencyMs.max).toBeCloseTo(9, 1);
    expect(r.stoppedBy).toBe('time_limit');
    expect(r.closes).toEqual([{ conn: 0, code: 1013, reason: 'slow', atMs: 100, pending: 2 }]);
    // buckets are relative to each process's own start, then summed
    expect(r.timeline.points.map((p) => [p.tMs, p.ok, p.errors])).toEqual([[0, 100, 1]]);
    expect(r.samples).toBeUndefined();
  });

  it('reports an empty result when nothing connected', () => {
    const s = new LoadStats();
    const r = mergePartials(
      [partial(s, 1000, 1000, { connectionsOpened: 0, stoppedBy: 'no_connections', notSent: 20 })],
      META,
    );
    expect(r.ok).toBe(0);
    expect(r.throughputRps).toBe(0);
    expect(r.latencyMs).toEqual({
      count: 0,
      min: 0,
      mean: 0,
      p50: 0,
      p90: 0,
      p95: 0,
      p99: 0,
      p999: 0,
      max: 0,
    });
    expect(r.notSent).toBe(20);
    expect(r.stoppedBy).toBe('no_connections');
  });

  it('survives a JSON round trip of the partial (the IPC path)', () => {
    const s = new LoadStats();
    s.startEpochMs = 0;
    s.recordOk(2500, '7', 10);
    const wire = JSON.parse(JSON.stringify(partial(s, 0, 1000))) as PartialResult;
    const r = mergePartials([wire], META);
    expect(r.latencyMs.p50).toBeCloseTo(2.5, 2);
    expect(r.versions).toEqual({ '7': 1 });
  });
});
