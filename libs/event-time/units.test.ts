import { compareEvents, estimateEventBytes, eventsIn, insertSorted, lowerBound } from './buffer';
import { rng } from './engine.test-util';
import { compareTimers, type Timer, TimerHeap, TimerKind } from './heap';
import { NO_WATERMARK, PartitionWatermarks } from './watermark';
import { lastEndOf, lastStartOf, windowStartsFor } from './windows';

describe('window arithmetic', () => {
  it('lists every window holding t, oldest first, aligned to the epoch', () => {
    expect(windowStartsFor(125, 50, 10)).toEqual([80, 90, 100, 110, 120]);
    expect(windowStartsFor(120, 50, 10)).toEqual([80, 90, 100, 110, 120]); // [70,120) excludes 120
    expect(windowStartsFor(125, 50, 50)).toEqual([100]);
    expect(windowStartsFor(-5, 10, 10)).toEqual([-10]);
    expect(windowStartsFor(7, 10, 4)).toEqual([0, 4]); // size not a multiple of the step
    expect(lastStartOf(125, 10)).toBe(120);
    expect(lastEndOf(125, 50, 10)).toBe(170);
  });

  it('agrees with a brute-force membership check', () => {
    const random = rng(3);
    for (let i = 0; i < 500; i++) {
      const step = 1 + Math.floor(random() * 20);
      const size = step + Math.floor(random() * 60);
      const t = Math.floor(random() * 400) - 200;
      const brute: number[] = [];
      for (let s = -400 - (((-400 % step) + step) % step); s <= 400; s += step)
        if (s <= t && t < s + size) brute.push(s);
      expect(windowStartsFor(t, size, step)).toEqual(brute);
    }
  });
});

describe('TimerHeap', () => {
  it('pops in (at, kind, key, window, start) order whatever the push order', () => {
    const random = rng(11);
    const heap = new TimerHeap();
    const all: Timer[] = [];
    for (let i = 0; i < 2000; i++) {
      const timer: Timer = {
        at: Math.floor(random() * 50),
        kind: Math.floor(random() * 4) as Timer['kind'],
        key: `k${Math.floor(random() * 5)}`,
        window: `w${Math.floor(random() * 2)}`,
        start: Math.floor(random() * 3),
      };
      heap.push(timer);
      all.push(timer);
      if (random() < 0.3) {
        all.sort(compareTimers);
        expect(heap.pop()).toEqual(all.shift());
      }
    }
    const popped: Timer[] = [];
    for (let t = heap.pop(); t !== undefined; t = heap.pop()) popped.push(t);
    expect(popped).toEqual([...all].sort(compareTimers));
    expect(heap.size).toBe(0);
  });

  it('fires a window before it closes and before its key expires at the same time', () => {
    const at = 100;
    const order = [TimerKind.Expire, TimerKind.Close, TimerKind.Fire].map((kind) => ({
      at,
      kind,
      key: 'k',
      window: 'w',
      start: 0,
    }));
    expect([...order].sort(compareTimers).map((t) => t.kind)).toEqual([
      TimerKind.Fire,
      TimerKind.Close,
      TimerKind.Expire,
    ]);
  });
});

describe('PartitionWatermarks', () => {
  it('is the min over partitions minus the bound, leaving out those silent for idleTimeoutMs of event time', () => {
    const w = new PartitionWatermarks(10, 100);
    expect(w.current()).toBe(NO_WATERMARK);
    w.observe('a', 1000);
    w.observe('b', 500); // behind, but just seen: active
    expect(w.current()).toBe(490);
    w.observe('a', 1099);
    expect(w.current()).toBe(490); // b seen at event clock 1000: active until it reaches 1100
    expect(w.activeCount()).toBe(2);
    w.observe('a', 1100);
    expect(w.current()).toBe(1090);
    expect(w.activeCount()).toBe(1);
    w.observe('b', 600); // an older event: b is active again and holds the watermark as it is behind
    expect(w.current()).toBe(590);
    expect(w.snapshot()).toEqual([
      { partition: 'a', maxEventTime: 1100, lastSeenAt: 1100 },
      { partition: 'b', maxEventTime: 600, lastSeenAt: 1100 },
    ]);
  });

  it('restores lastSeenAt no later than the event clock (snapshots of when it was processing time)', () => {
    const w = new PartitionWatermarks(10, 100);
    w.restore([
      { partition: 'a', maxEventTime: 1000, lastSeenAt: 5_000_000 },
      { partition: 'b', maxEventTime: 500, lastSeenAt: 0 },
    ]);
    expect(w.snapshot().map((s) => s.lastSeenAt)).toEqual([1000, 0]);
    expect(w.current()).toBe(990);
  });
});

describe('event buffer', () => {
  const ev = (id: string, t: number) => ({
    key: 'k',
    eventTime: t,
    partition: 'p',
    eventId: id,
    payload: { x: 1 },
  });

  it('keeps (eventTime, eventId) order and slices [start, end)', () => {
    const entries: { event: ReturnType<typeof ev>; bytes: number }[] = [];
    for (const [id, t] of [
      ['c', 30],
      ['a', 10],
      ['b', 20],
      ['b2', 20],
      ['a0', 20],
    ] as const) {
      insertSorted(entries, { event: ev(id, t), bytes: 1 });
    }
    expect(entries.map((e) => e.event.eventId)).toEqual(['a', 'a0', 'b', 'b2', 'c']);
    expect(lowerBound(entries, 20)).toBe(1);
    expect(eventsIn(entries, 20, 30).map((e) => e.eventId)).toEqual(['a0', 'b', 'b2']);
    expect(compareEvents(ev('x', 1), ev('y', 1))).toBeLessThan(0);
  });

  it('estimates size from strings and the payload JSON', () => {
    expect(estimateEventBytes(ev('id', 1))).toBe(96 + 2 * (1 + 2 + 1 + '{"x":1}'.length));
    expect(estimateEventBytes({ ...ev('id', 1), payload: undefined })).toBe(96 + 2 * 4);
  });
});
