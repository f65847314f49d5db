/**
 * Pure figures of the `stream` bench scenario: freshness percentiles from the broker's stored times of
 * first predictions, per-second p95 timelines, lag growth, drain times and the zero-loss verdict.
 * No I/O: the scenario feeds it what it read from the broker and sampled from the pipeline's /health.
 */
import { quantileSorted } from '../harness/quantile';

/** A first prediction (revision 0) as stored: the broker's timestamp and the event's own time, epoch ms. */
export interface FirstPrediction {
  storedMs: number;
  eventMs: number;
  /** the broker's stored time of the input event, when read back (splits publisher delay from pipeline time) */
  inStoredMs?: number;
}

export interface FreshnessSummary {
  count: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

/** p50/p95/p99/max of freshness (stored − event time, ms); count 0 → NaN figures. */
export function freshnessOf(preds: readonly FirstPrediction[]): FreshnessSummary {
  const xs = preds.map((p) => p.storedMs - p.eventMs).sort((a, b) => a - b);
  return {
    count: xs.length,
    p50: quantileSorted(xs, 0.5),
    p95: quantileSorted(xs, 0.95),
    p99: quantileSorted(xs, 0.99),
    max: xs.length ? xs[xs.length - 1]! : Number.NaN,
  };
}

/**
 * Freshness split in two: publisher delay (input stored − event time: the simulator's own lateness, which a
 * starved publisher adds) and pipeline time (prediction stored − input stored: broker in → broker out).
 */
export function freshnessParts(preds: readonly FirstPrediction[]): {
  publisher: FreshnessSummary;
  pipeline: FreshnessSummary;
} {
  const joined = preds.filter((p) => p.inStoredMs !== undefined);
  return {
    publisher: freshnessOf(joined.map((p) => ({ storedMs: p.inStoredMs!, eventMs: p.eventMs }))),
    pipeline: freshnessOf(joined.map((p) => ({ storedMs: p.storedMs, eventMs: p.inStoredMs! }))),
  };
}

/** The predictions of events whose event time lies in [fromMs, toMs): the measured window. */
export function inEventWindow(
  preds: readonly FirstPrediction[],
  fromMs: number,
  toMs: number,
): FirstPrediction[] {
  return preds.filter((p) => p.eventMs >= fromMs && p.eventMs < toMs);
}

/**
 * Freshness p95 per second of *stored* time (what a consumer of the output saw each second), as
 * [seconds since t0, p95 ms]; seconds with no prediction are left out.
 */
export function perSecondP95(preds: readonly FirstPrediction[], t0Ms: number): [number, number][] {
  const buckets = new Map<number, number[]>();
  for (const p of preds) {
    const s = Math.floor((p.storedMs - t0Ms) / 1000);
    let b = buckets.get(s);
    if (!b) buckets.set(s, (b = []));
    b.push(p.storedMs - p.eventMs);
  }
  return [...buckets.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([s, xs]) => [
      s,
      quantileSorted(
        xs.sort((a, b) => a - b),
        0.95,
      ),
    ]);
}

/** One /health sample of the pipeline. `lag` = num_pending + ack_pending: stored events not yet acked. */
export interface LagSample {
  tMs: number;
  pending: number;
  ackPending: number;
  /** Of ackPending, processed and published, their acks held for the next checkpoint (not lag). */
  held: number;
  received: number;
  predictions: number;
  paused: boolean;
}

/** Events not processed yet: pending, and delivered but not done (a checkpoint's held acks are done). */
export const lagOf = (s: LagSample): number => s.pending + Math.max(0, s.ackPending - s.held);

/** Least-squares slope of y over x (per unit of x); undefined with fewer than 2 distinct x. */
export function slope(points: readonly (readonly [number, number])[]): number | undefined {
  const n = points.length;
  if (n < 2) return undefined;
  const mx = points.reduce((a, p) => a + p[0], 0) / n;
  const my = points.reduce((a, p) => a + p[1], 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (const [x, y] of points) {
    sxx += (x - mx) ** 2;
    sxy += (x - mx) * (y - my);
  }
  return sxx === 0 ? undefined : sxy / sxx;
}

export interface LagFigures {
  /** most messages stored but not yet acked (pending + ack_pending) seen in the window */
  maxLag: number;
  maxPending: number;
  /** growth of the lag over the window, messages/s (least squares) */
  growthPerS: number | undefined;
  /** lag at the window's last sample */
  endLag: number;
}

export function lagFigures(samples: readonly LagSample[], fromMs: number, toMs: number): LagFigures {
  const w = samples.filter((s) => s.tMs >= fromMs && s.tMs <= toMs);
  return {
    maxLag: w.reduce((m, s) => Math.max(m, lagOf(s)), 0),
    maxPending: w.reduce((m, s) => Math.max(m, s.pending), 0),
    growthPerS: slope(w.map((s) => [s.tMs / 1000, lagOf(s)] as const)),
    endLag: w.length ? lagOf(w[w.length - 1]!) : 0,
  };
}

/**
 * The lag is "not growing" when, over the measured window, it grew by less than half a second of input
 * (growth/s × window s < rate × 0.5 s) — a queue that only jitters, not one that builds up.
 */
export function lagStable(f: LagFigures, rate: number, windowS: number): boolean {
  return f.growthPerS === undefined || f.growthPerS * windowS < rate * 0.5;
}

/** Pipeline counters (GET /health `counts`) — differences over one run. */
export interface CountsDelta {
  received: number;
  duplicates: number;
  invalid: number;
  late: number;
  dead_letters: number;
  /** first predictions the pipeline says it published */
  predictions: number;
  /** accepted events with no prediction at their time (streaminfer_stream_not_ready_events_total) */
  notReady: number;
}

export interface ZeroLossInput {
  /** messages the input stream gained from the simulator (its `stored`: sent − broker duplicates) */
  stored: number;
  counts: CountsDelta;
  /** consumer num_pending and ack_pending once the run has drained */
  pendingEnd: number;
  ackPendingEnd: number;
  /**
   * of ackPendingEnd, acks the pipeline holds for its next checkpoint (their events processed and their
   * effects PubAcked; the shipped interval is 30 s, longer than a quick run's drain wait)
   */
  heldEnd?: number;
  /** first predictions read back from the output stream for this run, and their distinct event ids */
  firstInStream: number;
  distinctFirstInStream: number;
  /**
   * events read back from the input stream for this run (distinct ids) and how many of them have no first
   * prediction in the output stream; undefined when the input was not read back
   */
  eventsInStream?: number;
  unpredicted?: number;
}

export interface ZeroLoss {
  ok: boolean;
  /** received − duplicates: at least the stored events (a redelivery of an unsettled message counts again) */
  processed: number;
  /** first predictions in the output stream + events counted not-ready */
  accounted: number;
  /** stored events with no first prediction (by id, from the broker); undefined when not read back */
  unpredicted?: number;
  /**
   * first predictions the pipeline counted beyond those stored: effects published again for a redelivered
   * message (after ack_wait), which the broker deduplicated by Msg-Id — not a second effect
   */
  republished: number;
  /** what broke the rule, empty when ok */
  reasons: string[];
}

/**
 * Zero loss, precisely — judged on what the broker holds, with the pipeline's counters as bounds:
 * (1) once drained, the durable consumer has nothing pending, and nothing unacked but the acks held for the
 *     next checkpoint (every stored event was delivered and processed; the pipeline acks, or holds the ack,
 *     only after its effects' PubAcks);
 * (2) the pipeline processed at least every stored event (received − duplicates ≥ stored);
 * (3) nothing was dead-lettered or sent to the late side output (the workload is clean);
 * (4) no event has two first predictions in the output stream, and the stream holds no more first
 *     predictions than the pipeline counted (a counted one was PubAcked);
 * (5) every stored event is accounted for: read back by id, the events with no first prediction are no
 *     more than the not-ready count (events before their delivery's first status or GPS point: nothing to
 *     predict yet); without the read-back, first predictions + not-ready ≥ stored.
 */
export function zeroLoss(i: ZeroLossInput): ZeroLoss {
  const c = i.counts;
  const processed = c.received - c.duplicates;
  const accounted = i.firstInStream + c.notReady;
  const reasons: string[] = [];
  const unprocessed = i.ackPendingEnd - (i.heldEnd ?? 0);
  if (i.pendingEnd !== 0 || unprocessed > 0)
    reasons.push(
      `consumer not drained: ${i.pendingEnd} pending, ${i.ackPendingEnd} unacked (${Math.max(0, unprocessed)} not processed)`,
    );
  if (processed < i.stored) reasons.push(`processed ${processed} < stored ${i.stored}`);
  if (c.dead_letters || c.invalid || c.late)
    reasons.push(`${c.dead_letters} dead letters, ${c.invalid} invalid, ${c.late} late on a clean workload`);
  if (i.distinctFirstInStream !== i.firstInStream)
    reasons.push(`${i.firstInStream - i.distinctFirstInStream} events with two first predictions`);
  if (i.firstInStream > c.predictions)
    reasons.push(
      `${i.firstInStream} first predictions in the stream, more than the ${c.predictions} counted`,
    );
  if (i.eventsInStream !== undefined && i.eventsInStream < i.stored)
    reasons.push(`${i.eventsInStream} events read back, ${i.stored} stored`);
  if (i.unpredicted !== undefined) {
    if (i.unpredicted > c.notReady)
      reasons.push(`${i.unpredicted} stored events without a first prediction, only ${c.notReady} not ready`);
  } else if (accounted < i.stored - c.invalid - c.late) {
    reasons.push(`accounted ${accounted} < stored ${i.stored - c.invalid - c.late}`);
  }
  return {
    ok: reasons.length === 0,
    processed,
    accounted,
    ...(i.unpredicted !== undefined ? { unpredicted: i.unpredicted } : {}),
    republished: Math.max(0, c.predictions - i.firstInStream),
    reasons,
  };
}

/**
 * First sample at or after `fromMs` where the lag is below `threshold` for `hold` samples in a row;
 * returns its time, or undefined when it never settles.
 */
export function settledAt(
  samples: readonly LagSample[],
  fromMs: number,
  threshold: number,
  hold = 2,
): number | undefined {
  const w = samples.filter((s) => s.tMs >= fromMs);
  for (let i = 0; i + hold <= w.length; i++) {
    if (w.slice(i, i + hold).every((s) => lagOf(s) < threshold)) return w[i]!.tMs;
  }
  return undefined;
}

/**
 * First second ≥ `fromS` of a per-second series from which the value stays under `limit` for `hold`
 * seconds in a row (or to the end of the series); undefined when it never does.
 */
export function recoveredAt(
  series: readonly [number, number][],
  fromS: number,
  limit: number,
  hold = 3,
): number | undefined {
  const w = series.filter(([s]) => s >= fromS);
  for (let i = 0; i < w.length; i++) {
    const run = w.slice(i, i + hold);
    if (run.every(([, v]) => v < limit)) return w[i]![0];
  }
  return undefined;
}

/** Least-squares rate of `received` (events/s) between two times: the pipeline's processing rate. */
export function receivedRate(
  samples: readonly LagSample[],
  fromMs: number,
  toMs: number,
): number | undefined {
  const w = samples.filter((s) => s.tMs >= fromMs && s.tMs <= toMs);
  return slope(w.map((s) => [s.tMs / 1000, s.received] as const));
}

/** Rates rounded to a multiple of `step` (≥ step): 50 % of 5,000 → 2,500. */
export function roundRate(rate: number, step = 100): number {
  return Math.max(step, Math.round(rate / step) * step);
}
