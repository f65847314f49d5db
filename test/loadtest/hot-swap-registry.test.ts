import { rowSource } from '../../loadtest/harness/stream-clients';
import { checksMarkdown, checksNote } from '../../loadtest/harness/verdicts';
import { offenderGroups, reloadPlan } from '../../loadtest/scenarios/hot-swap';
import { distinctRow, shareInterval95 } from '../../loadtest/scenarios/registry';

describe('hot-swap reloadPlan', () => {
  it('full: 20 reloads alternating 1/2, 10 atomic + 10 rolling, the corrupt one in the middle', () => {
    const plan = reloadPlan(20, 30_000, 3_000, 3_000);
    expect(plan).toHaveLength(21);
    const good = plan.filter((p) => !p.corrupt);
    expect(good).toHaveLength(20);
    expect(good.map((p) => p.version).join('')).toBe('12'.repeat(10));
    expect(good.filter((p) => p.strategy === 'atomic')).toHaveLength(10);
    expect(good.filter((p) => p.strategy === 'rolling')).toHaveLength(10);
    // each strategy reloads to both versions equally
    for (const s of ['atomic', 'rolling'])
      expect(good.filter((p) => p.strategy === s && p.version === '1')).toHaveLength(5);
    const corrupt = plan.filter((p) => p.corrupt);
    expect(corrupt).toHaveLength(1);
    expect(corrupt[0]).toMatchObject({ index: 10, version: '3' });
    // steady head and tail, calls evenly spread in between
    expect(plan[0]!.atMs).toBe(3_000);
    expect(plan.at(-1)!.atMs).toBeLessThan(27_000);
    const gaps = plan.slice(1).map((p, i) => p.atMs - plan[i]!.atMs);
    for (const g of gaps) expect(Math.abs(g - 24_000 / 21)).toBeLessThanOrEqual(1);
    expect(plan.map((p) => p.index)).toEqual(plan.map((_, i) => i));
  });

  it('quick: 6 reloads, 3 atomic + 3 rolling, corrupt after the third', () => {
    const plan = reloadPlan(6, 10_000, 2_000, 2_000);
    expect(plan).toHaveLength(7);
    expect(plan.map((p) => (p.corrupt ? 'x' : `${p.strategy[0]}${p.version}`))).toEqual([
      'a1',
      'r2',
      'r1',
      'x',
      'a2',
      'a1',
      'r2',
    ]);
  });
});

describe('registry helpers', () => {
  it('distinctRow visits distinct rows across connections', () => {
    const seen = new Set<number>();
    for (let seq = 0; seq < 300; seq++) for (let c = 0; c < 2; c++) seen.add(distinctRow(c, seq, 2, 1797));
    expect(seen.size).toBe(600);
    for (const r of seen) expect(r).toBeGreaterThanOrEqual(0);
    for (const r of seen) expect(r).toBeLessThan(1797);
  });

  it('shareInterval95 is ± 1.96 standard errors, clamped to [0, 1]', () => {
    const [lo, hi] = shareInterval95(0.1, 2000);
    expect(lo).toBeCloseTo(0.1 - 1.96 * Math.sqrt(0.09 / 2000), 10);
    expect(hi).toBeCloseTo(0.1 + 1.96 * Math.sqrt(0.09 / 2000), 10);
    expect(shareInterval95(0, 10)).toEqual([0, 0]);
    expect(shareInterval95(0.99, 10)[1]).toBe(1);
  });
});

describe('rowSource', () => {
  it('serialises a row once and wraps indices', () => {
    const src = rowSource(new Float64Array([1, 2, 3, 4, 5, 6]), 3);
    expect(src.n).toBe(2);
    expect(src.inputJson(0)).toBe('[1,2,3]');
    expect(src.inputJson(1)).toBe('[4,5,6]');
    expect(src.inputJson(2)).toBe('[1,2,3]');
    expect(src.inputJson(-1)).toBe('[4,5,6]');
  });
});

describe('checks', () => {
  const checks = [
    { name: 'a', target: '0', measured: '0', pass: true },
    { name: 'b | pipe', target: '≤ 2×', measured: '2.5×', pass: false, detail: 'over' },
    { name: 'c', target: '1', measured: '–', pass: undefined },
  ];

  it('renders a Markdown table with verdicts, pipes escaped', () => {
    const md = checksMarkdown(checks);
    expect(md.split('\n')).toHaveLength(5);
    expect(md).toContain('| a | 0 | 0 | PASS |');
    expect(md).toContain('b \\| pipe');
    expect(md).toContain('FAIL');
    expect(md).toContain('n/a');
  });

  it('summarises in one line, naming what did not pass', () => {
    expect(checksNote('x', checks)).toBe(
      'x: 1 PASS, 1 FAIL, 1 n/a — b | pipe: 2.5× (target ≤ 2×, FAIL); c: – (target 1, n/a).',
    );
    expect(checksNote('x', [checks[0]!])).toBe('x: 1 PASS, 0 FAIL.');
  });
});

describe('hot-swap offenderGroups', () => {
  it('groups violations by the reload call they overlapped and by (version, epoch)', () => {
    const calls = [
      {
        index: 0,
        strategy: 'atomic' as const,
        version: '1',
        corrupt: false,
        calledMs: 1100,
        returnedMs: 1120,
      },
      {
        index: 1,
        strategy: 'rolling' as const,
        version: '2',
        corrupt: false,
        calledMs: 2100,
        returnedMs: 2130,
      },
    ];
    const a = (conn: number, sentMs: number, recvMs: number, version: string, epoch: number) => ({
      conn,
      id: conn,
      row: 0,
      sentMs,
      recvMs,
      version,
      epoch,
    });
    const groups = offenderGroups(
      [a(0, 2101, 2125, '2', 1), a(1, 2102, 2126, '2', 1), a(2, 1500, 1501, '1', 0)],
      calls,
      1000,
    );
    expect(groups).toEqual([
      { call: 'none', kind: 'version 1 in epoch 0', count: 1, firstSentS: 0.5, lastSentS: 0.5 },
      { call: '#2 rolling → 2', kind: 'version 2 in epoch 1', count: 2, firstSentS: 1.101, lastSentS: 1.102 },
    ]);
  });
});
