import {
  addToIndex,
  byTime,
  computeFeatures,
  computeFeaturesSorted,
  countStops,
  type DeliveryFeatures,
  eventsUpTo,
  FEATURE_NAMES,
  featureVector,
  indexHistory,
  pathSpeedKmh,
  type SettledStops,
  settleStops,
  slideTimes,
} from './features';
import { EARTH_RADIUS_KM, haversineKm } from './geo';
import { type DeliveryEvent, type GpsEvent, parseEvent, type StatusEvent, type TrafficEvent } from './schema';
import { simulate } from './simulator';

const T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
const S = 1000;
const MIN = 60_000;
/** Kilometres per degree of latitude on the model's sphere. */
const KM_PER_DEG = (2 * Math.PI * EARTH_RADIUS_KM) / 360;

let n = 0;
function gps(at: number, lat: number, lon = 77.6): GpsEvent {
  return {
    event_id: `gps-${n++}`,
    delivery_id: 'order-1',
    event_time: new Date(at).toISOString(),
    eventTimeMs: at,
    type: 'gps',
    driver_lat: lat,
    driver_lon: lon,
  };
}
function pickedUp(
  at: number,
  promised: number,
  dest = { lat: 12.1, lon: 77.6 },
  route = 'route-1',
): StatusEvent {
  return {
    event_id: `status-${n++}`,
    delivery_id: 'order-1',
    event_time: new Date(at).toISOString(),
    eventTimeMs: at,
    type: 'status',
    status: 'picked_up',
    promised_time: new Date(promised).toISOString(),
    promisedTimeMs: promised,
    dest_lat: dest.lat,
    dest_lon: dest.lon,
    route_id: route,
  };
}
function traffic(at: number, route = 'route-1', id = `traffic-${n++}`): TrafficEvent {
  return {
    event_id: id,
    delivery_id: 'order-1',
    event_time: new Date(at).toISOString(),
    eventTimeMs: at,
    type: 'traffic',
    route_id: route,
    severity: 3,
  };
}

function features(events: DeliveryEvent[], t: number): DeliveryFeatures {
  const r = computeFeatures(events, t);
  if (!r.ok) throw new Error(`not ready: ${r.missing}`);
  return r.features;
}

describe('speed over the last 5 minutes', () => {
  it('is path length ÷ time span of the points in (t − 5 min, t]', () => {
    // Northward at 0.001° of latitude per minute: 0.111195 km/min = 6.6717 km/h.
    const pts = [0, 1, 2, 3].map((m) => gps(T0 + m * MIN, 12 + m * 0.001));
    expect(pathSpeedKmh(pts)).toBeCloseTo(0.001 * KM_PER_DEG * 60, 6);
    expect(0.001 * KM_PER_DEG * 60).toBeCloseTo(6.6717, 3);
    const evs = [pickedUp(T0 - MIN, T0 + 30 * MIN), ...pts];
    expect(features(evs, T0 + 3 * MIN).speed_5m_kmh).toBeCloseTo(6.6717, 3);
  });

  it('uses only the window: points at or before t − 5 min and after t are left out', () => {
    const slow = [gps(T0, 12), gps(T0 + MIN, 12.0005)]; // 3.34 km/h, then the window moves past them
    const fast = [gps(T0 + 6 * MIN, 12.001), gps(T0 + 7 * MIN, 12.003)]; // 0.002°/min = 13.34 km/h
    const future = gps(T0 + 8 * MIN, 13);
    const evs = [pickedUp(T0 - MIN, T0 + 30 * MIN), ...slow, ...fast, future];
    // t = 10:06:00 → window (10:01:00, 10:06:00]: the point at 10:01 is out, only one point in.
    expect(features(evs, T0 + 6 * MIN).speed_5m_kmh).toBe(0);
    expect(features(evs, T0 + 7 * MIN).speed_5m_kmh).toBeCloseTo(0.002 * KM_PER_DEG * 60, 6);
    // t = 10:05:59 → window (10:00:59, 10:05:59] holds only the point at 10:01.
    expect(features(evs, T0 + 5 * MIN + 59 * S).speed_5m_kmh).toBe(0);
    expect(features(evs, T0 + MIN).speed_5m_kmh).toBeCloseTo(0.0005 * KM_PER_DEG * 60, 6);
  });

  it('the issue’s out-of-order case: A at 10:00:05 arriving after B at 10:00:15 gives the in-order result', () => {
    const status = pickedUp(T0 - MIN, T0 + 30 * MIN);
    const a = gps(T0 + 5 * S, 12.0);
    const b = gps(T0 + 15 * S, 12.0003);
    const inOrder = features([status, a, b], T0 + 20 * S);
    const outOfOrder = features([b, status, a], T0 + 20 * S);
    expect(outOfOrder).toEqual(inOrder);
    // 0.0003° in 10 s = 0.0333585 km in 1/360 h = 12.009 km/h
    expect(inOrder.speed_5m_kmh).toBeCloseTo(0.0003 * KM_PER_DEG * 360, 6);
  });
});

describe('distance remaining', () => {
  it('is the haversine distance from the latest GPS point (by event time) to the destination', () => {
    const evs = [
      pickedUp(T0, T0 + 30 * MIN, { lat: 12.01, lon: 77.6 }),
      gps(T0 + 2 * MIN, 12.005),
      gps(T0 + MIN, 11.9),
    ];
    expect(features(evs, T0 + 3 * MIN).distance_remaining_km).toBeCloseTo(0.005 * KM_PER_DEG, 6);
    expect(features(evs, T0 + MIN + 30 * S).distance_remaining_km).toBeCloseTo(0.11 * KM_PER_DEG, 6);
  });

  it('along a parallel matches the spherical formula', () => {
    const d = haversineKm(0, 0, 0, 1);
    expect(d).toBeCloseTo(KM_PER_DEG, 9);
  });
});

describe('stops', () => {
  const status = pickedUp(T0, T0 + 60 * MIN);
  const still = (from: number, seconds: number, lat: number) =>
    Array.from({ length: seconds / 10 + 1 }, (_, i) => gps(from + i * 10 * S, lat + (i % 2) * 0.0001)); // ±11 m jitter

  it('counts a stationary run of ≥ 60 s once, and not one of 50 s', () => {
    expect(countStops(still(T0, 60, 12))).toBe(1);
    expect(countStops(still(T0, 50, 12))).toBe(0);
    expect(countStops(still(T0, 300, 12))).toBe(1);
  });

  it('counts separate stationary periods separately; moving points are not stops', () => {
    const moving = (from: number, lat: number) =>
      [1, 2, 3].map((i) => gps(from + i * 10 * S, lat + i * 0.001));
    const evs = [
      status,
      ...still(T0, 90, 12),
      ...moving(T0 + 90 * S, 12),
      ...still(T0 + 3 * MIN, 60, 12.01),
      ...moving(T0 + 4 * MIN, 12.01),
    ];
    expect(features(evs, T0 + 10 * MIN).stops).toBe(2);
    // Before the second stop has lasted 60 s it does not count yet.
    expect(features(evs, T0 + 3 * MIN + 50 * S).stops).toBe(1);
    expect(countStops(moving(T0, 12))).toBe(0);
  });
});

describe('traffic alerts in the last 10 minutes', () => {
  it('counts alerts on the delivery’s route in (t − 10 min, t], each event_id once', () => {
    const t = T0 + 20 * MIN;
    const evs = [
      pickedUp(T0, T0 + 60 * MIN),
      gps(T0 + 19 * MIN, 12),
      traffic(t - 10 * MIN), // at the window's open start: out
      traffic(t - 10 * MIN + S), // in
      traffic(t - 5 * MIN, 'route-1', 'traffic-dup'), // in
      traffic(t - 5 * MIN, 'route-1', 'traffic-dup'), // duplicate delivery of the same event: once
      traffic(t - 4 * MIN, 'route-2'), // another route: out
      traffic(t), // in
      traffic(t + S), // after t: out
    ];
    expect(features(evs, t).traffic_alerts_10m).toBe(3);
  });

  it('counts every alert when the delivery names no route', () => {
    const status = { ...pickedUp(T0, T0 + 60 * MIN) };
    delete status.route_id;
    const evs = [status, gps(T0, 12), traffic(T0 + MIN, 'route-1'), traffic(T0 + MIN, 'route-9')];
    expect(features(evs, T0 + 2 * MIN).traffic_alerts_10m).toBe(2);
  });
});

describe('minutes to promised time, readiness, vector', () => {
  it('is (promised − t) in minutes, negative when overdue', () => {
    const evs = [pickedUp(T0, T0 + 20 * MIN), gps(T0, 12)];
    expect(features(evs, T0 + 5 * MIN).minutes_to_promised).toBe(15);
    expect(features(evs, T0 + 23 * MIN + 30 * S).minutes_to_promised).toBe(-3.5);
  });

  it('says what is missing before the first status or the first GPS point', () => {
    const status = pickedUp(T0, T0 + 20 * MIN);
    expect(computeFeatures([gps(T0, 12)], T0 + MIN)).toEqual({ ok: false, missing: 'no_promised_time' });
    const noDest = { ...status, dest_lat: undefined, dest_lon: undefined };
    expect(computeFeatures([noDest, gps(T0, 12)], T0 + MIN)).toEqual({
      ok: false,
      missing: 'no_destination',
    });
    expect(computeFeatures([status], T0 + MIN)).toEqual({ ok: false, missing: 'no_gps' });
    // The status is in the future of t: not seen yet.
    expect(computeFeatures([status, gps(T0 - MIN, 12)], T0 - 30 * S)).toEqual({
      ok: false,
      missing: 'no_promised_time',
    });
  });

  it('the vector follows FEATURE_NAMES', () => {
    expect([...FEATURE_NAMES]).toEqual([
      'speed_5m_kmh',
      'distance_remaining_km',
      'stops',
      'traffic_alerts_10m',
      'minutes_to_promised',
    ]);
    const v = featureVector({
      speed_5m_kmh: 1,
      distance_remaining_km: 2,
      stops: 3,
      traffic_alerts_10m: 4,
      minutes_to_promised: -5,
    });
    expect(Array.from(v)).toEqual([1, 2, 3, 4, -5]);
  });

  it('slide times are the minute boundaries in (from, to]', () => {
    expect(slideTimes(T0 + 30 * S, T0 + 3 * MIN)).toEqual([T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]);
    expect(slideTimes(T0, T0 + 59 * S)).toEqual([]);
  });
});

describe('order independence', () => {
  it('any arrival order (and duplicates) gives the same features as event-time order', () => {
    // A delivery with every feature active: moving, stopping, alerts.
    const evs: DeliveryEvent[] = [pickedUp(T0, T0 + 25 * MIN, { lat: 12.05, lon: 77.6 })];
    let lat = 12;
    for (let s = 10; s <= 20 * 60; s += 10) {
      const stopped = s > 300 && s < 420;
      if (!stopped) lat += 0.00005 + (s % 70 === 0 ? 0.00003 : 0);
      evs.push(gps(T0 + s * S, lat));
      if (s % 240 === 0) evs.push(traffic(T0 + s * S));
    }
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const times = [5, 7, 10, 15, 21].map((m) => T0 + m * MIN + 3 * S);
    const expected = times.map((t) => features(evs, t));
    for (let trial = 0; trial < 20; trial++) {
      const shuffled = [...evs, ...evs.filter(() => rand() < 0.1)];
      for (let i = shuffled.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
      }
      expect(times.map((t) => features(shuffled, t))).toEqual(expected);
    }
    expect(expected[2]!.stops).toBe(1);
    expect(expected[4]!.traffic_alerts_10m).toBe(3); // alerts at 12, 16 and 20 min; t = 21:03
    expect(expected[0]!.speed_5m_kmh).toBeGreaterThan(0);
  });

  it('eventsUpTo sorts by event time, ties by event_id, and drops repeated ids', () => {
    const a = gps(T0, 12);
    const b = { ...gps(T0, 12.1), event_id: 'a-first' };
    const c = gps(T0 - S, 12.2);
    expect(eventsUpTo([a, b, c, a], T0).map((e) => e.event_id)).toEqual([c.event_id, 'a-first', a.event_id]);
  });
});

describe('settled stop scans and the history index (the pipeline’s shortcuts)', () => {
  test('computeFeaturesSorted with a resumed settled scan and an index equals it without them, at every prefix', () => {
    const { records } = simulate({
      seed: 11,
      deliveries: 12,
      durationMs: 24 * 60_000,
      gpsIntervalMs: 5_000,
      subSecondTimes: true,
    });
    const byDelivery = new Map<string, Map<string, DeliveryEvent>>();
    for (const r of records) {
      const parsed = parseEvent(r.payload);
      if (!parsed.ok) continue;
      const e = parsed.event;
      if (!byDelivery.has(e.delivery_id)) byDelivery.set(e.delivery_id, new Map());
      byDelivery.get(e.delivery_id)!.set(e.event_id, e);
    }
    let compared = 0;
    let withStops = 0;
    for (const events of byDelivery.values()) {
      const sorted = [...events.values()].sort(byTime);
      const index = indexHistory(sorted);
      let settled: SettledStops | undefined;
      for (let count = 1; count <= sorted.length; count++) {
        const t = sorted[count - 1]!.eventTimeMs;
        // As the decider does: settled two minutes back, resumed every 30 s of event time (first from a
        // prefix with no point yet).
        if (settled === undefined || settled.before < t - 150_000)
          settled = settleStops(index.gps, t - 120_000, settled);
        // Indexed lists must only hold the prefix's events for the comparison to be about the prefix.
        const plain = computeFeaturesSorted(sorted, count, t);
        const fast = computeFeaturesSorted(sorted, count, t, undefined, settled, index);
        expect(fast).toEqual(plain);
        compared++;
        if (plain.ok && plain.features.stops > 0) withStops++;
      }
    }
    expect(compared).toBeGreaterThan(1000);
    expect(withStops).toBeGreaterThan(100);
  });

  test('an index built event by event in random arrival orders, with late points, equals the plain computation', () => {
    const { records } = simulate({
      seed: 23,
      deliveries: 8,
      durationMs: 30 * 60_000,
      gpsIntervalMs: 4_000,
      subSecondTimes: true,
    });
    const byDelivery = new Map<string, DeliveryEvent[]>();
    for (const r of records) {
      const parsed = parseEvent(r.payload);
      if (!parsed.ok) continue;
      const list = byDelivery.get(parsed.event.delivery_id) ?? [];
      if (!list.some((e) => e.event_id === parsed.event.event_id)) list.push(parsed.event);
      byDelivery.set(parsed.event.delivery_id, list);
    }
    let seed = 99;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    let compared = 0;
    let moving = 0;
    for (const events of byDelivery.values()) {
      const inTime = [...events].sort(byTime);
      // Arrival: each event up to 30 s behind its time, and one in 20 up to 8 minutes (late, out of order).
      const arrival = inTime
        .map((e) => ({ e, at: e.eventTimeMs + (rand() < 0.05 ? rand() * 480_000 : rand() * 30_000) }))
        .sort((a, b) => a.at - b.at)
        .map((a) => a.e);
      const sorted: DeliveryEvent[] = [];
      const index = indexHistory([]);
      for (const e of arrival) {
        let at = sorted.length;
        while (at > 0 && byTime(sorted[at - 1]!, e) > 0) at--;
        sorted.splice(at, 0, e);
        addToIndex(index, e);
        // This event's decision, and a later one's (as a revision re-decides it), on the same index.
        for (const count of [at + 1, Math.min(sorted.length, at + 1 + Math.floor(rand() * 40))]) {
          const t = sorted[count - 1]!.eventTimeMs;
          const within = sorted.slice(0, count);
          const plain = computeFeatures(within, t);
          const fast = computeFeaturesSorted(sorted, count, t, undefined, undefined, index);
          expect(fast).toEqual(plain);
          compared++;
          if (plain.ok && plain.features.speed_5m_kmh > 0) moving++;
        }
      }
    }
    expect(compared).toBeGreaterThan(2000);
    expect(moving).toBeGreaterThan(1000);
  });
});
