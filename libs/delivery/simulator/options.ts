/** The simulator's options, the records and ground truth it produces, and the bounds derived from them. */
import type { DeliveryEvent } from '../schema';

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
  /**
   * Slots start their first delivery within this span (capped at durationMs). Unset: 5 min, the
   * historical ramp (training runs and their model depend on it).
   */
  rampMs?: number;
  /**
   * Give each slot a millisecond phase, so event times spread over the second (`…:12.345Z`) instead of
   * all falling on whole seconds: at thousands of events/s a live run then publishes smoothly rather
   * than in one burst per second. Unset/false: whole seconds, as the contract's example.
   */
  subSecondTimes?: boolean;
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

/** A delivery's ground truth as its plan knows it: everything but the events, before any is published. */
export interface DeliveryPlan {
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
}

export interface DeliveryTruth extends DeliveryPlan {
  /** Every valid event of the delivery, in event-time order (before duplication or loss). */
  events: DeliveryEvent[];
}

/** The longest a delivery may drive (a run's horizon is its duration plus this). */
export const MAX_DELIVERY_MS = 3 * 3_600_000;
/** The historical start ramp (see SimOptions.rampMs). */
export const DEFAULT_RAMP_MS = 5 * 60_000;

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
  if (opts.rampMs !== undefined && !(opts.rampMs >= 0))
    throw new Error(`simulator: rampMs must be ≥ 0, got ${opts.rampMs}`);
  if (!/^[A-Za-z0-9_-]*$/.test(opts.idPrefix))
    throw new Error('simulator: idPrefix may hold letters, digits, _ and -');
  return opts;
}

/**
 * The longest a record can wait between its event time and its publish time: the disorder (or a
 * too-late delay + up to 30 s), plus a duplicate's own delay on top. The incremental generator holds
 * at most this much of each delivery's records.
 */
export function maxArrivalDelayMs(o: SimOptions): number {
  const first = Math.max(o.disorderMs, o.tooLateFraction > 0 ? o.tooLateDelayMs + 30_000 : 0);
  return first + (o.duplicateFraction > 0 ? Math.max(o.disorderMs, 1000) : 0);
}
