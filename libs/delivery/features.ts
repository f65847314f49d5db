/**
 * The delay-risk model's inputs, computed from one delivery's events up to an evaluation time
 * `t` (epoch ms). Pure and order-independent: events are sorted by event time (ties by
 * event_id) and deduplicated by event_id first, so arrival order never changes the result.
 * Only events with event_time ≤ t count.
 *
 *   speed_5m_kmh           path length between consecutive GPS points in (t − 5 min, t],
 *                          divided by the time between the first and last of them (km/h);
 *                          0 with fewer than two points. Evaluated at minute boundaries this is
 *                          the sliding 5-minute window with a 1-minute step.
 *   distance_remaining_km  straight-line (haversine) distance from the latest GPS point to the
 *                          destination given on the first status event (dest_lat/dest_lon)
 *   stops                  stationary periods so far: maximal runs of consecutive GPS points
 *                          within STOP_RADIUS_KM of the run's first point lasting ≥ STOP_MIN_MS
 *   traffic_alerts_10m     traffic events in (t − 10 min, t] on the delivery's route (the
 *                          route_id of its status events; every traffic event when none is given)
 *   minutes_to_promised    (promised_time − t) in minutes; negative once overdue
 */
import { haversineKm, segmentUm, UM_PER_KM } from './geo';
import type { DeliveryEvent, GpsEvent, StatusEvent, TrafficEvent } from './schema';

export const FEATURE_NAMES = [
  'speed_5m_kmh',
  'distance_remaining_km',
  'stops',
  'traffic_alerts_10m',
  'minutes_to_promised',
] as const;
export type FeatureName = (typeof FEATURE_NAMES)[number];
export const N_FEATURES = FEATURE_NAMES.length;

export type DeliveryFeatures = Record<FeatureName, number>;

export const SPEED_WINDOW_MS = 5 * 60_000;
export const SPEED_STEP_MS = 60_000;
export const TRAFFIC_WINDOW_MS = 10 * 60_000;
export const STOP_RADIUS_KM = 0.03;
export const STOP_MIN_MS = 60_000;

/** Why features cannot be computed yet (the pipeline waits for more events). */
export type NotReady = 'no_promised_time' | 'no_destination' | 'no_gps';

export type FeatureResult = { ok: true; features: DeliveryFeatures } | { ok: false; missing: NotReady };

/** Event-time order, ties by event_id: the order features are computed in. */
export function byTime(a: DeliveryEvent, b: DeliveryEvent): number {
  return a.eventTimeMs - b.eventTimeMs || (a.event_id < b.event_id ? -1 : a.event_id > b.event_id ? 1 : 0);
}

/** Events with event_time ≤ t, deduplicated by event_id, in event-time order. */
export function eventsUpTo(events: Iterable<DeliveryEvent>, t: number): DeliveryEvent[] {
  const seen = new Set<string>();
  const out: DeliveryEvent[] = [];
  for (const e of events) {
    if (e.eventTimeMs > t || seen.has(e.event_id)) continue;
    seen.add(e.event_id);
    out.push(e);
  }
  return out.sort(byTime);
}

/** Average speed (km/h) over sorted GPS points; 0 with fewer than two points or no elapsed time. */
export function pathSpeedKmh(points: readonly GpsEvent[]): number {
  if (points.length < 2) return 0;
  let um = 0;
  for (let i = 1; i < points.length; i++) um += gpsSegmentUm(points[i - 1]!, points[i]!);
  return speedKmh(um, points[0]!.eventTimeMs, points[points.length - 1]!.eventTimeMs);
}

/** The path length from `a` to `b` in whole micrometres (geo.ts UM_PER_KM). */
export function gpsSegmentUm(a: GpsEvent, b: GpsEvent): number {
  return segmentUm(a.driver_lat, a.driver_lon, b.driver_lat, b.driver_lon);
}

/** km/h of a path of `um` micrometres from time `fromMs` to `toMs`; 0 with no elapsed time. */
export function speedKmh(um: number, fromMs: number, toMs: number): number {
  const hours = (toMs - fromMs) / 3_600_000;
  return hours > 0 ? um / UM_PER_KM / hours : 0;
}

/** Stationary periods in sorted GPS points. */
export function countStops(points: readonly GpsEvent[]): number {
  return scanStops(points, points.length).stops;
}

/**
 * The stop scan over the first `count` of sorted GPS points (nothing allocated): from each anchor, the run of
 * points within STOP_RADIUS_KM of it is a stop when it lasts STOP_MIN_MS, and the scan goes on after it (or
 * from the next point when it is not). With `settledBefore`, only runs decided by points before that time are
 * taken — the scan stops at the first anchor at or after it, or whose run could still grow — and `next` is
 * where it stopped (the first point not taken).
 */
function scanStops(
  points: readonly GpsEvent[],
  count: number,
  settledBefore = Number.POSITIVE_INFINITY,
  from?: SettledStops,
): { stops: number; next: number } {
  // Resuming a settled scan: its anchors' outcomes rest on points before its time only, so the scan from
  // where it stopped, with its count, is the scan from the start.
  let stops = from?.stops ?? 0;
  let i = from?.next ?? 0;
  while (i < count && points[i]!.eventTimeMs < settledBefore) {
    const anchor = points[i]!;
    let lastIn = i;
    let j = i + 1;
    while (j < count) {
      const p = points[j]!;
      if (haversineKm(anchor.driver_lat, anchor.driver_lon, p.driver_lat, p.driver_lon) > STOP_RADIUS_KM)
        break;
      lastIn = j;
      j++;
    }
    // The run ends at point j: when that point is not settled yet (or there is none), its outcome is open.
    if (settledBefore !== Number.POSITIVE_INFINITY && (j >= count || points[j]!.eventTimeMs >= settledBefore))
      break;
    if (points[lastIn]!.eventTimeMs - anchor.eventTimeMs >= STOP_MIN_MS) {
      stops++;
      i = j;
    } else {
      i++;
    }
  }
  return { stops, next: i };
}

/** The GPS points among the first `count` sorted events, in their order. */
function gpsOf(sorted: readonly DeliveryEvent[], count = sorted.length): GpsEvent[] {
  const out: GpsEvent[] = [];
  for (let i = 0; i < count; i++) {
    const e = sorted[i]!;
    if (e.type === 'gps') out.push(e);
  }
  return out;
}

/**
 * A stop scan settled up to `before` over a delivery's sorted GPS points (settleStops): the stops it
 * counted, the point it stopped at (`next`) and `end`, the index of the first point at or after `before`.
 * Valid while the points before `before` are unchanged (none inserted before it, nothing folded); then any
 * scan whose count reaches `end` can resume from it instead of from the first point — the pipeline's
 * features at every event would otherwise rescan the whole history.
 */
export interface SettledStops {
  readonly before: number;
  readonly stops: number;
  readonly next: number;
  readonly end: number;
}

/** The stop scan of sorted GPS `points` settled up to `before`, resumed from `from` (settled earlier, still valid). */
export function settleStops(points: readonly GpsEvent[], before: number, from?: SettledStops): SettledStops {
  let end = from && from.before <= before ? from.end : 0;
  while (end < points.length && points[end]!.eventTimeMs < before) end++;
  const resume = from && from.before <= before ? from : undefined;
  const { stops, next } = scanStops(points, end, before, resume);
  return { before, stops, next, end };
}

/**
 * A sorted history's events by type, in its order, and the running path length over its GPS points. Given to
 * computeFeaturesSorted, it spares every walk over the history: the last point, the first point of the speed
 * window and the path between them are found by binary search and one subtraction, so a decision costs the
 * same with 20 points in the window as with 300. Kept up to date event by event with addToIndex.
 */
export interface HistoryIndex {
  readonly statuses: readonly StatusEvent[];
  readonly traffic: readonly TrafficEvent[];
  readonly gps: readonly GpsEvent[];
  /** pathUm[i]: the path from gps[0] to gps[i] in whole micrometres (pathUm[0] = 0). */
  readonly pathUm: readonly number[];
}

export interface MutableHistoryIndex extends HistoryIndex {
  statuses: StatusEvent[];
  traffic: TrafficEvent[];
  gps: GpsEvent[];
  pathUm: number[];
}

export function indexHistory(sorted: readonly DeliveryEvent[]): MutableHistoryIndex {
  const index: MutableHistoryIndex = { statuses: [], traffic: [], gps: [], pathUm: [] };
  for (const e of sorted) {
    if (e.type === 'status') index.statuses.push(e);
    else if (e.type === 'traffic') index.traffic.push(e);
    else {
      const prev = index.gps[index.gps.length - 1];
      index.pathUm.push(
        prev === undefined ? 0 : index.pathUm[index.pathUm.length - 1]! + gpsSegmentUm(prev, e),
      );
      index.gps.push(e);
    }
  }
  return index;
}

/**
 * Adds one event (not in it yet) to an index in its place. A GPS point that lands before others (it arrived
 * late) updates the running path from its place on: most arrive in order, and a late one is among the last.
 */
export function addToIndex(index: MutableHistoryIndex, e: DeliveryEvent): void {
  if (e.type === 'status') insertSorted(index.statuses, e);
  else if (e.type === 'traffic') insertSorted(index.traffic, e);
  else {
    const at = insertSorted(index.gps, e);
    index.pathUm.splice(at, 0, 0);
    for (let k = Math.max(1, at); k < index.gps.length; k++)
      index.pathUm[k] = index.pathUm[k - 1]! + gpsSegmentUm(index.gps[k - 1]!, index.gps[k]!);
  }
}

/** Inserts into a list sorted by (event time, event_id), searching from the end; returns the place. */
function insertSorted<E extends DeliveryEvent>(list: E[], e: E): number {
  let i = list.length;
  while (i > 0 && byTime(list[i - 1]!, e) > 0) i--;
  list.splice(i, 0, e);
  return i;
}

/** The features at time t, or what is still missing. */
export function computeFeatures(events: Iterable<DeliveryEvent>, t: number): FeatureResult {
  const sorted = eventsUpTo(events, t);
  return computeFeaturesSorted(sorted, sorted.length, t);
}

/**
 * What a delivery's folded history — events so old that no accepted event can come before them any more —
 * still contributes to its features: every status (the first defines the delivery), the stops completed
 * among the folded GPS points, and the last of them (the position when no newer point is kept).
 */
export interface FoldedHistory {
  statuses: StatusEvent[];
  stops: number;
  lastGps: GpsEvent | undefined;
}

export function emptyFold(): FoldedHistory {
  return { statuses: [], stops: 0, lastGps: undefined };
}

/**
 * computeFeatures for events already deduplicated and sorted by (event time, event_id), of which the first
 * `count` are the ones with event_time ≤ t, plus what was folded out of them (foldHistory): the pipeline
 * keeps each delivery that way and evaluates it at every event without re-sorting or rescanning old points.
 * Equal to computeFeatures over the whole history for any t after the fold line.
 */
export function computeFeaturesSorted(
  sorted: readonly DeliveryEvent[],
  count: number,
  t: number,
  folded?: FoldedHistory,
  settled?: SettledStops,
  index?: HistoryIndex,
): FeatureResult {
  // One pass each way over the prefix, no allocation: this runs for every event the pipeline decides on.
  // The earliest status carrying each field wins: the first status defines the delivery.
  let promised: number | undefined;
  let dest: StatusEvent | undefined;
  let route: string | undefined;
  const takeStatus = (s: StatusEvent) => {
    if (promised === undefined && s.promisedTimeMs !== undefined) promised = s.promisedTimeMs;
    if (dest === undefined && s.dest_lat !== undefined) dest = s;
    if (route === undefined && s.route_id !== undefined) route = s.route_id;
  };
  if (folded) for (const s of folded.statuses) takeStatus(s);
  // The last event of the prefix: an indexed event is in it when it does not come after this one.
  const edge = count > 0 ? sorted[count - 1]! : undefined;
  const inPrefix = (e: DeliveryEvent): boolean =>
    edge !== undefined &&
    (e.eventTimeMs < edge.eventTimeMs || (e.eventTimeMs === edge.eventTimeMs && e.event_id <= edge.event_id));
  if (index) {
    for (const s of index.statuses) {
      if (!inPrefix(s)) break;
      takeStatus(s);
    }
  } else {
    for (let i = 0; i < count; i++) {
      const e = sorted[i]!;
      if (e.type === 'status') takeStatus(e);
    }
  }
  if (promised === undefined) return { ok: false, missing: 'no_promised_time' };
  const d = dest as StatusEvent | undefined;
  if (d?.dest_lat === undefined || d.dest_lon === undefined) return { ok: false, missing: 'no_destination' };
  let last: GpsEvent | undefined;
  let speed = 0;
  let alerts = 0;
  /** Indexed: the prefix's points are the index's first gpsCount. */
  let gpsCount = 0;
  if (index) {
    // The last point of the prefix and the first inside (t − 5 min, t], by binary search; the path between
    // them by subtraction of running totals.
    const lastAt = edge === undefined ? -1 : lastAtOrBefore(index.gps, edge);
    gpsCount = lastAt + 1;
    if (lastAt >= 0) {
      last = index.gps[lastAt]!;
      const firstRecentAt = firstAfter(index.gps, t - SPEED_WINDOW_MS, lastAt + 1);
      if (firstRecentAt < lastAt)
        speed = speedKmh(
          index.pathUm[lastAt]! - index.pathUm[firstRecentAt]!,
          index.gps[firstRecentAt]!.eventTimeMs,
          last.eventTimeMs,
        );
    }
    for (let k = index.traffic.length - 1; k >= 0; k--) {
      const e = index.traffic[k]!;
      if (e.eventTimeMs <= t - TRAFFIC_WINDOW_MS) break;
      if (inPrefix(e) && (route === undefined || e.route_id === route)) alerts++;
    }
  } else {
    // Backwards from t: the last GPS point, the first inside (t − 5 min, t], the route's alerts in (t − 10 min, t].
    let lastAt = -1;
    let firstRecentAt = -1;
    for (let i = count - 1; i >= 0; i--) {
      const e = sorted[i]!;
      if (e.type === 'gps') {
        if (lastAt < 0) lastAt = i;
        if (e.eventTimeMs > t - SPEED_WINDOW_MS) firstRecentAt = i;
      } else if (e.type === 'traffic') {
        if (e.eventTimeMs > t - TRAFFIC_WINDOW_MS && (route === undefined || e.route_id === route)) alerts++;
      }
      if (e.eventTimeMs <= t - TRAFFIC_WINDOW_MS && lastAt >= 0) break;
    }
    if (lastAt >= 0) last = sorted[lastAt] as GpsEvent;
    if (firstRecentAt >= 0 && firstRecentAt < lastAt) {
      let um = 0;
      let prev = sorted[firstRecentAt] as GpsEvent;
      for (let i = firstRecentAt + 1; i <= lastAt; i++) {
        const e = sorted[i]!;
        if (e.type !== 'gps') continue;
        um += gpsSegmentUm(prev, e);
        prev = e;
      }
      speed = speedKmh(um, (sorted[firstRecentAt] as GpsEvent).eventTimeMs, prev.eventTimeMs);
    }
  }
  last ??= folded?.lastGps;
  if (!last) return { ok: false, missing: 'no_gps' };
  // Plain: the points picked out of the prefix (the reference computation allocates; the pipeline's does not).
  const points = index ? index.gps : gpsOf(sorted, count);
  if (!index) gpsCount = points.length;
  return {
    ok: true,
    features: {
      speed_5m_kmh: speed,
      distance_remaining_km: haversineKm(last.driver_lat, last.driver_lon, d.dest_lat, d.dest_lon),
      stops:
        (folded?.stops ?? 0) +
        scanStops(
          points,
          gpsCount,
          Number.POSITIVE_INFINITY,
          settled && gpsCount >= settled.end ? settled : undefined,
        ).stops,
      traffic_alerts_10m: alerts,
      minutes_to_promised: (promised - t) / 60_000,
    },
  };
}

/** Index of the last point at or before `edge` in (event time, event_id) order, or -1. */
function lastAtOrBefore(points: readonly GpsEvent[], edge: DeliveryEvent): number {
  let lo = 0;
  let hi = points.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (byTime(points[mid]!, edge) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/** Index of the first point with event time > `t` among the first `end`; `end` when none. */
function firstAfter(points: readonly GpsEvent[], t: number, end: number): number {
  let lo = 0;
  let hi = end;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (points[mid]!.eventTimeMs <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Folds the part of a sorted history no future event can precede (every event of it before `finalBefore`)
 * into `folded`, and returns what must be kept: statuses move to the fold; traffic alerts older than the
 * traffic window before the fold line are dropped; GPS points older than the speed window before it are
 * folded into the stop count — up to the start of a stationary run still open at the fold line, whose
 * points stay (the run's outcome depends on points not final yet). Features at any t ≥ finalBefore are
 * unchanged (computeFeaturesSorted with the fold).
 */
export function foldHistory(
  sorted: readonly DeliveryEvent[],
  folded: FoldedHistory,
  finalBefore: number,
): DeliveryEvent[] {
  const gpsBefore = finalBefore - SPEED_WINDOW_MS;
  const trafficBefore = finalBefore - TRAFFIC_WINDOW_MS;
  // The stop scan, only as far as its decisions rest on points before the GPS fold line.
  const points = gpsOf(sorted);
  const { stops, next } = scanStops(points, points.length, gpsBefore);
  folded.stops += stops;
  if (next > 0) folded.lastGps = points[next - 1];
  const firstKeptGps = points[next];
  const kept: DeliveryEvent[] = [];
  for (const e of sorted) {
    if (e.type === 'status') {
      if (e.eventTimeMs < gpsBefore) folded.statuses.push(e);
      else kept.push(e);
    } else if (e.type === 'traffic') {
      if (e.eventTimeMs >= trafficBefore) kept.push(e);
    } else if (firstKeptGps !== undefined && byTime(e, firstKeptGps) >= 0) {
      kept.push(e);
    }
  }
  return kept;
}

/** The model's input row, in FEATURE_NAMES order. */
export function featureVector(f: DeliveryFeatures, out = new Float32Array(N_FEATURES)): Float32Array {
  FEATURE_NAMES.forEach((name, i) => {
    out[i] = f[name];
  });
  return out;
}

/** Minute boundaries (multiples of SPEED_STEP_MS) in (from, to]: the sliding window's evaluation times. */
export function slideTimes(fromMs: number, toMs: number): number[] {
  const out: number[] = [];
  for (
    let t = Math.floor(fromMs / SPEED_STEP_MS) * SPEED_STEP_MS + SPEED_STEP_MS;
    t <= toMs;
    t += SPEED_STEP_MS
  )
    out.push(t);
  return out;
}
