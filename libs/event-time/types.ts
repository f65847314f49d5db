/** One event as the engine sees it; `payload` is the caller's and must be JSON-able (it goes into snapshots). */
export interface StreamEvent<P = unknown> {
  /** Entity the state is keyed by (e.g. delivery_id). */
  readonly key: string;
  /** Event time, ms since the epoch (integer). */
  readonly eventTime: number;
  /** Source partition the watermark is tracked per (e.g. a subject shard or producer). */
  readonly partition: string;
  /** Unique id; duplicates are detected by it. */
  readonly eventId: string;
  readonly payload: P;
}

/** One window instance of one key: [start, end) in event time. */
export interface WindowRef {
  readonly key: string;
  readonly window: string;
  readonly start: number;
  readonly end: number;
}

/**
 * A per-key window definition. Tumbling when stepMs equals sizeMs (the default), sliding when smaller.
 * The engine keeps the window's events ordered by (eventTime, eventId) and calls `result` with them, so
 * order-dependent features (speed from consecutive positions) are computed in event-time order.
 */
export interface WindowSpec<P = unknown, R = unknown> {
  readonly name: string;
  readonly sizeMs: number;
  readonly stepMs?: number;
  /** Which events this window takes; all when absent. */
  readonly accepts?: (event: StreamEvent<P>) => boolean;
  /** Must be a pure function of its arguments and return a JSON-able value. */
  readonly result: (events: readonly StreamEvent<P>[], window: WindowRef) => R;
}

/** Per-key last-valid state: the accepted event with the greatest (eventTime, eventId) among those it takes. */
export interface LatestSpec<P = unknown> {
  readonly name: string;
  readonly accepts?: (event: StreamEvent<P>) => boolean;
}

export interface EventTimeEngineOptions<P = unknown, R = unknown> {
  /** Bound on disorder: a partition's watermark is its max event time minus this. */
  readonly outOfOrdernessMs: number;
  /**
   * How far behind the watermark an event may be and still count: further behind (wm − eventTime > this) it is
   * late (side output, changes nothing). Within it, it revises the windows it belongs to.
   */
  readonly allowedLatenessMs: number;
  /**
   * A partition silent while the others' events moved this far on (event time) no longer holds the watermark
   * back. Event time, not processing time: the same input in the same order meets the same watermark.
   */
  readonly idleTimeoutMs: number;
  /** A key is removed once the watermark passes its last event time plus this (event time). */
  readonly stateTtlMs: number;
  /** A processed event id is remembered until the watermark passes max(eventTime, watermark then) + this. */
  readonly dedupeTtlMs: number;
  readonly windows: readonly WindowSpec<P, R>[];
  readonly latest?: readonly LatestSpec<P>[];
  /**
   * Called before a key's state changes or the key is removed (an event applied, a window fired or closed,
   * the key expired): lets a caller capture the key's state as it was first (incremental snapshots).
   */
  readonly onKeyChange?: (key: string) => void;
}

/** Options after validation: steps filled in, everything frozen. */
export interface ResolvedWindowSpec<P, R> extends WindowSpec<P, R> {
  readonly stepMs: number;
}

export interface ResolvedEngineOptions<P, R> extends EventTimeEngineOptions<P, R> {
  readonly windows: readonly ResolvedWindowSpec<P, R>[];
  readonly latest: readonly LatestSpec<P>[];
}

/** Engine outputs: what the caller must publish or act on. The engine itself never does I/O. */
export type EngineOutput<P = unknown, R = unknown> =
  | AcceptedOutput<P>
  | DuplicateOutput<P>
  | LateOutput<P>
  | ResultOutput<R>
  | ExpiredOutput;

/** The event changed state. `behindWatermark`: it was late but within allowed lateness. */
export interface AcceptedOutput<P> {
  readonly kind: 'accepted';
  readonly event: StreamEvent<P>;
  readonly behindWatermark: boolean;
}

/** The event id was already processed; nothing changed. */
export interface DuplicateOutput<P> {
  readonly kind: 'duplicate';
  readonly event: StreamEvent<P>;
}

/** Beyond allowed lateness for every window it belongs to: side output, nothing changed. */
export interface LateOutput<P> {
  readonly kind: 'late';
  readonly event: StreamEvent<P>;
  readonly watermark: number;
}

/** A window result: revision 0 when it first fires, 1, 2, … for each correction by a late event. */
export interface ResultOutput<R> extends WindowRef {
  readonly kind: 'result';
  readonly revision: number;
  readonly result: R;
  readonly eventCount: number;
  readonly watermark: number;
}

/** A key's state was removed by the state TTL. */
export interface ExpiredOutput {
  readonly kind: 'expired';
  readonly key: string;
  readonly lastEventTime: number;
}

export interface EngineCounters {
  accepted: number;
  duplicates: number;
  late: number;
  results: number;
  revisions: number;
  expiredKeys: number;
}

export interface EngineStats {
  readonly watermark: number | null;
  readonly keys: number;
  readonly openWindows: number;
  readonly bufferedEvents: number;
  readonly dedupeIds: number;
  readonly partitions: number;
  readonly activePartitions: number;
  /** Rough estimate of state memory (UTF-16 strings, JSON size of payloads, fixed per-entry overhead). */
  readonly approxBytes: number;
  readonly counters: Readonly<EngineCounters>;
}
