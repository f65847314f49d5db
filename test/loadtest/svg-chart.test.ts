import { timelineChart } from '../../loadtest/harness/scenario-kit';
import { LoadStats, mergePartials } from '../../loadtest/harness/stats';
import { barChart, escapeXml, formatNumber, lineChart, niceTicks } from '../../loadtest/harness/svg-chart';

/**
 * Minimal XML well-formedness check (enough for generated SVG): balanced tags, quoted
 * attributes, no raw '<' or stray '&' in text.
 */
function assertWellFormed(xml: string): void {
  const stack: string[] = [];
  const re =
    /<(\/?)([a-zA-Z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|<|&(?!(?:amp|lt|gt|quot|apos|#\d+);)/g;
  let m: RegExpExecArray | null;
  let roots = 0;
  while ((m = re.exec(xml)) !== null) {
    if (m[2] === undefined) throw new Error(`bad markup at ${m.index}: ${xml.slice(m.index, m.index + 40)}`);
    const [, close, name, , selfClose] = m;
    if (close) {
      const open = stack.pop();
      if (open !== name) throw new Error(`</${name}> closes <${open}>`);
    } else if (!selfClose) {
      if (stack.length === 0) roots++;
      stack.push(name);
    } else if (stack.length === 0) roots++;
  }
  if (stack.length) throw new Error(`unclosed: ${stack.join(',')}`);
  if (roots !== 1) throw new Error(`${roots} root elements`);
}

describe('escapeXml', () => {
  it('escapes the five specials and drops forbidden control characters', () => {
    expect(escapeXml(`<a href="x">Tom & Jerry's</a>`)).toBe(
      '&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&apos;s&lt;/a&gt;',
    );
    expect(escapeXml('a\u0000b\u0007c\td\ne')).toBe('abc\td\ne');
  });
});

describe('niceTicks / formatNumber', () => {
  it('covers the range with 1/2/5 steps', () => {
    expect(niceTicks(0, 35359)).toEqual([0, 10000, 20000, 30000, 40000]);
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0, 0)).toEqual([0, 1]);
    expect(niceTicks(5, 5)[0]).toBe(0);
    expect(niceTicks(Number.NaN, 3)).toEqual([0, 1]);
    const t = niceTicks(-3, 7);
    expect(t[0]).toBeLessThanOrEqual(-3);
    expect(t.at(-1)).toBeGreaterThanOrEqual(7);
  });

  it('formats compactly', () => {
    expect(formatNumber(35359)).toBe('35.4k');
    expect(formatNumber(1_500_000)).toBe('1.5M');
    expect(formatNumber(512)).toBe('512');
    expect(formatNumber(4.539)).toBe('4.54');
    expect(formatNumber(0)).toBe('0');
    expect(formatNumber(Number.NaN)).toBe('n/a');
  });
});

describe('barChart', () => {
  it('renders well-formed SVG with one bar per run and escaped labels', () => {
    const svg = barChart({
      title: 'throughput <req/s> & "more"',
      unit: 'req/s',
      bars: [
        { label: 'bare <uWS>', value: 42000 },
        { label: "Stream'Infer & co", value: 12000 },
      ],
    });
    assertWellFormed(svg);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg).toContain('bare &lt;uWS&gt;');
    expect(svg).toContain('Stream&apos;Infer &amp; co');
    expect(svg).toContain('throughput &lt;req/s&gt; &amp; &quot;more&quot;');
    expect(svg).not.toContain('<uWS>');
    expect((svg.match(/<rect /g) ?? []).length).toBe(3); // background + 2 bars
    expect(svg).toContain('>42k<');
    expect(svg).not.toMatch(/NaN|Infinity/);
  });

  it('draws missing values as n/a and survives empty / all-zero input', () => {
    const svg = barChart({
      title: 't',
      bars: [
        { label: 'failed', value: Number.NaN },
        { label: 'zero', value: 0 },
      ],
    });
    assertWellFormed(svg);
    expect(svg).toContain('>n/a<');
    expect(svg).not.toMatch(/NaN|Infinity/);
    const empty = barChart({ title: 'empty', bars: [] });
    assertWellFormed(empty);
    expect(empty).not.toMatch(/NaN|Infinity/);
  });
});

describe('lineChart', () => {
  it('renders series as polylines with a legend and markers', () => {
    const svg = lineChart({
      title: 'versions over time',
      xLabel: 's',
      yLabel: 'req/s',
      series: [
        {
          name: 'v1 <old>',
          points: [
            [0, 100],
            [1, 120],
            [2, 0],
          ],
        },
        {
          name: 'v2',
          points: [
            [2, 110],
            [3, 130],
            [4, Number.NaN],
          ],
        },
        { name: 'single', points: [[1, 5]] },
        { name: 'empty', points: [] },
      ],
      markers: [{ x: 2, label: 'reload & swap' }],
    });
    assertWellFormed(svg);
    expect((svg.match(/<polyline /g) ?? []).length).toBe(2);
    expect((svg.match(/<circle /g) ?? []).length).toBe(1);
    expect(svg).toContain('v1 &lt;old&gt;');
    expect(svg).toContain('reload &amp; swap');
    expect(svg).toContain('stroke-dasharray');
    expect(svg).not.toMatch(/NaN|Infinity/);
  });

  it('handles no data at all', () => {
    const svg = lineChart({ title: 'nothing', series: [] });
    assertWellFormed(svg);
    expect(svg).not.toMatch(/NaN|Infinity/);
  });
});

describe('timelineChart (scenario kit)', () => {
  it('plots answers/s per version and errors over time', () => {
    const s = new LoadStats(500);
    s.startEpochMs = 0;
    for (let t = 0; t < 2000; t += 10) s.recordOk(1000, t < 1000 ? '1' : '2', t);
    s.recordError('overloaded', 1200);
    const part = s.toPartial({
      connections: 1,
      connectionsOpened: 1,
      connectFailures: [],
      closes: [],
      startEpochMs: 0,
      endEpochMs: 2000,
      stoppedBy: 'completed',
      cpuPct: 0,
    });
    const load = mergePartials([part], {
      url: 'u',
      body: 'b',
      requestsPerConnection: 1,
      inFlightPerConnection: 1,
      ratePerConnection: null,
      warmupPerConnection: 0,
    });
    const c = timelineChart('swap.svg', 'hot swap', load, [{ x: 1, label: 'reload' }]);
    assertWellFormed(c.svg);
    expect(c.file).toBe('swap.svg');
    expect(c.svg).toContain('version 1');
    expect(c.svg).toContain('version 2');
    expect(c.svg).toContain('>errors<');
    expect((c.svg.match(/<polyline /g) ?? []).length).toBe(3);
    expect(c.svg).not.toMatch(/NaN|Infinity/);
  });
});
