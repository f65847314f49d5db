/**
 * Paces a simulation in real time for a publisher (the `streaminfer simulate` CLI): event times
 * start at the run's wall-clock start, and each record is handed over when its publishAt comes.
 */
import { simulationRecords } from './generator';
import type { SimOptions, SimRecord } from './options';

export interface PaceOptions {
  /** Wall clock (epoch ms). */
  now: () => number;
  sleep: (ms: number) => Promise<void>;
}

export interface Publishable {
  /** Epoch ms at which the record was due. */
  publishAt: number;
  record: SimRecord;
}

/**
 * A driver's GPS interval that a live run aims for when it may choose the number of deliveries:
 * real fleet apps report every few seconds, so a higher rate means more deliveries, not faster GPS.
 */
export const REALISTIC_GPS_INTERVAL_MS = 4000;

/** GPS interval that makes N deliveries produce about `rate` events/s (GPS dominates the mix). */
export function gpsIntervalForRate(rate: number, deliveries: number): number {
  if (!(rate > 0)) throw new Error(`simulator: rate must be > 0, got ${rate}`);
  return Math.max(1, Math.round((deliveries / rate) * 1000));
}

/** Concurrent deliveries for `rate` events/s at the realistic GPS interval: ⌈rate × 4 s⌉ (3,000 ev/s → 12,000). */
export function deliveriesForRate(rate: number): number {
  if (!(rate > 0)) throw new Error(`simulator: rate must be > 0, got ${rate}`);
  return Math.max(1, Math.ceil((rate * REALISTIC_GPS_INTERVAL_MS) / 1000));
}

/**
 * Options for a live run: event times from now, ids unique to this run. With a rate, the GPS interval
 * is deliveries / rate; the deliveries are the caller's when given (honoured as they are), else
 * deliveriesForRate(rate), so GPS stays at about 4 s. Without a rate: 50 deliveries, the default GPS.
 */
export function liveOptions(o: Partial<SimOptions> & { rate?: number }, now: number): Partial<SimOptions> {
  const { rate, ...rest } = o;
  const deliveries = rest.deliveries ?? (rate !== undefined ? deliveriesForRate(rate) : 50);
  return {
    ...rest,
    deliveries,
    startMs: now,
    idPrefix: rest.idPrefix ?? `r${now.toString(36)}-`,
    ...(rate !== undefined ? { gpsIntervalMs: gpsIntervalForRate(rate, deliveries) } : {}),
  };
}

/** Yields each record at its publish time (never early); a slow consumer makes it catch up, not skip. */
export async function* paced(records: Iterable<SimRecord>, p: PaceOptions): AsyncGenerator<Publishable> {
  for (const record of records) {
    const wait = record.publishAtMs - p.now();
    if (wait > 0) await p.sleep(wait);
    yield { publishAt: record.publishAtMs, record };
  }
}

/** A live run: liveOptions + simulationRecords + paced, on the real clock. */
export function liveRun(
  o: Partial<SimOptions> & { rate?: number },
  p?: Partial<PaceOptions>,
): AsyncGenerator<Publishable> {
  const now = p?.now ?? Date.now;
  const sleep = p?.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  return paced(simulationRecords(liveOptions(o, now())), { now, sleep });
}
