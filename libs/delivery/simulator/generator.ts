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
 * until durationMs (the last one runs to completion). Slots start their first delivery at a
 * random whole second within the ramp (rampMs, default min(durationMs, 5 min)): a short ramp
 * reaches the full rate within seconds (every slot busy), the default ramps up over 5 min. Starting
 * N deliveries over a ramp of R seconds adds their N `picked_up` events, N/R events/s, to the rate
 * during the ramp; after it the rate is steady (every slot busy for its first 20–60 min delivery).
 *
 * Arrival: publishAt = event time + uniform(0, disorderMs) (out of order by up to disorderMs);
 * a duplicateFraction of events is published twice; a tooLateFraction arrives tooLateDelayMs
 * (+ up to 30 s) after its event time (beyond the allowed lateness); an invalidFraction of GPS
 * events is replaced by a malformed payload. Status events are never made too late or invalid
 * (they define the delivery).
 *
 * Generation is incremental, so a live run at thousands of events/s holds bounded memory. A
 * delivery is first planned (its trajectory simulated once without building events: the ground
 * truth, including when it ends, is known up front), then driven again from the same seed as a
 * lazy generator that yields its events in event-time order. Deliveries in flight are merged by
 * the event time of their next event; a record is yielded only once no delivery can still produce
 * an earlier one. Memory: one small driver per delivery in flight plus the records generated but
 * not yet due — those whose event time has passed the publish frontier but whose arrival delay has
 * not (at most maxArrivalDelayMs(o) of each delivery's records), never whole deliveries.
 */
import { MinHeap } from '../../event-time';
import { destinationPoint, haversineKm } from '../geo';
import { type DeliveryEvent, formatIsoTime, type StatusEvent } from '../schema';
import { arrive } from './arrival';
import {
  ALERT_REPEAT_MS,
  DEFAULT_RAMP_MS,
  type DeliveryPlan,
  type DeliveryTruth,
  type Incident,
  MAX_DELIVERY_MS,
  NOMINAL_SPEED_KMH,
  type SimOptions,
  type SimRecord,
  simOptions,
} from './options';
import { SimRng, subSeed } from './rng';

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

interface Point {
  lat: number;
  lon: number;
}

/** What a delivery draws before it drives (route, driver, promise); both passes draw it identically. */
interface DeliverySetup {
  rng: SimRng;
  delivery_id: string;
  route_id: string;
  routeIncidents: Incident[];
  legs: { from: Point; to: Point; km: number }[];
  routeKm: number;
  dest: Point;
  driverSpeedKmh: number;
  promisedMs: number;
}

function setupDelivery(
  o: SimOptions,
  k: number,
  startMs: number,
  incidentsOf: (route_id: string) => Incident[],
): DeliverySetup {
  const rng = new SimRng(subSeed(o.seed, 'delivery', k));
  const delivery_id = `${o.idPrefix}order-${k}`;
  const route_id = routeId(o, rng.int(0, o.routes - 1));
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
  return {
    rng,
    delivery_id,
    route_id,
    routeIncidents: incidentsOf(route_id),
    legs,
    routeKm,
    dest,
    driverSpeedKmh,
    promisedMs,
  };
}

interface DriveOutcome {
  deliveredMs: number;
  stops: number;
  incidentTicks: number;
}

/**
 * Drives a delivery in 1-second ticks (speed re-drawn each minute; stops start at random) and, when
 * `emit`, yields its events in event-time order as it goes; returns how the drive ended. Without
 * `emit` it builds no event but makes exactly the same random draws, so a plan pass and an emitting
 * pass from the same setup agree.
 */
function* drive(
  o: SimOptions,
  k: number,
  startMs: number,
  s: DeliverySetup,
  emit: boolean,
): Generator<DeliveryEvent, DriveOutcome> {
  const { rng, legs, routeKm, route_id, delivery_id, routeIncidents, driverSpeedKmh } = s;
  let seq = 0;
  const base = (type: string, t: number) => ({
    event_id: `${o.idPrefix}${type}-${k}-${seq++}`,
    delivery_id,
    event_time: formatIsoTime(t),
    eventTimeMs: t,
  });
  const position = (km: number): Point => {
    const leg = km <= legs[0]!.km ? legs[0]! : legs[1]!;
    const along = km <= legs[0]!.km ? km : km - legs[0]!.km;
    const f = leg.km > 0 ? Math.min(1, along / leg.km) : 1;
    return {
      lat: leg.from.lat + (leg.to.lat - leg.from.lat) * f,
      lon: leg.from.lon + (leg.to.lon - leg.from.lon) * f,
    };
  };
  if (emit) {
    const pickedUp: StatusEvent = {
      ...base('status', startMs),
      type: 'status',
      status: 'picked_up',
      promised_time: formatIsoTime(s.promisedMs),
      promisedTimeMs: s.promisedMs,
      dest_lat: round6(s.dest.lat),
      dest_lon: round6(s.dest.lon),
      route_id,
    };
    yield pickedUp;
  }

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
    const active = activeIncident(routeIncidents, t);
    if (active) {
      incidentTicks++;
      const last = alertSent.get(active);
      if (last === undefined || t - last >= ALERT_REPEAT_MS) {
        alertSent.set(active, t);
        if (emit) yield { ...base('traffic', t), type: 'traffic', route_id, severity: active.severity };
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
      // The noise is drawn in both passes (bearing first, then distance): the draws must stay aligned.
      const noiseBearing = rng.uniform(0, 360);
      const noiseKm = Math.abs(rng.normal(0, 0.004));
      if (emit) {
        const p = position(km);
        const q = destinationPoint(p.lat, p.lon, noiseBearing, noiseKm);
        yield { ...base('gps', t), type: 'gps', driver_lat: round6(q.lat), driver_lon: round6(q.lon) };
      }
      nextGps += o.gpsIntervalMs;
    }
  }
  if (emit) yield { ...base('status', t), type: 'status', status: 'delivered' };
  return { deliveredMs: t, stops, incidentTicks };
}

/** The first incident active at t (a loop, not find(): this runs every tick of every delivery). */
function activeIncident(list: Incident[], t: number): Incident | undefined {
  for (const i of list) if (i.startMs <= t && t < i.endMs) return i;
  return undefined;
}

function toPlan(s: DeliverySetup, startMs: number, d: DriveOutcome): DeliveryPlan {
  return {
    delivery_id: s.delivery_id,
    route_id: s.route_id,
    pickupMs: startMs,
    promisedMs: s.promisedMs,
    deliveredMs: d.deliveredMs,
    late: d.deliveredMs > s.promisedMs,
    lateByMin: (d.deliveredMs - s.promisedMs) / 60_000,
    routeKm: s.routeKm,
    driverSpeedKmh: s.driverSpeedKmh,
    stops: d.stops,
    incidentMin: d.incidentTicks / 60,
  };
}

function routeIncidentsOf(all: Incident[]): (route_id: string) => Incident[] {
  const byRoute = new Map<string, Incident[]>();
  for (const i of all) {
    const list = byRoute.get(i.route_id);
    if (list) list.push(i);
    else byRoute.set(i.route_id, [i]);
  }
  return (route_id) => byRoute.get(route_id) ?? [];
}

/** One delivery's truth without its events (the plan pass: no event is built). */
export function planDelivery(
  o: SimOptions,
  k: number,
  startMs: number,
  allIncidents: Incident[],
): DeliveryPlan {
  return planWith(o, k, startMs, routeIncidentsOf(allIncidents));
}

function planWith(
  o: SimOptions,
  k: number,
  startMs: number,
  incidentsOf: (route_id: string) => Incident[],
): DeliveryPlan {
  const s = setupDelivery(o, k, startMs, incidentsOf);
  const it = drive(o, k, startMs, s, false);
  let step = it.next();
  while (!step.done) step = it.next();
  return toPlan(s, startMs, step.value);
}

/** One delivery's events and truth; depends only on (options, k, startMs), never on generation order. */
export function simulateDelivery(
  o: SimOptions,
  k: number,
  startMs: number,
  allIncidents: Incident[],
): DeliveryTruth {
  const s = setupDelivery(o, k, startMs, routeIncidentsOf(allIncidents));
  const events: DeliveryEvent[] = [];
  const it = drive(o, k, startMs, s, true);
  let step = it.next();
  while (!step.done) {
    events.push(step.value);
    step = it.next();
  }
  return { ...toPlan(s, startMs, step.value), events };
}

/** Event times in whole seconds, like the contract's example. */
function wholeSeconds(ms: number): number {
  return Math.round(ms / 1000) * 1000;
}

function round6(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}

/** What the incremental generator holds right now and at most (tests, progress lines). */
export interface SimulationGauges {
  /** Records generated but not yet yielded. */
  pending: number;
  maxPending: number;
  /** Deliveries being driven. */
  driving: number;
  maxDriving: number;
}

export function newGauges(): SimulationGauges {
  return { pending: 0, maxPending: 0, driving: 0, maxDriving: 0 };
}

/** A slot waiting to start its next delivery, or a delivery being driven (its next event in hand). */
type Lane =
  | { kind: 'slot'; at: number; slot: number; round: number }
  | {
      kind: 'drive';
      at: number;
      slot: number;
      /** Generation rank: deliveries in (start, slot) order, as planned. */
      g: number;
      next: DeliveryEvent;
      driver: Generator<DeliveryEvent, DriveOutcome>;
      arrival: SimRng;
      /** Records made so far (tie-break after publish time and rank). */
      made: number;
    };

type Pending = { r: SimRecord; g: number; i: number };

/**
 * The run's records in publish order; ties by (delivery rank, record order within the delivery), the
 * order a whole-delivery generator gives. `onPlan` sees each delivery's plan (rank = call order) before
 * any of its records; `onEvent` sees each event as it is generated (only simulate() keeps them).
 */
function* recordStream(
  o: SimOptions,
  onPlan?: (plan: DeliveryPlan) => void,
  onEvent?: (g: number, e: DeliveryEvent) => void,
  gauges: SimulationGauges = newGauges(),
): Generator<SimRecord> {
  const incidentsOf = routeIncidentsOf(incidents(o));
  const endMs = o.startMs + o.durationMs;
  // Keyed by the time of the lane's next event (a slot's: its start); equal slot starts in slot order.
  const lanes = new MinHeap<Lane>((a, b) => a.at < b.at || (a.at === b.at && a.slot < b.slot));
  const spread = Math.min(o.durationMs, o.rampMs ?? DEFAULT_RAMP_MS);
  for (let s = 0; s < o.deliveries; s++) {
    const rng = new SimRng(subSeed(o.seed, 'slot', s));
    // The phase has its own seed: turning it on moves start times only, never the other draws.
    const phase = o.subSecondTimes ? Math.floor(new SimRng(subSeed(o.seed, 'phase', s)).next() * 1000) : 0;
    lanes.push({
      kind: 'slot',
      slot: s,
      round: 0,
      at: o.startMs + wholeSeconds(rng.uniform(0, spread)) + phase,
    });
  }
  const pending = new MinHeap<Pending>(
    (a, b) =>
      a.r.publishAtMs < b.r.publishAtMs ||
      (a.r.publishAtMs === b.r.publishAtMs && (a.g < b.g || (a.g === b.g && a.i < b.i))),
  );
  let rank = 0;
  for (;;) {
    const top = pending.peek();
    const lane = lanes.peek();
    // Every record publishes at or after its event time, and a lane's events come in event-time order:
    // advance each lane whose next event is no later than the earliest pending record before yielding it.
    if (lane && (!top || lane.at <= top.r.publishAtMs)) {
      if (lane.kind === 'slot') {
        lanes.pop();
        if (lane.at > endMs) continue; // No new delivery after the duration.
        const k = lane.round * o.deliveries + lane.slot;
        const plan = planWith(o, k, lane.at, incidentsOf);
        onPlan?.(plan);
        const g = rank++;
        const gap = new SimRng(subSeed(o.seed, 'gap', k)).uniform(0, 60_000);
        lanes.push({
          kind: 'slot',
          slot: lane.slot,
          round: lane.round + 1,
          at: plan.deliveredMs + wholeSeconds(gap),
        });
        const driver = drive(o, k, lane.at, setupDelivery(o, k, lane.at, incidentsOf), true);
        const first = driver.next(); // picked_up, at the start
        if (first.done) continue;
        lanes.push({
          kind: 'drive',
          at: first.value.eventTimeMs,
          slot: lane.slot,
          g,
          next: first.value,
          driver,
          arrival: new SimRng(subSeed(o.seed, 'arrival', k)),
          made: 0,
        });
        gauges.driving++;
        gauges.maxDriving = Math.max(gauges.maxDriving, gauges.driving);
        continue;
      }
      const e = lane.next;
      onEvent?.(lane.g, e);
      arrive(o, lane.arrival, e, (r) => pending.push({ r, g: lane.g, i: lane.made++ }));
      gauges.pending = pending.size;
      gauges.maxPending = Math.max(gauges.maxPending, pending.size);
      const step = lane.driver.next();
      if (step.done) {
        lanes.pop();
        gauges.driving--;
      } else {
        // The lane stays on top with a later key: one sift instead of pop + push.
        lane.next = step.value;
        lane.at = step.value.eventTimeMs;
        lanes.replaceTop(lane);
      }
      continue;
    }
    const r = pending.pop();
    if (!r) return;
    gauges.pending = pending.size;
    yield r.r;
  }
}

/**
 * The records of a run in publish order, generated incrementally: memory holds one driver per
 * delivery in flight and the records not yet due, never a whole delivery or run. `onDelivery`
 * receives each delivery's plan — its whole ground truth but the events — when it is planned, before
 * any of its records is yielded. `gauges`, when given, is kept up to date with what is held.
 */
export function simulationRecords(
  options: Partial<SimOptions> = {},
  onDelivery?: (plan: DeliveryPlan) => void,
  gauges?: SimulationGauges,
): Generator<SimRecord> {
  return recordStream(simOptions(options), onDelivery, undefined, gauges);
}

/** A whole run in memory (tests, training): records in publish order and every delivery's truth with its events. */
export function simulate(options: Partial<SimOptions> = {}): {
  records: SimRecord[];
  deliveries: DeliveryTruth[];
} {
  const deliveries: DeliveryTruth[] = [];
  const records = [
    ...recordStream(
      simOptions(options),
      (plan) => deliveries.push({ ...plan, events: [] }),
      (g, e) => deliveries[g]!.events.push(e),
    ),
  ];
  return { records, deliveries };
}
