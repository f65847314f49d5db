/**
 * Arrival: what becomes of one event on its way to the broker — publish time = event time + disorder, a
 * duplicateFraction published twice, a tooLateFraction delayed past the allowed lateness, an invalidFraction
 * of GPS events replaced by a malformed payload (status events never: they define the delivery).
 */
import { type DeliveryEvent, toWire } from '../schema';
import type { DeliveryTruth, SimOptions, SimRecord } from './options';
import { SimRng, subSeed } from './rng';

const INVALID_VARIANTS: ((wire: Record<string, unknown>) => string)[] = [
  (w) => JSON.stringify({ ...w, driver_lat: 123.4 }),
  (w) => JSON.stringify({ ...w, event_time: '08/11/2026 10:00:12' }),
  (w) => JSON.stringify({ ...w, event_id: undefined }),
  (w) => JSON.stringify({ ...w, driver_lon: String(w['driver_lon']) }),
  (w) => JSON.stringify(w).slice(0, -3),
];

/**
 * The records of one event after disorder, duplication, loss and corruption (a delivery's arrival
 * rng is drawn event by event, in event-time order).
 */
export function arrive(o: SimOptions, rng: SimRng, e: DeliveryEvent, out: (r: SimRecord) => void): void {
  const wire = toWire(e);
  const payload = JSON.stringify(wire);
  const protectedEvent = e.type === 'status';
  const common = { msgId: e.event_id, delivery_id: e.delivery_id };
  if (!protectedEvent && e.type === 'gps' && rng.chance(o.invalidFraction)) {
    const bad = INVALID_VARIANTS[rng.int(0, INVALID_VARIANTS.length - 1)]!(wire);
    out({
      ...common,
      publishAtMs: e.eventTimeMs + Math.round(rng.uniform(0, o.disorderMs)),
      payload: bad,
      kind: 'invalid',
    });
    return;
  }
  const tooLate = !protectedEvent && rng.chance(o.tooLateFraction);
  const publishAtMs =
    e.eventTimeMs +
    Math.round(tooLate ? o.tooLateDelayMs + rng.uniform(0, 30_000) : rng.uniform(0, o.disorderMs));
  out({ ...common, publishAtMs, payload, kind: tooLate ? 'too_late' : 'event', event: e });
  if (rng.chance(o.duplicateFraction)) {
    const again = publishAtMs + Math.round(rng.uniform(0, Math.max(o.disorderMs, 1000)));
    out({ ...common, publishAtMs: again, payload, kind: 'duplicate', event: e });
  }
}

/**
 * A whole delivery's records in its own order (each event through arrival): what the incremental
 * generator yields for that delivery, produced the non-incremental way (tests compare the two).
 */
export function deliveryRecords(o: SimOptions, k: number, truth: DeliveryTruth): SimRecord[] {
  const rng = new SimRng(subSeed(o.seed, 'arrival', k));
  const out: SimRecord[] = [];
  for (const e of truth.events) arrive(o, rng, e, (r) => out.push(r));
  return out;
}
