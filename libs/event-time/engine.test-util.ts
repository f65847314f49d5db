import {
  createEventTimeEngine,
  type EventTimeEngine,
  type EventTimeEngineOptions,
  type StreamEvent,
} from './index';

/** 2026-11-08T10:00:00Z, the reference morning. */
export const T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
export const SEC = 1000;
export const MIN = 60 * SEC;

export type Payload =
  | { type: 'gps'; x: number }
  | { type: 'traffic'; severity: number }
  | { type: 'status'; s: string };

export interface SpeedResult {
  metresPerSecond: number;
  points: number;
}

/** Path length over elapsed time: depends on event order, so an arrival-order engine would get it wrong. */
export function speed(events: readonly StreamEvent<Payload>[]): SpeedResult {
  let path = 0;
  let prev: StreamEvent<Payload> | undefined;
  for (const e of events) {
    if (e.payload.type !== 'gps') continue;
    if (prev !== undefined && prev.payload.type === 'gps') path += Math.abs(e.payload.x - prev.payload.x);
    prev = e;
  }
  const first = events[0];
  const elapsed = first !== undefined && prev !== undefined ? (prev.eventTime - first.eventTime) / SEC : 0;
  return { metresPerSecond: elapsed > 0 ? path / elapsed : 0, points: events.length };
}

export function gps(id: string, key: string, t: number, x: number, partition = 'p0'): StreamEvent<Payload> {
  return { key, eventTime: t, partition, eventId: id, payload: { type: 'gps', x } };
}

export function traffic(id: string, key: string, t: number, partition = 'p0'): StreamEvent<Payload> {
  return { key, eventTime: t, partition, eventId: id, payload: { type: 'traffic', severity: 2 } };
}

export function status(
  id: string,
  key: string,
  t: number,
  s: string,
  partition = 'p0',
): StreamEvent<Payload> {
  return { key, eventTime: t, partition, eventId: id, payload: { type: 'status', s } };
}

/** The reference workload's windows: speed over 5 min sliding by 1 min, traffic over 10 min, 5-min tumbling ids. */
export function deliveryOptions(
  overrides: Partial<EventTimeEngineOptions<Payload, unknown>> = {},
): EventTimeEngineOptions<Payload, unknown> {
  return {
    outOfOrdernessMs: 30 * SEC,
    allowedLatenessMs: 2 * MIN,
    idleTimeoutMs: 10 * SEC,
    stateTtlMs: 30 * MIN,
    dedupeTtlMs: 30 * MIN,
    windows: [
      {
        name: 'speed5m',
        sizeMs: 5 * MIN,
        stepMs: MIN,
        accepts: (e) => e.payload.type === 'gps',
        result: (events) => speed(events),
      },
      {
        name: 'traffic10m',
        sizeMs: 10 * MIN,
        stepMs: MIN,
        accepts: (e) => e.payload.type === 'traffic',
        result: (events) => ({ alerts: events.length }),
      },
      {
        name: 'ids5m',
        sizeMs: 5 * MIN,
        result: (events) => events.map((e) => e.eventId),
      },
    ],
    latest: [
      { name: 'position', accepts: (e) => e.payload.type === 'gps' },
      { name: 'status', accepts: (e) => e.payload.type === 'status' },
    ],
    ...overrides,
  };
}

export function deliveryEngine(
  overrides: Partial<EventTimeEngineOptions<Payload, unknown>> = {},
): EventTimeEngine<Payload, unknown> {
  return createEventTimeEngine(deliveryOptions(overrides));
}

/** Seeded PRNG (mulberry32): the randomized tests are reproducible. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
