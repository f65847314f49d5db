/**
 * Pure figures of the `stream-chaos` scenario: the victim's output against the reference's (duplicates,
 * losses, value mismatches by decision id), the Prometheus text the pipeline exposes (counters, gauges and
 * histogram quantiles), the unprocessed lag with held acks, and the replay arithmetic per kill. No I/O.
 */
import { type FirstPrediction, type FreshnessSummary, freshnessOf } from './analysis';

/** One prediction as read back from an output stream. */
export interface OutputRecord {
  decisionId: string;
  /** the broker's Msg-Id header (must equal the decision id) */
  msgId: string | undefined;
  risk: number;
  revision: number;
  eventId: string;
  eventMs: number;
  storedMs: number;
}

export interface OutputComparison {
  referenceCount: number;
  victimCount: number;
  /** decision ids stored more than once in the victim's output (must be none) */
  duplicates: string[];
  /** decision ids of the reference missing in the victim's output (must be none) */
  lost: string[];
  /** decision ids in the victim's output the reference does not have (must be none) */
  extra: string[];
  /** the same decision with a different risk (must be none) */
  mismatches: { id: string; reference: number; victim: number }[];
  /** messages whose Msg-Id is not their decision id */
  msgIdMismatches: number;
  /** duplicates in the reference's own output (a failure-free run: must be none as well) */
  referenceDuplicates: string[];
}

function byId(list: readonly OutputRecord[]): { map: Map<string, number>; dups: string[]; badMsgId: number } {
  const map = new Map<string, number>();
  const dups: string[] = [];
  let badMsgId = 0;
  for (const p of list) {
    if (p.msgId !== p.decisionId) badMsgId++;
    if (map.has(p.decisionId)) dups.push(p.decisionId);
    else map.set(p.decisionId, p.risk);
  }
  return { map, dups, badMsgId };
}

/** Decision by decision: what the victim published against what the failure-free reference did. */
export function compareOutputs(
  reference: readonly OutputRecord[],
  victim: readonly OutputRecord[],
): OutputComparison {
  const ref = byId(reference);
  const vic = byId(victim);
  const lost: string[] = [];
  const mismatches: OutputComparison['mismatches'] = [];
  for (const [id, risk] of ref.map) {
    const got = vic.map.get(id);
    if (got === undefined) lost.push(id);
    else if (got !== risk) mismatches.push({ id, reference: risk, victim: got });
  }
  const extra = [...vic.map.keys()].filter((id) => !ref.map.has(id));
  return {
    referenceCount: reference.length,
    victimCount: victim.length,
    duplicates: vic.dups,
    lost,
    extra,
    mismatches,
    msgIdMismatches: vic.badMsgId + ref.badMsgId,
    referenceDuplicates: ref.dups,
  };
}

/** A Prometheus text exposition as `name{labels}` → value (samples only; comments skipped). */
export function parseProm(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    if (at <= 0) continue;
    const v = Number(line.slice(at + 1));
    if (!Number.isNaN(v)) out.set(line.slice(0, at), v);
  }
  return out;
}

/** A sample by bare name (unlabelled), or the sum over its labelled series; undefined when absent. */
export function promValue(m: ReadonlyMap<string, number>, name: string): number | undefined {
  const bare = m.get(name);
  if (bare !== undefined) return bare;
  let sum: number | undefined;
  for (const [k, v] of m) if (k.startsWith(`${name}{`)) sum = (sum ?? 0) + v;
  return sum;
}

/** A histogram's cumulative buckets (le → count, ascending), its count and sum. */
export interface PromHistogram {
  buckets: [number, number][];
  count: number;
  sum: number;
}

export function promHistogram(m: ReadonlyMap<string, number>, name: string): PromHistogram | undefined {
  const buckets: [number, number][] = [];
  for (const [k, v] of m) {
    if (!k.startsWith(`${name}_bucket{`)) continue;
    const le = /le="([^"]+)"/.exec(k)?.[1];
    if (le === undefined) continue;
    buckets.push([le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le), v]);
  }
  const count = m.get(`${name}_count`);
  if (buckets.length === 0 || count === undefined) return undefined;
  buckets.sort((a, b) => a[0] - b[0]);
  return { buckets, count, sum: m.get(`${name}_sum`) ?? 0 };
}

/** The two histograms' difference (the observations between two scrapes of one process). */
export function histogramDelta(after: PromHistogram, before: PromHistogram | undefined): PromHistogram {
  if (!before) return after;
  return {
    buckets: after.buckets.map(([le, c]) => [le, c - (before.buckets.find((b) => b[0] === le)?.[1] ?? 0)]),
    count: after.count - before.count,
    sum: after.sum - before.sum,
  };
}

/**
 * The q-quantile of a histogram as the upper bound of the bucket that holds it (what the buckets can say;
 * NaN when empty). The +Inf bucket answers with the largest finite bound, marked by `beyond`.
 */
export function histogramQuantile(h: PromHistogram, q: number): { value: number; beyond: boolean } {
  if (h.count <= 0) return { value: Number.NaN, beyond: false };
  const want = Math.ceil(q * h.count);
  let lastFinite = 0;
  for (const [le, c] of h.buckets) {
    if (Number.isFinite(le)) lastFinite = le;
    if (c >= want)
      return Number.isFinite(le) ? { value: le, beyond: false } : { value: lastFinite, beyond: true };
  }
  return { value: lastFinite, beyond: true };
}

/**
 * Events a pipeline process has processed, with acks held for checkpoints: the last completed checkpoint's
 * position plus the acks held since (the consumer's ack_pending cannot say it: it includes those held acks).
 * Monotone per process: while a checkpoint is written its held acks are handed to it before its position
 * is the completed one, so position + held dips for that moment — `previous` (same process) bridges it.
 */
export function processedCount(position: number, heldAcks: number, previous?: number): number {
  return Math.max(position + heldAcks, previous ?? 0);
}

/** Stored but not yet processed: the input stream's last sequence minus processedCount. */
export function unprocessedLag(lastSeq: number, processed: number): number {
  return Math.max(0, lastSeq - processed);
}

/** The replay arithmetic of one kill: measured re-processed span against (time since checkpoint) × rate. */
export interface ReplayArithmetic {
  /** seconds since the last completed checkpoint at the kill */
  sinceCheckpointS: number;
  rate: number;
  /** sinceCheckpointS × rate */
  expected: number;
  /** events processed at the kill minus the restored checkpoint's position: what was done twice */
  measured: number;
  /** measured ÷ expected (undefined when nothing was expected) */
  ratio: number | undefined;
}

export function replayArithmetic(
  sinceCheckpointS: number,
  rate: number,
  processedAtKill: number,
  restoredPosition: number,
): ReplayArithmetic {
  const expected = sinceCheckpointS * rate;
  const measured = Math.max(0, processedAtKill - restoredPosition);
  return {
    sinceCheckpointS,
    rate,
    expected,
    measured,
    ratio: expected > 0 ? measured / expected : undefined,
  };
}

/** First predictions whose event time lies inside any of the windows, and those outside all (after `fromMs`). */
export function splitByWindows(
  preds: readonly FirstPrediction[],
  windows: readonly [number, number][],
  fromMs: number,
  toMs: number,
): { inside: FirstPrediction[]; outside: FirstPrediction[] } {
  const inside: FirstPrediction[] = [];
  const outside: FirstPrediction[] = [];
  for (const p of preds) {
    if (p.eventMs < fromMs || p.eventMs >= toMs) continue;
    if (windows.some(([a, b]) => p.eventMs >= a && p.eventMs < b)) inside.push(p);
    else outside.push(p);
  }
  return { inside, outside };
}

/** Freshness of the first predictions of events in [fromMs, toMs). */
export function freshnessIn(
  preds: readonly FirstPrediction[],
  fromMs: number,
  toMs: number,
): FreshnessSummary {
  return freshnessOf(preds.filter((p) => p.eventMs >= fromMs && p.eventMs < toMs));
}

/** First time ≥ fromMs at which `value` stays below `limit` for `hold` samples in a row; undefined: never. */
export function firstBelow(
  series: readonly { tMs: number; value: number }[],
  fromMs: number,
  limit: number,
  hold = 2,
): number | undefined {
  const w = series.filter((s) => s.tMs >= fromMs);
  for (let i = 0; i + hold <= w.length; i++) {
    if (w.slice(i, i + hold).every((s) => s.value < limit)) return w[i]!.tMs;
  }
  return undefined;
}

/** The partition token of an event subject `<eventsPrefix>.<p>.<delivery_id>`; undefined when it does not match. */
export function partitionOfSubject(subject: string, eventsPrefix: string): number | undefined {
  if (!subject.startsWith(`${eventsPrefix}.`)) return undefined;
  const token = subject.slice(eventsPrefix.length + 1).split('.')[0] ?? '';
  return /^\d+$/.test(token) ? Number(token) : undefined;
}

/** One sample of a partitioned pipeline: its unprocessed lag, and its partitions as the live instances see them. */
export interface CoverageSample {
  tMs: number;
  /** Σ over the partitions' consumers of messages not yet delivered */
  lag: number;
  /** partitions owned by an instance that answered /health */
  covered: number;
  /** of those, partitions still replaying after a restore */
  replaying: number;
}

export interface Recovery {
  /** first sample with every partition owned again (restart, or takeover after the lease TTL) */
  ownedAt?: number;
  /** first sample from ownedAt on with no partition replaying */
  replayDoneAt?: number;
  /** first sample where, for `hold` samples in a row, every partition is owned, none replays and lag < limit */
  recoveredAt?: number;
}

/** When a partitioned pipeline was whole again after `fromMs` (a kill): owned, replay done, lag back to normal. */
export function recoveryAfter(
  samples: readonly CoverageSample[],
  fromMs: number,
  partitions: number,
  lagLimit: number,
  hold = 2,
): Recovery {
  const w = samples.filter((s) => s.tMs >= fromMs);
  const out: Recovery = {};
  const owned = w.findIndex((s) => s.covered >= partitions);
  if (owned < 0) return out;
  out.ownedAt = w[owned]!.tMs;
  const done = w.findIndex((s, i) => i >= owned && s.covered >= partitions && s.replaying === 0);
  if (done >= 0) out.replayDoneAt = w[done]!.tMs;
  const ok = (s: CoverageSample): boolean => s.covered >= partitions && s.replaying === 0 && s.lag < lagLimit;
  for (let i = owned; i + hold <= w.length; i++) {
    if (w.slice(i, i + hold).every(ok)) {
      out.recoveredAt = w[i]!.tMs;
      break;
    }
  }
  return out;
}

/** One completed checkpoint as the pipeline logged it, with the partition its position belongs to. */
export interface CheckpointRecord {
  partition: number;
  bytes: number;
  ms: number;
}

export interface PartitionCheckpoints {
  partition: number;
  count: number;
  p50Ms: number;
  maxMs: number;
  meanMs: number;
  lastBytes: number;
  maxBytes: number;
}

/** Checkpoint duration and size per partition (in the order given: the last is the latest). */
export function checkpointsByPartition(list: readonly CheckpointRecord[]): PartitionCheckpoints[] {
  const by = new Map<number, CheckpointRecord[]>();
  for (const c of list) by.set(c.partition, [...(by.get(c.partition) ?? []), c]);
  return [...by.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([partition, cs]) => {
      const ms = cs.map((c) => c.ms).sort((a, b) => a - b);
      return {
        partition,
        count: cs.length,
        p50Ms: ms[Math.ceil(ms.length / 2) - 1]!,
        maxMs: ms[ms.length - 1]!,
        meanMs: ms.reduce((a, b) => a + b, 0) / ms.length,
        lastBytes: cs[cs.length - 1]!.bytes,
        maxBytes: Math.max(...cs.map((c) => c.bytes)),
      };
    });
}

/**
 * A per-process counter summed over instances between two scrapes, keyed by pid: a pid seen in both adds
 * its growth, a pid only in `after` (a restarted process: its counter began at 0) adds all of it.
 */
export function counterDelta(
  before: ReadonlyMap<number, number>,
  after: ReadonlyMap<number, number>,
): number {
  let sum = 0;
  for (const [pid, v] of after) sum += Math.max(0, v - (before.get(pid) ?? 0));
  return sum;
}
