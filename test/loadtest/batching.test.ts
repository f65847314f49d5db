import { parsePrometheusText } from '../../loadtest/harness/metrics';
import {
  bestOf,
  inProcessAt,
  judge,
  metricDeltas,
  pairedCeiling,
  parseInProcess,
  TARGETS,
} from '../../loadtest/scenarios/batching';

const JSON_OUT = JSON.stringify({
  model: 'bench',
  version: '1',
  executionProvider: 'cpu',
  intraOpThreads: 2,
  results: [
    { batchSize: 1, calls: 100, usPerCall: 3200, usPerItem: 3200, itemsPerSecond: 312.5 },
    { batchSize: 2, calls: 100, usPerCall: 3450, usPerItem: 1725, itemsPerSecond: 580 },
    { batchSize: 4, calls: 100, usPerCall: 4540, usPerItem: 1135, itemsPerSecond: 880 },
  ],
  best: { batchSize: 4 },
  speedupBestOverBatch1: 2.8,
});

describe('parseInProcess / inProcessAt', () => {
  it('reads `streaminfer bench model --json` and interpolates in log2(batch)', () => {
    const r = parseInProcess(JSON_OUT);
    expect(r.executionProvider).toBe('cpu');
    expect(r.intraOpThreads).toBe(2);
    expect(r.results).toHaveLength(3);
    expect(inProcessAt(r, 1)).toBe(312.5);
    expect(inProcessAt(r, 2 * Math.SQRT2)).toBeCloseTo(730, 9);
    expect(inProcessAt(r, 64)).toBe(880);
  });

  it('keeps the best pass per batch size', () => {
    const a = parseInProcess(JSON_OUT);
    const b = {
      ...a,
      results: [
        { batchSize: 1, calls: 1, usPerCall: 1, usPerItem: 1, itemsPerSecond: 400 },
        { batchSize: 8, calls: 1, usPerCall: 1, usPerItem: 1, itemsPerSecond: 1200 },
      ],
    };
    const best = bestOf([a, b])!;
    expect(best.results.map((r) => [r.batchSize, r.itemsPerSecond])).toEqual([
      [1, 400],
      [2, 580],
      [4, 880],
      [8, 1200],
    ]);
    expect(bestOf([])).toBeUndefined();
  });

  it('pairs a run with the passes just before and after it', () => {
    const before = parseInProcess(JSON_OUT);
    const after = {
      ...before,
      results: before.results.map((r) => ({ ...r, itemsPerSecond: r.itemsPerSecond / 2 })),
    };
    expect(pairedCeiling(before, after, 4)).toBe((880 + 440) / 2);
    expect(pairedCeiling(before, after, 1)).toBe((312.5 + 156.25) / 2);
    // one side failed: the other alone
    expect(pairedCeiling(undefined, after, 4)).toBe(440);
    expect(pairedCeiling(before, undefined, 2)).toBe(580);
    expect(pairedCeiling(undefined, undefined, 2)).toBeUndefined();
  });

  it('rejects output without usable rows', () => {
    expect(() => parseInProcess('{"results": []}')).toThrow(/no usable results/);
    expect(() => parseInProcess('not json')).toThrow();
  });
});

describe('metricDeltas', () => {
  const scrape = (count: number, sum: number, qSum: number, cSum: number): string =>
    [
      `streaminfer_batch_size_sum{model="bench",version="1"} ${sum}`,
      `streaminfer_batch_size_count{model="bench",version="1"} ${count}`,
      `streaminfer_batch_size_sum{model="echo",version="1"} 999`,
      `streaminfer_batch_size_count{model="echo",version="1"} 1`,
      `streaminfer_queue_duration_seconds_sum{model="bench",version="1"} ${qSum}`,
      `streaminfer_queue_duration_seconds_count{model="bench",version="1"} ${sum}`,
      `streaminfer_compute_duration_seconds_sum{model="bench",version="1"} ${cSum}`,
      `streaminfer_compute_duration_seconds_count{model="bench",version="1"} ${sum}`,
    ].join('\n');

  it('gives the bench model’s figures between two scrapes only', () => {
    const before = parsePrometheusText(scrape(10, 40, 0.4, 0.8));
    const after = parsePrometheusText(scrape(30, 840, 8.4, 16.8));
    const d = metricDeltas(before, after);
    expect(d['batches']).toBe(20);
    expect(d['meanBatchSize']).toBe(40);
    expect(d['meanQueueMs']).toBeCloseTo(10, 9);
    expect(d['meanComputeMs']).toBeCloseTo(20, 9);
  });

  it('is undefined when nothing ran', () => {
    const s = parsePrometheusText(scrape(10, 40, 0.4, 0.8));
    expect(metricDeltas(s, s)['meanBatchSize']).toBeUndefined();
  });
});

describe('judge', () => {
  it('passes at the targets', () => {
    const c = judge(TARGETS.gain, 0.5, TARGETS.servedFraction, 40);
    expect(c.map((x) => x.pass)).toEqual([true, true, true]);
    expect(c[2]!.name).toContain('(40)');
  });

  it('fails below them and says by how much', () => {
    const c = judge(6, 1.2, 0.6, 30);
    expect(c.map((x) => x.pass)).toEqual([false, false, false]);
    expect(c[0]!.detail).toBe('FAIL: 6.00× (short by 2.00×, 25.0%)');
    expect(c[2]!.detail).toBe('FAIL: 60.0% (short by 30.0 points)');
  });

  it('judges JSON requests against their own target (85 %) when given', () => {
    const pass = judge(TARGETS.gain, 0.5, 0.95, 40, {
      servedFraction: TARGETS.servedFractionJson,
      batchReached: 42,
    });
    expect(pass.map((x) => x.pass)).toEqual([true, true, true, true]);
    expect(pass[3]!.name).toMatch(/^JSON: .*\(42\)/);
    const fail = judge(TARGETS.gain, 0.5, 0.95, 40, { servedFraction: 0.8, batchReached: 42 });
    expect(fail[3]!.detail).toBe('FAIL: 80.0% (short by 5.0 points)');
  });

  it('is n/a when a figure is missing', () => {
    const c = judge(undefined, undefined, undefined, undefined);
    expect(c.map((x) => x.pass)).toEqual([undefined, undefined, undefined]);
    expect(c[0]!.detail).toBe('n/a: –');
  });
});
