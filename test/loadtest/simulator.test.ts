import {
  type DeliveryTruth,
  gpsIntervalForRate,
  haversineKm,
  incidents,
  liveOptions,
  paced,
  parseEvent,
  type SimOptions,
  type SimRecord,
  simOptions,
  simulate,
  simulateDelivery,
} from '../../libs/delivery';

const BASE: Partial<SimOptions> = { seed: 11, deliveries: 30, durationMs: 30 * 60_000 };
const MESSY: Partial<SimOptions> = {
  ...BASE,
  disorderMs: 8000,
  duplicateFraction: 0.05,
  tooLateFraction: 0.02,
  tooLateDelayMs: 120_000,
  invalidFraction: 0.01,
};

let clean: { records: SimRecord[]; deliveries: DeliveryTruth[] };
let messy: { records: SimRecord[]; deliveries: DeliveryTruth[] };
beforeAll(() => {
  clean = simulate(BASE);
  messy = simulate(MESSY);
});

describe('simulator: determinism', () => {
  it('same seed, same records; another seed, other records', () => {
    const again = simulate(MESSY);
    expect(again.records.map((r) => [r.publishAtMs, r.payload, r.kind])).toEqual(
      messy.records.map((r) => [r.publishAtMs, r.payload, r.kind]),
    );
    const other = simulate({ ...MESSY, seed: 12 });
    expect(other.records.slice(0, 50).map((r) => r.payload)).not.toEqual(
      messy.records.slice(0, 50).map((r) => r.payload),
    );
    console.log(
      `simulator seed 11: ${messy.deliveries.length} deliveries, ${messy.records.length} records, ` +
        `${messy.deliveries.filter((d) => d.late).length} late`,
    );
  });

  it('arrival noise does not change the deliveries themselves', () => {
    expect(messy.deliveries.map((d) => [d.delivery_id, d.deliveredMs, d.events.length])).toEqual(
      clean.deliveries.map((d) => [d.delivery_id, d.deliveredMs, d.events.length]),
    );
  });

  it('a delivery depends only on its index and start, not on generation order', () => {
    const o = simOptions(BASE);
    const d = clean.deliveries[17]!;
    const k = Number(d.delivery_id.replace('order-', ''));
    const alone = simulateDelivery(o, k, d.pickupMs, incidents(o));
    expect(alone).toEqual(d);
  });
});

describe('simulator: deliveries', () => {
  it('keeps N deliveries in flight and starts none after the duration', () => {
    const o = simOptions(BASE);
    const at = o.startMs + 15 * 60_000;
    const active = clean.deliveries.filter((d) => d.pickupMs <= at && at < d.deliveredMs).length;
    expect(active).toBeGreaterThanOrEqual(25);
    expect(active).toBeLessThanOrEqual(30);
    for (const d of clean.deliveries) expect(d.pickupMs).toBeLessThanOrEqual(o.startMs + o.durationMs);
    expect(new Set(clean.deliveries.map((d) => d.delivery_id)).size).toBe(clean.deliveries.length);
  });

  it('each delivery: picked_up first (promise, destination, route), GPS every interval toward the destination, delivered last', () => {
    for (const d of clean.deliveries) {
      const first = d.events[0]!;
      const last = d.events[d.events.length - 1]!;
      if (first.type !== 'status' || last.type !== 'status') throw new Error('status first and last');
      expect(first.status).toBe('picked_up');
      expect(first.promisedTimeMs).toBe(d.promisedMs);
      expect(first.route_id).toBe(d.route_id);
      expect(last.status).toBe('delivered');
      expect(last.eventTimeMs).toBe(d.deliveredMs);
      const gps = d.events.filter((e) => e.type === 'gps');
      for (let i = 1; i < gps.length; i++) expect(gps[i]!.eventTimeMs - gps[i - 1]!.eventTimeMs).toBe(10_000);
      const end = gps[gps.length - 1]!;
      expect(haversineKm(end.driver_lat, end.driver_lon, first.dest_lat!, first.dest_lon!)).toBeLessThan(
        0.15,
      );
      // Event times are sorted and in whole seconds.
      for (let i = 1; i < d.events.length; i++)
        expect(d.events[i]!.eventTimeMs).toBeGreaterThanOrEqual(d.events[i - 1]!.eventTimeMs);
      for (const e of d.events) expect(e.eventTimeMs % 1000).toBe(0);
    }
  });

  it('ground truth: late means delivered after the promise; some but not most are late, for the stated reasons', () => {
    const late = clean.deliveries.filter((d) => d.late);
    for (const d of clean.deliveries) expect(d.late).toBe(d.deliveredMs > d.promisedMs);
    const share = late.length / clean.deliveries.length;
    expect(share).toBeGreaterThan(0.1);
    expect(share).toBeLessThan(0.5);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const onTime = clean.deliveries.filter((d) => !d.late);
    expect(mean(late.map((d) => d.driverSpeedKmh))).toBeLessThan(mean(onTime.map((d) => d.driverSpeedKmh)));
    expect(mean(late.map((d) => d.incidentMin + d.stops))).toBeGreaterThan(
      mean(onTime.map((d) => d.incidentMin + d.stops)),
    );
  });

  it('urban speeds: every delivery averages 5–40 km/h over its route', () => {
    for (const d of clean.deliveries) {
      const kmh = d.routeKm / ((d.deliveredMs - d.pickupMs) / 3_600_000);
      expect(kmh).toBeGreaterThan(5);
      expect(kmh).toBeLessThan(40);
    }
  });
});

describe('simulator: arrival', () => {
  it('records come in publish order, never before their event time', () => {
    for (let i = 1; i < messy.records.length; i++) {
      expect(messy.records[i]!.publishAtMs).toBeGreaterThanOrEqual(messy.records[i - 1]!.publishAtMs);
    }
    for (const r of messy.records)
      if (r.event) expect(r.publishAtMs).toBeGreaterThanOrEqual(r.event.eventTimeMs);
  });

  it('a clean run publishes every event once, at its event time, in order', () => {
    const events = clean.deliveries.reduce((s, d) => s + d.events.length, 0);
    expect(clean.records.length).toBe(events);
    for (const r of clean.records) expect(r.publishAtMs).toBe(r.event!.eventTimeMs);
  });

  it('disorder ≤ D, duplicates, too-late and invalid records in the configured shares', () => {
    const count = (k: string) => messy.records.filter((r) => r.kind === k).length;
    const events = messy.deliveries.reduce((s, d) => s + d.events.length, 0);
    let inverted = 0;
    const lastSeen = new Map<string, number>();
    for (const r of messy.records) {
      const delay = r.publishAtMs - (r.event?.eventTimeMs ?? r.publishAtMs);
      if (r.kind === 'event') expect(delay).toBeLessThanOrEqual(8000);
      if (r.kind === 'too_late') expect(delay).toBeGreaterThanOrEqual(120_000);
      if (r.event && r.kind === 'event') {
        const prev = lastSeen.get(r.delivery_id) ?? 0;
        if (r.event.eventTimeMs < prev) inverted++;
        lastSeen.set(r.delivery_id, Math.max(prev, r.event.eventTimeMs));
      }
    }
    expect(inverted).toBeGreaterThan(0);
    expect(count('event') + count('too_late') + count('invalid')).toBe(events);
    expect(count('duplicate') / events).toBeGreaterThan(0.035);
    expect(count('duplicate') / events).toBeLessThan(0.065);
    expect(count('too_late') / events).toBeGreaterThan(0.01);
    expect(count('too_late') / events).toBeLessThan(0.03);
    expect(count('invalid')).toBeGreaterThan(0);
    // A duplicate repeats an event already published (same Msg-Id, same bytes), later.
    const firstAt = new Map<string, SimRecord>();
    for (const r of messy.records) {
      if (r.kind === 'duplicate') {
        expect(firstAt.get(r.msgId)?.payload).toBe(r.payload);
      } else firstAt.set(r.msgId, r);
    }
    console.log(
      `messy run: ${events} events, ${count('duplicate')} duplicates, ${count('too_late')} too late, ` +
        `${count('invalid')} invalid, ${inverted} arrivals behind a later event of the same delivery`,
    );
  });

  it('the validator agrees with the ground truth on every payload; status events are never corrupted or too late', () => {
    for (const r of messy.records) {
      const v = parseEvent(r.payload);
      expect(v.ok).toBe(r.kind !== 'invalid');
      if (v.ok) expect(v.event).toEqual(r.event);
      if (r.kind === 'invalid') expect(r.msgId).toMatch(/^gps-/);
      if (r.kind === 'too_late') expect(r.event?.type).not.toBe('status');
    }
  });

  it('ids are unique per event and carry the run prefix', () => {
    const run = simulate({ ...BASE, deliveries: 3, durationMs: 60_000, idPrefix: 'run7-' });
    const ids = run.records.map((r) => r.msgId);
    expect(new Set(ids).size).toBe(ids.length);
    for (const r of run.records) {
      expect(r.msgId.startsWith('run7-')).toBe(true);
      expect(r.delivery_id.startsWith('run7-order-')).toBe(true);
    }
  });

  it('rejects nonsense options', () => {
    expect(() => simulate({ duplicateFraction: 1.5 })).toThrow(/duplicateFraction/);
    expect(() => simulate({ deliveries: 0 })).toThrow(/deliveries/);
    expect(() => simulate({ idPrefix: 'a.b' })).toThrow(/idPrefix/);
  });
});

describe('simulator runner', () => {
  it('hands records over at their publish time on the given clock', async () => {
    let now = 1_000;
    const sleeps: number[] = [];
    const records = [1_000, 1_500, 1_500, 4_000].map((publishAtMs) => ({ publishAtMs }) as SimRecord);
    const got: number[] = [];
    for await (const p of paced(records, {
      now: () => now,
      sleep: async (ms) => {
        sleeps.push(ms);
        now += ms;
      },
    })) {
      got.push(now);
      expect(p.publishAt).toBe(p.record.publishAtMs);
    }
    expect(got).toEqual([1_000, 1_500, 1_500, 4_000]);
    expect(sleeps).toEqual([500, 2_500]);
  });

  it('live options: event times from now, a run prefix, GPS interval from the rate', () => {
    const o = liveOptions({ deliveries: 100, rate: 50 }, Date.UTC(2026, 10, 8));
    expect(o.startMs).toBe(Date.UTC(2026, 10, 8));
    expect(o.gpsIntervalMs).toBe(2000);
    expect(o.idPrefix).toMatch(/^r[0-9a-z]+-$/);
    expect(gpsIntervalForRate(3000, 1000)).toBe(333);
    expect(() => gpsIntervalForRate(0, 10)).toThrow(/rate/);
  });
});
