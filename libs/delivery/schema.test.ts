import { decisionId } from './contract';
import { MAX_EVENT_BYTES, parseEvent, parseIsoTime, toWire, validateEvent } from './schema';

const GPS = {
  event_id: 'gps-78221',
  delivery_id: 'order-482',
  event_time: '2026-11-08T10:00:12Z',
  type: 'gps',
  driver_lat: 12.9716,
  driver_lon: 77.5946,
};
const STATUS = {
  event_id: 'status-1',
  delivery_id: 'order-482',
  event_time: '2026-11-08T09:58:00Z',
  type: 'status',
  status: 'picked_up',
  promised_time: '2026-11-08T10:25:00Z',
  dest_lat: 12.99,
  dest_lon: 77.6,
  route_id: 'route-7',
};
const TRAFFIC = {
  event_id: 'traffic-9',
  delivery_id: 'order-482',
  event_time: '2026-11-08T10:01:00+05:30',
  type: 'traffic',
  route_id: 'route-7',
  severity: 3,
};

function reason(raw: unknown): string {
  const r = validateEvent(raw);
  if (r.ok) throw new Error(`expected a rejection of ${JSON.stringify(raw)}`);
  return r.reason;
}

describe('validateEvent: valid events', () => {
  it('accepts the contract example and types it', () => {
    const r = validateEvent(GPS);
    expect(r).toEqual({ ok: true, event: { ...GPS, eventTimeMs: Date.UTC(2026, 10, 8, 10, 0, 12) } });
  });

  it('accepts a first status with promised time, destination and route', () => {
    const r = validateEvent(STATUS);
    if (!r.ok) throw new Error(r.reason);
    expect(r.event).toMatchObject({
      type: 'status',
      status: 'picked_up',
      dest_lat: 12.99,
      route_id: 'route-7',
    });
    expect(r.event.type === 'status' && r.event.promisedTimeMs).toBe(Date.UTC(2026, 10, 8, 10, 25));
  });

  it('accepts a later status without the optional fields', () => {
    const r = validateEvent({ ...GPS, type: 'status', status: 'delivered', driver_lat: undefined });
    expect(r.ok && r.event).toMatchObject({ status: 'delivered' });
    expect(r.ok && 'promised_time' in r.event).toBe(false);
  });

  it('accepts a traffic alert and converts the offset to UTC', () => {
    const r = validateEvent(TRAFFIC);
    expect(r.ok && r.event).toMatchObject({ route_id: 'route-7', severity: 3 });
    expect(r.ok && r.event.eventTimeMs).toBe(Date.UTC(2026, 10, 8, 4, 31));
  });

  it('ignores unknown extra fields (not carried into the typed event)', () => {
    const r = validateEvent({ ...GPS, speed_kmh: 20, app_version: '3.1' });
    expect(r.ok && Object.keys(toWire(r.event)).sort()).toEqual(Object.keys(GPS).sort());
  });

  it('round-trips through toWire and parseEvent', () => {
    for (const raw of [GPS, STATUS, TRAFFIC]) {
      const a = validateEvent(raw);
      if (!a.ok) throw new Error(a.reason);
      const b = parseEvent(JSON.stringify(toWire(a.event)));
      expect(b).toEqual(a);
    }
  });

  it('accepts boundary coordinates and severities', () => {
    expect(validateEvent({ ...GPS, driver_lat: -90, driver_lon: 180 }).ok).toBe(true);
    expect(validateEvent({ ...GPS, driver_lat: 90, driver_lon: -180 }).ok).toBe(true);
    expect(validateEvent({ ...TRAFFIC, severity: 1 }).ok).toBe(true);
    expect(validateEvent({ ...TRAFFIC, severity: 5 }).ok).toBe(true);
  });
});

describe('validateEvent: every field is checked', () => {
  it.each([
    ['event', null, /^event: must be a JSON object, got null/],
    ['event', [GPS], /^event: must be a JSON object, got array/],
    ['event', 'gps', /^event: must be a JSON object, got string/],
    ['event_id', { ...GPS, event_id: undefined }, /^event_id: missing/],
    ['event_id', { ...GPS, event_id: 78221 }, /^event_id: must be a string, got number/],
    ['event_id', { ...GPS, event_id: '' }, /^event_id: must not be empty/],
    ['event_id', { ...GPS, event_id: 'x'.repeat(129) }, /^event_id: longer than 128/],
    ['delivery_id', { ...GPS, delivery_id: undefined }, /^delivery_id: missing/],
    ['delivery_id', { ...GPS, delivery_id: null }, /^delivery_id: must be a string, got null/],
    ['delivery_id', { ...GPS, delivery_id: 'order.482' }, /^delivery_id: may only hold/],
    ['delivery_id', { ...GPS, delivery_id: 'order-*' }, /^delivery_id: may only hold/],
    ['delivery_id', { ...GPS, delivery_id: 'order >' }, /^delivery_id: may only hold/],
    ['event_time', { ...GPS, event_time: undefined }, /^event_time: missing/],
    ['event_time', { ...GPS, event_time: 1762596012000 }, /^event_time: must be a string, got number/],
    ['type', { ...GPS, type: undefined }, /^type: missing/],
    ['type', { ...GPS, type: 'weather' }, /^type: must be one of gps, status, traffic, got "weather"/],
    ['type', { ...GPS, type: ['gps'] }, /^type: must be a string, got array/],
    ['driver_lat', { ...GPS, driver_lat: undefined }, /^driver_lat: missing/],
    ['driver_lat', { ...GPS, driver_lat: '12.97' }, /^driver_lat: must be a finite number, got string/],
    ['driver_lat', { ...GPS, driver_lat: 90.01 }, /^driver_lat: must be in \[-90, 90\], got 90.01/],
    ['driver_lat', { ...GPS, driver_lat: Number.NaN }, /^driver_lat: must be a finite number, got NaN/],
    ['driver_lon', { ...GPS, driver_lon: undefined }, /^driver_lon: missing/],
    ['driver_lon', { ...GPS, driver_lon: -180.5 }, /^driver_lon: must be in \[-180, 180\]/],
    [
      'driver_lon',
      { ...GPS, driver_lon: Number.POSITIVE_INFINITY },
      /^driver_lon: must be a finite number, got Infinity/,
    ],
    ['status', { ...STATUS, status: undefined }, /^status: missing/],
    ['status', { ...STATUS, status: 'lost' }, /^status: must be one of assigned, picked_up/],
    ['status', { ...STATUS, status: 3 }, /^status: must be a string/],
    ['promised_time', { ...STATUS, promised_time: '10:25' }, /^promised_time: not an ISO-8601 timestamp/],
    ['promised_time', { ...STATUS, promised_time: 0 }, /^promised_time: must be a string/],
    [
      'dest_lat',
      { ...STATUS, dest_lat: undefined },
      /^dest_lat: missing \(dest_lat and dest_lon come together\)/,
    ],
    ['dest_lon', { ...STATUS, dest_lon: undefined }, /^dest_lon: missing/],
    ['dest_lat', { ...STATUS, dest_lat: -91 }, /^dest_lat: must be in/],
    ['route_id', { ...STATUS, route_id: 'a b' }, /^route_id: may only hold/],
    ['route_id', { ...TRAFFIC, route_id: undefined }, /^route_id: missing/],
    ['severity', { ...TRAFFIC, severity: undefined }, /^severity: missing/],
    ['severity', { ...TRAFFIC, severity: 0 }, /^severity: must be in \[1, 5\], got 0/],
    ['severity', { ...TRAFFIC, severity: 6 }, /^severity: must be in \[1, 5\]/],
    ['severity', { ...TRAFFIC, severity: 2.5 }, /^severity: must be an integer, got 2.5/],
    ['severity', { ...TRAFFIC, severity: 'high' }, /^severity: must be a finite number, got string/],
  ])('%s: %j', (_field, raw, expected) => {
    expect(reason(raw)).toMatch(expected);
  });
});

describe('timestamps', () => {
  it.each([
    '2026-11-08T10:00:12', // no zone
    '2026-11-08 10:00:12Z',
    '2026-11-08',
    '2026-11-08T10:00Z',
    '2026-02-30T10:00:00Z', // no such day
    '2025-02-29T10:00:00Z', // not a leap year
    '2026-13-01T10:00:00Z',
    '2026-11-00T10:00:00Z',
    '2026-11-08T24:00:00Z',
    '2026-11-08T10:60:00Z',
    '2026-11-08T10:00:60Z',
    '2026-11-08T10:00:12+24:00',
    '2026-11-08T10:00:12+05:60',
    '2026-11-08T10:00:12.Z',
    '2026-11-08T10:00:12.1234567891Z',
    'Sun, 08 Nov 2026 10:00:12 GMT',
    ' 2026-11-08T10:00:12Z',
    '',
  ])('rejects %j', (s) => {
    expect(parseIsoTime(s)).toBeNull();
    expect(reason({ ...GPS, event_time: s })).toMatch(/^event_time: /);
  });

  it('parses fractions, leap days and offsets', () => {
    expect(parseIsoTime('2026-11-08T10:00:12.5Z')).toBe(Date.UTC(2026, 10, 8, 10, 0, 12, 500));
    expect(parseIsoTime('2026-11-08T10:00:12.123456789Z')).toBe(Date.UTC(2026, 10, 8, 10, 0, 12, 123));
    expect(parseIsoTime('2028-02-29T00:00:00Z')).toBe(Date.UTC(2028, 1, 29));
    expect(parseIsoTime('2026-11-08T15:30:12+05:30')).toBe(Date.UTC(2026, 10, 8, 10, 0, 12));
    expect(parseIsoTime('2026-11-08T05:00:12-05:00')).toBe(Date.UTC(2026, 10, 8, 10, 0, 12));
  });
});

describe('parseEvent (raw payloads)', () => {
  it('decodes UTF-8 bytes', () => {
    expect(parseEvent(new TextEncoder().encode(JSON.stringify(GPS))).ok).toBe(true);
  });

  it('rejects non-JSON, invalid UTF-8 and oversized payloads with a reason', () => {
    expect(parseEvent('{"event_id": ')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^payload: not JSON/),
    });
    expect(parseEvent(Uint8Array.from([0x7b, 0xff, 0xfe, 0x7d]))).toEqual({
      ok: false,
      reason: 'payload: not valid UTF-8',
    });
    const big = JSON.stringify({ ...GPS, pad: 'x'.repeat(MAX_EVENT_BYTES) });
    expect(parseEvent(big)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^payload: \d+ bytes, over maxEventBytes 65536/),
    });
    expect(parseEvent('[1,2]')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^event: must be a JSON object/),
    });
  });
});

describe('contract shapes', () => {
  it('decision id: one per delivery, event, model version, rule version and revision', () => {
    const p = {
      delivery_id: 'order-482',
      event_id: 'gps-78221',
      model: 'delay-risk',
      version: '1',
      revision: 0,
    };
    expect(decisionId(p)).toBe('order-482:gps-78221:delay-risk@1:r1:0');
    const ids = new Set([
      decisionId(p),
      decisionId({ ...p, version: '2' }),
      decisionId({ ...p, revision: 1 }),
      decisionId({ ...p, ruleVersion: 2 }),
      decisionId({ ...p, event_id: 'gps-78222' }),
    ]);
    expect(ids.size).toBe(5);
  });
});

describe('ids: letters and digits of any script (subject tokens are UTF-8)', () => {
  it.each(['Müller_7', '配達-0042', 'Łódź-9', 'Ωmega', 'e\u0301clair', 'заказ-1'])('accepts %s', (id) => {
    const r = validateEvent({ ...GPS, event_id: `${id}-g`, delivery_id: id });
    expect(r.ok && r.event.delivery_id).toBe(id);
    expect(validateEvent({ ...STATUS, route_id: id }).ok).toBe(true);
  });

  it.each(['🚚-1', 'a\u00a0b', 'a\u200bb', 'tab\t', 'a/b'])('refuses %j (not a letter or digit)', (id) => {
    expect(validateEvent({ ...GPS, delivery_id: id })).toEqual({
      ok: false,
      reason: 'delivery_id: may only hold letters, digits, "_" and "-"',
    });
  });
});
