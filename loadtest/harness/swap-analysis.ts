/**
 * Pure analysis of per-answer records for the `hot-swap` and `registry` scenarios: latency
 * quantiles, "during a reload" vs steady split, the per-connection epoch/version ordering
 * checks, the post-commit check, timelines and the small figures of the registry scenario.
 * No I/O; times are milliseconds on one clock (`performance.now()` of the bench process).
 */
import { quantile } from './quantile';

/** One answer (or failure) as a stream client recorded it. */
export interface AnswerRecord {
  /** connection index */
  conn: number;
  /** request id (unique per connection) */
  id: number;
  /** row of the digits data the input came from */
  row: number;
  /** when the request was written to the socket */
  sentMs: number;
  /** when the answer (or the failure) arrived */
  recvMs: number;
  /** set on a successful answer */
  version?: string;
  epoch?: number;
  label?: string;
  /** error code on a failed request (server `code`, or `client_timeout` / `connection_closed`) */
  error?: string;
  message?: string;
}

export interface Interval {
  start: number;
  end: number;
}

export interface LatencyStats {
  n: number;
  p50: number | undefined;
  p95: number | undefined;
  p99: number | undefined;
  max: number | undefined;
  mean: number | undefined;
}

export function latencyStats(values: readonly number[]): LatencyStats {
  const v = values.filter((x) => Number.isFinite(x));
  return {
    n: v.length,
    p50: quantile(v, 0.5),
    p95: quantile(v, 0.95),
    p99: quantile(v, 0.99),
    max: v.length ? v.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY) : undefined,
    mean: v.length ? v.reduce((a, b) => a + b, 0) / v.length : undefined,
  };
}

export function latencyMs(a: AnswerRecord): number {
  return a.recvMs - a.sentMs;
}

/** Whether [a.start, a.end] and [b.start, b.end] share at least one instant. */
export function overlaps(a: Interval, b: Interval): boolean {
  return a.start <= b.end && b.start <= a.end;
}

/**
 * Split answers into those whose request was in flight while a reload call was in progress
 * (the interval [sent, received] overlaps some [call start, call end]) and the rest.
 */
export function splitByIntervals<T extends Pick<AnswerRecord, 'sentMs' | 'recvMs'>>(
  answers: readonly T[],
  intervals: readonly Interval[],
): { during: T[]; steady: T[] } {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const during: T[] = [];
  const steady: T[] = [];
  for (const a of answers) {
    const span = { start: a.sentMs, end: a.recvMs };
    (sorted.some((iv) => overlaps(span, iv)) ? during : steady).push(a);
  }
  return { during, steady };
}

/** min / median / max (median of an even count = mean of the middle two). */
export function minMedianMax(
  xs: readonly number[],
): { n: number; min: number; median: number; max: number } | undefined {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return undefined;
  const mid = Math.floor(v.length / 2);
  return {
    n: v.length,
    min: v[0]!,
    median: v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2,
    max: v.at(-1)!,
  };
}

/** A committed reload as the scenario saw it. */
export interface Commit {
  /** epoch the reload committed */
  epoch: number;
  from: string;
  to: string;
  /** when the call started / when its answer arrived */
  calledMs: number;
  returnedMs: number;
}

/** epoch → the stable version it serves, from the starting epoch and the commits. */
export function epochVersions(
  initialEpoch: number,
  initialVersion: string,
  commits: readonly Commit[],
): Map<number, string> {
  const m = new Map<number, string>([[initialEpoch, initialVersion]]);
  for (const c of commits) m.set(c.epoch, c.to);
  return m;
}

export interface OrderCheck {
  /** ok answers examined */
  answers: number;
  connections: number;
  /** answers whose epoch is lower than an earlier answer's on the same connection */
  epochDecreases: number;
  /** answers whose version is not the stable version of their epoch */
  wrongVersionForEpoch: number;
  /** answers carrying an epoch no commit produced */
  unknownEpoch: number;
  /** answers from an older version after a newer epoch's answer on the same connection */
  oldAfterNew: number;
  /** first few violations, for the report */
  examples: string[];
  /** the offending answers themselves (at most `maxOffenders`), for diagnosis */
  offenders: AnswerRecord[];
}

/**
 * Per connection, in the order answers arrived: epochs never decrease, and every answer's
 * version is the stable version of its epoch (`epochs`). Failed requests are ignored.
 */
export function checkConnectionOrder(
  answers: readonly AnswerRecord[],
  epochs: ReadonlyMap<number, string>,
  maxExamples = 5,
  maxOffenders = 10_000,
): OrderCheck {
  const byConn = new Map<number, AnswerRecord[]>();
  for (const a of answers) {
    if (a.error !== undefined || a.epoch === undefined) continue;
    let list = byConn.get(a.conn);
    if (!list) byConn.set(a.conn, (list = []));
    list.push(a);
  }
  const out: OrderCheck = {
    answers: 0,
    connections: byConn.size,
    epochDecreases: 0,
    wrongVersionForEpoch: 0,
    unknownEpoch: 0,
    oldAfterNew: 0,
    examples: [],
    offenders: [],
  };
  const note = (s: string): void => {
    if (out.examples.length < maxExamples) out.examples.push(s);
  };
  const offend = (a: AnswerRecord): void => {
    if (out.offenders.length < maxOffenders && out.offenders.at(-1) !== a) out.offenders.push(a);
  };
  for (const [conn, list] of byConn) {
    list.sort((a, b) => a.recvMs - b.recvMs || a.id - b.id);
    let maxEpoch = Number.NEGATIVE_INFINITY;
    for (const a of list) {
      out.answers++;
      const epoch = a.epoch!;
      if (epoch < maxEpoch) {
        out.epochDecreases++;
        offend(a);
        note(`conn ${conn} id ${a.id}: epoch ${epoch} after epoch ${maxEpoch}`);
        const newer = epochs.get(maxEpoch);
        if (newer !== undefined && a.version !== newer) out.oldAfterNew++;
      }
      maxEpoch = Math.max(maxEpoch, epoch);
      const expected = epochs.get(epoch);
      if (expected === undefined) {
        out.unknownEpoch++;
        offend(a);
        note(`conn ${conn} id ${a.id}: epoch ${epoch} was never committed`);
      } else if (a.version !== expected) {
        out.wrongVersionForEpoch++;
        offend(a);
        note(`conn ${conn} id ${a.id}: version ${a.version} in epoch ${epoch} (stable ${expected})`);
      }
    }
  }
  return out;
}

export interface AfterCommitCheck {
  commits: number;
  /** ok answers sent after some commit returned */
  checked: number;
  /** of those, answers with an epoch older than the newest commit that had returned when they were sent */
  staleEpoch: number;
  /**
   * answers from the version a commit replaced, sent after that commit returned and before the
   * next reload call started (so no later reload can explain them)
   */
  releasedVersion: number;
  examples: string[];
}

/**
 * After each commit returned, no request sent from then on may be answered by an older epoch,
 * and (until the next reload call starts) none by the version the commit replaced.
 * `callStarts` are the start times of every reload call, committed or not.
 */
export function checkAfterCommits(
  answers: readonly AnswerRecord[],
  commits: readonly Commit[],
  callStarts: readonly number[],
  maxExamples = 5,
): AfterCommitCheck {
  const sorted = [...commits].sort((a, b) => a.returnedMs - b.returnedMs);
  const starts = [...callStarts].sort((a, b) => a - b);
  const out: AfterCommitCheck = {
    commits: sorted.length,
    checked: 0,
    staleEpoch: 0,
    releasedVersion: 0,
    examples: [],
  };
  for (const a of answers) {
    if (a.error !== undefined || a.epoch === undefined) continue;
    let last: Commit | undefined;
    for (const c of sorted) if (c.returnedMs <= a.sentMs) last = c;
    if (!last) continue;
    out.checked++;
    if (a.epoch < last.epoch) {
      out.staleEpoch++;
      if (out.examples.length < maxExamples)
        out.examples.push(
          `conn ${a.conn} id ${a.id}: epoch ${a.epoch} sent ${(a.sentMs - last.returnedMs).toFixed(1)} ms after epoch ${last.epoch} committed`,
        );
    }
    const nextCall = starts.find((s) => s > last!.returnedMs);
    if ((nextCall === undefined || a.sentMs < nextCall) && a.version === last.from && last.from !== last.to) {
      out.releasedVersion++;
      if (out.examples.length < maxExamples)
        out.examples.push(
          `conn ${a.conn} id ${a.id}: version ${a.version} after the switch to ${last.to} (epoch ${last.epoch})`,
        );
    }
  }
  return out;
}

export interface TimelineBucket {
  /** bucket start, ms since `t0` */
  tMs: number;
  byVersion: Record<string, number>;
  errors: number;
}

/** Answers per bucket (by arrival time) and version, errors separately; empty buckets included. */
export function timelineBuckets(
  answers: readonly AnswerRecord[],
  t0: number,
  bucketMs: number,
  endMs?: number,
): TimelineBucket[] {
  // a loop, not Math.max(...): hundreds of thousands of answers overflow the argument stack
  let last = endMs ?? 0;
  for (const a of answers) if (a.recvMs - t0 > last) last = a.recvMs - t0;
  const n = Math.max(0, Math.floor(last / bucketMs) + 1);
  const out: TimelineBucket[] = Array.from({ length: n }, (_, i) => ({
    tMs: i * bucketMs,
    byVersion: {},
    errors: 0,
  }));
  for (const a of answers) {
    const i = Math.floor((a.recvMs - t0) / bucketMs);
    const b = out[i];
    if (!b) continue;
    if (a.error !== undefined) b.errors++;
    else if (a.version !== undefined) b.byVersion[a.version] = (b.byVersion[a.version] ?? 0) + 1;
  }
  return out;
}

/** Count of each error code among `answers`. */
export function errorCounts(answers: readonly AnswerRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const a of answers) if (a.error !== undefined) out[a.error] = (out[a.error] ?? 0) + 1;
  return out;
}

/** Count of each version among successful answers. */
export function versionCounts(answers: readonly AnswerRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const a of answers)
    if (a.error === undefined && a.version !== undefined) out[a.version] = (out[a.version] ?? 0) + 1;
  return out;
}

/** Positions where two label lists differ (they must be the same length). */
export function countDisagreements(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) throw new Error(`label lists differ in length: ${a.length} vs ${b.length}`);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) n++;
  return n;
}

/** Share of `version` among successful answers (undefined when there is none). */
export function versionShare(answers: readonly AnswerRecord[], version: string): number | undefined {
  const ok = answers.filter((a) => a.error === undefined && a.version !== undefined);
  return ok.length ? ok.filter((a) => a.version === version).length / ok.length : undefined;
}

/**
 * Time from `callMs` to the first answer from `version` whose request was sent at or after
 * `callMs` (by arrival); undefined when none came.
 */
export function firstServedAfter(
  answers: readonly AnswerRecord[],
  callMs: number,
  version: string,
): { ms: number; answer: AnswerRecord } | undefined {
  let best: AnswerRecord | undefined;
  for (const a of answers) {
    if (a.error !== undefined || a.version !== version || a.sentMs < callMs) continue;
    if (!best || a.recvMs < best.recvMs) best = a;
  }
  return best ? { ms: best.recvMs - callMs, answer: best } : undefined;
}
