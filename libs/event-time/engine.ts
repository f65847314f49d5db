import { compareEvents, type Entry, estimateEventBytes, eventsIn, insertSorted } from './buffer';
import { DEDUPE_BUCKET_MS, DedupeIds } from './dedupe';
import { EngineEventError, EngineSnapshotError } from './errors';
import { TimerHeap, TimerKind } from './heap';
import { validateEngineOptions } from './options';
import { packRuns } from './pack';
import {
  checkSnapshot,
  type EngineSnapshot,
  type KeySnapshot,
  packEvents,
  type RestoredSnapshot,
  SNAPSHOT_VERSION,
} from './snapshot';
import type {
  EngineCounters,
  EngineOutput,
  EngineStats,
  EventTimeEngineOptions,
  ResolvedEngineOptions,
  ResolvedWindowSpec,
  StreamEvent,
} from './types';
import { NO_WATERMARK, type PartitionState, PartitionWatermarks } from './watermark';
import { lastEndOf, windowStartsFor } from './windows';

/** The watermark after flush(): every window has fired and closed, every later event is late. */
export const END_OF_INPUT = Number.MAX_SAFE_INTEGER;

const KEY_OVERHEAD_BYTES = 128;
const WINDOW_TRACKER_BYTES = 32;

interface WindowState<P> {
  /** Events of the open windows, in (eventTime, eventId) order. */
  entries: Entry<P>[];
  /** Open window start → times its result was emitted (0: not fired yet). */
  emitted: Map<number, number>;
}

interface KeyState<P> {
  readonly key: string;
  lastEventTime: number;
  /** Time of the pending Expire timer, if one is queued. */
  expireTimerAt: number | null;
  readonly windows: Map<string, WindowState<P>>;
  readonly latest: Map<string, Entry<P>>;
  bytes: number;
}

export interface EventTimeEngine<P = unknown, R = unknown> {
  /** One event in; its disposition (accepted | duplicate | late) first, then any results it caused. */
  ingest(event: StreamEvent<P>): EngineOutput<P, R>[];
  /** End of a bounded input: the watermark jumps to END_OF_INPUT, every window fires and every key expires. */
  flush(): EngineOutput<P, R>[];
  /** Current engine watermark; null before the first event. */
  watermark(): number | null;
  /** Last-valid state of `key` for a `latest` spec, by event time. */
  latest(key: string, name: string): StreamEvent<P> | undefined;
  /**
   * The result a window of `key` would have now, without emitting anything: for features read between
   * firings (e.g. at each event). Undefined unless that window is open (holds events, not yet closed).
   */
  evaluate(key: string, window: string, start: number): { result: R; eventCount: number } | undefined;
  hasKey(key: string): boolean;
  stats(): EngineStats;
  /** Plain JSON-able copy of all state (keyed state, watermarks, dedupe ids, counters). */
  snapshot(): EngineSnapshot<P>;
  /**
   * An incremental snapshot's first half, now: everything but the keys, and the keys to capture. Each key
   * is then captured with snapshotKey before it next changes (see the onKeyChange option) or at leisure;
   * together they equal snapshot() at this moment.
   */
  snapshotHead(): EngineSnapshotHead;
  /** One key as snapshot() would write it (undefined: no such key), against a head's partition index. */
  snapshotKey(key: string, head: EngineSnapshotHead): KeySnapshot<P> | undefined;
}

/** snapshot() without its keys, and the keys (sorted) that it would hold. */
export interface EngineSnapshotHead {
  readonly version: typeof SNAPSHOT_VERSION;
  readonly watermark: number | null;
  readonly partitions: PartitionState[];
  readonly dedupe: [number, string][];
  readonly counters: EngineCounters;
  readonly keys: readonly string[];
  readonly partitionIndex: ReadonlyMap<string, number>;
}

function checkEvent(event: StreamEvent<unknown>): void {
  if (typeof event !== 'object' || event === null)
    throw new EngineEventError('event', 'event must be an object');
  if (typeof event.key !== 'string' || event.key.length === 0) {
    throw new EngineEventError('key', 'event key must be a non-empty string');
  }
  if (typeof event.eventTime !== 'number' || !Number.isSafeInteger(event.eventTime)) {
    throw new EngineEventError('eventTime', `event ${event.eventId} has a non-integer eventTime`);
  }
  if (typeof event.partition !== 'string') {
    throw new EngineEventError('partition', `event ${event.eventId} has a non-string partition`);
  }
  if (typeof event.eventId !== 'string' || event.eventId.length === 0) {
    throw new EngineEventError('eventId', 'event id must be a non-empty string');
  }
}

class Engine<P, R> implements EventTimeEngine<P, R> {
  private readonly options: ResolvedEngineOptions<P, R>;
  private readonly specs: ReadonlyMap<string, ResolvedWindowSpec<P, R>>;
  private readonly partitions: PartitionWatermarks;
  private readonly keys = new Map<string, KeyState<P>>();
  /** Processed event ids until their forget time (dedupe.ts). */
  private readonly dedupe = new DedupeIds();
  private readonly timers = new TimerHeap();
  private wm = NO_WATERMARK;
  private bytes = 0;
  private openWindows = 0;
  private buffered = 0;
  private readonly counters: EngineCounters = {
    accepted: 0,
    duplicates: 0,
    late: 0,
    results: 0,
    revisions: 0,
    expiredKeys: 0,
  };

  constructor(input: EventTimeEngineOptions<P, R>, snapshot?: unknown) {
    this.options = validateEngineOptions(input);
    this.specs = new Map(this.options.windows.map((w) => [w.name, w]));
    this.partitions = new PartitionWatermarks(this.options.outOfOrdernessMs, this.options.idleTimeoutMs);
    if (snapshot !== undefined) this.restore(checkSnapshot<P>(snapshot));
  }

  ingest(event: StreamEvent<P>): EngineOutput<P, R>[] {
    checkEvent(event);
    if (this.dedupe.has(event.eventId)) {
      this.counters.duplicates++;
      return [{ kind: 'duplicate', event }];
    }
    // Remember from the later of its time and now's watermark, so a late event's id outlives its arrival.
    const forgetAt = Math.max(event.eventTime, this.wm) + this.options.dedupeTtlMs;
    this.remember(event.eventId, Math.ceil(forgetAt / DEDUPE_BUCKET_MS) * DEDUPE_BUCKET_MS);
    this.partitions.observe(event.partition, event.eventTime);
    const effects: EngineOutput<P, R>[] = [];
    if (this.isTooLate(event)) {
      this.counters.late++;
      effects.push({ kind: 'late', event, watermark: this.wm });
    } else {
      this.apply(event, effects);
    }
    this.advance(effects);
    return effects;
  }

  flush(): EngineOutput<P, R>[] {
    const effects: EngineOutput<P, R>[] = [];
    this.wm = END_OF_INPUT;
    this.runTimers(effects);
    return effects;
  }

  watermark(): number | null {
    return this.wm === NO_WATERMARK ? null : this.wm;
  }

  latest(key: string, name: string): StreamEvent<P> | undefined {
    return this.keys.get(key)?.latest.get(name)?.event;
  }

  hasKey(key: string): boolean {
    return this.keys.has(key);
  }

  evaluate(key: string, window: string, start: number): { result: R; eventCount: number } | undefined {
    const spec = this.specs.get(window);
    const ws = this.keys.get(key)?.windows.get(window);
    if (spec === undefined || ws === undefined || !ws.emitted.has(start)) return undefined;
    const end = start + spec.sizeMs;
    const events = eventsIn(ws.entries, start, end);
    return { result: spec.result(events, { key, window, start, end }), eventCount: events.length };
  }

  stats(): EngineStats {
    return {
      watermark: this.watermark(),
      keys: this.keys.size,
      openWindows: this.openWindows,
      bufferedEvents: this.buffered,
      dedupeIds: this.dedupe.size,
      partitions: this.partitions.size,
      activePartitions: this.partitions.activeCount(),
      approxBytes: this.bytes + this.dedupe.bytes,
      counters: { ...this.counters },
    };
  }

  snapshot(): EngineSnapshot<P> {
    const head = this.snapshotHead();
    return {
      version: head.version,
      watermark: head.watermark,
      partitions: head.partitions,
      keys: head.keys.map((key) => this.snapshotKey(key, head)!),
      dedupe: head.dedupe,
      counters: head.counters,
    };
  }

  snapshotHead(): EngineSnapshotHead {
    const partitions = this.partitions.snapshot();
    return {
      version: SNAPSHOT_VERSION,
      watermark: this.watermark(),
      partitions,
      dedupe: this.dedupe.pack(),
      counters: { ...this.counters },
      keys: [...this.keys.keys()].sort(),
      partitionIndex: new Map(partitions.map((p, i) => [p.partition, i])),
    };
  }

  snapshotKey(key: string, head: EngineSnapshotHead): KeySnapshot<P> | undefined {
    const ks = this.keys.get(key);
    return ks === undefined ? undefined : this.packKey(ks, head.partitionIndex);
  }

  /** One key: its events once each (a GPS point sits in several windows and is the latest position). */
  private packKey(ks: KeyState<P>, partitionIndex: ReadonlyMap<string, number>): KeySnapshot<P> {
    const index = new Map<StreamEvent<P>, number>();
    const events: StreamEvent<P>[] = [];
    const add = (e: StreamEvent<P>) => {
      if (index.has(e)) return;
      index.set(e, 0);
      events.push(e);
    };
    // In spec order, not arrival order, so equal state gives byte-equal snapshots.
    const windows = this.options.windows.flatMap((spec) => {
      const w = ks.windows.get(spec.name);
      if (w === undefined) return [];
      for (const entry of w.entries) add(entry.event);
      return [{ name: spec.name, w }];
    });
    const latest = this.options.latest.flatMap((spec) => {
      const e = ks.latest.get(spec.name);
      if (e === undefined) return [];
      add(e.event);
      return [{ name: spec.name, e: e.event }];
    });
    // Stable: distinct objects with equal (eventTime, eventId) keep the order above.
    events.sort(compareEvents);
    for (let i = 0; i < events.length; i++) index.set(events[i]!, i);
    return {
      key: ks.key,
      lastEventTime: ks.lastEventTime,
      events: packEvents(events, partitionIndex),
      windows: windows.map(({ name, w }) => ({
        name,
        events: packRuns(w.entries.map((entry) => index.get(entry.event)!)),
        emitted: [...w.emitted.entries()].sort((a, b) => a[0] - b[0]),
      })),
      latest: latest.map(({ name, e }) => ({ name, event: index.get(e)! })),
    };
  }

  /**
   * Late: more than allowedLatenessMs behind the watermark (as the events before it left it). A function of
   * the event and the watermark only — not of where its time falls in the window grid (judged by its windows'
   * ends, an event 2 min behind was late or not with its event time's minute, which looked random), and not
   * of processing time. Every window of an event on time is still open: its end > t ≥ wm − lateness.
   */
  private isTooLate(event: StreamEvent<P>): boolean {
    return this.wm - event.eventTime > this.options.allowedLatenessMs;
  }

  private apply(event: StreamEvent<P>, effects: EngineOutput<P, R>[]): void {
    const { allowedLatenessMs } = this.options;
    this.options.onKeyChange?.(event.key);
    let ks = this.keys.get(event.key);
    if (ks === undefined) {
      ks = {
        key: event.key,
        lastEventTime: event.eventTime,
        expireTimerAt: null,
        windows: new Map(),
        latest: new Map(),
        bytes: KEY_OVERHEAD_BYTES + 2 * event.key.length,
      };
      this.keys.set(event.key, ks);
      this.bytes += ks.bytes;
    }
    effects.push({ kind: 'accepted', event, behindWatermark: event.eventTime < this.wm });
    this.counters.accepted++;
    const bytes = estimateEventBytes(event);

    for (const spec of this.options.windows) {
      if (spec.accepts !== undefined && !spec.accepts(event)) continue;
      const open = windowStartsFor(event.eventTime, spec.sizeMs, spec.stepMs).filter(
        (start) => this.wm < start + spec.sizeMs + allowedLatenessMs,
      );
      if (open.length === 0) continue;
      let ws = ks.windows.get(spec.name);
      if (ws === undefined) {
        ws = { entries: [], emitted: new Map() };
        ks.windows.set(spec.name, ws);
      }
      insertSorted(ws.entries, { event, bytes });
      this.addBytes(ks, bytes);
      this.buffered++;
      for (const start of open) {
        const end = start + spec.sizeMs;
        const emitted = ws.emitted.get(start);
        if (emitted === undefined) {
          ws.emitted.set(start, 0);
          this.openWindows++;
          this.addBytes(ks, WINDOW_TRACKER_BYTES);
          // A window first opened by a late event has already been passed: it fires at once.
          if (end <= this.wm) this.emit(ks, spec, ws, start, effects);
          else this.timers.push({ at: end, kind: TimerKind.Fire, key: ks.key, window: spec.name, start });
        } else if (emitted > 0) {
          this.emit(ks, spec, ws, start, effects);
        }
      }
    }

    for (const spec of this.options.latest) {
      if (spec.accepts !== undefined && !spec.accepts(event)) continue;
      const current = ks.latest.get(spec.name);
      if (current !== undefined && compareEvents(current.event, event) >= 0) continue;
      if (current !== undefined) this.addBytes(ks, -current.bytes);
      ks.latest.set(spec.name, { event, bytes });
      this.addBytes(ks, bytes);
    }

    if (event.eventTime > ks.lastEventTime) ks.lastEventTime = event.eventTime;
    if (ks.expireTimerAt === null) this.scheduleExpiry(ks);
  }

  /** Emits the window's result: revision 0 the first time, then 1, 2, … */
  private emit(
    ks: KeyState<P>,
    spec: ResolvedWindowSpec<P, R>,
    ws: WindowState<P>,
    start: number,
    effects: EngineOutput<P, R>[],
  ): void {
    const end = start + spec.sizeMs;
    const revision = ws.emitted.get(start) ?? 0;
    const events = eventsIn(ws.entries, start, end);
    const window = { key: ks.key, window: spec.name, start, end };
    const result = spec.result(events, window);
    ws.emitted.set(start, revision + 1);
    if (revision === 0) {
      this.counters.results++;
      this.timers.push({
        at: end + this.options.allowedLatenessMs,
        kind: TimerKind.Close,
        key: ks.key,
        window: spec.name,
        start,
      });
    } else {
      this.counters.revisions++;
    }
    effects.push({
      kind: 'result',
      ...window,
      revision,
      result,
      eventCount: events.length,
      watermark: this.wm,
    });
  }

  private advance(effects: EngineOutput<P, R>[]): void {
    if (this.partitions.size === 0) return;
    const w = this.partitions.current();
    if (w > this.wm) this.wm = w;
    this.runTimers(effects);
  }

  private runTimers(effects: EngineOutput<P, R>[]): void {
    for (let top = this.timers.peek(); top !== undefined && top.at <= this.wm; top = this.timers.peek()) {
      this.timers.pop();
      if (top.kind === TimerKind.Forget) {
        this.dedupe.forget(top.at);
        continue;
      }
      const ks = this.keys.get(top.key);
      if (ks === undefined) continue;
      this.options.onKeyChange?.(top.key);
      if (top.kind === TimerKind.Expire) {
        this.expire(ks, top.at, effects);
        continue;
      }
      const spec = this.specs.get(top.window)!;
      const ws = ks.windows.get(top.window);
      const emitted = ws?.emitted.get(top.start);
      if (ws === undefined || emitted === undefined) continue;
      if (top.kind === TimerKind.Close) this.close(ks, spec, ws, top.start);
      else if (emitted === 0) this.emit(ks, spec, ws, top.start, effects);
    }
  }

  /** Past allowed lateness: the window is final; drop it and every event no open window still needs. */
  private close(ks: KeyState<P>, spec: ResolvedWindowSpec<P, R>, ws: WindowState<P>, start: number): void {
    ws.emitted.delete(start);
    this.openWindows--;
    this.addBytes(ks, -WINDOW_TRACKER_BYTES);
    // Windows of one key and spec close in end order, so every window ending by this one has closed; the
    // watermark itself may be far ahead (a jump, flush) with later windows still to fire from these events.
    const closedEnd = start + spec.sizeMs;
    let drop = 0;
    while (drop < ws.entries.length) {
      const entry = ws.entries[drop]!;
      if (lastEndOf(entry.event.eventTime, spec.sizeMs, spec.stepMs) > closedEnd) break;
      this.addBytes(ks, -entry.bytes);
      drop++;
    }
    if (drop > 0) {
      ws.entries.splice(0, drop);
      this.buffered -= drop;
    }
    if (ws.entries.length === 0 && ws.emitted.size === 0) ks.windows.delete(spec.name);
  }

  private scheduleExpiry(ks: KeyState<P>): void {
    const at = ks.lastEventTime + this.options.stateTtlMs;
    ks.expireTimerAt = at;
    this.timers.push({ at, kind: TimerKind.Expire, key: ks.key, window: '', start: 0 });
  }

  private expire(ks: KeyState<P>, at: number, effects: EngineOutput<P, R>[]): void {
    ks.expireTimerAt = null;
    // Newer events moved the deadline: re-queue rather than keep one timer per event. Compared with the
    // timer's own time, not the watermark: after a jump the key's later windows must still fire first.
    if (ks.lastEventTime + this.options.stateTtlMs > at) {
      this.scheduleExpiry(ks);
      return;
    }
    for (const ws of ks.windows.values()) {
      this.openWindows -= ws.emitted.size;
      this.buffered -= ws.entries.length;
    }
    this.keys.delete(ks.key);
    this.bytes -= ks.bytes;
    this.counters.expiredKeys++;
    effects.push({ kind: 'expired', key: ks.key, lastEventTime: ks.lastEventTime });
  }

  private remember(eventId: string, forgetAt: number): void {
    if (this.dedupe.remember(eventId, forgetAt))
      this.timers.push({ at: forgetAt, kind: TimerKind.Forget, key: '', window: '', start: 0 });
  }

  private addBytes(ks: KeyState<P>, delta: number): void {
    ks.bytes += delta;
    this.bytes += delta;
  }

  private restore(snapshot: RestoredSnapshot<P>): void {
    this.wm = snapshot.watermark ?? NO_WATERMARK;
    this.partitions.restore(snapshot.partitions);
    Object.assign(this.counters, snapshot.counters);
    for (const [forgetAt, ids] of snapshot.dedupe)
      for (const eventId of ids) this.remember(eventId, forgetAt);
    snapshot.keys.forEach((k, i) => {
      const ks: KeyState<P> = {
        key: k.key,
        lastEventTime: k.lastEventTime,
        expireTimerAt: null,
        windows: new Map(),
        latest: new Map(),
        bytes: KEY_OVERHEAD_BYTES + 2 * k.key.length,
      };
      this.keys.set(k.key, ks);
      this.bytes += ks.bytes;
      // One estimate per event object, as ingest made one per event.
      const sizes = new Map<StreamEvent<P>, number>();
      const sizeOf = (event: StreamEvent<P>): number => {
        let bytes = sizes.get(event);
        if (bytes === undefined) {
          bytes = estimateEventBytes(event);
          sizes.set(event, bytes);
        }
        return bytes;
      };
      k.windows.forEach((w, j) => {
        const spec = this.specs.get(w.name);
        if (spec === undefined) {
          throw new EngineSnapshotError(
            `$.keys[${i}].windows[${j}].name`,
            `snapshot has window ${w.name}, which the options do not define`,
          );
        }
        const ws: WindowState<P> = { entries: [], emitted: new Map() };
        for (const event of w.events) {
          const bytes = sizeOf(event);
          ws.entries.push({ event, bytes });
          this.addBytes(ks, bytes);
        }
        this.buffered += ws.entries.length;
        for (const [start, emitted] of w.emitted) {
          ws.emitted.set(start, emitted);
          this.openWindows++;
          this.addBytes(ks, WINDOW_TRACKER_BYTES);
          const end = start + spec.sizeMs;
          this.timers.push(
            emitted === 0
              ? { at: end, kind: TimerKind.Fire, key: k.key, window: w.name, start }
              : {
                  at: end + this.options.allowedLatenessMs,
                  kind: TimerKind.Close,
                  key: k.key,
                  window: w.name,
                  start,
                },
          );
        }
        ks.windows.set(w.name, ws);
      });
      for (const l of k.latest) {
        const bytes = sizeOf(l.event);
        ks.latest.set(l.name, { event: l.event, bytes });
        this.addBytes(ks, bytes);
      }
      this.scheduleExpiry(ks);
    });
  }
}

/**
 * Creates the engine, optionally from a `snapshot()` of one built with the same window and latest specs.
 * Options are validated up front (EngineOptionError); a malformed snapshot throws EngineSnapshotError.
 */
export function createEventTimeEngine<P = unknown, R = unknown>(
  options: EventTimeEngineOptions<P, R>,
  snapshot?: EngineSnapshot<P> | unknown,
): EventTimeEngine<P, R> {
  return new Engine(options, snapshot);
}
