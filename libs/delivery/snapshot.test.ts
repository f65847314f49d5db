import { EngineSnapshotError } from '../event-time';
import { rng } from '../event-time/engine.test-util';
import { type DeciderSnapshot, DeliveryDecider, type DeliveryDeciderOptions } from './decider';
import { play, steps } from './decider.test-util';
import { canonicalTime, isCanonicalTime, packHistory, unpackHistory } from './history-codec';
import { type DeliveryEvent, formatIsoTime, parseEvent, parseIsoTime } from './schema';

function options(): DeliveryDeciderOptions {
  return {
    outOfOrdernessMs: 15_000,
    allowedLatenessMs: 60_000,
    idleTimeoutMs: 10_000,
    stateTtlMs: 20 * 60_000,
    dedupeTtlMs: 20 * 60_000,
  };
}

/** A simulated run on two partitions (one pauses now and then, so idleness moves the watermark). */
const runOf = (seed: number) =>
  steps({ seed, deliveries: 6, minutes: 25, gapMs: [20, 30], cycle: [700, 100] });

describe('DeliveryDecider snapshots at random points', () => {
  test.each([3])(
    'seed %i: a restore from JSON decides, revises, dedupes and fires exactly as the uninterrupted run',
    (seed) => {
      const run = runOf(seed);
      const reference = new DeliveryDecider(options());
      const expected = run.map((s) => {
        return play(reference, s);
      });
      const random = rng(seed * 31);
      const cuts = [1, ...Array.from({ length: 2 }, () => Math.floor(random() * run.length))].sort(
        (a, b) => a - b,
      );
      let checkedSize = 0;
      for (const cut of cuts) {
        const first = new DeliveryDecider(options());
        run.slice(0, cut).forEach((s) => {
          play(first, s);
        });
        const snapshot = first.snapshot();
        const json = JSON.stringify(snapshot);
        // The JSON round trip is exact: a restored decider snapshots to the same bytes, and so does the
        // snapshot object itself before and after serialising (nothing in it is shared with live state).
        const restored = new DeliveryDecider(options(), JSON.parse(json));
        expect(JSON.stringify(restored.snapshot())).toBe(json);
        expect(restored.stats()).toEqual(first.stats());
        const fromObject = new DeliveryDecider(options(), snapshot);
        expect(JSON.stringify(fromObject.snapshot())).toBe(json);
        const got = run.slice(cut).map((s) => {
          return play(restored, s);
        });
        expect(got).toEqual(expected.slice(cut));
        expect(JSON.stringify(snapshot)).toBe(json);
        expect(restored.stats()).toEqual(reference.stats());
        expect(JSON.stringify(restored.snapshot())).toBe(JSON.stringify(reference.snapshot()));
        checkedSize = Math.max(checkedSize, json.length);
      }
      expect(checkedSize).toBeGreaterThan(10_000);
    },
  );

  test('rejects malformed decider snapshots with EngineSnapshotError naming the path', () => {
    const decider = new DeliveryDecider(options());
    for (const s of runOf(5).slice(0, 800)) {
      play(decider, s);
    }
    const good = JSON.parse(JSON.stringify(decider.snapshot())) as DeciderSnapshot;
    const i = good.deliveries.findIndex((d) => d.decided.length > 0 && d.undecided.length > 0);
    expect(i).toBeGreaterThanOrEqual(0);
    // biome-ignore lint/suspicious/noExplicitAny: mutating a parsed JSON snapshot in many shapes
    const cases: [string, (s: any) => void][] = [
      ['$.version', (s) => (s.version = 1)],
      ['$.engine', (s) => delete s.engine],
      ['$.engine.keys[0].events.id[0]', (s) => (s.engine.keys[0].events.id = 'x')],
      [`$.deliveries[${i}].events.type`, (s) => (s.deliveries[i].events.type += 'g')],
      [`$.deliveries[${i}].events.gps`, (s) => s.deliveries[i].events.gps.push(1)],
      [`$.deliveries[${i}].events.id`, (s) => (s.deliveries[i].events.id = 7)],
      [`$.deliveries[${i}].decided[0]`, (s) => (s.deliveries[i].decided[0] = 9999)],
      [`$.deliveries[${i}].revisions`, (s) => s.deliveries[i].revisions.pop()],
      [`$.deliveries[${i}].rows`, (s) => (s.deliveries[i].rows = s.deliveries[i].rows.slice(4))],
      [`$.deliveries[${i}].undecided[0][0]`, (s) => (s.deliveries[i].undecided[0] = [1, 2])],
      [`$.deliveries[${i}].alerting`, (s) => (s.deliveries[i].alerting = 0)],
      ['$.prunedBefore', (s) => (s.prunedBefore = 'x')],
    ];
    for (const [path, mutate] of cases) {
      const copy = JSON.parse(JSON.stringify(good));
      mutate(copy);
      let caught: unknown;
      try {
        new DeliveryDecider(options(), copy);
      } catch (error) {
        caught = error;
      }
      expect([path, caught]).toEqual([path, expect.any(EngineSnapshotError)]);
      expect((caught as EngineSnapshotError).path).toBe(path);
    }
  });
});

describe('history columns', () => {
  test('canonicalTime is formatIsoTime', () => {
    const random = rng(9);
    const wrong: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const ms = Math.floor(random() * 4e12) - (i % 7 === 0 ? 1e12 : 0);
      const t = i % 3 === 0 ? ms - (ms % 1000) : ms;
      if (canonicalTime(t) !== formatIsoTime(t) && wrong.length < 5) wrong.push(t);
    }
    expect(wrong).toEqual([]);
    expect(canonicalTime(253_402_300_800_000)).toBe(formatIsoTime(253_402_300_800_000));
  });

  test('isCanonicalTime(text, its parsed time) is text === canonicalTime(its parsed time)', () => {
    const random = rng(12);
    const wrong: string[] = [];
    let canonical = 0;
    for (let i = 0; i < 20_000; i++) {
      const ms = Math.floor(random() * 4e12) - 1e12;
      const iso = new Date(ms).toISOString(); // …SS.mmmZ
      const forms = [
        iso,
        iso.replace(/\.\d{3}Z$/, 'Z'),
        iso.replace(/Z$/, '+00:00'),
        iso.replace(/(\.\d)\d\dZ$/, '$1Z'),
        iso.replace(/Z$/, '1Z'),
        canonicalTime(ms),
      ];
      for (const text of forms) {
        const t = parseIsoTime(text);
        if (t === null) continue;
        const expected = text === canonicalTime(t);
        // One expect for the lot (120,000 of them cost seconds); the first mismatches are named.
        if (isCanonicalTime(text, t) !== expected && wrong.length < 5) wrong.push(text);
        if (expected) canonical++;
      }
    }
    expect(wrong).toEqual([]);
    expect(canonical).toBeGreaterThan(20_000);
  });

  test('round-trips events as parsed, non-canonical times and optional status fields included', () => {
    const raw = [
      { type: 'status', status: 'assigned', event_time: '2026-11-08T10:00:00Z' },
      {
        type: 'status',
        status: 'picked_up',
        event_time: '2026-11-08T10:00:00.000Z',
        promised_time: '2026-11-08T10:25:00+05:30',
        dest_lat: 12.99,
        dest_lon: 77.62,
        route_id: 'r1',
      },
      { type: 'gps', event_time: '2026-11-08T15:30:01+05:30', driver_lat: -0.5, driver_lon: 179.999999 },
      { type: 'traffic', event_time: '2026-11-08T10:00:02.5Z', route_id: 'r1', severity: 4 },
      { type: 'gps', event_time: '2026-11-08T10:00:02.5Z', driver_lat: 12.971612, driver_lon: 77.5946 },
    ];
    const events = raw.map((r, i) => {
      const p = parseEvent(JSON.stringify({ event_id: `e-${i}`, delivery_id: 'd-1', ...r }));
      if (!p.ok) throw new Error(p.reason);
      return p.event;
    });
    const packed = JSON.parse(JSON.stringify(packHistory('d-1', events)));
    const back: DeliveryEvent[] = unpackHistory('$', packed, 'd-1');
    expect(back).toEqual(events);
    expect(back.map((e) => JSON.stringify(e))).toEqual(events.map((e) => JSON.stringify(e)));
  });
});
