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
import { haversineKm } from './geo';
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
  let km = 0;
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1]!;
    const b = points[i]!;
    km += haversineKm(a.driver_lat, a.driver_lon, b.driver_lat, b.driver_lon);
  }
  const hours = (points[points.length - 1]!.eventTimeMs - points[0]!.eventTimeMs) / 3_600_000;
  return hours > 0 ? km / hours : 0;
}

/** Stationary periods in sorted GPS points. */
export function countStops(points: readonly GpsEvent[]): number {
  let stops = 0;
  let i = 0;
  while (i < points.length) {
    const anchor = points[i]!;
    let j = i + 1;
    while (
      j < points.length &&
      haversineKm(anchor.driver_lat, anchor.driver_lon, points[j]!.driver_lat, points[j]!.driver_lon) <=
        STOP_RADIUS_KM
    )
      j++;
    if (points[j - 1]!.eventTimeMs - anchor.eventTimeMs >= STOP_MIN_MS) {
      stops++;
      i = j;
    } else {
      i++;
    }
  }
  return stops;
}

/** The features at time t, or what is still missing. */
export function computeFeatures(events: Iterable<DeliveryEvent>, t: number): FeatureResult {
  const sorted = eventsUpTo(events, t);
  return computeFeaturesSorted(sorted, sorted.length, t);
}

/**
 * computeFeatures for events already deduplicated and sorted by (event time, event_id), of which the first
 * `count` are the ones with event_time ≤ t: the pipeline keeps each delivery's history that way and
 * evaluates it at every event without re-sorting.
 */
export function computeFeaturesSorted(
  sorted: readonly DeliveryEvent[],
  count: number,
  t: number,
): FeatureResult {
  const gps: GpsEvent[] = [];
  const statuses: StatusEvent[] = [];
  const traffic: TrafficEvent[] = [];
  for (let i = 0; i < count; i++) {
    const e = sorted[i]!;
    if (e.type === 'gps') gps.push(e);
    else if (e.type === 'status') statuses.push(e);
    else traffic.push(e);
  }
  // The earliest status carrying each field wins: the first status defines the delivery.
  const promised = statuses.find((s) => s.promisedTimeMs !== undefined)?.promisedTimeMs;
  const dest = statuses.find((s) => s.dest_lat !== undefined);
  const route = statuses.find((s) => s.route_id !== undefined)?.route_id;
  if (promised === undefined) return { ok: false, missing: 'no_promised_time' };
  if (dest?.dest_lat === undefined || dest.dest_lon === undefined)
    return { ok: false, missing: 'no_destination' };
  const last = gps[gps.length - 1];
  if (!last) return { ok: false, missing: 'no_gps' };
  const recent = gps.filter((g) => g.eventTimeMs > t - SPEED_WINDOW_MS);
  const alerts = traffic.filter(
    (a) => a.eventTimeMs > t - TRAFFIC_WINDOW_MS && (route === undefined || a.route_id === route),
  );
  return {
    ok: true,
    features: {
      speed_5m_kmh: pathSpeedKmh(recent),
      distance_remaining_km: haversineKm(last.driver_lat, last.driver_lon, dest.dest_lat, dest.dest_lon),
      stops: countStops(gps),
      traffic_alerts_10m: alerts.length,
      minutes_to_promised: (promised - t) / 60_000,
    },
  };
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
