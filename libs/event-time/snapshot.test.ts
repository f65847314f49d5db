import {
  deliveryEngine,
  deliveryOptions,
  gps,
  MIN,
  type Payload,
  rng,
  SEC,
  T0,
  traffic,
} from './engine.test-util';
import { createEventTimeEngine, EngineSnapshotError, type StreamEvent } from './index';

function events(seed: number, count: number): StreamEvent<Payload>[] {
  const random = rng(seed);
  const out: StreamEvent<Payload>[] = [];
  let t = T0;
  for (let i = 0; i < count; i++) {
    t += Math.floor(random() * 3 * SEC);
    // Mostly within the bound, some within allowed lateness, a few beyond it (side output).
    const r = random();
    const jitter = Math.floor(random() * (r < 0.8 ? 30 * SEC : r < 0.97 ? 3 * MIN : 12 * MIN));
    // Deliveries come and go (a new group of 4 every 400 events), so keys expire along the way.
    const key = `d${Math.floor(i / 400)}-${Math.floor(random() * 4)}`;
    const partition = `p${Math.floor(random() * 2)}`;
    const e =
      random() < 0.1
        ? traffic(`t${i}`, key, t - jitter, partition)
        : gps(`g${i}`, key, t - jitter, Math.floor(random() * 900), partition);
    out.push(e);
    if (random() < 0.05) out.push({ ...e });
  }
  return out;
}

describe('snapshot / restore', () => {
  it('a JSON round trip mid-stream gives identical subsequent effects and snapshots', () => {
    const all = events(7, 4000);
    const original = deliveryEngine();
    const half = Math.floor(all.length / 2);
    for (let i = 0; i < half; i++) original.ingest(all[i]!);
    const json = JSON.stringify(original.snapshot());
    const restored = createEventTimeEngine(deliveryOptions(), JSON.parse(json));
    expect(JSON.stringify(restored.snapshot())).toBe(json);
    expect(restored.stats()).toEqual(original.stats());

    const kinds = new Map<string, number>();
    for (let i = half; i < all.length; i++) {
      const a = original.ingest(all[i]!);
      const b = restored.ingest(all[i]!);
      expect(b).toEqual(a);
      for (const e of a) kinds.set(e.kind, (kinds.get(e.kind) ?? 0) + 1);
    }
    expect(restored.flush()).toEqual(original.flush());
    expect(restored.snapshot()).toEqual(original.snapshot());
    // The stream exercised every kind of effect after the restore.
    for (const kind of ['accepted', 'duplicate', 'late', 'result', 'expired']) {
      expect(kinds.get(kind) ?? 0).toBeGreaterThan(0);
    }
    expect(restored.stats().counters.revisions).toBeGreaterThan(0);
    console.log(
      `snapshot: ${json.length} bytes at mid-stream; effects after restore ${JSON.stringify([...kinds])}`,
    );
  });

  it('an empty engine snapshots to an empty state with a null watermark', () => {
    const engine = deliveryEngine();
    expect(engine.snapshot()).toEqual({
      version: 2,
      watermark: null,
      partitions: [],
      keys: [],
      dedupe: [],
      counters: { accepted: 0, duplicates: 0, late: 0, results: 0, revisions: 0, expiredKeys: 0 },
    });
    const restored = createEventTimeEngine(deliveryOptions(), engine.snapshot());
    expect(restored.watermark()).toBeNull();
  });

  it('restored dedupe ids and last-valid state still work', () => {
    const engine = deliveryEngine();
    const e = gps('a', 'd1', T0, 3);
    engine.ingest(e);
    const restored = createEventTimeEngine(deliveryOptions(), JSON.parse(JSON.stringify(engine.snapshot())));
    expect(restored.ingest(e)[0]?.kind).toBe('duplicate');
    expect(restored.latest('d1', 'position')).toEqual(e);
  });

  it('rejects malformed snapshots with EngineSnapshotError naming the path', () => {
    const good = (() => {
      const engine = deliveryEngine();
      engine.ingest(gps('a', 'd1', T0, 3));
      engine.ingest(gps('b', 'd1', T0 + 6 * MIN, 3));
      return JSON.parse(JSON.stringify(engine.snapshot()));
    })();
    // biome-ignore lint/suspicious/noExplicitAny: mutating a parsed JSON snapshot in many shapes
    const cases: [string, (s: Record<string, any>) => unknown][] = [
      ['$', () => 'nope'],
      ['$.version', (s) => ({ ...s, version: 1 })],
      ['$.watermark', (s) => ({ ...s, watermark: 'x' })],
      [
        '$.partitions[0].maxEventTime',
        (s) => ({ ...s, partitions: [{ ...s.partitions[0], maxEventTime: 1.5 }] }),
      ],
      ['$.keys[0].key', (s) => ({ ...s, keys: [{ ...s.keys[0], key: '' }] })],
      [
        '$.keys[0].events.id',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].events.id = 5;
          return copy;
        },
      ],
      [
        '$.keys[0].events.id[1]',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].events.id = '0:1:a99:1:x'; // a prefix longer than the id before
          return copy;
        },
      ],
      [
        '$.keys[0].events.time[1]',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].events.time[1] = 1.5;
          return copy;
        },
      ],
      [
        '$.keys[0].events.partition',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].events.partition = 3;
          return copy;
        },
      ],
      [
        '$.keys[0].events.payload',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].events.payload.pop();
          return copy;
        },
      ],
      [
        '$.keys[0].windows[0].events[0]',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].windows[0].events = [0, 9]; // a run past the key's events
          return copy;
        },
      ],
      [
        '$.keys[0].latest[0].event',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].latest[0].event = 2;
          return copy;
        },
      ],
      [
        '$.keys[0].windows[0].emitted[0][1]',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].windows[0].emitted[0][1] = null;
          return copy;
        },
      ],
      ['$.dedupe[0][1]', (s) => ({ ...s, dedupe: [[T0, ['0:1:a']]] })],
      ['$.dedupe[0][1][0]', (s) => ({ ...s, dedupe: [[T0, 'soon']] })],
      ['$.dedupe[0][0]', (s) => ({ ...s, dedupe: [['a', '0:1:a']] })],
      ['$.counters.late', (s) => ({ ...s, counters: { ...s.counters, late: undefined } })],
      [
        '$.keys[0].windows[0].name',
        (s) => {
          const copy = JSON.parse(JSON.stringify(s));
          copy.keys[0].windows[0].name = 'unknown';
          return copy;
        },
      ],
    ];
    for (const [path, mutate] of cases) {
      let caught: unknown;
      try {
        createEventTimeEngine(deliveryOptions(), mutate(good));
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(EngineSnapshotError);
      expect((caught as EngineSnapshotError).path).toBe(path);
      expect((caught as EngineSnapshotError).code).toBe('invalid_engine_snapshot');
    }
  });
});
