/**
 * The sliding-window analysis: cumulative counter samples in (what the server's own counters say at each
 * evaluation), per-check verdicts out. The window's totals are the newest sample minus the oldest one kept,
 * where the oldest kept is the last sample at or before (newest − windowMs): the checks always see about
 * `windowMs` of traffic, never more. A counter that went down (a node restarted, a slot was reused) makes the
 * window start again from that sample: a difference across a reset means nothing.
 */
import type { CheckName, ChecksPlan } from './plan';
import { proportionDifference, quantileBounds, wilson } from './stats';

/** One version's counters, cumulative since the server started. */
export interface VersionCounters {
  /** Answers that count for the error rate: successes and server-side errors (client faults left out). */
  requests: number;
  /** Server-side errors among them (model_error, internal, overloaded, deadline_exceeded, unavailable, ...). */
  errors: number;
  /** Request-duration histogram: cumulative count at or below each of the window's `bounds`. */
  latency: readonly number[];
}

export interface CounterSample {
  at: number;
  stable: VersionCounters;
  candidate: VersionCounters;
  /**
   * Mirrored requests (stable-served requests copied to the candidate): compared (agree / disagree), and those
   * the candidate failed with a fault of its own while stable answered (`candidateErrors`, optional: 0).
   */
  shadow: ShadowCounters;
}

export interface ShadowCounters {
  agree: number;
  disagree: number;
  candidateErrors?: number;
}

export interface WindowTotals {
  spanMs: number;
  stable: VersionCounters;
  candidate: VersionCounters;
  shadow: ShadowCounters;
}

/** What one new sample added since the previous one (0 after a reset). */
export interface SampleDelta {
  candidateRequests: number;
  comparisons: number;
  reset: boolean;
}

const zeroDelta = (reset: boolean): SampleDelta => ({ candidateRequests: 0, comparisons: 0, reset });

function versionDecreased(next: VersionCounters, previous: VersionCounters): boolean {
  if (next.requests < previous.requests || next.errors < previous.errors) return true;
  if (next.latency.length !== previous.latency.length) return true;
  return next.latency.some((count, index) => count < previous.latency[index]!);
}

function versionMinus(a: VersionCounters, b: VersionCounters): VersionCounters {
  return {
    requests: a.requests - b.requests,
    errors: a.errors - b.errors,
    latency: a.latency.map((count, index) => count - b.latency[index]!),
  };
}

export class SampleWindow {
  private samples: CounterSample[] = [];

  /** `bounds`: the latency histogram's upper bounds in seconds, the last one Infinity. */
  constructor(
    readonly windowMs: number,
    readonly bounds: readonly number[],
  ) {}

  get size(): number {
    return this.samples.length;
  }

  /** Adds a sample (times must not go back; one that does is ignored) and says what it added. */
  add(sample: CounterSample): SampleDelta {
    const last = this.samples[this.samples.length - 1];
    if (last && sample.at < last.at) return zeroDelta(false);
    if (
      sample.stable.latency.length !== this.bounds.length ||
      sample.candidate.latency.length !== this.bounds.length
    )
      throw new RangeError(`a sample's latency buckets must match the window's ${this.bounds.length} bounds`);
    if (
      last &&
      (versionDecreased(sample.stable, last.stable) ||
        versionDecreased(sample.candidate, last.candidate) ||
        sample.shadow.agree < last.shadow.agree ||
        sample.shadow.disagree < last.shadow.disagree ||
        (sample.shadow.candidateErrors ?? 0) < (last.shadow.candidateErrors ?? 0))
    ) {
      this.samples = [sample];
      return zeroDelta(true);
    }
    this.samples.push(sample);
    // Keep one sample at or before the window's start as the baseline.
    const start = sample.at - this.windowMs;
    while (this.samples.length > 2 && this.samples[1]!.at <= start) this.samples.shift();
    if (!last) return zeroDelta(false);
    return {
      candidateRequests: sample.candidate.requests - last.candidate.requests,
      comparisons: sample.shadow.agree - last.shadow.agree + (sample.shadow.disagree - last.shadow.disagree),
      reset: false,
    };
  }

  /** Newest minus baseline; undefined until there are two samples. */
  totals(): WindowTotals | undefined {
    if (this.samples.length < 2) return undefined;
    const first = this.samples[0]!;
    const last = this.samples[this.samples.length - 1]!;
    return {
      spanMs: last.at - first.at,
      stable: versionMinus(last.stable, first.stable),
      candidate: versionMinus(last.candidate, first.candidate),
      shadow: {
        agree: last.shadow.agree - first.shadow.agree,
        disagree: last.shadow.disagree - first.shadow.disagree,
        candidateErrors: (last.shadow.candidateErrors ?? 0) - (first.shadow.candidateErrors ?? 0),
      },
    };
  }
}

export type Verdict = 'pass' | 'fail' | 'insufficient';

export interface CheckResult {
  name: CheckName;
  /** The point estimate (error-rate difference, p99 ratio, disagreement share); null without data. */
  value: number | null;
  threshold: number;
  verdict: Verdict;
  candidateSamples: number;
  stableSamples: number;
  /** The bounds behind the verdict, in words (goes into the rollback reason). */
  detail: string;
}

const fmt = (value: number): string =>
  Number.isFinite(value) ? String(Number(value.toPrecision(4))) : String(value);

/**
 * Error rate: candidate − stable error rate, Newcombe interval at 95 % one-sided. fail when its lower bound
 * is above `maxIncrease` (the candidate is worse by more than allowed, at that confidence); pass when its
 * upper bound is at or below it; insufficient otherwise or with fewer than `minSamples` answers either side.
 * The candidate's answers are those it served and those it gave on mirrored copies (compared, or failed by
 * its own fault): so a shadow phase, where it serves nothing, still sees a candidate that errors.
 */
export function errorRateCheck(
  totals: WindowTotals | undefined,
  plan: NonNullable<ChecksPlan['errorRate']>,
  minSamples: number,
): CheckResult {
  const mirrored = totals?.shadow ?? { agree: 0, disagree: 0 };
  const mirroredErrors = mirrored.candidateErrors ?? 0;
  const served = totals?.candidate ?? { requests: 0, errors: 0 };
  const c = {
    requests: served.requests + mirrored.agree + mirrored.disagree + mirroredErrors,
    errors: served.errors + mirroredErrors,
  };
  const s = totals?.stable ?? { requests: 0, errors: 0 };
  const base = {
    name: 'error_rate' as const,
    threshold: plan.maxIncrease,
    candidateSamples: c.requests,
    stableSamples: s.requests,
  };
  if (c.requests < minSamples || s.requests < minSamples)
    return {
      ...base,
      value: c.requests > 0 && s.requests > 0 ? c.errors / c.requests - s.errors / s.requests : null,
      verdict: 'insufficient',
      detail: `needs ${minSamples} answers each side (candidate ${c.requests}, stable ${s.requests})`,
    };
  const d = proportionDifference(c.errors, c.requests, s.errors, s.requests);
  const detail = `error rate candidate ${c.errors}/${c.requests} − stable ${s.errors}/${s.requests} = ${fmt(d.estimate)}, 95% bounds [${fmt(d.lower)}, ${fmt(d.upper)}] vs max increase ${plan.maxIncrease}`;
  const verdict: Verdict =
    d.lower > plan.maxIncrease ? 'fail' : d.upper <= plan.maxIncrease ? 'pass' : 'insufficient';
  return { ...base, value: d.estimate, verdict, detail };
}

/**
 * p99 ratio: candidate p99 / stable p99 from the request-duration histograms, each raised to `floorMs`. The
 * candidate's p99 is bounded by order statistics (stats.ts); the stable side, which serves the larger share
 * in every step but the last ones, is taken at its estimate. fail when the candidate's lower bound over
 * stable's p99 is above `max`; pass when its upper bound over it is at or below `max`; insufficient otherwise
 * or with fewer than `minSamples` answers either side. Buckets are coarse (0.5 ms … 10 s): a ratio near `max`
 * stays insufficient rather than guess inside a bucket.
 */
export function p99RatioCheck(
  totals: WindowTotals | undefined,
  bounds: readonly number[],
  plan: NonNullable<ChecksPlan['p99Ratio']>,
  minSamples: number,
): CheckResult {
  const empty = bounds.map(() => 0);
  const c = quantileBounds(bounds, totals?.candidate.latency ?? empty, 0.99);
  const s = quantileBounds(bounds, totals?.stable.latency ?? empty, 0.99);
  const base = { name: 'p99_ratio' as const, threshold: plan.max, candidateSamples: c.n, stableSamples: s.n };
  const floor = plan.floorMs / 1000;
  const reference = Math.max(s.estimate, floor);
  const ratio = (value: number): number => (reference > 0 ? Math.max(value, floor) / reference : 1);
  if (c.n < minSamples || s.n < minSamples)
    return {
      ...base,
      value: c.n > 0 && s.n > 0 ? ratio(c.estimate) : null,
      verdict: 'insufficient',
      detail: `needs ${minSamples} answers each side (candidate ${c.n}, stable ${s.n})`,
    };
  const value = ratio(c.estimate);
  const lower = ratio(c.lower);
  const upper = ratio(c.upper);
  const detail = `p99 candidate ${fmt(c.estimate * 1000)} ms (95% bounds [${fmt(c.lower * 1000)}, ${fmt(c.upper * 1000)}] ms, n=${c.n}) / stable ${fmt(s.estimate * 1000)} ms (n=${s.n}), floor ${plan.floorMs} ms: ratio ${fmt(value)} [${fmt(lower)}, ${fmt(upper)}] vs max ${plan.max}`;
  const verdict: Verdict = lower > plan.max ? 'fail' : upper <= plan.max ? 'pass' : 'insufficient';
  return { ...base, value, verdict, detail };
}

/**
 * Disagreement: disagreeing / compared mirrored requests, Wilson interval at 95 % one-sided. fail when the
 * lower bound is above `max`; pass when the upper bound is at or below it; insufficient otherwise or with
 * fewer than `minSamples` comparisons. Both sides of a comparison answered the same input, so
 * `stableSamples` = `candidateSamples` = comparisons.
 */
export function disagreementCheck(
  totals: WindowTotals | undefined,
  plan: NonNullable<ChecksPlan['disagreement']>,
  minSamples: number,
): CheckResult {
  const k = totals?.shadow.disagree ?? 0;
  const n = k + (totals?.shadow.agree ?? 0);
  const base = { name: 'disagreement' as const, threshold: plan.max, candidateSamples: n, stableSamples: n };
  if (n < minSamples)
    return {
      ...base,
      value: n > 0 ? k / n : null,
      verdict: 'insufficient',
      detail: `needs ${minSamples} comparisons (has ${n})`,
    };
  const bounds = wilson(k, n);
  const detail = `disagreement ${k}/${n} = ${fmt(k / n)}, 95% bounds [${fmt(bounds.lower)}, ${fmt(bounds.upper)}] vs max ${plan.max}`;
  const verdict: Verdict =
    bounds.lower > plan.max ? 'fail' : bounds.upper <= plan.max ? 'pass' : 'insufficient';
  return { ...base, value: k / n, verdict, detail };
}

/** Every check the plan turns on, in CHECK_NAMES order. */
export function runChecks(
  totals: WindowTotals | undefined,
  bounds: readonly number[],
  checks: ChecksPlan,
  minSamples: number,
): CheckResult[] {
  const results: CheckResult[] = [];
  if (checks.errorRate) results.push(errorRateCheck(totals, checks.errorRate, minSamples));
  if (checks.p99Ratio) results.push(p99RatioCheck(totals, bounds, checks.p99Ratio, minSamples));
  if (checks.disagreement) results.push(disagreementCheck(totals, checks.disagreement, minSamples));
  return results;
}
