/**
 * The reference workload's generator: N concurrent food deliveries in a city, as the events a
 * producer would publish, with ground truth. Pure and deterministic for a seed (no clock, no I/O).
 *
 * A delivery: picked up at a restaurant, driven along a bent route (pickup → waypoint → drop-off)
 * at the driver's own urban speed (km/h ~ N(24, 6) clipped to [10, 40], ±10 % minute to minute),
 * with random stops (lights, parking: 30–180 s) and slowed by traffic incidents on its route
 * (speed × (1 − 0.12 × severity) while one is active). The promised time is set at pickup from
 * the route length at a nominal 22 km/h plus a buffer of 4–12 min; the delivery is LATE when the
 * driver arrives after it. So slow drivers, long routes with a thin buffer, incidents and many
 * stops make deliveries late — what the features see.
 *
 * Events: `status picked_up` (promised_time, dest_lat/dest_lon, route_id), GPS every
 * gpsIntervalMs (±4 m noise), traffic alerts while an incident is active on the route (at its
 * start and every 3 min), `status delivered`. Each delivery slot runs deliveries back to back
 * until durationMs (the last one runs to completion).
 *
 * Arrival: publishAt = event time + uniform(0, disorderMs) (out of order by up to disorderMs);
 * a duplicateFraction of events is published twice; a tooLateFraction arrives tooLateDelayMs
 * (+ up to 30 s) after its event time (beyond the allowed lateness); an invalidFraction of GPS
 * events is replaced by a malformed payload. Status events are never made too late or invalid
 * (they define the delivery).
 */
import {
  type DeliveryEvent,
  destinationPoint,
  formatIsoTime,
  haversineKm,
  type StatusEvent,
  toWire,
} from '../../libs/stream';
import { MinHeap } from './heap';
import { SimRng, subSeed } from './rng';

export interface SimOptions {
  seed: number;
  /** Concurrent deliveries (slots). */
  deliveries: number;
  /** New deliveries start only before startMs + durationMs. */
  durationMs: number;
  /** Event time of the simulation start (epoch ms). */
  startMs: number;
  gpsIntervalMs: number;
  /** Max arrival delay of an ordinary event (out-of-orderness). */
  disorderMs: number;
  duplicateFraction: number;
  tooLateFraction: number;
  /** Arrival delay of a too-late event (it should exceed out-of-orderness + allowed lateness). */
  tooLateDelayMs: number;
  invalidFraction: number;
  /** Traffic corridors deliveries are spread over. */
  routes: number;
  incidentsPerRouteHour: number;
  /** City centre. */
  centerLat: number;
  centerLon: number;
  /** Prefix of every delivery_id and event_id (distinct runs on one stream need distinct ids). */
  idPrefix: string;
}

export const DEFAULT_SIM_OPTIONS: SimOptions = {
  seed: 1,
  deliveries: 50,
  durationMs: 30 * 60_000,
  startMs: Date.UTC(2026, 10, 8, 10, 0, 0),
  gpsIntervalMs: 10_000,
  disorderMs: 0,
  duplicateFraction: 0,
  tooLateFraction: 0,
  tooLateDelayMs: 5 * 60_000,
  invalidFraction: 0,
  routes: 12,
  incidentsPerRouteHour: 1.2,
  centerLat: 12.9716,
  centerLon: 77.5946,
  idPrefix: '',
};

export const NOMINAL_SPEED_KMH = 22;
export const ALERT_REPEAT_MS = 3 * 60_000;

export type RecordKind = 'event' | 'duplicate' | 'too_late' | 'invalid';

export interface SimRecord {
  /** When to publish (epoch ms; ≥ the event time). */
  publishAtMs: number;
  /** The JSON payload to publish. */
  payload: string;
  /** Msg-Id to publish with (the event_id; for an invalid payload the id it replaced). */
  msgId: string;
  delivery_id: string;
  kind: RecordKind;
  /** The typed event (absent for an invalid payload). */
  event?: DeliveryEvent;
}

export interface Incident {
  route_id: string;
  startMs: number;
  endMs: number;
  severity: number;
}

export interface DeliveryTruth {
  delivery_id: string;
  route_id: string;
  pickupMs: number;
  promisedMs: number;
  deliveredMs: number;
  late: boolean;
  /** deliveredMs − promisedMs in minutes (positive = late). */
  lateByMin: number;
  routeKm: number;
  driverSpeedKmh: number;
  stops: number;
  /** Minutes spent inside incidents. */
  incidentMin: number;
  /** Every valid event of the delivery, in event-time order (before duplication or loss). */
  events: DeliveryEvent[];
}

const MAX_DELIVERY_MS = 3 * 3_600_000;

export function simOptions(o: Partial<SimOptions> = {}): SimOptions {
  const opts = { ...DEFAULT_SIM_OPTIONS, ...o };
  const fractions = ['duplicateFraction', 'tooLateFraction', 'invalidFraction'] as const;
  for (const f of fractions) {
    if (!(opts[f] >= 0 && opts[f] <= 1)) throw new Error(`simulator: ${f} must be in [0, 1], got ${opts[f]}`);
  }
  for (const k of ['deliveries', 'gpsIntervalMs', 'routes'] as const) {
    if (!(opts[k] > 0)) throw new Error(`simulator: ${k} must be > 0, got ${opts[k]}`);
  }
  for (const k of ['durationMs', 'disorderMs', 'tooLateDelayMs', 'incidentsPerRouteHour'] as const) {
    if (!(opts[k] >= 0)) throw new Error(`simulator: ${k} must be ≥ 0, got ${opts[k]}`);
  }
  if (!/^[A-Za-z0-9_-]*$/.test(opts.idPrefix))
    throw new Error('simulator: idPrefix may hold letters, digits, _ and -');
  return opts;
}

/** Traffic incidents per route over the whole horizon (Poisson arrivals, 5–25 min, severity 1..5). */
export function incidents(o: SimOptions): Incident[] {
  const out: Incident[] = [];
  const horizon = o.startMs + o.durationMs + MAX_DELIVERY_MS;
  for (let r = 0; r < o.routes; r++) {
    const rng = new SimRng(subSeed(o.seed, 'route', r));
    const route_id = routeId(o, r);
    if (o.incidentsPerRouteHour === 0) continue;
    let t = o.startMs - 20 * 60_000 + rng.exponential(3_600_000 / o.incidentsPerRouteHour);
    while (t < horizon) {
      const endMs = t + rng.uniform(5, 25) * 60_000;
      out.push({ route_id, startMs: Math.round(t), endMs: Math.round(endMs), severity: rng.int(1, 5) });
      t = endMs + rng.exponential(3_600_000 / o.incidentsPerRouteHour);
    }
  }
  return out;
}

function routeId(o: SimOptions, r: number): string {
  return `${o.idPrefix}route-${r}`;
}

/** One delivery's events and truth; depends only on (options, k, startMs), never on generation order. */
export function simulateDelivery(
  o: SimOptions,
  k: number,
  startMs: number,
  allIncidents: Incident[],
): DeliveryTruth {
  const rng = new SimRng(subSeed(o.seed, 'delivery', k));
  const delivery_id = `${o.idPrefix}order-${k}`;
  const route_id = routeId(o, rng.int(0, o.routes - 1));
  const routeIncidents = allIncidents.filter((i) => i.route_id === route_id);
  // Pickup within 5 km of the centre; drop-off 1.5–7 km away; a waypoint bends the route.
  const pickup = destinationPoint(o.centerLat, o.centerLon, rng.uniform(0, 360), 5 * Math.sqrt(rng.next()));
  const bearing = rng.uniform(0, 360);
  const directKm = rng.uniform(1.5, 7);
  const dest = destinationPoint(pickup.lat, pickup.lon, bearing, directKm);
  const mid = destinationPoint(pickup.lat, pickup.lon, bearing, directKm / 2);
  const way = destinationPoint(mid.lat, mid.lon, bearing + 90, rng.uniform(-0.3, 0.3) * directKm);
  const legs = [
    { from: pickup, to: way, km: haversineKm(pickup.lat, pickup.lon, way.lat, way.lon) },
    { from: way, to: dest, km: haversineKm(way.lat, way.lon, dest.lat, dest.lon) },
  ];
  const routeKm = legs[0]!.km + legs[1]!.km;
  const driverSpeedKmh = Math.min(40, Math.max(10, rng.normal(24, 6)));
  const promisedMs =
    startMs + wholeSeconds((routeKm / NOMINAL_SPEED_KMH) * 3_600_000 + rng.uniform(4, 12) * 60_000);

  const events: DeliveryEvent[] = [];
  let seq = 0;
  const base = (type: string, t: number) => ({
    event_id: `${o.idPrefix}${type}-${k}-${seq++}`,
    delivery_id,
    event_time: formatIsoTime(t),
    eventTimeMs: t,
  });
  const position = (km: number) => {
    const leg = km <= legs[0]!.km ? legs[0]! : legs[1]!;
    const along = km <= legs[0]!.km ? km : km - legs[0]!.km;
    const f = leg.km > 0 ? Math.min(1, along / leg.km) : 1;
    return {
      lat: leg.from.lat + (leg.to.lat - leg.from.lat) * f,
      lon: leg.from.lon + (leg.to.lon - leg.from.lon) * f,
    };
  };
  const pickedUp: StatusEvent = {
    ...base('status', startMs),
    type: 'status',
    status: 'picked_up',
    promised_time: formatIsoTime(promisedMs),
    promisedTimeMs: promisedMs,
    dest_lat: round6(dest.lat),
    dest_lon: round6(dest.lon),
    route_id,
  };
  events.push(pickedUp);

  // Drive in 1-second ticks; speed re-drawn each minute; stops start at random.
  const TICK = 1000;
  let t = startMs;
  let km = 0;
  let speedFactor = 1;
  let stopUntil = -1;
  let stops = 0;
  let incidentTicks = 0;
  let nextGps = startMs + Math.round(rng.uniform(0, o.gpsIntervalMs));
  const alertSent = new Map<Incident, number>();
  while (km < routeKm && t - startMs < MAX_DELIVERY_MS) {
    t += TICK;
    if ((t - startMs) % 60_000 === 0) speedFactor = Math.max(0.5, rng.normal(1, 0.1));
    const active = routeIncidents.find((i) => i.startMs <= t && t < i.endMs);
    if (active) {
      incidentTicks++;
      const last = alertSent.get(active);
      if (last === undefined || t - last >= ALERT_REPEAT_MS) {
        alertSent.set(active, t);
        events.push({ ...base('traffic', t), type: 'traffic', route_id, severity: active.severity });
      }
    }
    if (t < stopUntil) {
      // Stationary.
    } else if (rng.chance(0.2 / 60)) {
      stopUntil = t + Math.round(rng.uniform(30, 180)) * 1000;
      stops++;
    } else {
      const slow = active ? 1 - 0.12 * active.severity : 1;
      km += (driverSpeedKmh * speedFactor * slow * TICK) / 3_600_000;
    }
    if (t >= nextGps && km < routeKm) {
      const p = position(km);
      const noiseKm = 0.004;
      const q = destinationPoint(p.lat, p.lon, rng.uniform(0, 360), Math.abs(rng.normal(0, noiseKm)));
      events.push({ ...base('gps', t), type: 'gps', driver_lat: round6(q.lat), driver_lon: round6(q.lon) });
      nextGps += o.gpsIntervalMs;
    }
  }
  events.push({ ...base('status', t), type: 'status', status: 'delivered' });
  return {
    delivery_id,
    route_id,
    pickupMs: startMs,
    promisedMs,
    deliveredMs: t,
    late: t > promisedMs,
    lateByMin: (t - promisedMs) / 60_000,
    routeKm,
    driverSpeedKmh,
    stops,
    incidentMin: incidentTicks / 60,
    events,
  };
}

/** Event times in whole seconds, like the contract's example. */
function wholeSeconds(ms: number): number {
  return Math.round(ms / 1000) * 1000;
}

function round6(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}

const INVALID_VARIANTS: ((wire: Record<string, unknown>) => string)[] = [
  (w) => JSON.stringify({ ...w, driver_lat: 123.4 }),
  (w) => JSON.stringify({ ...w, event_time: '08/11/2026 10:00:12' }),
  (w) => JSON.stringify({ ...w, event_id: undefined }),
  (w) => JSON.stringify({ ...w, driver_lon: String(w['driver_lon']) }),
  (w) => JSON.stringify(w).slice(0, -3),
];

/** The records (publish order) of one delivery's events, after disorder, duplication, loss, corruption. */
function arrivals(o: SimOptions, d: DeliveryTruth, k: number): SimRecord[] {
  const rng = new SimRng(subSeed(o.seed, 'arrival', k));
  const out: SimRecord[] = [];
  for (const e of d.events) {
    const wire = toWire(e);
    const payload = JSON.stringify(wire);
    const protectedEvent = e.type === 'status';
    const common = { msgId: e.event_id, delivery_id: d.delivery_id };
    if (!protectedEvent && e.type === 'gps' && rng.chance(o.invalidFraction)) {
      const bad = INVALID_VARIANTS[rng.int(0, INVALID_VARIANTS.length - 1)]!(wire);
      out.push({
        ...common,
        publishAtMs: e.eventTimeMs + Math.round(rng.uniform(0, o.disorderMs)),
        payload: bad,
        kind: 'invalid',
      });
      continue;
    }
    const tooLate = !protectedEvent && rng.chance(o.tooLateFraction);
    const publishAtMs =
      e.eventTimeMs +
      Math.round(tooLate ? o.tooLateDelayMs + rng.uniform(0, 30_000) : rng.uniform(0, o.disorderMs));
    out.push({ ...common, publishAtMs, payload, kind: tooLate ? 'too_late' : 'event', event: e });
    if (rng.chance(o.duplicateFraction)) {
      const again = publishAtMs + Math.round(rng.uniform(0, Math.max(o.disorderMs, 1000)));
      out.push({ ...common, publishAtMs: again, payload, kind: 'duplicate', event: e });
    }
  }
  return out;
}

/**
 * The records of a run in publish order (ties: generation order), generated lazily: memory
 * holds only the deliveries in flight. `onDelivery` receives each delivery's truth as it is
 * generated (before its records are yielded).
 */
export function* simulationRecords(
  options: Partial<SimOptions> = {},
  onDelivery?: (truth: DeliveryTruth) => void,
): Generator<SimRecord> {
  const o = simOptions(options);
  const allIncidents = incidents(o);
  const endMs = o.startMs + o.durationMs;
  type Slot = { slot: number; round: number; startMs: number };
  const slots = new MinHeap<Slot>(
    (a, b) => a.startMs < b.startMs || (a.startMs === b.startMs && a.slot < b.slot),
  );
  const spread = Math.min(o.durationMs, 5 * 60_000);
  for (let s = 0; s < o.deliveries; s++) {
    const rng = new SimRng(subSeed(o.seed, 'slot', s));
    slots.push({ slot: s, round: 0, startMs: o.startMs + wholeSeconds(rng.uniform(0, spread)) });
  }
  type Pending = { r: SimRecord; n: number };
  const pending = new MinHeap<Pending>(
    (a, b) => a.r.publishAtMs < b.r.publishAtMs || (a.r.publishAtMs === b.r.publishAtMs && a.n < b.n),
  );
  let n = 0;
  for (;;) {
    const top = pending.peek();
    const next = slots.peek();
    // A delivery's records all publish at or after its start, so generate every delivery
    // starting no later than the next record before yielding it.
    if (next && next.startMs <= endMs && (!top || next.startMs <= top.r.publishAtMs)) {
      slots.pop();
      const k = next.round * o.deliveries + next.slot;
      const truth = simulateDelivery(o, k, next.startMs, allIncidents);
      onDelivery?.(truth);
      for (const r of arrivals(o, truth, k)) pending.push({ r, n: n++ });
      const gap = new SimRng(subSeed(o.seed, 'gap', k)).uniform(0, 60_000);
      slots.push({ slot: next.slot, round: next.round + 1, startMs: truth.deliveredMs + wholeSeconds(gap) });
      continue;
    }
    const r = pending.pop();
    if (!r) return;
    yield r.r;
  }
}

/** A whole run in memory (tests, training): records in publish order and every delivery's truth. */
export function simulate(options: Partial<SimOptions> = {}): {
  records: SimRecord[];
  deliveries: DeliveryTruth[];
} {
  const deliveries: DeliveryTruth[] = [];
  const records = [...simulationRecords(options, (d) => deliveries.push(d))];
  return { records, deliveries };
}
