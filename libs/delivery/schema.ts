/**
 * The reference workload's event schema (public contract of `delivery.events.<delivery_id>`)
 * and its validator. Pure: no I/O, no clock.
 *
 * Every event: `event_id`, `delivery_id`, `event_time` (ISO-8601 with `Z` or an offset), `type`.
 *   gps      driver_lat [-90, 90], driver_lon [-180, 180]
 *   status   status (one of STATUSES); the first status of a delivery (`picked_up`) carries
 *            `promised_time` (ISO-8601) and the destination `dest_lat`/`dest_lon`, and may carry
 *            `route_id` (the route whose traffic alerts concern it)
 *   traffic  route_id, severity (integer 1..5)
 * Unknown extra fields are ignored (producers may add fields without breaking consumers).
 */
import { Invalid } from './errors';

export const EVENT_TYPES = ['gps', 'status', 'traffic'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const STATUSES = ['assigned', 'picked_up', 'in_transit', 'delivered', 'cancelled'] as const;
export type DeliveryStatus = (typeof STATUSES)[number];

/** Statuses after which a delivery's state can be cleaned up. */
export const TERMINAL_STATUSES: readonly DeliveryStatus[] = ['delivered', 'cancelled'];

export const MIN_SEVERITY = 1;
export const MAX_SEVERITY = 5;
/** Longest accepted `event_id` / `delivery_id` / `route_id`. */
export const MAX_ID_LENGTH = 128;
/**
 * Largest accepted payload by default (bytes, UTF-8; the pipeline's `maxEventBytes`); bigger ones are
 * dead-lettered unparsed. Room for extra fields (ignored, not kept in state) while bounding the parse.
 */
export const MAX_EVENT_BYTES = 65_536;

interface EventBase {
  event_id: string;
  delivery_id: string;
  /** As sent (ISO-8601). */
  event_time: string;
  /** `event_time` parsed: epoch milliseconds. */
  eventTimeMs: number;
}

export interface GpsEvent extends EventBase {
  type: 'gps';
  driver_lat: number;
  driver_lon: number;
}

export interface StatusEvent extends EventBase {
  type: 'status';
  status: DeliveryStatus;
  promised_time?: string;
  promisedTimeMs?: number;
  dest_lat?: number;
  dest_lon?: number;
  route_id?: string;
}

export interface TrafficEvent extends EventBase {
  type: 'traffic';
  route_id: string;
  severity: number;
}

export type DeliveryEvent = GpsEvent | StatusEvent | TrafficEvent;

export type ValidationResult = { ok: true; event: DeliveryEvent } | { ok: false; reason: string };

// YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM); the calendar is checked separately.
const ISO_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-](\d{2}):(\d{2}))$/;

/** Epoch ms of a strict ISO-8601 timestamp, or null (wrong format, impossible date, bad offset). */
export function parseIsoTime(s: string): number | null {
  const m = ISO_RE.exec(s);
  if (!m) return null;
  const [y, mo, d, h, mi, se] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (mo < 1 || mo > 12 || h > 23 || mi > 59 || se > 59) return null;
  const dayMs = Date.UTC(y, mo - 1, d);
  const check = new Date(dayMs);
  if (d < 1 || check.getUTCMonth() !== mo - 1 || check.getUTCDate() !== d) return null;
  let offsetMin = 0;
  if (m[8] !== 'Z') {
    const oh = Number(m[9]);
    const om = Number(m[10]);
    if (oh > 23 || om > 59) return null;
    offsetMin = (m[8]!.startsWith('-') ? -1 : 1) * (oh * 60 + om);
  }
  const frac = m[7] ? Math.floor(Number(`0.${m[7]}`) * 1000) : 0;
  return dayMs + ((h * 60 + mi) * 60 + se) * 1000 + frac - offsetMin * 60_000;
}

/** Canonical ISO-8601 UTC form (what the simulator emits): `2026-11-08T10:00:12Z`, ms when non-zero. */
export function formatIsoTime(ms: number): string {
  const s = new Date(ms).toISOString();
  return s.endsWith('.000Z') ? `${s.slice(0, -5)}Z` : s;
}

// delivery_id becomes a NATS subject token: no '.', '*', '>' or whitespace. Letters (with their combining
// marks) and digits of any script: a subject token is UTF-8, and the partition is hashed over its bytes.
const ID_RE = /^[\p{L}\p{M}\p{N}_-]+$/u;

function fail(field: string, problem: string): never {
  throw new Invalid(`${field}: ${problem}`);
}

function str(o: Record<string, unknown>, field: string, required: boolean): string | undefined {
  const v = o[field];
  if (v === undefined) {
    if (required) fail(field, 'missing');
    return undefined;
  }
  if (typeof v !== 'string') fail(field, `must be a string, got ${kind(v)}`);
  if (v.length === 0) fail(field, 'must not be empty');
  return v;
}

function id(o: Record<string, unknown>, field: string, required: boolean): string | undefined {
  const v = str(o, field, required);
  if (v === undefined) return undefined;
  if (v.length > MAX_ID_LENGTH) fail(field, `longer than ${MAX_ID_LENGTH} characters`);
  if (!ID_RE.test(v)) fail(field, 'may only hold letters, digits, "_" and "-"');
  return v;
}

function time(o: Record<string, unknown>, field: string): number | undefined {
  const v = str(o, field, false);
  if (v === undefined) return undefined;
  const ms = parseIsoTime(v);
  if (ms === null)
    fail(field, `not an ISO-8601 timestamp with a zone (e.g. 2026-11-08T10:00:12Z): ${clip(v)}`);
  return ms;
}

function num(
  o: Record<string, unknown>,
  field: string,
  lo: number,
  hi: number,
  required: boolean,
): number | undefined {
  const v = o[field];
  if (v === undefined) {
    if (required) fail(field, 'missing');
    return undefined;
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) fail(field, `must be a finite number, got ${kind(v)}`);
  if (v < lo || v > hi) fail(field, `must be in [${lo}, ${hi}], got ${v}`);
  return v;
}

function kind(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return typeof v;
}

function clip(s: string): string {
  return s.length > 40 ? `${JSON.stringify(s.slice(0, 40))}…` : JSON.stringify(s);
}

function validate(raw: unknown): DeliveryEvent {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    fail('event', `must be a JSON object, got ${kind(raw)}`);
  const o = raw as Record<string, unknown>;
  const event_id = id(o, 'event_id', true)!;
  const delivery_id = id(o, 'delivery_id', true)!;
  const event_time = str(o, 'event_time', true)!;
  const eventTimeMs = time(o, 'event_time')!;
  const type = str(o, 'type', true)!;
  const base = { event_id, delivery_id, event_time, eventTimeMs };
  switch (type) {
    case 'gps':
      return {
        ...base,
        type,
        driver_lat: num(o, 'driver_lat', -90, 90, true)!,
        driver_lon: num(o, 'driver_lon', -180, 180, true)!,
      };
    case 'status': {
      const status = str(o, 'status', true)!;
      if (!(STATUSES as readonly string[]).includes(status))
        fail('status', `must be one of ${STATUSES.join(', ')}, got ${clip(status)}`);
      const ev: StatusEvent = { ...base, type, status: status as DeliveryStatus };
      const promisedTimeMs = time(o, 'promised_time');
      if (promisedTimeMs !== undefined) {
        ev.promised_time = o['promised_time'] as string;
        ev.promisedTimeMs = promisedTimeMs;
      }
      const lat = num(o, 'dest_lat', -90, 90, false);
      const lon = num(o, 'dest_lon', -180, 180, false);
      if ((lat === undefined) !== (lon === undefined))
        fail(lat === undefined ? 'dest_lat' : 'dest_lon', 'missing (dest_lat and dest_lon come together)');
      if (lat !== undefined && lon !== undefined) {
        ev.dest_lat = lat;
        ev.dest_lon = lon;
      }
      const route = id(o, 'route_id', false);
      if (route !== undefined) ev.route_id = route;
      return ev;
    }
    case 'traffic': {
      const route_id = id(o, 'route_id', true)!;
      const severity = num(o, 'severity', MIN_SEVERITY, MAX_SEVERITY, true)!;
      if (!Number.isInteger(severity)) fail('severity', `must be an integer, got ${severity}`);
      return { ...base, type, route_id, severity };
    }
    default:
      return fail('type', `must be one of ${EVENT_TYPES.join(', ')}, got ${clip(type)}`);
  }
}

/** Checks a parsed JSON value against the schema: the typed event, or why not (for the dead letter). */
export function validateEvent(raw: unknown): ValidationResult {
  try {
    return { ok: true, event: validate(raw) };
  } catch (err) {
    if (err instanceof Invalid) return { ok: false, reason: err.message };
    throw err;
  }
}

/** Decodes and validates a message payload (UTF-8 JSON) of at most `maxBytes`, as the pipeline receives it. */
export function parseEvent(payload: Uint8Array | string, maxBytes = MAX_EVENT_BYTES): ValidationResult {
  const size = typeof payload === 'string' ? new TextEncoder().encode(payload).length : payload.length;
  if (size > maxBytes) return { ok: false, reason: `payload: ${size} bytes, over maxEventBytes ${maxBytes}` };
  let text: string;
  try {
    text = typeof payload === 'string' ? payload : new TextDecoder('utf-8', { fatal: true }).decode(payload);
  } catch {
    return { ok: false, reason: 'payload: not valid UTF-8' };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, reason: `payload: not JSON (${(err as Error).message})` };
  }
  return validateEvent(raw);
}

/** The wire form of a typed event (drops the parsed-time helpers). */
export function toWire(e: DeliveryEvent): Record<string, unknown> {
  const { eventTimeMs: _t, ...rest } = e as DeliveryEvent & { promisedTimeMs?: number };
  delete (rest as { promisedTimeMs?: number }).promisedTimeMs;
  return rest;
}
