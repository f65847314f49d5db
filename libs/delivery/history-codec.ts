/**
 * A delivery's events as snapshot columns: no per-event objects, no repeated delivery_id, times as
 * differences, ids front-coded, `event_time` only where it is not the canonical form of its time, and the
 * type-specific fields in one column per type. Decoding rebuilds objects equal to what parseEvent made
 * (same fields, same key order).
 */
import {
  arr,
  bad,
  int,
  isRecord,
  num,
  packDeltas,
  packStrings,
  str,
  unpackDeltas,
  unpackStrings,
} from '../event-time';
import {
  type DeliveryEvent,
  type DeliveryStatus,
  formatIsoTime,
  type GpsEvent,
  STATUSES,
  type StatusEvent,
  type TrafficEvent,
} from './schema';

/** A status event's own fields. */
export type StatusFields = Omit<
  StatusEvent,
  'event_id' | 'delivery_id' | 'event_time' | 'eventTimeMs' | 'type'
>;

export interface HistoryColumns {
  /** event_id, front-coded (see packStrings). */
  id: string;
  /** eventTimeMs: the first, then differences. */
  time: number[];
  /** One letter per event: g(ps), s(tatus), t(raffic). */
  type: string;
  /** [index, event_time] of the events whose event_time is not canonicalTime(eventTimeMs); absent when none. */
  eventTime?: [number, string][];
  /** The GPS points' driver_lat, driver_lon, flattened, in order; absent when none. */
  gps?: number[];
  status?: StatusFields[];
  /** [route_id, severity] per traffic alert, in order. */
  traffic?: [string, number][];
}

const DAY_MS = 86_400_000;
/** Year 10000: toISOString's 4-digit years end here. */
const FOUR_DIGIT_YEARS_END = 253_402_300_800_000;
let cachedDay = Number.NaN;
let cachedPrefix = '';

const pad2 = (n: number): string => (n < 10 ? `0${n}` : `${n}`);

/**
 * formatIsoTime(ms) (the simulator's and most producers' form), without a Date per call: snapshots check
 * every history event's event_time against it.
 */
export function canonicalTime(ms: number): string {
  if (!Number.isInteger(ms) || ms < 0 || ms >= FOUR_DIGIT_YEARS_END) return formatIsoTime(ms);
  const day = Math.floor(ms / DAY_MS);
  if (day !== cachedDay) {
    cachedDay = day;
    cachedPrefix = new Date(day * DAY_MS).toISOString().slice(0, 11);
  }
  let rest = ms - day * DAY_MS;
  const milli = rest % 1000;
  rest = (rest - milli) / 1000;
  const sec = rest % 60;
  rest = (rest - sec) / 60;
  const min = rest % 60;
  const hour = (rest - min) / 60;
  const frac = milli === 0 ? '' : milli < 10 ? `.00${milli}` : milli < 100 ? `.0${milli}` : `.${milli}`;
  return `${cachedPrefix}${pad2(hour)}:${pad2(min)}:${pad2(sec)}${frac}Z`;
}

/**
 * Whether `text` is canonicalTime(ms), for a text that names the same instant as ms to the second (parsed
 * from it, or made by canonicalTime): only the form can differ then — the zone, the fraction's digits — and
 * that is checked without formatting: a snapshot asks it of every history event.
 */
export function isCanonicalTime(text: string, ms: number): boolean {
  if (!Number.isInteger(ms) || ms < 0 || ms >= FOUR_DIGIT_YEARS_END) return text === formatIsoTime(ms);
  const frac = ms % 1000;
  if (text.length === 20) return frac === 0 && text.charCodeAt(19) === 90; // …SSZ
  if (text.length !== 24 || frac === 0 || text.charCodeAt(19) !== 46 || text.charCodeAt(23) !== 90)
    return false;
  const digits = (i: number) => text.charCodeAt(i) - 48;
  return digits(20) * 100 + digits(21) * 10 + digits(22) === frac && text.charCodeAt(10) === 84; // …T…
}

export function packHistory(key: string, events: readonly DeliveryEvent[]): HistoryColumns {
  const n = events.length;
  const ids = new Array<string>(n);
  const times = new Array<number>(n);
  const type = new Array<string>(n);
  const eventTime: [number, string][] = [];
  const gps: number[] = [];
  const status: StatusFields[] = [];
  const traffic: [string, number][] = [];
  for (let i = 0; i < n; i++) {
    const e = events[i]!;
    // A delivery's history holds only its own events: the key is its delivery_id.
    if (e.delivery_id !== key)
      throw new Error(`event ${e.event_id} of ${e.delivery_id} in the history of ${key}`);
    ids[i] = e.event_id;
    times[i] = e.eventTimeMs;
    if (!isCanonicalTime(e.event_time, e.eventTimeMs)) eventTime.push([i, e.event_time]);
    if (e.type === 'gps') {
      type[i] = 'g';
      gps.push(e.driver_lat, e.driver_lon);
    } else if (e.type === 'status') {
      type[i] = 's';
      const { event_id: _i, delivery_id: _d, event_time: _t, eventTimeMs: _m, type: _y, ...own } = e;
      status.push(own);
    } else {
      type[i] = 't';
      traffic.push([e.route_id, e.severity]);
    }
  }
  const out: HistoryColumns = { id: packStrings(ids), time: packDeltas(times), type: type.join('') };
  if (eventTime.length > 0) out.eventTime = eventTime;
  if (gps.length > 0) out.gps = gps;
  if (status.length > 0) out.status = status;
  if (traffic.length > 0) out.traffic = traffic;
  return out;
}

/** Checked inline: a path string per element would cost more than the decoding. */
function numberAt(path: string, values: readonly unknown[], i: number): number {
  const v = values[i];
  return typeof v === 'number' && Number.isFinite(v) ? v : num(`${path}[${i}]`, v);
}

function optionalColumn(path: string, value: unknown): unknown[] {
  return value === undefined ? [] : arr(path, value);
}

function statusFields(path: string, value: unknown): StatusFields {
  if (!isRecord(value)) bad(path, 'an object');
  const status = str(`${path}.status`, value.status);
  if (!(STATUSES as readonly string[]).includes(status))
    bad(`${path}.status`, `one of ${STATUSES.join(', ')}`);
  const out: StatusFields = { status: status as DeliveryStatus };
  if (value.promised_time !== undefined || value.promisedTimeMs !== undefined) {
    out.promised_time = str(`${path}.promised_time`, value.promised_time);
    out.promisedTimeMs = int(`${path}.promisedTimeMs`, value.promisedTimeMs);
  }
  if (value.dest_lat !== undefined || value.dest_lon !== undefined) {
    out.dest_lat = num(`${path}.dest_lat`, value.dest_lat);
    out.dest_lon = num(`${path}.dest_lon`, value.dest_lon);
  }
  if (value.route_id !== undefined) out.route_id = str(`${path}.route_id`, value.route_id);
  return out;
}

export function unpackHistory(path: string, value: unknown, key: string): DeliveryEvent[] {
  if (!isRecord(value)) bad(path, 'an object');
  const ids = unpackStrings(`${path}.id`, value.id);
  const times = unpackDeltas(`${path}.time`, value.time);
  const type = str(`${path}.type`, value.type);
  const n = ids.length;
  if (times.length !== n) bad(`${path}.time`, `${n} times`);
  if (type.length !== n) bad(`${path}.type`, `${n} type letters`);
  const eventTimes = new Map<number, string>();
  optionalColumn(`${path}.eventTime`, value.eventTime).forEach((pair, j) => {
    const pp = `${path}.eventTime[${j}]`;
    const [index, text] = arr(pp, pair);
    eventTimes.set(int(`${pp}[0]`, index), str(`${pp}[1]`, text));
  });
  const gps = optionalColumn(`${path}.gps`, value.gps);
  const status = optionalColumn(`${path}.status`, value.status);
  const traffic = optionalColumn(`${path}.traffic`, value.traffic);
  let g = 0;
  let s = 0;
  let t = 0;
  const out = new Array<DeliveryEvent>(n);
  for (let i = 0; i < n; i++) {
    const base = {
      event_id: ids[i]!,
      delivery_id: key,
      event_time: eventTimes.get(i) ?? canonicalTime(times[i]!),
      eventTimeMs: times[i]!,
    };
    const letter = type[i];
    if (letter === 'g') {
      if (2 * g + 1 >= gps.length) bad(`${path}.gps`, 'a [lat, lon] pair per g in type');
      const e: GpsEvent = {
        ...base,
        type: 'gps',
        driver_lat: numberAt(`${path}.gps`, gps, 2 * g),
        driver_lon: numberAt(`${path}.gps`, gps, 2 * g + 1),
      };
      g++;
      out[i] = e;
    } else if (letter === 's') {
      if (s >= status.length) bad(`${path}.status`, 'an entry per s in type');
      const e: StatusEvent = { ...base, type: 'status', ...statusFields(`${path}.status[${s}]`, status[s]) };
      s++;
      out[i] = e;
    } else if (letter === 't') {
      if (t >= traffic.length) bad(`${path}.traffic`, 'an entry per t in type');
      const tp = `${path}.traffic[${t}]`;
      const [route, severity] = arr(tp, traffic[t]);
      const e: TrafficEvent = {
        ...base,
        type: 'traffic',
        route_id: str(`${tp}[0]`, route),
        severity: int(`${tp}[1]`, severity),
      };
      t++;
      out[i] = e;
    } else {
      bad(`${path}.type`, 'only the letters g, s and t');
    }
  }
  if (2 * g !== gps.length) bad(`${path}.gps`, `${2 * g} numbers`);
  if (s !== status.length) bad(`${path}.status`, `${s} entries`);
  if (t !== traffic.length) bad(`${path}.traffic`, `${t} entries`);
  return out;
}
