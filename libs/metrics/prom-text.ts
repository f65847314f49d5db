/**
 * Prometheus text exposition (format 0.0.4) read back: a parser and helpers over the parsed samples — sums,
 * label filters, histogram means and quantiles, and counter deltas between two scrapes (reset-aware), so a
 * reader can turn two scrapes into rates. Pure: text in, samples out. The bench and `streaminfer status`
 * both read /metrics with it.
 */
import { PrometheusTextError } from './errors';

export interface MetricSample {
  /** full sample name, e.g. `streaminfer_batch_size_sum` */
  name: string;
  labels: Record<string, string>;
  value: number;
  timestampMs?: number;
}

/**
 * A sample value. Special values are case-insensitive, as Go's ParseFloat (what Prometheus uses)
 * reads them: `NaN`, `Nan`, `+Inf`, `-inf`, `Infinity`, … (prom-client writes `Nan` for an empty mean).
 */
function parseValue(s: string): number {
  switch (s.toLowerCase()) {
    case '+inf':
    case 'inf':
    case '+infinity':
    case 'infinity':
      return Number.POSITIVE_INFINITY;
    case '-inf':
    case '-infinity':
      return Number.NEGATIVE_INFINITY;
    case 'nan':
      return Number.NaN;
    default: {
      const v = Number(s);
      if (s.trim() === '' || Number.isNaN(v)) throw new Error(`bad sample value "${s}"`);
      return v;
    }
  }
}

/** Parse `{a="x",b="y\"z"}` starting at `i` (pointing at `{`); returns labels and the index after `}`. */
function parseLabels(line: string, i: number): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  i++; // past '{'
  for (;;) {
    while (line[i] === ' ' || line[i] === ',') i++;
    if (line[i] === '}') return { labels, end: i + 1 };
    const eq = line.indexOf('=', i);
    if (eq < 0) throw new Error('label without "="');
    const name = line.slice(i, eq).trim();
    if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(name)) throw new Error(`bad label name "${name}"`);
    i = eq + 1;
    while (line[i] === ' ') i++;
    if (line[i] !== '"') throw new Error(`label ${name}: value not quoted`);
    i++;
    let value = '';
    for (;;) {
      const ch = line[i];
      if (ch === undefined) throw new Error(`label ${name}: unterminated value`);
      if (ch === '\\') {
        const next = line[i + 1];
        value += next === 'n' ? '\n' : next === '\\' ? '\\' : next === '"' ? '"' : '\\' + (next ?? '');
        i += 2;
        continue;
      }
      if (ch === '"') {
        i++;
        break;
      }
      value += ch;
      i++;
    }
    labels[name] = value;
  }
}

/**
 * Parse Prometheus text exposition into samples. Comment/`# HELP`/`# TYPE` lines and
 * blank lines are skipped; a malformed line throws with its line number (a server that
 * emits broken metrics is a finding, not something to paper over).
 */
export function parsePrometheusText(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.replace(/\r$/, '');
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    try {
      const m = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(trimmed);
      if (!m) throw new Error('no metric name');
      const name = m[0];
      let i = name.length;
      let labels: Record<string, string> = {};
      if (trimmed[i] === '{') {
        const parsed = parseLabels(trimmed, i);
        labels = parsed.labels;
        i = parsed.end;
      }
      const rest = trimmed.slice(i).trim().split(/\s+/);
      const valueText = rest[0];
      if (valueText === undefined || valueText === '') throw new Error('no value');
      const sample: MetricSample = { name, labels, value: parseValue(valueText) };
      if (rest[1] !== undefined) {
        const timestampMs = Number(rest[1]);
        if (!Number.isInteger(timestampMs)) throw new Error(`bad timestamp "${rest[1]}"`);
        sample.timestampMs = timestampMs;
      }
      out.push(sample);
    } catch (e) {
      throw new PrometheusTextError(n + 1, e instanceof Error ? e.message : String(e), line);
    }
  }
  return out;
}

export type LabelFilter = Record<string, string | ((v: string) => boolean)>;

export function matches(labels: Record<string, string>, filter: LabelFilter = {}): boolean {
  for (const [k, want] of Object.entries(filter)) {
    const v = labels[k];
    if (v === undefined) return false;
    if (typeof want === 'function' ? !want(v) : v !== want) return false;
  }
  return true;
}

export function findSamples(
  samples: readonly MetricSample[],
  name: string,
  filter?: LabelFilter,
): MetricSample[] {
  return samples.filter((s) => s.name === name && matches(s.labels, filter));
}

/** Sum of every sample named `name` whose labels match (0 when none). */
export function sumSamples(samples: readonly MetricSample[], name: string, filter?: LabelFilter): number {
  return findSamples(samples, name, filter).reduce((a, s) => a + s.value, 0);
}

export interface HistogramSums {
  sum: number;
  count: number;
}

export function histogramTotals(
  samples: readonly MetricSample[],
  name: string,
  filter?: LabelFilter,
): HistogramSums {
  return {
    sum: sumSamples(samples, `${name}_sum`, filter),
    count: sumSamples(samples, `${name}_count`, filter),
  };
}

/**
 * Mean of a Prometheus histogram (`name` without suffix) over every label set matching
 * `filter`: Σ`name_sum` / Σ`name_count`. `undefined` when nothing was observed.
 */
export function histogramMean(
  samples: readonly MetricSample[],
  name: string,
  filter?: LabelFilter,
): number | undefined {
  const t = histogramTotals(samples, name, filter);
  return t.count > 0 ? t.sum / t.count : undefined;
}

/** Histogram mean of what was observed between two scrapes (`after` − `before`). */
export function histogramMeanDelta(
  before: readonly MetricSample[],
  after: readonly MetricSample[],
  name: string,
  filter?: LabelFilter,
): number | undefined {
  const a = histogramTotals(after, name, filter);
  const b = histogramTotals(before, name, filter);
  const count = a.count - b.count;
  return count > 0 ? (a.sum - b.sum) / count : undefined;
}

/**
 * A quantile estimate. `aboveLastBound`: the rank fell in the `+Inf` bucket, so `value` is the last finite
 * bound and the quantile lies somewhere above it (Prometheus's histogram_quantile answers that bound too).
 */
export interface QuantileEstimate {
  value: number;
  aboveLastBound: boolean;
}

/** Estimated quantile (0..1) of a Prometheus histogram by linear interpolation within buckets. */
export function histogramQuantileEstimate(
  samples: readonly MetricSample[],
  name: string,
  q: number,
  filter?: LabelFilter,
): QuantileEstimate | undefined {
  const byLe = new Map<number, number>();
  for (const s of findSamples(samples, `${name}_bucket`, filter)) {
    const leText = s.labels['le'];
    if (leText === undefined) continue;
    const le = parseValue(leText);
    byLe.set(le, (byLe.get(le) ?? 0) + s.value);
  }
  const buckets = [...byLe.entries()].sort((x, y) => x[0] - y[0]);
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total <= 0) return undefined;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (!Number.isFinite(le)) return { value: prevLe, aboveLastBound: true };
      const inBucket = count - prevCount;
      const value = inBucket > 0 ? prevLe + ((le - prevLe) * (rank - prevCount)) / inBucket : le;
      return { value, aboveLastBound: false };
    }
    prevLe = le;
    prevCount = count;
  }
  return { value: prevLe, aboveLastBound: true };
}

/** The estimate's value alone (see histogramQuantileEstimate). */
export function histogramQuantile(
  samples: readonly MetricSample[],
  name: string,
  q: number,
  filter?: LabelFilter,
): number | undefined {
  return histogramQuantileEstimate(samples, name, q, filter)?.value;
}

/** Identity of a series: its name and its labels in name order. */
export function seriesKey(sample: MetricSample): string {
  const labels = Object.keys(sample.labels)
    .sort()
    .map((name) => `${name}=${JSON.stringify(sample.labels[name])}`);
  return `${sample.name}{${labels.join(',')}}`;
}

/**
 * What each counter-like series (counters, histogram buckets, `_sum`, `_count`) of `after` gained since
 * `before`, as samples, so the helpers above read them as "observed in between". A series absent from
 * `before` started at zero in between; one that went down was reset (its process restarted) and counts
 * from zero, as Prometheus's `rate()` reads a reset. Series only in `before` are gone and dropped.
 */
export function sampleDeltas(
  before: readonly MetricSample[],
  after: readonly MetricSample[],
  include: (name: string) => boolean = () => true,
): MetricSample[] {
  const previous = new Map<string, number>();
  for (const sample of before) if (include(sample.name)) previous.set(seriesKey(sample), sample.value);
  const out: MetricSample[] = [];
  for (const sample of after) {
    if (!include(sample.name)) continue;
    const was = previous.get(seriesKey(sample)) ?? 0;
    out.push({
      name: sample.name,
      labels: sample.labels,
      value: sample.value >= was ? sample.value - was : sample.value,
    });
  }
  return out;
}
