import {
  findSamples,
  histogramMean,
  histogramMeanDelta,
  histogramQuantile,
  histogramQuantileEstimate,
  PrometheusTextError,
  parsePrometheusText,
  sampleDeltas,
  seriesKey,
  sumSamples,
} from './index';

const TEXT = `# HELP streaminfer_requests_total Requests answered.
# TYPE streaminfer_requests_total counter
streaminfer_requests_total{model="echo",version="1",protocol="ws",code="ok"} 120
streaminfer_requests_total{model="echo",version="1",protocol="ws",code="overloaded"} 3
streaminfer_requests_total{model="digits",version="2",protocol="http",code="ok"} 7

# TYPE streaminfer_batch_size histogram
streaminfer_batch_size_bucket{le="1",model="echo",version="1"} 2
streaminfer_batch_size_bucket{le="4",model="echo",version="1"} 6
streaminfer_batch_size_bucket{le="16",model="echo",version="1"} 10
streaminfer_batch_size_bucket{le="+Inf",model="echo",version="1"} 10
streaminfer_batch_size_sum{model="echo",version="1"} 48
streaminfer_batch_size_count{model="echo",version="1"} 10
streaminfer_batch_size_sum{model="digits",version="2"} 30
streaminfer_batch_size_count{model="digits",version="2"} 2
process_start_time_seconds 1700000000.5
weird_gauge{path="C:\\\\tmp",quote="say \\"hi\\"",nl="a\\nb",empty=""} -Inf 1700000000000
nan_gauge NaN
`;

describe('parsePrometheusText', () => {
  const samples = parsePrometheusText(TEXT);

  it('skips comments and blank lines and reads every sample', () => {
    expect(samples).toHaveLength(14);
    expect(samples[0]).toEqual({
      name: 'streaminfer_requests_total',
      labels: { model: 'echo', version: '1', protocol: 'ws', code: 'ok' },
      value: 120,
    });
  });

  it('reads unlabelled samples, special values and timestamps', () => {
    expect(findSamples(samples, 'process_start_time_seconds')[0]?.value).toBe(1700000000.5);
    const weird = findSamples(samples, 'weird_gauge')[0]!;
    expect(weird.value).toBe(Number.NEGATIVE_INFINITY);
    expect(weird.timestampMs).toBe(1700000000000);
    expect(Number.isNaN(findSamples(samples, 'nan_gauge')[0]!.value)).toBe(true);
    expect(findSamples(samples, 'streaminfer_batch_size_bucket', { le: '+Inf' })[0]?.value).toBe(10);
  });

  it('unescapes label values', () => {
    const weird = findSamples(samples, 'weird_gauge')[0]!;
    expect(weird.labels).toEqual({ path: 'C:\\tmp', quote: 'say "hi"', nl: 'a\nb', empty: '' });
  });

  it('accepts commas and spaces inside quoted label values and CRLF line ends', () => {
    const s = parsePrometheusText('m{a="x, y}",b="z"} 1\r\n');
    expect(s).toEqual([{ name: 'm', labels: { a: 'x, y}', b: 'z' }, value: 1 }]);
  });

  it('throws on malformed lines with the line number', () => {
    expect(() => parsePrometheusText('ok 1\nbroken{a="x"\n')).toThrow(/line 2/);
    expect(() => parsePrometheusText('m notanumber')).toThrow(/bad sample value/);
    expect(() => parsePrometheusText('m{a=x} 1')).toThrow(/not quoted/);
    expect(() => parsePrometheusText('m')).toThrow(/no value/);
    expect(() => parsePrometheusText('m 1 soon')).toThrow(/bad timestamp/);
  });

  it('throws a typed error naming the line and the problem', () => {
    let caught: unknown;
    try {
      parsePrometheusText('ok 1\n# c\nm{a=x} 1\n');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(PrometheusTextError);
    expect(caught).toMatchObject({ line: 3, problem: 'label a: value not quoted', code: 'bad_metrics_text' });
  });

  it('returns nothing for empty input', () => {
    expect(parsePrometheusText('')).toEqual([]);
    expect(parsePrometheusText('# only a comment\n\n')).toEqual([]);
  });
});

describe('sample helpers', () => {
  const samples = parsePrometheusText(TEXT);

  it('sums with label filters (exact and predicate)', () => {
    expect(sumSamples(samples, 'streaminfer_requests_total')).toBe(130);
    expect(sumSamples(samples, 'streaminfer_requests_total', { model: 'echo' })).toBe(123);
    expect(sumSamples(samples, 'streaminfer_requests_total', { code: (c) => c !== 'ok' })).toBe(3);
    expect(sumSamples(samples, 'streaminfer_requests_total', { missing_label: 'x' })).toBe(0);
    expect(sumSamples(samples, 'no_such_metric')).toBe(0);
  });

  it('computes histogram means from _sum/_count', () => {
    expect(histogramMean(samples, 'streaminfer_batch_size', { model: 'echo' })).toBeCloseTo(4.8);
    expect(histogramMean(samples, 'streaminfer_batch_size')).toBeCloseTo(78 / 12);
    expect(histogramMean(samples, 'streaminfer_batch_size', { model: 'nope' })).toBeUndefined();
  });

  it('computes the mean of what was observed between two scrapes', () => {
    const before = parsePrometheusText('h_sum{m="a"} 10\nh_count{m="a"} 5\n');
    const after = parsePrometheusText('h_sum{m="a"} 50\nh_count{m="a"} 10\n');
    expect(histogramMeanDelta(before, after, 'h')).toBe(8);
    expect(histogramMeanDelta(after, after, 'h')).toBeUndefined();
    expect(histogramMeanDelta([], after, 'h', { m: 'a' })).toBe(5);
  });

  it('estimates quantiles from buckets', () => {
    // echo buckets: 2 in (0,1], 4 in (1,4], 4 in (4,16]
    expect(histogramQuantile(samples, 'streaminfer_batch_size', 0.5, { model: 'echo' })).toBeCloseTo(
      1 + 3 * (3 / 4),
    );
    expect(histogramQuantile(samples, 'streaminfer_batch_size', 1, { model: 'echo' })).toBe(16);
    expect(histogramQuantile(samples, 'streaminfer_batch_size', 0.5, { model: 'digits' })).toBeUndefined();
  });

  it('says when a quantile lies past the last finite bucket bound', () => {
    const h = parsePrometheusText('h_bucket{le="1"} 3\nh_bucket{le="10"} 9\nh_bucket{le="+Inf"} 10\n');
    expect(histogramQuantileEstimate(h, 'h', 0.5)).toEqual({ value: 1 + 9 * (2 / 6), aboveLastBound: false });
    expect(histogramQuantileEstimate(h, 'h', 0.95)).toEqual({ value: 10, aboveLastBound: true });
    expect(histogramQuantile(h, 'h', 0.95)).toBe(10);
  });
});

describe('sampleDeltas', () => {
  const before = parsePrometheusText(
    ['c_total{m="a",code="ok"} 10', 'c_total{code="err",m="a"} 4', 'gone_total 7', 'g 5'].join('\n'),
  );

  it('subtracts series by name and labels, whatever their label order', () => {
    const after = parsePrometheusText('c_total{code="ok",m="a"} 25\nc_total{m="a",code="err"} 4\n');
    expect(sampleDeltas(before, after).map((s) => [seriesKey(s), s.value])).toEqual([
      ['c_total{code="ok",m="a"}', 15],
      ['c_total{code="err",m="a"}', 0],
    ]);
  });

  it('reads a series absent before as started at zero, and drops series that are gone', () => {
    const after = parsePrometheusText('c_total{m="b",code="ok"} 3\n');
    expect(sampleDeltas(before, after)).toEqual([
      { name: 'c_total', labels: { m: 'b', code: 'ok' }, value: 3 },
    ]);
  });

  it('reads a series that went down as reset: it counts from zero', () => {
    const after = parsePrometheusText('c_total{m="a",code="ok"} 2\n');
    expect(sampleDeltas(before, after)[0]?.value).toBe(2);
  });

  it('keeps only the names asked for', () => {
    const after = parsePrometheusText('c_total{m="a",code="ok"} 11\ng 9\n');
    expect(sampleDeltas(before, after, (name) => name === 'c_total')).toEqual([
      { name: 'c_total', labels: { m: 'a', code: 'ok' }, value: 1 },
    ]);
  });

  it('gives histogram quantiles of what was observed in between', () => {
    const h = (b1: number, b2: number, inf: number): string =>
      `h_bucket{le="0.1"} ${b1}\nh_bucket{le="1"} ${b2}\nh_bucket{le="+Inf"} ${inf}\n`;
    // Before: 100 fast answers; in between: 10 more, all between 0.1 and 1.
    const deltas = sampleDeltas(parsePrometheusText(h(100, 100, 100)), parsePrometheusText(h(100, 110, 110)));
    expect(histogramQuantile(deltas, 'h', 0.5)).toBeCloseTo(0.1 + 0.9 * 0.5);
    expect(histogramQuantile(parsePrometheusText(h(100, 110, 110)), 'h', 0.5)).toBeCloseTo(0.055);
  });
});
