import { type Decision, DeliveryDecider, type DeliveryDeciderOptions } from './decider';
import { play, steps } from './decider.test-util';
import { computeFeatures, featureVector } from './features';
import { type DeliveryEvent, parseEvent } from './schema';
import { simulate } from './simulator';

const T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

function options(over: Partial<DeliveryDeciderOptions> = {}): DeliveryDeciderOptions {
  return {
    outOfOrdernessMs: 30_000,
    allowedLatenessMs: 60_000,
    idleTimeoutMs: 10_000,
    stateTtlMs: 20 * 60_000,
    dedupeTtlMs: 20 * 60_000,
    ...over,
  };
}

const pickedUp = (id = 'order-1', at = T0) =>
  JSON.stringify({
    event_id: `st-${id}`,
    delivery_id: id,
    event_time: iso(at),
    type: 'status',
    status: 'picked_up',
    promised_time: iso(at + 25 * 60_000),
    dest_lat: 12.99,
    dest_lon: 77.62,
    route_id: 'r1',
  });

const gps = (eventId: string, at: number, lat: number, id = 'order-1') =>
  JSON.stringify({
    event_id: eventId,
    delivery_id: id,
    event_time: iso(at),
    type: 'gps',
    driver_lat: lat,
    driver_lon: 77.5946,
  });

function parsed(payloads: string[]): DeliveryEvent[] {
  return payloads.map((p) => {
    const r = parseEvent(p);
    if (!r.ok) throw new Error(r.reason);
    return r.event;
  });
}

/** Feeds payloads in order; returns every decision made. */
function run(decider: DeliveryDecider, payloads: string[]): Decision[] {
  return payloads.flatMap((p) => decider.ingest(p, '0').decisions);
}

/** The last revision of each event's decision. */
function finalRows(decisions: Decision[]): Map<string, number[]> {
  const out = new Map<string, { revision: number; row: number[] }>();
  for (const d of decisions) {
    const prev = out.get(d.event_id);
    if (!prev || d.revision > prev.revision) out.set(d.event_id, { revision: d.revision, row: [...d.row] });
  }
  return new Map([...out].map(([k, v]) => [k, v.row]));
}

describe('DeliveryDecider', () => {
  const a = gps('gps-a', T0 + 5_000, 12.9716);
  const b = gps('gps-b', T0 + 15_000, 12.9736);

  test('out of order: B (10:00:15) before A (10:00:05) — B is revised to the in-order result', () => {
    const inOrder = run(new DeliveryDecider(options()), [pickedUp(), a, b]);
    const outOfOrder = run(new DeliveryDecider(options()), [pickedUp(), b, a]);
    // In order: one decision per GPS event, no revision.
    expect(inOrder.map((d) => [d.event_id, d.revision])).toEqual([
      ['gps-a', 0],
      ['gps-b', 0],
    ]);
    // Out of order: B alone first (speed 0), then A, then B again with A before it (revision 1).
    expect(outOfOrder.map((d) => [d.event_id, d.revision])).toEqual([
      ['gps-b', 0],
      ['gps-a', 0],
      ['gps-b', 1],
    ]);
    const bInOrder = inOrder[1]!.row;
    expect(bInOrder[0]).toBeGreaterThan(0); // speed over (A, B): ~222 m in 10 s
    expect([...outOfOrder[2]!.row]).toEqual([...bInOrder]);
    expect(finalRows(outOfOrder)).toEqual(finalRows(inOrder));
    // And it is what the model was trained on: computeFeatures over the events in event-time order.
    const expected = computeFeatures(parsed([pickedUp(), a, b]), T0 + 15_000);
    if (!expected.ok) throw new Error('not ready');
    expect([...outOfOrder[2]!.row]).toEqual([...featureVector(expected.features)]);
  });

  test('a decision is made at once, not when the watermark passes', () => {
    const decider = new DeliveryDecider(options({ outOfOrdernessMs: 600_000 }));
    const r = run(decider, [pickedUp(), a]);
    expect(r).toHaveLength(1);
    expect(decider.watermark()).toBe(T0 + 5_000 - 600_000);
  });

  test('not ready until the first status and a GPS point', () => {
    const decider = new DeliveryDecider(options());
    const first = decider.ingest(a, '0');
    expect(first.disposition).toBe('accepted');
    expect(first.decisions).toEqual([]);
    expect(first.notReady).toBe('no_promised_time');
    // The status arrives after the GPS point but is earlier in event time: A is decided then (revision 0).
    const status = decider.ingest(pickedUp(), '0');
    expect(status.notReady).toBe('no_gps');
    expect(status.decisions.map((d) => [d.event_id, d.revision])).toEqual([['gps-a', 0]]);
    // The status itself never is (no GPS point at or before its time): counted by the caller as not ready.
    expect(decider.ingest(b, '0').decisions.map((d) => d.event_id)).toEqual(['gps-b']);
  });

  test('late inside allowed lateness: accepted behind the watermark, later decisions revised', () => {
    const decider = new DeliveryDecider(options({ outOfOrdernessMs: 0, allowedLatenessMs: 120_000 }));
    run(decider, [pickedUp(), gps('g1', T0 + 60_000, 12.9716), gps('g4', T0 + 240_000, 12.98)]);
    // Watermark is now 10:04; a 10:02 point arrives: behind it, but inside lateness.
    const late = decider.ingest(gps('g2', T0 + 120_000, 12.99), '0');
    expect(late.disposition).toBe('accepted');
    expect(late.behindWatermark).toBe(true);
    expect(late.decisions.map((d) => [d.event_id, d.revision])).toEqual([
      ['g2', 0],
      ['g4', 1],
    ]);
  });

  test('beyond allowed lateness: late (side output), nothing decided, counted', () => {
    const decider = new DeliveryDecider(options({ outOfOrdernessMs: 0, allowedLatenessMs: 60_000 }));
    run(decider, [pickedUp(), gps('g1', T0 + 60_000, 12.9716), gps('g9', T0 + 30 * 60_000, 12.98)]);
    const late = decider.ingest(gps('g2', T0 + 120_000, 12.99), '0');
    expect(late.disposition).toBe('late');
    expect(late.decisions).toEqual([]);
    expect(decider.stats().engine.counters.late).toBe(1);
  });

  test('a duplicate event_id changes nothing and decides nothing', () => {
    const decider = new DeliveryDecider(options());
    run(decider, [pickedUp(), a]);
    const again = decider.ingest(a, '0');
    expect(again.disposition).toBe('duplicate');
    expect(again.decisions).toEqual([]);
    expect(decider.stats().historyEvents).toBe(2);
  });

  test('invalid payloads are reported with a reason, never thrown', () => {
    const decider = new DeliveryDecider(options());
    for (const bad of ['{', '[]', '{"event_id":"x"}', new Uint8Array([0xff, 0xfe]), gps('', T0, 12)]) {
      const r = decider.ingest(bad, '0');
      expect(r.disposition).toBe('invalid');
      expect(r.reason).toMatch(/\S+: \S+/);
    }
  });

  test('a payload naming another delivery than its subject is invalid and leaves no state', () => {
    const decider = new DeliveryDecider(options());
    const r = decider.ingest(pickedUp('order-2'), '0', 'order-1');
    expect(r.disposition).toBe('invalid');
    expect(r.reason).toBe('delivery_id: "order-2" is not the delivery its subject names ("order-1")');
    expect(decider.stats().deliveries).toBe(0);
    expect(decider.ingest(pickedUp('order-1'), '0', 'order-1').disposition).toBe('accepted');
  });

  test('maxEventBytes bounds the payload; extra fields below it are ignored', () => {
    const withNotes = (bytes: number) => {
      const e = JSON.parse(pickedUp());
      e.notes = 'n'.repeat(bytes - pickedUp().length - ',"notes":""'.length);
      return JSON.stringify(e);
    };
    expect(new DeliveryDecider(options()).ingest(withNotes(60_000), '0').disposition).toBe('accepted');
    const small = new DeliveryDecider(options({ maxEventBytes: 1024 }));
    expect(small.ingest(withNotes(1024), '0').disposition).toBe('accepted');
    expect(small.ingest(withNotes(1025), '0')).toMatchObject({
      disposition: 'invalid',
      reason: 'payload: 1025 bytes, over maxEventBytes 1024',
    });
    expect(() => new DeliveryDecider(options({ maxEventBytes: 0 }))).toThrow(RangeError);
  });

  test('alerts once per crossing, re-armed below 0.6', () => {
    const decider = new DeliveryDecider(options());
    run(decider, [pickedUp(), a]);
    expect([0.5, 0.81, 0.9, 0.79, 0.65, 0.85, 0.55, 0.95].map((r) => decider.alertFor('order-1', r))).toEqual(
      [false, true, false, false, false, false, false, true],
    );
  });

  test('state is cleaned up once the watermark passes the TTL; revisable decisions are pruned', () => {
    const decider = new DeliveryDecider(options({ outOfOrdernessMs: 0, stateTtlMs: 15 * 60_000 }));
    run(decider, [pickedUp('d1'), gps('d1-g', T0 + 5_000, 12.97, 'd1')]);
    expect(decider.stats().deliveries).toBe(1);
    expect(decider.stats().revisable).toBe(1);
    run(decider, [pickedUp('d2', T0 + 20 * 60_000), gps('d2-g', T0 + 20 * 60_000 + 5_000, 12.97, 'd2')]);
    const s = decider.stats();
    expect(s.deliveries).toBe(1);
    expect(s.historyEvents).toBe(2);
    expect(s.revisable).toBe(1);
    expect(s.approxBytes).toBeGreaterThan(0);
  });
});

describe('DeliveryDecider: folded history', () => {
  test('every decision equals computeFeatures over the whole accepted history (folding changes nothing)', () => {
    const { records } = simulate({
      seed: 11,
      deliveries: 10,
      durationMs: 60 * 60_000,
      gpsIntervalMs: 5_000,
      disorderMs: 20_000,
      duplicateFraction: 0.02,
      tooLateFraction: 0.01,
    });
    const decider = new DeliveryDecider(options({ outOfOrdernessMs: 15_000, allowedLatenessMs: 60_000 }));
    const accepted = new Map<string, DeliveryEvent[]>();
    let decisions = 0;
    let maxHistory = 0;
    for (const r of records) {
      const result = decider.ingest(r.payload, 'p0');
      if (result.disposition === 'accepted') {
        const e = result.event!;
        accepted.set(e.delivery_id, [...(accepted.get(e.delivery_id) ?? []), e]);
      }
      for (const d of result.decisions) {
        // The decision's view: events up to its time, ties (same time) up to its own event_id.
        const view = accepted
          .get(d.delivery_id)!
          .filter(
            (e) =>
              e.eventTimeMs < d.eventTimeMs || (e.eventTimeMs === d.eventTimeMs && e.event_id <= d.event_id),
          );
        const expected = computeFeatures(view, d.eventTimeMs);
        if (!expected.ok) throw new Error(`decided ${d.event_id} but the whole history is not ready`);
        expect([...d.row]).toEqual([...featureVector(expected.features)]);
        decisions++;
      }
      maxHistory = Math.max(maxHistory, decider.stats().historyEvents);
    }
    expect(decisions).toBeGreaterThan(5_000);
    // Folded: the histories hold minutes per delivery, not whole deliveries.
    const all = [...accepted.values()].reduce((n, list) => n + list.length, 0);
    expect(maxHistory).toBeLessThan(all / 4);
  });
});

describe('DeliveryDecider: snapshot', () => {
  test('a decider restored from a JSON snapshot at any point decides exactly as the one that was not stopped', () => {
    const { records } = simulate({
      seed: 5,
      deliveries: 8,
      durationMs: 40 * 60_000,
      gpsIntervalMs: 5_000,
      disorderMs: 20_000,
      duplicateFraction: 0.03,
      tooLateFraction: 0.01,
      invalidFraction: 0.01,
    });
    const opts = options({ outOfOrdernessMs: 15_000, allowedLatenessMs: 60_000 });
    const summary = (r: ReturnType<DeliveryDecider['ingest']>) =>
      JSON.stringify([
        r.disposition,
        r.reason,
        r.decisions.map((d) => [d.event_id, d.revision, [...d.row]]),
        r.windowResults,
      ]);
    const reference = new DeliveryDecider(opts);
    const expected = records.map((r) => summary(reference.ingest(r.payload, 'p0')));
    // From the start, and from the middle (snapshot.test.ts cuts at random points).
    for (const cut of [1, Math.floor(records.length / 2)]) {
      const first = new DeliveryDecider(opts);
      for (const r of records.slice(0, cut)) first.ingest(r.payload, 'p0');
      const restored = new DeliveryDecider(opts, JSON.parse(JSON.stringify(first.snapshot())));
      const got = records.slice(cut).map((r) => summary(restored.ingest(r.payload, 'p0')));
      expect(got).toEqual(expected.slice(cut));
      expect(restored.stats().deliveries).toBe(reference.stats().deliveries);
    }
  });
});

describe('DeliveryDecider: processing time decides nothing', () => {
  test('the same input in the same order, admitted with or without stalls, gives the same decisions and late set', () => {
    // Two partitions, one quiet now and then; admission 20–50 ms apart, or with stalls of up to 2 min
    // (a slow host, a broker election, a replay) between records.
    const paced = steps({ seed: 5, deliveries: 6, minutes: 25, gapMs: [20, 30], cycle: [700, 100] });
    const random = [0.3, 0.9, 0.1, 0.7, 0.5];
    let stall = 0;
    const stalled = paced.map((s, i) => {
      if (i % 97 === 0) stall += Math.floor(random[i % random.length]! * 120_000);
      return { ...s, at: s.at + stall };
    });
    // Admitted around the simulated morning, within the admission bounds either way.
    const bounds = { maxClockSkewMs: 60 * 60_000, maxEventAgeMs: 24 * 3_600_000 };
    const outputs = (run: typeof paced) => {
      const decider = new DeliveryDecider(options(bounds));
      return run.map((s) => play(decider, { ...s, at: T0 + s.at }, 'all'));
    };
    const a = outputs(paced);
    const b = outputs(stalled);
    expect(b).toEqual(a);
    const late = a.filter((o) => o.startsWith('["late"')).length;
    expect(late).toBeGreaterThan(10);
    expect(a.filter((o) => o.startsWith('["invalid"')).length).toBeGreaterThan(0);
  });

  test('the admission bounds: too far ahead of its admission or too far behind it is invalid, with the reason', () => {
    const decider = new DeliveryDecider(options({ maxClockSkewMs: 300_000, maxEventAgeMs: 86_400_000 }));
    const at = T0 + 60 * 60_000;
    expect(decider.ingest(pickedUp('order-1', T0), '0', undefined, at).disposition).toBe('accepted');
    const ahead = decider.ingest(gps('g-9999', Date.UTC(9999, 11, 31), 12.9), '0', undefined, at);
    expect(ahead).toMatchObject({
      disposition: 'invalid',
      reason:
        'event_time: 9999-12-31T00:00:00Z is more than 300000 ms after its admission at 2026-11-08T11:00:00.000Z (clock skew)',
    });
    const old = decider.ingest(gps('g-1970', 1_000, 12.9), '0', undefined, at);
    expect(old).toMatchObject({
      disposition: 'invalid',
      reason:
        'event_time: 1970-01-01T00:00:01Z is more than 86400000 ms before its admission at 2026-11-08T11:00:00.000Z',
    });
    // Neither moved the watermark; at the bounds it is still accepted.
    expect(decider.watermark()).toBe(T0 - 30_000);
    expect(decider.ingest(gps('g-edge', at + 300_000, 12.9), '0', undefined, at).disposition).toBe(
      'accepted',
    );
    expect(decider.ingest(gps('g-edge2', at + 300_001, 12.9), '0', undefined, at).disposition).toBe(
      'invalid',
    );
    expect(decider.ingest(gps('g-old', at - 86_400_000, 12.9), '0', undefined, at).disposition).toBe('late');
    // Without an admission time the bounds are not checked (the caller decides what admission means).
    expect(decider.ingest(gps('g-free', Date.UTC(9999, 0, 1), 12.9), '0').disposition).toBe('accepted');
  });
});
