/**
 * Load-generator statistics: what one load-generator process records while it runs
 * (`LoadStats`), the serialisable partial result it sends back to the bench, and the pure
 * merge/summary step that turns one or more partials into a `LoadResult`.
 *
 * Latency is client-side send → receive, recorded in microseconds into an HDR histogram and
 * reported in milliseconds. Only successful answers feed the latency histogram; error
 * answers are counted by code.
 */
import * as hdr from 'hdr-histogram-js';

/**
 * How the measured phase ended: every request answered (`completed`), the time limit hit, the
 * parent asked it to stop (`stop_request`, e.g. a background load that runs until the measured one
 * is over), or no connection could be opened.
 */
export type StopReason = 'completed' | 'stop_request' | 'time_limit' | 'no_connections';

export interface LatencySummaryMs {
  count: number;
  min: number;
  mean: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  p999: number;
  max: number;
}

export interface ConnectFailure {
  conn: number;
  message: string;
}

export interface EarlyClose {
  conn: number;
  code: number;
  reason: string;
  /** ms since the measured phase started (negative: before the clock started). */
  atMs: number;
  /** requests that were awaiting an answer when the connection closed */
  pending: number;
}

export interface TimelinePoint {
  /** bucket start, ms since the measured phase started */
  tMs: number;
  ok: number;
  errors: number;
  byVersion: Record<string, number>;
}

export interface Timeline {
  bucketMs: number;
  points: TimelinePoint[];
}

/** One answer in the timeline sample list: [ms since start, version or `!code` for errors]. */
export type Sample = [number, string];

/** What one loadgen process hands back (JSON-serialisable; histogram base64-encoded). */
export interface PartialResult {
  connections: number;
  connectionsOpened: number;
  connectFailures: ConnectFailure[];
  closes: EarlyClose[];
  /** epoch ms when the measured phase started / ended in that process */
  startEpochMs: number;
  endEpochMs: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
  warnings: Record<string, number>;
  unmatched: number;
  /** requests that were planned but never sent (time limit or connection lost) */
  notSent: number;
  versions: Record<string, number>;
  histogram: string;
  /** timeline buckets: key = floor((epochMs - startEpochMs) / bucketMs) */
  buckets: Record<string, { ok: number; errors: number; byVersion: Record<string, number> }>;
  bucketMs: number;
  /** samples with absolute epoch ms */
  samples?: Sample[];
  stoppedBy: StopReason;
  /** CPU used by the loadgen process during the measured phase, % of one core */
  cpuPct: number;
  /** errors / warnings seen during warm-up (not part of the stats) */
  warmupErrors: number;
  /** per error code, send → error-answer latency histogram (base64), server answers only */
  errorHistograms?: Record<string, string>;
  /** per error code, `retry_after_ms` value → how many answers carried it */
  retryAfterMs?: Record<string, Record<string, number>>;
}

/** Distribution of the `retry_after_ms` values one error code carried. */
export interface RetryAfterSummary {
  /** answers of that code that carried a `retry_after_ms` */
  count: number;
  min: number;
  p50: number;
  p90: number;
  max: number;
  mean: number;
}

export interface LoadResult {
  url: string;
  body: string;
  connections: number;
  connectionsOpened: number;
  requestsPerConnection: number;
  inFlightPerConnection: number;
  ratePerConnection: number | null;
  warmupPerConnection: number;
  loadgenProcesses: number;
  /** per-process CPU of the load generator(s), % of one core each */
  loadgenCpuPct: number[];
  sent: number;
  /** answers received (ok + error answers) */
  completed: number;
  ok: number;
  errorCount: number;
  errors: Record<string, number>;
  warningCount: number;
  warnings: Record<string, number>;
  unmatched: number;
  notSent: number;
  durationMs: number;
  /** successful answers per second over the measured window */
  throughputRps: number;
  /** all answers (ok + error) per second over the measured window */
  completedRps: number;
  latencyMs: LatencySummaryMs;
  versions: Record<string, number>;
  connectFailures: ConnectFailure[];
  closes: EarlyClose[];
  stoppedBy: StopReason;
  warmupErrors: number;
  timeline: Timeline;
  samples?: Sample[];
  /** client-side send → answer latency of error answers, per code (absent on older results) */
  errorLatencyMs?: Record<string, LatencySummaryMs>;
  /** `retry_after_ms` carried by error answers, per code */
  retryAfterMs?: Record<string, RetryAfterSummary>;
  /** requests went out as binary tensor frames */
  binary?: boolean;
  /** a shared request budget over all connections, instead of requestsPerConnection each */
  totalRequests?: number;
  /** epoch ms the measured phase started (timeline and samples are relative to it) */
  startEpochMs?: number;
}

export function newHistogram(): hdr.Histogram {
  return hdr.build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true });
}

function inc(rec: Record<string, number>, key: string, by = 1): void {
  rec[key] = (rec[key] ?? 0) + by;
}

function addAll(into: Record<string, number>, from: Record<string, number>): void {
  for (const [k, v] of Object.entries(from)) inc(into, k, v);
}

/** Mutable recorder used inside one loadgen process. */
export class LoadStats {
  readonly histogram = newHistogram();
  sent = 0;
  ok = 0;
  unmatched = 0;
  notSent = 0;
  warmupErrors = 0;
  readonly errors: Record<string, number> = {};
  readonly warnings: Record<string, number> = {};
  readonly versions: Record<string, number> = {};
  readonly buckets: PartialResult['buckets'] = {};
  readonly samples: Sample[] | undefined;
  readonly errorHistograms = new Map<string, hdr.Histogram>();
  readonly retryAfterMs: Record<string, Record<string, number>> = {};
  /** epoch ms the measured phase started; timeline buckets are relative to it */
  startEpochMs = 0;

  constructor(
    readonly bucketMs = 1000,
    recordSamples = false,
  ) {
    this.samples = recordSamples ? [] : undefined;
  }

  private bucket(epochMs: number): { ok: number; errors: number; byVersion: Record<string, number> } {
    const key = String(Math.max(0, Math.floor((epochMs - this.startEpochMs) / this.bucketMs)));
    let b = this.buckets[key];
    if (!b) {
      b = { ok: 0, errors: 0, byVersion: {} };
      this.buckets[key] = b;
    }
    return b;
  }

  recordOk(latencyUs: number, version: string, epochMs: number): void {
    this.ok++;
    this.histogram.recordValue(Math.max(1, Math.round(latencyUs)));
    inc(this.versions, version);
    const b = this.bucket(epochMs);
    b.ok++;
    inc(b.byVersion, version);
    this.samples?.push([epochMs, version]);
  }

  /**
   * An error. `latencyUs` (send → answer) is given for answers from the server, not for the
   * codes the client assigns itself; `retryAfterMs` when the answer carried one.
   */
  recordError(code: string, epochMs: number, latencyUs?: number, retryAfterMs?: number): void {
    inc(this.errors, code);
    this.bucket(epochMs).errors++;
    this.samples?.push([epochMs, '!' + code]);
    if (latencyUs !== undefined && Number.isFinite(latencyUs)) {
      let h = this.errorHistograms.get(code);
      if (!h) {
        h = newHistogram();
        this.errorHistograms.set(code, h);
      }
      h.recordValue(Math.max(1, Math.round(latencyUs)));
    }
    if (retryAfterMs !== undefined && Number.isFinite(retryAfterMs)) {
      inc((this.retryAfterMs[code] ??= {}), String(retryAfterMs));
    }
  }

  recordWarning(code: string): void {
    inc(this.warnings, code);
  }

  toPartial(extra: {
    connections: number;
    connectionsOpened: number;
    connectFailures: ConnectFailure[];
    closes: EarlyClose[];
    startEpochMs: number;
    endEpochMs: number;
    stoppedBy: StopReason;
    cpuPct: number;
  }): PartialResult {
    return {
      ...extra,
      sent: this.sent,
      ok: this.ok,
      errors: { ...this.errors },
      warnings: { ...this.warnings },
      unmatched: this.unmatched,
      notSent: this.notSent,
      versions: { ...this.versions },
      histogram: hdr.encodeIntoCompressedBase64(this.histogram),
      buckets: this.buckets,
      bucketMs: this.bucketMs,
      samples: this.samples,
      warmupErrors: this.warmupErrors,
      errorHistograms: Object.fromEntries(
        [...this.errorHistograms].map(([code, h]) => [code, hdr.encodeIntoCompressedBase64(h)]),
      ),
      retryAfterMs: structuredClone(this.retryAfterMs),
    };
  }
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;

export function summarizeHistogramMs(h: hdr.Histogram): LatencySummaryMs {
  const count = h.totalCount;
  if (count === 0) return { count: 0, min: 0, mean: 0, p50: 0, p90: 0, p95: 0, p99: 0, p999: 0, max: 0 };
  const ms = (us: number): number => round3(us / 1000);
  return {
    count,
    min: ms(h.minNonZeroValue),
    mean: ms(h.mean),
    p50: ms(h.getValueAtPercentile(50)),
    p90: ms(h.getValueAtPercentile(90)),
    p95: ms(h.getValueAtPercentile(95)),
    p99: ms(h.getValueAtPercentile(99)),
    p999: ms(h.getValueAtPercentile(99.9)),
    max: ms(h.maxValue),
  };
}

export interface MergeMeta {
  url: string;
  body: string;
  requestsPerConnection: number;
  inFlightPerConnection: number;
  ratePerConnection: number | null;
  warmupPerConnection: number;
  binary?: boolean;
  totalRequests?: number;
}

const STOP_SEVERITY: Record<StopReason, number> = {
  completed: 0,
  stop_request: 1,
  time_limit: 2,
  no_connections: 3,
};

/** Summary of a `value → count` distribution (keys are numbers as text); undefined when empty. */
export function summarizeCounts(counts: Record<string, number>): RetryAfterSummary | undefined {
  const pairs = Object.entries(counts)
    .map(([k, n]): [number, number] => [Number(k), n])
    .filter(([v, n]) => Number.isFinite(v) && n > 0)
    .sort((a, b) => a[0] - b[0]);
  const count = pairs.reduce((a, [, n]) => a + n, 0);
  if (count === 0) return undefined;
  const at = (q: number): number => {
    const rank = Math.max(1, Math.ceil(q * count));
    let seen = 0;
    for (const [v, n] of pairs) {
      seen += n;
      if (seen >= rank) return v;
    }
    return pairs.at(-1)![0];
  };
  const sum = pairs.reduce((a, [v, n]) => a + v * n, 0);
  return {
    count,
    min: pairs[0]![0],
    p50: at(0.5),
    p90: at(0.9),
    max: pairs.at(-1)![0],
    mean: round3(sum / count),
  };
}

/** Merge the partial results of one or more loadgen processes into one summary. */
export function mergePartials(parts: readonly PartialResult[], meta: MergeMeta): LoadResult {
  const hist = newHistogram();
  const errors: Record<string, number> = {};
  const warnings: Record<string, number> = {};
  const versions: Record<string, number> = {};
  const buckets = new Map<number, { ok: number; errors: number; byVersion: Record<string, number> }>();
  const errorHists = new Map<string, hdr.Histogram>();
  const retryAfter: Record<string, Record<string, number>> = {};
  let samples: Sample[] | undefined;
  let sent = 0;
  let ok = 0;
  let unmatched = 0;
  let notSent = 0;
  let warmupErrors = 0;
  let connections = 0;
  let opened = 0;
  let start = Number.POSITIVE_INFINITY;
  let end = Number.NEGATIVE_INFINITY;
  let stoppedBy: StopReason = 'completed';
  const connectFailures: ConnectFailure[] = [];
  const closes: EarlyClose[] = [];
  const bucketMs = parts[0]?.bucketMs ?? 1000;

  for (const p of parts) {
    hist.add(hdr.decodeFromCompressedBase64(p.histogram));
    addAll(errors, p.errors);
    addAll(warnings, p.warnings);
    addAll(versions, p.versions);
    sent += p.sent;
    ok += p.ok;
    unmatched += p.unmatched;
    notSent += p.notSent;
    warmupErrors += p.warmupErrors;
    connections += p.connections;
    opened += p.connectionsOpened;
    connectFailures.push(...p.connectFailures);
    // Only processes that opened connections define the measured window.
    if (p.connectionsOpened > 0) {
      start = Math.min(start, p.startEpochMs);
      end = Math.max(end, p.endEpochMs);
    }
    if (STOP_SEVERITY[p.stoppedBy] > STOP_SEVERITY[stoppedBy]) stoppedBy = p.stoppedBy;
    for (const [k, b] of Object.entries(p.buckets)) {
      const key = Number(k);
      let into = buckets.get(key);
      if (!into) {
        into = { ok: 0, errors: 0, byVersion: {} };
        buckets.set(key, into);
      }
      into.ok += b.ok;
      into.errors += b.errors;
      addAll(into.byVersion, b.byVersion);
    }
    for (const [code, b64] of Object.entries(p.errorHistograms ?? {})) {
      let h = errorHists.get(code);
      if (!h) {
        h = newHistogram();
        errorHists.set(code, h);
      }
      h.add(hdr.decodeFromCompressedBase64(b64));
    }
    for (const [code, counts] of Object.entries(p.retryAfterMs ?? {}))
      addAll((retryAfter[code] ??= {}), counts);
    if (p.samples) {
      samples ??= [];
      for (const s of p.samples) samples.push(s);
    }
  }
  if (!Number.isFinite(start)) {
    start = parts[0]?.startEpochMs ?? 0;
    end = start;
  }
  // Closes are reported relative to the merged start.
  for (const p of parts) {
    for (const c of p.closes) closes.push({ ...c, atMs: round3(c.atMs + (p.startEpochMs - start)) });
  }
  const errorCount = Object.values(errors).reduce((a, b) => a + b, 0);
  const warningCount = Object.values(warnings).reduce((a, b) => a + b, 0);
  const durationMs = Math.max(0, end - start);
  const secs = durationMs / 1000;
  const completed = ok + errorCount - (errors['connection_closed'] ?? 0) - (errors['client_timeout'] ?? 0);

  const points: TimelinePoint[] = [...buckets.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([key, b]) => ({ tMs: key * bucketMs, ...b }));
  if (samples) {
    samples.sort((a, b) => a[0] - b[0]);
    samples = samples.map(([t, v]) => [round3(t - start), v]);
  }

  return {
    url: meta.url,
    body: meta.body,
    connections,
    connectionsOpened: opened,
    requestsPerConnection: meta.requestsPerConnection,
    inFlightPerConnection: meta.inFlightPerConnection,
    ratePerConnection: meta.ratePerConnection,
    warmupPerConnection: meta.warmupPerConnection,
    loadgenProcesses: parts.length,
    loadgenCpuPct: parts.map((p) => Math.round(p.cpuPct)),
    sent,
    completed,
    ok,
    errorCount,
    errors,
    warningCount,
    warnings,
    unmatched,
    notSent,
    durationMs: round3(durationMs),
    throughputRps: secs > 0 ? Math.round((ok / secs) * 10) / 10 : 0,
    completedRps: secs > 0 ? Math.round((completed / secs) * 10) / 10 : 0,
    latencyMs: summarizeHistogramMs(hist),
    versions,
    connectFailures,
    closes,
    stoppedBy,
    warmupErrors,
    timeline: { bucketMs, points },
    ...(samples ? { samples } : {}),
    errorLatencyMs: Object.fromEntries([...errorHists].map(([code, h]) => [code, summarizeHistogramMs(h)])),
    retryAfterMs: Object.fromEntries(
      Object.entries(retryAfter)
        .map(([code, counts]) => [code, summarizeCounts(counts)] as const)
        .filter((e): e is readonly [string, RetryAfterSummary] => e[1] !== undefined),
    ),
    startEpochMs: start,
    ...(meta.binary ? { binary: true } : {}),
    ...(meta.totalRequests !== undefined ? { totalRequests: meta.totalRequests } : {}),
  };
}
