import type { BackpressureOptions } from './index';
import { AdmissionCode, BackpressureError, ClientState, ClientTable } from './index';

const options: BackpressureOptions = {
  rateLimitRps: 10,
  rateLimitBurst: 1,
  maxInflightPerClient: 10,
  maxModelQueue: 1,
};

function table(maxEntries: number, idleMs: number): { table: ClientTable<string>; created: () => number } {
  let count = 0;
  return {
    table: new ClientTable<string>(maxEntries, idleMs, (now) => {
      count++;
      return new ClientState(options, now);
    }),
    created: () => count,
  };
}

describe('ClientTable', () => {
  it('creates a state once per key and returns the same one after', () => {
    const { table: t, created } = table(10, 60_000);
    const a = t.get('10.0.0.1', 0);
    expect(t.get('10.0.0.1', 5)).toBe(a);
    expect(t.get('10.0.0.2', 5)).not.toBe(a);
    expect(t.size).toBe(2);
    expect(created()).toBe(2);
    expect(t.has('10.0.0.1')).toBe(true);
    expect(t.has('10.0.0.3')).toBe(false);
  });

  it('keeps the rate-limit state of a known client', () => {
    const { table: t } = table(10, 60_000);
    expect(t.get('a', 0).tryAcquire(0)).toBe(AdmissionCode.Admit);
    const again = t.get('a', 50);
    expect(again.tryAcquire(50)).toBe(AdmissionCode.RateLimited);
    expect(again.retryAfterMs).toBe(50);
  });

  it('stays bounded: evicts the least recently seen idle client at capacity', () => {
    const { table: t } = table(3, 60_000);
    t.get('a', 0);
    t.get('b', 1);
    t.get('c', 2);
    t.get('a', 3); // a is now the most recent
    t.get('d', 4);
    expect(t.size).toBe(3);
    expect([t.has('a'), t.has('b'), t.has('c'), t.has('d')]).toEqual([true, false, true, true]);
    for (let i = 0; i < 10_000; i++) {
      t.get(`client-${i}`, 10 + i);
      expect(t.size).toBeLessThanOrEqual(3);
    }
    expect([t.has('client-9997'), t.has('client-9998'), t.has('client-9999')]).toEqual([true, true, true]);
  });

  it('never evicts a client with requests in flight', () => {
    const { table: t } = table(3, 1000);
    const busy = t.get('busy', 0);
    expect(busy.tryAcquire(0)).toBe(AdmissionCode.Admit);
    busy.onAdmitted();
    for (let i = 0; i < 100; i++) t.get(`other-${i}`, i);
    expect(t.size).toBe(3);
    expect(t.get('busy', 100)).toBe(busy);
    // long past the idle time, still there while in flight
    t.sweep(1_000_000);
    expect(t.has('busy')).toBe(true);
    expect(t.get('busy', 1_000_000)).toBe(busy);
    // once done and idle, it can go
    busy.onCompleted();
    expect(t.size).toBe(1);
    expect(t.sweep(1_000_000 + 1000)).toBe(1);
    expect(t.size).toBe(0);
  });

  it('grows past maxEntries only while every entry has requests in flight, then shrinks back', () => {
    const { table: t } = table(3, 1000);
    const states = ['a', 'b', 'c'].map((key) => t.get(key, 0));
    for (const s of states) {
      s.tryAcquire(0);
      s.onAdmitted();
    }
    const d = t.get('d', 1);
    expect(t.size).toBe(4);
    expect(['a', 'b', 'c', 'd'].every((key) => t.has(key))).toBe(true);
    expect(t.get('a', 2)).toBe(states[0]);
    for (const s of states) s.onCompleted();
    t.get('e', 3);
    expect(t.size).toBe(3);
    expect(t.has('d')).toBe(true);
    expect(t.has('e')).toBe(true);
    expect(d.inflight).toBe(0);
  });

  it('with a mix of busy and idle clients, evicts only idle ones and stays at capacity', () => {
    const { table: t } = table(50, 60_000);
    const busy = new Map<string, ClientState>();
    for (let i = 0; i < 20; i++) {
      const key = `busy-${i}`;
      const s = t.get(key, i);
      s.tryAcquire(i);
      s.onAdmitted();
      busy.set(key, s);
    }
    for (let i = 0; i < 5000; i++) {
      t.get(`idle-${i}`, 100 + i);
      expect(t.size).toBeLessThanOrEqual(50);
    }
    for (const [key, s] of busy) expect(t.get(key, 10_000)).toBe(s);
    expect(t.size).toBe(50);
  });

  it('evicts clients idle for idleMs (sweep, and a few on each insertion)', () => {
    const { table: t } = table(100, 1000);
    for (let i = 0; i < 20; i++) t.get(`old-${i}`, i);
    t.get('old-19', 500); // seen again: expires later
    expect(t.sweep(999)).toBe(0);
    expect(t.sweep(1000)).toBe(1); // old-0: now − seenAt >= idleMs
    expect(t.sweep(1010, 5)).toBe(5); // bounded work
    expect(t.size).toBe(14);
    t.get('new', 1018);
    expect(t.size).toBe(7); // the insertion evicted 8 more: old-14..old-18 are left
    expect(t.sweep(1_000_000)).toBe(7);
    expect(t.size).toBe(0);
  });

  it('a client that comes back after eviction starts afresh', () => {
    const { table: t, created } = table(10, 1000);
    const first = t.get('a', 0);
    first.tryAcquire(0);
    t.sweep(5000);
    const second = t.get('a', 5000);
    expect(second).not.toBe(first);
    expect(second.tryAcquire(5000)).toBe(AdmissionCode.Admit);
    expect(created()).toBe(2);
  });

  it('idleMs = Infinity: only capacity evicts', () => {
    const { table: t } = table(2, Number.POSITIVE_INFINITY);
    t.get('a', 0);
    t.get('b', 0);
    expect(t.sweep(Number.MAX_SAFE_INTEGER)).toBe(0);
    t.get('c', 1);
    expect(t.size).toBe(2);
    expect(t.has('a')).toBe(false);
  });

  it('validates its arguments, naming them', () => {
    const create = (now: number) => new ClientState(options, now);
    const bad: [string, () => unknown][] = [
      ['maxEntries', () => new ClientTable(0, 1000, create)],
      ['maxEntries', () => new ClientTable(1.5, 1000, create)],
      ['idleMs', () => new ClientTable(10, -1, create)],
      ['idleMs', () => new ClientTable(10, Number.NaN, create)],
      ['create', () => new ClientTable(10, 1000, undefined as unknown as typeof create)],
    ];
    for (const [option, make] of bad) {
      try {
        make();
        throw new Error(`expected ${option} to be rejected`);
      } catch (error) {
        expect(error).toBeInstanceOf(BackpressureError);
        expect((error as BackpressureError).option).toBe(option);
      }
    }
  });
});
