import { StreamSnapshotError } from './errors';
import type { EngineCounters, StreamEvent } from './types';
import type { PartitionState } from './watermark';

export const SNAPSHOT_VERSION = 1;

/**
 * Everything the engine knows, as plain JSON. Timers are not stored: each is a function of this state (a
 * window not yet fired fires at its end, a fired one closes at end + lateness, a key expires at its last
 * event time + TTL, an id is forgotten at its forgetAt), so restore() rebuilds them exactly.
 */
export interface EngineSnapshot<P = unknown> {
  version: typeof SNAPSHOT_VERSION;
  /** null before any event. */
  watermark: number | null;
  partitions: PartitionState[];
  /** Sorted by key. */
  keys: KeySnapshot<P>[];
  /** [eventId, forgetAt (a multiple of DEDUPE_BUCKET_MS)], sorted by id. */
  dedupe: [string, number][];
  counters: EngineCounters;
}

export interface KeySnapshot<P> {
  key: string;
  lastEventTime: number;
  windows: WindowStateSnapshot<P>[];
  latest: { name: string; event: StreamEvent<P> }[];
}

export interface WindowStateSnapshot<P> {
  name: string;
  /** Buffered events in (eventTime, eventId) order. */
  events: StreamEvent<P>[];
  /** [start, times emitted]: 0 = not fired yet. */
  emitted: [number, number][];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function bad(path: string, expected: string): never {
  throw new StreamSnapshotError(path, `invalid stream snapshot at ${path}: expected ${expected}`);
}

function int(path: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) bad(path, 'an integer');
  return value;
}

function str(path: string, value: unknown): string {
  if (typeof value !== 'string') bad(path, 'a string');
  return value;
}

function arr(path: string, value: unknown): unknown[] {
  if (!Array.isArray(value)) bad(path, 'an array');
  return value;
}

function event(path: string, value: unknown): StreamEvent<unknown> {
  if (!isRecord(value)) bad(path, 'an event object');
  return {
    key: str(`${path}.key`, value.key),
    eventTime: int(`${path}.eventTime`, value.eventTime),
    partition: str(`${path}.partition`, value.partition),
    eventId: str(`${path}.eventId`, value.eventId),
    payload: value.payload,
  };
}

const COUNTERS: readonly (keyof EngineCounters)[] = [
  'accepted',
  'duplicates',
  'late',
  'results',
  'revisions',
  'expiredKeys',
];

/** Checks the shape (not the payloads) and returns a typed copy; throws StreamSnapshotError naming the path. */
export function checkSnapshot<P>(value: unknown): EngineSnapshot<P> {
  if (!isRecord(value)) bad('$', 'an object');
  if (value.version !== SNAPSHOT_VERSION) bad('$.version', String(SNAPSHOT_VERSION));
  const watermark = value.watermark === null ? null : int('$.watermark', value.watermark);
  const partitions = arr('$.partitions', value.partitions).map((p, i) => {
    const path = `$.partitions[${i}]`;
    if (!isRecord(p)) bad(path, 'an object');
    return {
      partition: str(`${path}.partition`, p.partition),
      maxEventTime: int(`${path}.maxEventTime`, p.maxEventTime),
      lastSeenAt: int(`${path}.lastSeenAt`, p.lastSeenAt),
    };
  });
  const keys = arr('$.keys', value.keys).map((k, i) => {
    const path = `$.keys[${i}]`;
    if (!isRecord(k)) bad(path, 'an object');
    return {
      key: str(`${path}.key`, k.key),
      lastEventTime: int(`${path}.lastEventTime`, k.lastEventTime),
      windows: arr(`${path}.windows`, k.windows).map((w, j) => {
        const wp = `${path}.windows[${j}]`;
        if (!isRecord(w)) bad(wp, 'an object');
        return {
          name: str(`${wp}.name`, w.name),
          events: arr(`${wp}.events`, w.events).map(
            (e, n) => event(`${wp}.events[${n}]`, e) as StreamEvent<P>,
          ),
          emitted: arr(`${wp}.emitted`, w.emitted).map((pair, n) => {
            const pp = `${wp}.emitted[${n}]`;
            const [start, count] = arr(pp, pair);
            return [int(`${pp}[0]`, start), int(`${pp}[1]`, count)] as [number, number];
          }),
        };
      }),
      latest: arr(`${path}.latest`, k.latest).map((l, j) => {
        const lp = `${path}.latest[${j}]`;
        if (!isRecord(l)) bad(lp, 'an object');
        return { name: str(`${lp}.name`, l.name), event: event(`${lp}.event`, l.event) as StreamEvent<P> };
      }),
    };
  });
  const dedupe = arr('$.dedupe', value.dedupe).map((pair, i) => {
    const [id, forgetAt] = arr(`$.dedupe[${i}]`, pair);
    return [str(`$.dedupe[${i}][0]`, id), int(`$.dedupe[${i}][1]`, forgetAt)] as [string, number];
  });
  if (!isRecord(value.counters)) bad('$.counters', 'an object');
  const rawCounters = value.counters;
  const counters = Object.fromEntries(
    COUNTERS.map((name) => [name, int(`$.counters.${name}`, rawCounters[name])]),
  ) as unknown as EngineCounters;
  return { version: SNAPSHOT_VERSION, watermark, partitions, keys, dedupe, counters };
}
