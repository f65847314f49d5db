import {
  arr,
  bad,
  int,
  isRecord,
  packDeltas,
  packStrings,
  str,
  unpackDeltas,
  unpackRuns,
  unpackStrings,
} from './pack';
import type { EngineCounters, StreamEvent } from './types';
import type { PartitionState } from './watermark';

/** 2: each key's events stored once, in columns; windows point into them; dedupe ids by forget time. */
export const SNAPSHOT_VERSION = 2;

/**
 * Everything the engine knows, as plain JSON. Timers are not stored: each is a function of this state (a
 * window not yet fired fires at its end, a fired one closes at end + lateness, a key expires at its last
 * event time + TTL, an id is forgotten at its forgetAt), so restore() rebuilds them exactly.
 */
export interface EngineSnapshot<P = unknown> {
  version: typeof SNAPSHOT_VERSION;
  /** null before any event. */
  watermark: number | null;
  /** Sorted by partition; events name their partition by index in this list. */
  partitions: PartitionState[];
  /** Sorted by key. */
  keys: KeySnapshot<P>[];
  /** [forgetAt (a multiple of DEDUPE_BUCKET_MS), the ids forgotten then, sorted and front-coded], by forgetAt. */
  dedupe: [number, string][];
  counters: EngineCounters;
}

export interface KeySnapshot<P> {
  key: string;
  lastEventTime: number;
  /** Every event a window or latest spec of the key holds, once, in (eventTime, eventId) order. */
  events: EventColumns<P>;
  windows: WindowStateSnapshot[];
  /** The latest event per spec, by index in `events`. */
  latest: { name: string; event: number }[];
}

/** Events as columns; the key is the key's own. */
export interface EventColumns<P> {
  /** Event times: the first, then differences. */
  time: number[];
  /** Event ids, front-coded (see packStrings). */
  id: string;
  /** Index in `partitions` per event, or one index for all of them. */
  partition: number | number[];
  payload: P[];
}

export interface WindowStateSnapshot {
  name: string;
  /** The buffered events, in order, as runs of indices in the key's `events` (see packRuns). */
  events: number[];
  /** [start, times emitted]: 0 = not fired yet. */
  emitted: [number, number][];
}

/** A snapshot decoded and checked: events as objects again, windows and latest pointing at them. */
export interface RestoredSnapshot<P> {
  watermark: number | null;
  partitions: PartitionState[];
  keys: {
    key: string;
    lastEventTime: number;
    windows: { name: string; events: StreamEvent<P>[]; emitted: [number, number][] }[];
    latest: { name: string; event: StreamEvent<P> }[];
  }[];
  dedupe: [number, string[]][];
  counters: EngineCounters;
}

/** Encodes one key's events (`events`: distinct objects, already in (eventTime, eventId) order). */
export function packEvents<P>(
  events: readonly StreamEvent<P>[],
  partitionIndex: ReadonlyMap<string, number>,
): EventColumns<P> {
  const n = events.length;
  const time = new Array<number>(n);
  const id = new Array<string>(n);
  const partition = new Array<number>(n);
  const payload = new Array<P>(n);
  let samePartition = true;
  for (let i = 0; i < n; i++) {
    const e = events[i]!;
    time[i] = e.eventTime;
    id[i] = e.eventId;
    const p = partitionIndex.get(e.partition);
    // Every event's partition was observed before it was applied, and partitions are never removed.
    if (p === undefined)
      throw new Error(`event ${e.eventId} has partition ${e.partition}, which has no watermark`);
    partition[i] = p;
    if (p !== partition[0]) samePartition = false;
    payload[i] = e.payload;
  }
  return {
    time: packDeltas(time),
    id: packStrings(id),
    partition: samePartition && n > 0 ? partition[0]! : partition,
    payload,
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

function unpackEvents<P>(
  path: string,
  value: unknown,
  key: string,
  partitions: readonly PartitionState[],
): StreamEvent<P>[] {
  if (!isRecord(value)) bad(path, 'an object');
  const time = unpackDeltas(`${path}.time`, value.time);
  const ids = unpackStrings(`${path}.id`, value.id);
  const payload = arr(`${path}.payload`, value.payload);
  const n = time.length;
  if (ids.length !== n) bad(`${path}.id`, `${n} ids`);
  if (payload.length !== n) bad(`${path}.payload`, `${n} payloads`);
  const rawPartition = value.partition;
  const partitionOf = (i: number): string => {
    const p = typeof rawPartition === 'number' ? rawPartition : (rawPartition as unknown[])[i];
    const at = typeof rawPartition === 'number' ? `${path}.partition` : `${path}.partition[${i}]`;
    const name = partitions[int(at, p)]?.partition;
    if (name === undefined) bad(at, `an index in $.partitions (${partitions.length})`);
    return name;
  };
  if (typeof rawPartition !== 'number') {
    if (arr(`${path}.partition`, rawPartition).length !== n) bad(`${path}.partition`, `${n} partitions`);
  }
  const events = new Array<StreamEvent<P>>(n);
  for (let i = 0; i < n; i++) {
    if (ids[i]!.length === 0) bad(`${path}.id[${i}]`, 'a non-empty id');
    events[i] = {
      key,
      eventTime: time[i]!,
      partition: partitionOf(i),
      eventId: ids[i]!,
      payload: payload[i] as P,
    };
  }
  return events;
}

/**
 * Checks the shape (not the payloads) and decodes it; throws EngineSnapshotError naming the path. `root`
 * prefixes the paths (a snapshot embedded in another one).
 */
export function checkSnapshot<P>(value: unknown, root = '$'): RestoredSnapshot<P> {
  if (!isRecord(value)) bad(root, 'an object');
  if (value.version !== SNAPSHOT_VERSION) bad(`${root}.version`, String(SNAPSHOT_VERSION));
  const watermark = value.watermark === null ? null : int(`${root}.watermark`, value.watermark);
  const partitions = arr(`${root}.partitions`, value.partitions).map((p, i) => {
    const path = `${root}.partitions[${i}]`;
    if (!isRecord(p)) bad(path, 'an object');
    return {
      partition: str(`${path}.partition`, p.partition),
      maxEventTime: int(`${path}.maxEventTime`, p.maxEventTime),
      lastSeenAt: int(`${path}.lastSeenAt`, p.lastSeenAt),
    };
  });
  const keys = arr(`${root}.keys`, value.keys).map((k, i) => {
    const path = `${root}.keys[${i}]`;
    if (!isRecord(k)) bad(path, 'an object');
    const key = str(`${path}.key`, k.key);
    if (key.length === 0) bad(`${path}.key`, 'a non-empty key');
    const events = unpackEvents<P>(`${path}.events`, k.events, key, partitions);
    return {
      key,
      lastEventTime: int(`${path}.lastEventTime`, k.lastEventTime),
      windows: arr(`${path}.windows`, k.windows).map((w, j) => {
        const wp = `${path}.windows[${j}]`;
        if (!isRecord(w)) bad(wp, 'an object');
        return {
          name: str(`${wp}.name`, w.name),
          events: unpackRuns(`${wp}.events`, w.events, events.length).map((n) => events[n]!),
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
        const event = events[int(`${lp}.event`, l.event)];
        if (event === undefined) bad(`${lp}.event`, `an index in the key's ${events.length} events`);
        return { name: str(`${lp}.name`, l.name), event };
      }),
    };
  });
  const dedupe = arr(`${root}.dedupe`, value.dedupe).map((bucket, i) => {
    const bp = `${root}.dedupe[${i}]`;
    const [forgetAt, ids] = arr(bp, bucket);
    return [int(`${bp}[0]`, forgetAt), unpackStrings(`${bp}[1]`, ids)] as [number, string[]];
  });
  if (!isRecord(value.counters)) bad(`${root}.counters`, 'an object');
  const rawCounters = value.counters;
  const counters = Object.fromEntries(
    COUNTERS.map((name) => [name, int(`${root}.counters.${name}`, rawCounters[name])]),
  ) as unknown as EngineCounters;
  return { watermark, partitions, keys, dedupe, counters };
}
