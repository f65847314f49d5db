import {
  deliveryEngine,
  gps,
  MIN,
  type Payload,
  SEC,
  type SpeedResult,
  status,
  T0,
  traffic,
} from './engine.test-util';
import { END_OF_INPUT, EngineEventError, type EngineOutput, type ResultOutput } from './index';

function results(
  effects: readonly EngineOutput<Payload, unknown>[],
  window?: string,
): ResultOutput<unknown>[] {
  return effects.filter(
    (e): e is ResultOutput<unknown> => e.kind === 'result' && (window === undefined || e.window === window),
  );
}

function feed(
  engine: ReturnType<typeof deliveryEngine>,
  events: Parameters<ReturnType<typeof deliveryEngine>['ingest']>[0][],
) {
  return events.flatMap((e) => engine.ingest(e));
}

function withoutWatermark(effects: readonly ResultOutput<unknown>[]) {
  return effects.map(({ watermark: _ignored, ...rest }) => rest);
}

describe('event-time order', () => {
  // The case: GPS A at 10:00:05 arrives after B at 10:00:15.
  const a = gps('A', 'order-482', T0 + 5 * SEC, 50);
  const b = gps('B', 'order-482', T0 + 15 * SEC, 150);
  const start = gps('S', 'order-482', T0, 0);
  const after = gps('C', 'order-482', T0 + 30 * SEC, 300);
  const push = gps('W', 'order-482', T0 + 6 * MIN, 2000); // watermark 10:05:30: [10:00,10:05) has fired

  it('computes the sliding 5-minute speed in event-time order, equal to in-order arrival', () => {
    const inOrder = deliveryEngine();
    const disordered = deliveryEngine();
    const expected = results(feed(inOrder, [start, a, b, after, push]), 'speed5m');
    const actual = results(feed(disordered, [start, b, a, after, push]), 'speed5m');
    expect(withoutWatermark(actual)).toEqual(withoutWatermark(expected));
    const window = actual.find((r) => r.start === T0);
    // 300 m in 30 s; in arrival order the path would be 0→150→50→300 = 500 m.
    expect(window?.result).toEqual({ metresPerSecond: 10, points: 4 });
    expect(window?.end).toBe(T0 + 5 * MIN);
    expect(actual.map((r) => r.start)).toEqual([T0 - 4 * MIN, T0 - 3 * MIN, T0 - 2 * MIN, T0 - MIN, T0]);
  });

  it('keeps last-valid state by event time: an older event arriving later does not overwrite it', () => {
    const engine = deliveryEngine();
    feed(engine, [b, a]);
    expect(engine.latest('order-482', 'position')?.eventId).toBe('B');
    feed(engine, [
      status('st1', 'order-482', T0 + 20 * SEC, 'picked_up'),
      status('st0', 'order-482', T0, 'assigned'),
    ]);
    expect(engine.latest('order-482', 'status')?.payload).toEqual({ type: 'status', s: 'picked_up' });
    expect(engine.latest('order-482', 'nothing')).toBeUndefined();
    expect(engine.latest('other', 'position')).toBeUndefined();
  });
});

describe('firing, allowed lateness and the late side output', () => {
  // Tumbling [10:00, 10:05) (ids5m); bound 30 s, allowed lateness 2 min.
  function setup() {
    const engine = deliveryEngine();
    const first = engine.ingest(gps('e1', 'd1', T0 + 1 * MIN, 0));
    return { engine, first };
  }

  it('fires [10:00, 10:05) exactly when the watermark passes 10:05', () => {
    const { engine, first } = setup();
    expect(first).toEqual([
      { kind: 'accepted', event: gps('e1', 'd1', T0 + MIN, 0), behindWatermark: false },
    ]);
    const before = engine.ingest(gps('e2', 'd1', T0 + 5 * MIN + 29 * SEC, 10));
    expect(engine.watermark()).toBe(T0 + 4 * MIN + 59 * SEC);
    expect(results(before, 'ids5m')).toEqual([]);
    const at = engine.ingest(gps('e3', 'd1', T0 + 5 * MIN + 30 * SEC, 20));
    expect(engine.watermark()).toBe(T0 + 5 * MIN);
    expect(results(at, 'ids5m')).toEqual([
      {
        kind: 'result',
        key: 'd1',
        window: 'ids5m',
        start: T0,
        end: T0 + 5 * MIN,
        revision: 0,
        result: ['e1'],
        eventCount: 1,
        watermark: T0 + 5 * MIN,
      },
    ]);
  });

  it('a 10:03:30 event after the firing but within allowed lateness re-emits the window as revision 1, then 2', () => {
    const { engine } = setup();
    engine.ingest(gps('e2', 'd1', T0 + 5 * MIN + 30 * SEC, 10)); // fires [10:00,10:05)
    const late = engine.ingest(gps('late1', 'd1', T0 + 3 * MIN + 30 * SEC, 5)); // 1:30 behind
    expect(late[0]).toEqual({
      kind: 'accepted',
      event: gps('late1', 'd1', T0 + 3 * MIN + 30 * SEC, 5),
      behindWatermark: true,
    });
    const revised = results(late, 'ids5m');
    expect(revised).toHaveLength(1);
    expect(revised[0]).toMatchObject({ start: T0, revision: 1, result: ['e1', 'late1'], eventCount: 2 });
    const again = results(engine.ingest(gps('late2', 'd1', T0 + 4 * MIN, 7)), 'ids5m');
    expect(again[0]).toMatchObject({ start: T0, revision: 2, result: ['e1', 'late1', 'late2'] });
    expect(engine.stats().counters).toMatchObject({ revisions: expect.any(Number), late: 0 });
  });

  it('a 10:02 event beyond allowed lateness goes to the side output, is counted and changes nothing', () => {
    const { engine } = setup();
    engine.ingest(gps('e2', 'd1', T0 + 7 * MIN + 30 * SEC, 10)); // watermark 10:07
    const before = JSON.stringify({ ...engine.snapshot(), dedupe: [], counters: {} });
    // 5 min behind the watermark, 2 min allowed.
    const tooLate = status('tooLate', 'd1', T0 + 2 * MIN, 'picked_up');
    const late = engine.ingest(tooLate);
    expect(late).toEqual([{ kind: 'late', event: tooLate, watermark: T0 + 7 * MIN }]);
    expect(engine.stats().counters.late).toBe(1);
    expect(JSON.stringify({ ...engine.snapshot(), dedupe: [], counters: {} })).toBe(before);
    // Its id is still remembered: a redelivery is a duplicate, not a second late effect.
    expect(engine.ingest(tooLate)[0]?.kind).toBe('duplicate');
    expect(engine.stats().counters.late).toBe(1);
  });

  it('exactly allowedLatenessMs behind the watermark still counts; 1 ms more is late', () => {
    const { engine } = setup();
    engine.ingest(gps('e2', 'd1', T0 + 6 * MIN + 30 * SEC, 10)); // watermark 10:06
    const ok = engine.ingest(gps('ok', 'd1', T0 + 4 * MIN, 5));
    expect(ok[0]).toMatchObject({ kind: 'accepted', behindWatermark: true });
    expect(results(ok, 'ids5m')[0]?.revision).toBe(1);
    expect(engine.ingest(gps('tooLate', 'd1', T0 + 4 * MIN - 1, 5))[0]?.kind).toBe('late');
  });

  it('lateness is the distance behind the watermark, wherever the event time falls in the window grid', () => {
    // Judged by its windows' ends, a status event 2:30 behind was late at :55 past a 5-min boundary and
    // accepted at :05 — the same distance behind, a different outcome.
    for (const offset of [5 * SEC, 55 * SEC, 2 * MIN + 30 * SEC, 4 * MIN + 55 * SEC]) {
      const engine = deliveryEngine();
      const t = T0 + 10 * MIN + offset;
      engine.ingest(gps('lead', 'd1', t + 2 * MIN + 30 * SEC + 30 * SEC, 0)); // watermark t + 2:30
      expect(engine.ingest(status('s', 'd1', t, 'picked_up'))[0]?.kind).toBe('late');
      expect(engine.ingest(status('s2', 'd1', t + 30 * SEC, 'picked_up'))[0]?.kind).toBe('accepted');
    }
  });

  it('revises only the sliding windows still open; windows not yet fired just take the event', () => {
    const engine = deliveryEngine();
    for (let m = 0; m < 7; m++) engine.ingest(gps(`g${m}`, 'd1', T0 + m * MIN, m * 100));
    engine.ingest(gps('push', 'd1', T0 + 6 * MIN + 30 * SEC, 700)); // watermark 10:06
    const late = results(engine.ingest(gps('late', 'd1', T0 + 4 * MIN + 30 * SEC, 450)), 'speed5m');
    // Windows holding 10:04:30 end 10:05 … 10:09, none closed (an event on time is never in a closed
    // window); [10:00,10:05) and [10:01,10:06) have fired and are revised, the later ones just take it.
    expect(late.map((r) => [r.start - T0, r.revision])).toEqual([
      [0, 1],
      [1 * MIN, 1],
    ]);
    const flushed = results(engine.flush(), 'speed5m').find((r) => r.start === T0 + 4 * MIN);
    expect(flushed).toMatchObject({ revision: 0, eventCount: 5 });
  });

  it('a late event that opens a window nobody had opened yet emits it at once as revision 0', () => {
    const engine = deliveryEngine();
    engine.ingest(traffic('t1', 'd1', T0));
    engine.ingest(gps('g', 'd1', T0 + 6 * MIN, 0)); // watermark 10:05:30
    const effects = results(engine.ingest(gps('late', 'd1', T0 + 4 * MIN, 0)), 'speed5m');
    // speed5m windows containing 10:04 that ended by 10:05:30 but are not closed: [10:00,10:05).
    expect(effects.map((r) => [r.start - T0, r.revision, r.eventCount])).toEqual([[0, 0, 1]]);
  });
});

describe('evaluate', () => {
  it('reads an open window without emitting, and nothing once it has closed', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a', 'd1', T0, 0));
    engine.ingest(gps('b', 'd1', T0 + 30 * SEC, 300));
    expect(engine.evaluate('d1', 'speed5m', T0)).toEqual({
      result: { metresPerSecond: 10, points: 2 },
      eventCount: 2,
    });
    expect(engine.evaluate('d1', 'ids5m', T0)).toEqual({ result: ['a', 'b'], eventCount: 2 });
    expect(engine.stats().counters.results).toBe(0);
    expect(engine.evaluate('d1', 'speed5m', T0 + 5 * MIN)).toBeUndefined(); // no event in it
    expect(engine.evaluate('d1', 'nope', T0)).toBeUndefined();
    expect(engine.evaluate('d2', 'speed5m', T0)).toBeUndefined();
    engine.ingest(gps('c', 'd1', T0 + 8 * MIN, 0)); // watermark 10:07:30: [10:00,10:05) closed
    expect(engine.evaluate('d1', 'ids5m', T0)).toBeUndefined();
  });
});

describe('dedupe', () => {
  it('a duplicate returns one duplicate effect and changes nothing', () => {
    const engine = deliveryEngine();
    const event = gps('gps-78221', 'order-482', T0 + 12 * SEC, 1);
    expect(engine.ingest(event)[0]?.kind).toBe('accepted');
    const before = JSON.stringify({ ...engine.snapshot(), counters: {} });
    expect(engine.ingest({ ...event })).toEqual([{ kind: 'duplicate', event }]);
    expect(engine.ingest({ ...event, eventTime: T0 + 9 * MIN })).toHaveLength(1); // same id, other payload
    expect(JSON.stringify({ ...engine.snapshot(), counters: {} })).toBe(before);
    expect(engine.stats().counters).toMatchObject({ accepted: 1, duplicates: 2 });
  });

  it('a duplicate after the window fired produces no revision', () => {
    const engine = deliveryEngine();
    const e1 = gps('e1', 'd1', T0 + MIN, 0);
    engine.ingest(e1);
    engine.ingest(gps('e2', 'd1', T0 + 6 * MIN, 0));
    expect(engine.ingest(e1)).toEqual([{ kind: 'duplicate', event: e1 }]);
  });

  it('forgets ids once the watermark passes eventTime + dedupeTtl; a resend that old can only be late', () => {
    const engine = deliveryEngine();
    const old = gps('old', 'd1', T0, 0);
    engine.ingest(old);
    engine.ingest(gps('n1', 'd2', T0 + 30 * MIN + 29 * SEC, 0)); // watermark T0 + 29:59
    expect(engine.stats().dedupeIds).toBe(2);
    engine.ingest(gps('n2', 'd2', T0 + 30 * MIN + 30 * SEC, 0)); // watermark T0 + 30:00 = forgetAt
    expect(engine.stats().dedupeIds).toBe(2);
    expect(engine.ingest(old)[0]?.kind).toBe('late');
  });
});

describe('dedupe buckets', () => {
  it('rounds forget times up to the next second: an id is kept at least dedupeTtlMs, at most 1 s more', () => {
    const engine = deliveryEngine();
    const e = gps('half', 'd1', T0 + 500, 0);
    engine.ingest(e);
    // [forgetAt, front-coded ids]
    expect(engine.snapshot().dedupe).toEqual([[T0 + 30 * MIN + SEC, '0:4:half']]);
    engine.ingest(gps('w1', 'd2', T0 + 30 * MIN + 30 * SEC + 999, 0)); // watermark ttl + 999 ms
    expect(engine.ingest(e)[0]?.kind).toBe('duplicate');
    engine.ingest(gps('w2', 'd2', T0 + 30 * MIN + 31 * SEC, 0)); // watermark reaches the bucket
    // One bucket, front-coded: w1, then w2 sharing its first character.
    expect(engine.snapshot().dedupe.map(([, ids]) => ids)).toEqual(['0:2:w11:1:2']);
  });
});

describe('watermarks across partitions', () => {
  it('is the min over partitions, monotone, and a partition silent for idleTimeoutMs of event time stops holding it back', () => {
    const engine = deliveryEngine();
    expect(engine.watermark()).toBeNull();
    engine.ingest(gps('a0', 'd1', T0, 0, 'p0'));
    engine.ingest(gps('b0', 'd2', T0 + 5 * SEC, 0, 'p1'));
    expect(engine.watermark()).toBe(T0 - 30 * SEC);
    // p1's events move the event clock on; p0, silent, holds the watermark until 10 s (idleTimeoutMs) of it.
    const held = engine.ingest(gps('b1', 'd2', T0 + 9 * SEC, 0, 'p1'));
    expect(engine.watermark()).toBe(T0 - 30 * SEC);
    expect(results(held)).toEqual([]);
    expect(engine.stats()).toMatchObject({ partitions: 2, activePartitions: 2 });
    const released = engine.ingest(gps('b2', 'd2', T0 + 20 * MIN, 0, 'p1'));
    expect(engine.watermark()).toBe(T0 + 19 * MIN + 30 * SEC);
    expect(engine.stats().activePartitions).toBe(1);
    expect(results(released, 'ids5m').map((r) => [r.key, r.start - T0])).toEqual([
      ['d1', 0],
      ['d2', 0],
    ]);
    // p0 comes back behind: the watermark does not go back, and its stale event is judged against it.
    const back = engine.ingest(gps('a1', 'd1', T0 + MIN, 0, 'p0'));
    expect(back[0]?.kind).toBe('late');
    expect(engine.watermark()).toBe(T0 + 19 * MIN + 30 * SEC);
    expect(engine.stats().activePartitions).toBe(2);
  });

  it('a partition that keeps sending, however far behind, stays active and holds the watermark', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a0', 'd1', T0, 0, 'p0'));
    // p1 runs 9 s of event time per event, p0 1 s: 160 s behind in the end, never 10 s silent.
    for (let i = 1; i <= 20; i++) {
      engine.ingest(gps(`b${i}`, 'd2', T0 + i * 9 * SEC, 0, 'p1'));
      engine.ingest(gps(`a${i}`, 'd1', T0 + i * SEC, 0, 'p0'));
    }
    expect(engine.watermark()).toBe(T0 + 20 * SEC - 30 * SEC);
    expect(engine.stats().activePartitions).toBe(2);
  });
});

describe('state TTL and size', () => {
  it('removes a finished key once the watermark passes its last event + stateTtl, and reports it', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a', 'done', T0, 0));
    engine.ingest(status('s', 'done', T0 + MIN, 'delivered'));
    expect(engine.stats().keys).toBe(1);
    const effects = engine.ingest(gps('x', 'other', T0 + 31 * MIN + 30 * SEC, 0)); // watermark T0 + 31 min
    expect(effects.filter((e) => e.kind === 'expired')).toEqual([
      { kind: 'expired', key: 'done', lastEventTime: T0 + MIN },
    ]);
    expect(engine.hasKey('done')).toBe(false);
    expect(engine.latest('done', 'status')).toBeUndefined();
    expect(engine.stats()).toMatchObject({ keys: 1, counters: { expiredKeys: 1 } });
  });

  it('a key that keeps receiving events is not expired by its first deadline', () => {
    const engine = deliveryEngine();
    for (let m = 0; m <= 40; m++) engine.ingest(gps(`g${m}`, 'long', T0 + m * MIN, m));
    expect(engine.hasKey('long')).toBe(true);
  });

  it('state stays bounded over 2,000 sequential deliveries and returns to zero at end of input', () => {
    const engine = deliveryEngine();
    let maxKeys = 0;
    let maxBuffered = 0;
    let maxBytes = 0;
    for (let d = 0; d < 2000; d++) {
      // Each delivery lasts 10 minutes with a GPS fix every 20 s; a new one starts every minute.
      for (let i = 0; i < 30; i++) {
        const t = T0 + d * MIN + i * 20 * SEC;
        engine.ingest(gps(`d${d}-g${i}`, `d${d}`, t, i * 100));
      }
      const s = engine.stats();
      maxKeys = Math.max(maxKeys, s.keys);
      maxBuffered = Math.max(maxBuffered, s.bufferedEvents);
      maxBytes = Math.max(maxBytes, s.approxBytes);
    }
    // Keys live ≈ 10 min of events + 30 min TTL, one starting per minute: ≈ 40, never the 2,000.
    expect(maxKeys).toBeLessThanOrEqual(45);
    expect(maxBytes).toBeLessThan(5_000_000);
    console.log(
      `bounded state: max keys ${maxKeys}, max buffered ${maxBuffered}, max approx bytes ${maxBytes}`,
    );
    engine.flush();
    expect(engine.stats()).toMatchObject({
      watermark: END_OF_INPUT,
      keys: 0,
      openWindows: 0,
      bufferedEvents: 0,
      dedupeIds: 0,
      approxBytes: 0,
    });
  });
});

describe('flush and stats', () => {
  it('flush fires every pending window, expires every key, and later events are late', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a', 'd1', T0, 0));
    engine.ingest(traffic('t', 'd1', T0 + SEC));
    const effects = engine.flush();
    expect(results(effects, 'traffic10m')).toHaveLength(10);
    expect(results(effects, 'speed5m')).toHaveLength(5);
    expect(results(effects, 'ids5m')).toHaveLength(1);
    expect(effects.at(-1)).toEqual({ kind: 'expired', key: 'd1', lastEventTime: T0 + SEC });
    expect(engine.ingest(gps('b', 'd1', T0 + 99 * MIN, 0))[0]?.kind).toBe('late');
  });

  it('a watermark jump past a stale expiry deadline still fires the later windows before the key expires', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a', 'd1', T0, 0)); // queues the key's expiry for T0 + 30 min
    engine.ingest(gps('b', 'd1', T0 + 40 * MIN, 0)); // moves it to T0 + 70 min; the old timer is stale
    const effects = engine.flush();
    const last = results(effects, 'ids5m').at(-1);
    expect(last).toMatchObject({ start: T0 + 40 * MIN, result: ['b'] });
    expect(effects.at(-1)).toEqual({ kind: 'expired', key: 'd1', lastEventTime: T0 + 40 * MIN });
  });

  it('counts results, revisions, accepted, duplicates and late', () => {
    const engine = deliveryEngine();
    engine.ingest(gps('a', 'd1', T0, 0));
    engine.ingest(gps('a', 'd1', T0, 0));
    engine.ingest(gps('b', 'd1', T0 + 5 * MIN + 30 * SEC, 0)); // fires ids5m [10:00) and 1 speed window
    engine.ingest(gps('c', 'd1', T0 + 4 * MIN, 0)); // 1 min behind: revises both
    engine.ingest(gps('d', 'd1', T0 + 20 * MIN, 0)); // closes them
    engine.ingest(gps('e', 'd1', T0, 0)); // late
    const { counters } = engine.stats();
    expect(counters).toMatchObject({ accepted: 4, duplicates: 1, late: 1 });
    // ids5m [10:00,10:05) and the one speed window holding 10:04 that had fired at 10:05: [10:00,10:05).
    expect(counters.revisions).toBe(2);
    expect(counters.results).toBeGreaterThan(0);
  });

  it('rejects malformed events with EngineEventError naming the field', () => {
    const engine = deliveryEngine();
    const ok = gps('a', 'd1', T0, 0);
    for (const [field, event] of [
      ['key', { ...ok, key: '' }],
      ['eventTime', { ...ok, eventTime: 1.5 }],
      ['eventTime', { ...ok, eventTime: Number.NaN }],
      ['partition', { ...ok, partition: 3 }],
      ['eventId', { ...ok, eventId: '' }],
    ] as const) {
      expect(() => engine.ingest(event as never)).toThrow(EngineEventError);
      try {
        engine.ingest(event as never);
      } catch (error) {
        expect((error as EngineEventError).field).toBe(field);
        expect((error as EngineEventError).code).toBe('invalid_engine_event');
      }
    }
    expect(engine.stats().counters.accepted).toBe(0);
  });
});

describe('the speed fixture', () => {
  it('is order-dependent (so the event-time test above means something)', () => {
    const a = gps('A', 'k', T0 + 5 * SEC, 50);
    const b = gps('B', 'k', T0 + 15 * SEC, 150);
    const s = gps('S', 'k', T0, 0);
    const c = gps('C', 'k', T0 + 30 * SEC, 300);
    const inOrder = [s, a, b, c];
    const arrival = [s, b, a, c];
    const imported: SpeedResult = { metresPerSecond: 10, points: 4 };
    expect(require('./engine.test-util').speed(inOrder)).toEqual(imported);
    expect(require('./engine.test-util').speed(arrival).metresPerSecond).not.toBe(10);
  });
});
