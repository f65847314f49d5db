// One file by design: the decider is one spec (disposition, prediction, revision, snapshot) read as a whole.
/**
 * The delivery pipeline's decisions, pure (no I/O, no clock: event time, and each event's admission time for
 * its bounds): raw event in → its disposition (invalid, duplicate, late, accepted) and the predictions to make, each a feature row with the decision's
 * identity. The process (apps/pipeline) runs the model on the rows and publishes.
 *
 * State, keyed by delivery_id:
 *   - the event-time engine (libs/event-time): dedupe by event_id, watermark per source partition, allowed
 *     lateness, the late side output, key TTL, and the delivery's windows (GPS speed, sliding 5 min / 1 min;
 *     activity, tumbling 5 min) and last-valid state (position, status); it keeps only an EnginePoint per
 *     event (a GPS point's [lat, lon]), not the parsed event;
 *   - per delivery: its accepted events in (event time, event_id) order — the features need the whole
 *     history (stops so far, the destination from the first status) — the decisions it may still revise,
 *     and whether it is alerting.
 *
 * A prediction is made for every accepted event at its own event time, from the events up to that time, at
 * once: freshness is not held back by the watermark. Out-of-order arrival is corrected by revisions: when an
 * accepted event lands before events already predicted (arrived earlier, later in event time), each of those
 * whose feature row changes is predicted again as revision n + 1. So every event's last revision equals its
 * in-order prediction. Decisions stay revisable while an event before them could still be accepted (the
 * watermark has not passed their time + the longest window + allowed lateness).
 */
import {
  arr,
  bad,
  createEventTimeEngine,
  type EngineOutput,
  type EngineSnapshot,
  EngineSnapshotError,
  type EngineSnapshotHead,
  type EngineStats,
  type EventTimeEngine,
  type EventTimeEngineOptions,
  int,
  isRecord,
  type StreamEvent,
  str,
} from '../event-time';
import { ALERT_THRESHOLD } from './contract';
import {
  addToIndex,
  byTime,
  computeFeaturesSorted,
  emptyFold,
  type FoldedHistory,
  featureVector,
  foldHistory,
  indexHistory,
  type MutableHistoryIndex,
  N_FEATURES,
  type NotReady,
  type SettledStops,
  SPEED_STEP_MS,
  SPEED_WINDOW_MS,
  settleStops,
  speedKmh,
  TRAFFIC_WINDOW_MS,
} from './features';
import { segmentUm } from './geo';
import { type HistoryColumns, packHistory, unpackHistory } from './history-codec';
import { type DeliveryEvent, type GpsEvent, MAX_EVENT_BYTES, parseEvent, type StatusEvent } from './schema';
import { type KeyText, SnapshotJob } from './snapshot-job';

/** Engine windows of a delivery (results are counted; the features read the history). */
export const DELIVERY_WINDOWS = { speed: 'speed5m', activity: 'activity5m' } as const;
/** Risk below which an alerting delivery re-arms (hysteresis: a risk hovering at the threshold alerts once). */
export const ALERT_REARM_BELOW = 0.6;

export interface DeliveryDeciderOptions {
  outOfOrdernessMs: number;
  allowedLatenessMs: number;
  idleTimeoutMs: number;
  /** Event time a delivery's state is kept after its last event (≥ 10 min + allowed lateness). */
  stateTtlMs: number;
  /** Event time a processed event_id is remembered (≥ 10 min + allowed lateness). */
  dedupeTtlMs: number;
  alertThreshold?: number;
  /** Largest payload accepted (bytes); default MAX_EVENT_BYTES. */
  maxEventBytes?: number;
  /**
   * Admission bounds, checked against the time an event was admitted (ingest's `admittedAtMs`; the broker's
   * store time in the pipeline): an event stamped more than maxClockSkewMs after it, or more than
   * maxEventAgeMs before it, is invalid (its clock is wrong) instead of moving the watermark. Unset: no bound.
   */
  maxClockSkewMs?: number;
  maxEventAgeMs?: number;
}

/** One prediction to make: who, which event, which revision, and the model's input row. */
export interface Decision {
  delivery_id: string;
  event_id: string;
  event_time: string;
  eventTimeMs: number;
  revision: number;
  row: Float32Array;
}

export interface WindowFiring {
  window: string;
  revision: number;
}

export type Disposition = 'invalid' | 'duplicate' | 'late' | 'accepted';

export interface DecideResult {
  disposition: Disposition;
  /** The parsed event (absent when invalid). */
  event?: DeliveryEvent;
  /** Why it is invalid (`<field>: <problem>`). */
  reason?: string;
  /** Accepted behind the watermark (inside allowed lateness). */
  behindWatermark: boolean;
  /** Predictions to make: the event's own (revision 0) first, then revisions of later events. */
  decisions: Decision[];
  /** Set when the event's own prediction waits for more of the delivery (first status, a GPS point). */
  notReady?: NotReady;
  /** Engine window results this event caused: window name and revision (0 = first firing). */
  windowResults: WindowFiring[];
  watermark: number | null;
}

interface Revisable {
  event_id: string;
  event_time: string;
  t: number;
  revision: number;
  row: Float32Array;
}

interface DeliveryState {
  /** Accepted events after the fold line, sorted by (event time, event_id). */
  events: DeliveryEvent[];
  /** What the events before the fold line still contribute (statuses, stops, last position). */
  folded: FoldedHistory;
  /** Decisions still revisable, by event_id. */
  decided: Map<string, Revisable>;
  /** Accepted events whose features were not ready at their time (no first status or GPS yet): event_id → t. */
  undecided: Map<string, number>;
  alerting: boolean;
  /** The stop scan settled a little behind the latest decision (derived, not snapshotted; see SettledStops). */
  settled: SettledStops | undefined;
  /** The history by type and its running path (derived, rebuilt after a fold; see HistoryIndex). */
  index: MutableHistoryIndex | undefined;
}

/** 2: histories in columns, decisions as indices into them with their rows in base64, a compact engine. */
export const DECIDER_SNAPSHOT_VERSION = 2;

/**
 * What the engine keeps of an event: a GPS point's [lat, lon] (the speed window reads it), 's' for a status,
 * 't' for a traffic alert. The features read the delivery's history; the engine's copy stays small.
 */
export type EnginePoint = readonly [lat: number, lon: number] | 's' | 't';

/** A decision's identity when its event is not in the history (kept for exactness; not expected). */
type DecisionRef = number | [event_id: string, event_time: string, t: number];

interface DeliverySnapshot {
  key: string;
  /** The history after the fold line. */
  events: HistoryColumns;
  /** The folded statuses, then the folded last GPS point if there is one. */
  folded: HistoryColumns;
  foldedStops: number;
  /** Revisable decisions in their map order: index in `events`, or the decision's identity. */
  decided: DecisionRef[];
  revisions: number[];
  /** The decisions' rows, N_FEATURES float32 each, little-endian, base64. */
  rows: string;
  /** Events not decided yet, in their map order: index in `events`, or [event_id, t]. */
  undecided: (number | [string, number])[];
  alerting: boolean;
}

/** A DeliveryDecider's whole state, JSON-able (checkpoints). */
export interface DeciderSnapshot {
  version: typeof DECIDER_SNAPSHOT_VERSION;
  engine: EngineSnapshot<EnginePoint>;
  deliveries: DeliverySnapshot[];
  prunedBefore: number | null;
}

export interface DeciderStats {
  engine: EngineStats;
  deliveries: number;
  historyEvents: number;
  revisable: number;
  /** Rough state bytes: the engine's estimate plus the histories. */
  approxBytes: number;
}

type Engine = EventTimeEngine<EnginePoint, number>;
type Output = EngineOutput<EnginePoint, number>;

/**
 * How far behind a decision its delivery's stop scan is settled, and how often (event time) it advances. Each
 * decision scans from there: 30 s of points, not 2 min (the stop scan was the larger half of the features'
 * cost). An event landing before it (more than 30 s out of order, beyond the 10 s out-of-orderness) drops the
 * settled scan and the next decision scans from the history's start; a run still open (a driver stopped)
 * holds the settled scan back whatever this is.
 */
const SETTLE_MS = 30_000;
const SETTLE_STEP_MS = 10_000;

/** Pruning runs on this grid of watermark (pruneAt). */
const PRUNE_STEP_MS = SPEED_STEP_MS / 6;
/** More grid steps than this at once (an hour of watermark) are taken as one. */
const MAX_PRUNE_STEPS = 360;

/** Rough bytes per history event (object, strings, numbers), for the state-size gauge. */
const HISTORY_EVENT_BYTES = 320;

export class DeliveryDecider {
  private readonly engine: Engine;
  private readonly deliveries = new Map<string, DeliveryState>();
  /** How far behind the watermark a decision stays revisable (the longest feature window + lateness). */
  private readonly horizonMs: number;
  private readonly allowedLatenessMs: number;
  /** Decisions before this event time were pruned. */
  private prunedBefore = Number.NEGATIVE_INFINITY;
  private readonly threshold: number;
  private readonly maxEventBytes: number;
  private readonly maxClockSkewMs: number;
  private readonly maxEventAgeMs: number;
  private historyEvents = 0;
  private revisable = 0;
  private undecidedCount = 0;
  /** The incremental snapshot being taken (beginSnapshot), capturing each key before it changes. */
  private job: SnapshotJob | undefined;
  /** Each key's JSON as last captured, while the key has not changed since: a later job takes it as is. */
  private readonly captured = new Map<string, KeyText>();

  /** `snapshot`: what snapshot() returned (same options): the decider continues exactly where it was. */
  constructor(options: DeliveryDeciderOptions, snapshot?: DeciderSnapshot | unknown) {
    this.threshold = options.alertThreshold ?? ALERT_THRESHOLD;
    if (!(this.threshold > 0 && this.threshold < 1)) {
      throw new RangeError(`alertThreshold must be in (0, 1), got ${options.alertThreshold}`);
    }
    this.horizonMs = TRAFFIC_WINDOW_MS + options.allowedLatenessMs;
    this.allowedLatenessMs = options.allowedLatenessMs;
    this.maxEventBytes = options.maxEventBytes ?? MAX_EVENT_BYTES;
    if (!(Number.isSafeInteger(this.maxEventBytes) && this.maxEventBytes > 0))
      throw new RangeError(`maxEventBytes must be a positive integer, got ${options.maxEventBytes}`);
    if (snapshot !== undefined) {
      if (!isRecord(snapshot)) bad('$', 'an object');
      if (snapshot.version !== DECIDER_SNAPSHOT_VERSION) bad('$.version', String(DECIDER_SNAPSHOT_VERSION));
      // Without it the engine would start empty.
      if (!isRecord(snapshot.engine)) bad('$.engine', 'an object');
    }
    this.maxClockSkewMs = options.maxClockSkewMs ?? Number.POSITIVE_INFINITY;
    this.maxEventAgeMs = options.maxEventAgeMs ?? Number.POSITIVE_INFINITY;
    const engineOptions: EventTimeEngineOptions<EnginePoint, number> = {
      outOfOrdernessMs: options.outOfOrdernessMs,
      allowedLatenessMs: options.allowedLatenessMs,
      idleTimeoutMs: options.idleTimeoutMs,
      stateTtlMs: options.stateTtlMs,
      dedupeTtlMs: options.dedupeTtlMs,
      onKeyChange: (key) => this.keyChanging(key),
      windows: [
        {
          name: DELIVERY_WINDOWS.speed,
          sizeMs: SPEED_WINDOW_MS,
          stepMs: SPEED_STEP_MS,
          accepts: (e: StreamEvent<EnginePoint>) => typeof e.payload !== 'string',
          result: pointsSpeedKmh,
        },
        {
          name: DELIVERY_WINDOWS.activity,
          sizeMs: SPEED_WINDOW_MS,
          result: (events: readonly StreamEvent<EnginePoint>[]) => events.length,
        },
      ],
      latest: [
        { name: 'position', accepts: (e: StreamEvent<EnginePoint>) => typeof e.payload !== 'string' },
        { name: 'status', accepts: (e: StreamEvent<EnginePoint>) => e.payload === 's' },
      ],
    };
    try {
      this.engine = createEventTimeEngine<EnginePoint, number>(
        engineOptions,
        snapshot === undefined ? undefined : (snapshot as Record<string, unknown>).engine,
      );
    } catch (err) {
      // The engine names paths from its own root.
      if (err instanceof EngineSnapshotError) {
        const path = `$.engine${err.path.slice(1)}`;
        throw new EngineSnapshotError(path, err.message.replace(err.path, path));
      }
      throw err;
    }
    if (snapshot !== undefined) this.restore(snapshot as Record<string, unknown>);
  }

  /**
   * All state as plain JSON-able data: the engine's snapshot (windows, watermarks, dedupe ids, timers follow
   * from them) and each delivery's history, fold, revisable decisions and alert state. A checkpoint.
   */
  snapshot(): DeciderSnapshot {
    const engine = this.engine.snapshot();
    const deliveries: DeliverySnapshot[] = [];
    // In key order, like the engine's: equal state, equal snapshot (and the same as an incremental one).
    for (const key of [...this.deliveries.keys()].sort()) deliveries.push(this.packDelivery(key));
    return {
      version: DECIDER_SNAPSHOT_VERSION,
      engine,
      deliveries,
      prunedBefore: Number.isFinite(this.prunedBefore) ? this.prunedBefore : null,
    };
  }

  /**
   * snapshot(), taken incrementally: the job holds everything but the keys now, each key is captured just
   * before it next changes or when the job's step() reaches it, and finish() returns the JSON text of
   * snapshot() as of this call. The caller goes on ingesting between steps; the pause is the head's cost,
   * not the state's. One job at a time; pruning waits while one is open.
   */
  beginSnapshot(): SnapshotJob {
    if (this.job) throw new Error('a snapshot is already being taken');
    const head = this.engine.snapshotHead();
    const keys = new Set(head.keys);
    for (const key of this.deliveries.keys()) keys.add(key);
    const job = new SnapshotJob(
      DECIDER_SNAPSHOT_VERSION,
      head,
      Number.isFinite(this.prunedBefore) ? this.prunedBefore : null,
      [...keys].sort(),
      (key) => this.captureKey(key, head),
      () => {
        if (this.job !== job) return;
        this.job = undefined;
        this.prune();
      },
    );
    this.job = job;
    return job;
  }

  /** A key's JSON parts now: from the last capture if it has not changed since. */
  private captureKey(key: string, head: EngineSnapshotHead): KeyText {
    let text = this.captured.get(key);
    if (text === undefined) {
      const engine = this.engine.snapshotKey(key, head);
      text = {
        engine: engine === undefined ? undefined : JSON.stringify(engine),
        delivery: this.deliveries.has(key) ? JSON.stringify(this.packDelivery(key)) : undefined,
      };
      this.captured.set(key, text);
    }
    return text;
  }

  /** Before any change to a key: an open job captures it as it was; a cached capture is no longer it. */
  private keyChanging(key: string): void {
    this.job?.capture(key);
    this.captured.delete(key);
  }

  private packDelivery(key: string): DeliverySnapshot {
    const state = this.deliveries.get(key)!;
    // A decision's event is in the history (checked below), found by its (time, id): the history's order.
    // Decisions are mostly in history order: the event after the last one found is tried first.
    let hint = 0;
    const indexOf = (t: number, id: string): number => {
      const e = state.events[hint];
      const i =
        e !== undefined && e.eventTimeMs === t && e.event_id === id
          ? hint
          : historyIndex(state.events, t, id);
      if (i >= 0) hint = i + 1;
      return i;
    };
    const decided: DecisionRef[] = [];
    const revisions: number[] = [];
    const rows = new Float32Array(state.decided.size * N_FEATURES);
    let n = 0;
    for (const d of state.decided.values()) {
      const i = indexOf(d.t, d.event_id);
      decided.push(
        i >= 0 && state.events[i]!.event_time === d.event_time ? i : [d.event_id, d.event_time, d.t],
      );
      revisions.push(d.revision);
      rows.set(d.row, n * N_FEATURES);
      n++;
    }
    const undecided: (number | [string, number])[] = [];
    for (const [id, t] of state.undecided) {
      const i = indexOf(t, id);
      undecided.push(i >= 0 ? i : [id, t]);
    }
    const { statuses, stops, lastGps } = state.folded;
    return {
      key,
      events: packHistory(key, state.events),
      folded: packHistory(key, lastGps === undefined ? statuses : [...statuses, lastGps]),
      foldedStops: stops,
      decided,
      revisions,
      rows: encodeRows(rows),
      undecided,
      alerting: state.alerting,
    };
  }

  /** The engine restored itself (and checked the version); the deliveries are checked here, path by path. */
  private restore(snapshot: Record<string, unknown>): void {
    arr('$.deliveries', snapshot.deliveries).forEach((raw, i) => {
      const path = `$.deliveries[${i}]`;
      if (!isRecord(raw)) bad(path, 'an object');
      const key = str(`${path}.key`, raw.key);
      const events = unpackHistory(`${path}.events`, raw.events, key);
      const foldedEvents = unpackHistory(`${path}.folded`, raw.folded, key);
      const statuses: StatusEvent[] = [];
      let lastGps: GpsEvent | undefined;
      foldedEvents.forEach((e, j) => {
        if (e.type === 'status' && lastGps === undefined) statuses.push(e);
        else if (e.type === 'gps' && j === foldedEvents.length - 1) lastGps = e;
        else bad(`${path}.folded.type`, 'statuses, then at most one GPS point');
      });
      const eventAt = (p: string, index: number): DeliveryEvent => {
        const e = events[index];
        if (e === undefined) bad(p, `an index in the delivery's ${events.length} events`);
        return e;
      };
      const refs = arr(`${path}.decided`, raw.decided);
      const revisions = arr(`${path}.revisions`, raw.revisions);
      if (revisions.length !== refs.length) bad(`${path}.revisions`, `${refs.length} revisions`);
      const rows = decodeRows(`${path}.rows`, raw.rows, refs.length);
      const decided = new Map<string, Revisable>();
      refs.forEach((ref, j) => {
        let id: { event_id: string; event_time: string; t: number };
        if (typeof ref === 'number' && events[ref] !== undefined) {
          const e = events[ref]!;
          id = { event_id: e.event_id, event_time: e.event_time, t: e.eventTimeMs };
        } else {
          const rp = `${path}.decided[${j}]`;
          if (typeof ref === 'number') eventAt(rp, int(rp, ref));
          const [eventId, eventTime, t] = arr(rp, ref);
          id = {
            event_id: str(`${rp}[0]`, eventId),
            event_time: str(`${rp}[1]`, eventTime),
            t: int(`${rp}[2]`, t),
          };
        }
        const revision = revisions[j];
        decided.set(id.event_id, {
          ...id,
          revision:
            typeof revision === 'number' && Number.isSafeInteger(revision)
              ? revision
              : int(`${path}.revisions[${j}]`, revision),
          row: rows[j]!,
        });
      });
      const undecided = new Map<string, number>();
      arr(`${path}.undecided`, raw.undecided).forEach((ref, j) => {
        const up = `${path}.undecided[${j}]`;
        if (typeof ref === 'number') {
          const e = eventAt(up, int(up, ref));
          undecided.set(e.event_id, e.eventTimeMs);
        } else {
          const [eventId, t] = arr(up, ref);
          undecided.set(str(`${up}[0]`, eventId), int(`${up}[1]`, t));
        }
      });
      if (typeof raw.alerting !== 'boolean') bad(`${path}.alerting`, 'a boolean');
      this.deliveries.set(key, {
        events,
        folded: { statuses, stops: int(`${path}.foldedStops`, raw.foldedStops), lastGps },
        decided,
        undecided,
        alerting: raw.alerting,
        settled: undefined,
        index: undefined,
      });
      this.historyEvents += events.length;
      this.revisable += decided.size;
      this.undecidedCount += undecided.size;
    });
    this.prunedBefore =
      snapshot.prunedBefore === null
        ? Number.NEGATIVE_INFINITY
        : int('$.prunedBefore', snapshot.prunedBefore);
  }

  /**
   * One raw message (its bytes as received) from a source partition. `subjectKey`: the delivery its subject
   * names; a payload naming another one is invalid (its state would be split from that delivery's).
   * `admittedAtMs`: when it was admitted (the admission bounds are checked against it). The one input that is
   * not event time: a fixed fact about the message, so a replay decides the same.
   */
  ingest(
    payload: Uint8Array | string,
    partition: string,
    subjectKey?: string,
    admittedAtMs?: number,
  ): DecideResult {
    const parsed = parseEvent(payload, this.maxEventBytes);
    const reason = !parsed.ok
      ? parsed.reason
      : subjectKey !== undefined && parsed.event.delivery_id !== subjectKey
        ? `delivery_id: ${JSON.stringify(parsed.event.delivery_id)} is not the delivery its subject names (${JSON.stringify(subjectKey)})`
        : this.implausible(parsed.event, admittedAtMs);
    if (!parsed.ok || reason !== undefined) {
      return {
        disposition: 'invalid',
        reason,
        behindWatermark: false,
        decisions: [],
        windowResults: [],
        watermark: this.engine.watermark(),
      };
    }
    const { event } = parsed;
    const streamEvent: StreamEvent<EnginePoint> = {
      key: event.delivery_id,
      eventTime: event.eventTimeMs,
      partition,
      eventId: event.event_id,
      payload:
        event.type === 'gps' ? [event.driver_lat, event.driver_lon] : event.type === 'status' ? 's' : 't',
    };
    const effects = this.engine.ingest(streamEvent);
    const result: DecideResult = {
      disposition: 'accepted',
      event,
      behindWatermark: false,
      decisions: [],
      windowResults: [],
      watermark: null,
    };
    const own = effects[0]!;
    if (own.kind === 'duplicate') result.disposition = 'duplicate';
    else if (own.kind === 'late') result.disposition = 'late';
    else if (own.kind === 'accepted') {
      result.behindWatermark = own.behindWatermark;
      this.accept(event, result);
    }
    this.afterEffects(effects, result);
    result.watermark = this.engine.watermark();
    return result;
  }

  /** Why an event's time cannot be right, judged against its admission time; undefined when plausible. */
  private implausible(event: DeliveryEvent, admittedAtMs: number | undefined): string | undefined {
    if (admittedAtMs === undefined) return undefined;
    const ahead = event.eventTimeMs - admittedAtMs;
    // The admission time is printed only for a refusal: an ISO string per event was a hot-path cost.
    if (ahead > this.maxClockSkewMs)
      return `event_time: ${event.event_time} is more than ${this.maxClockSkewMs} ms after its admission at ${new Date(admittedAtMs).toISOString()} (clock skew)`;
    if (-ahead > this.maxEventAgeMs)
      return `event_time: ${event.event_time} is more than ${this.maxEventAgeMs} ms before its admission at ${new Date(admittedAtMs).toISOString()}`;
    return undefined;
  }

  /**
   * Whether a prediction of this delivery raises an alert: its risk is above the threshold and the delivery
   * is not already alerting (it re-arms once a prediction falls below ALERT_REARM_BELOW). Call in the
   * order the predictions are published, per delivery.
   */
  alertFor(deliveryId: string, risk: number): boolean {
    const state = this.deliveries.get(deliveryId);
    if (!state) return risk > this.threshold;
    if (risk > this.threshold) {
      if (state.alerting) return false;
      this.keyChanging(deliveryId);
      state.alerting = true;
      return true;
    }
    if (risk < ALERT_REARM_BELOW && state.alerting) {
      this.keyChanging(deliveryId);
      state.alerting = false;
    }
    return false;
  }

  get alertThreshold(): number {
    return this.threshold;
  }

  watermark(): number | null {
    return this.engine.watermark();
  }

  stats(): DeciderStats {
    const engine = this.engine.stats();
    return {
      engine,
      deliveries: this.deliveries.size,
      historyEvents: this.historyEvents,
      revisable: this.revisable,
      approxBytes: engine.approxBytes + this.historyEvents * HISTORY_EVENT_BYTES + this.revisable * 160,
    };
  }

  private accept(event: DeliveryEvent, result: DecideResult): void {
    let state = this.deliveries.get(event.delivery_id);
    if (!state) {
      state = {
        events: [],
        folded: emptyFold(),
        decided: new Map(),
        undecided: new Map(),
        alerting: false,
        settled: undefined,
        index: undefined,
      };
      this.deliveries.set(event.delivery_id, state);
    }
    const at = insertionIndex(state.events, event);
    state.events.splice(at, 0, event);
    if (state.settled !== undefined && event.eventTimeMs < state.settled.before) state.settled = undefined;
    if (state.index !== undefined) addToIndex(state.index, event);
    this.historyEvents++;
    const own = this.decide(state, event.event_id, event.eventTimeMs);
    if (own.ok) {
      result.decisions.push({
        delivery_id: event.delivery_id,
        event_id: event.event_id,
        event_time: event.event_time,
        eventTimeMs: event.eventTimeMs,
        revision: 0,
        row: own.row,
      });
      state.decided.set(event.event_id, {
        event_id: event.event_id,
        event_time: event.event_time,
        t: event.eventTimeMs,
        revision: 0,
        row: own.row,
      });
      this.revisable++;
    } else {
      result.notReady = own.missing;
      state.undecided.set(event.event_id, event.eventTimeMs);
      this.undecidedCount++;
    }
    if (at === state.events.length - 1) return;
    // Events that arrived before this one but are later in event time: those not decided yet may be ready
    // now (the first status came late), those decided may have a changed row.
    for (const [id, t] of state.undecided) {
      if (id === event.event_id || byTimeKey(t, id, event) <= 0) continue;
      const now = this.decide(state, id, t);
      if (!now.ok) continue;
      const e = state.events.find((x) => x.event_id === id)!;
      state.undecided.delete(id);
      this.undecidedCount--;
      state.decided.set(id, { event_id: id, event_time: e.event_time, t, revision: 0, row: now.row });
      this.revisable++;
      result.decisions.push({
        delivery_id: event.delivery_id,
        event_id: id,
        event_time: e.event_time,
        eventTimeMs: t,
        revision: 0,
        row: now.row,
      });
    }
    for (const d of state.decided.values()) {
      if (d.revision === 0 && result.decisions.some((x) => x.event_id === d.event_id)) continue;
      if (d.event_id === event.event_id || byTimeKey(d.t, d.event_id, event) <= 0) continue;
      const again = this.decide(state, d.event_id, d.t);
      if (!again.ok || sameRow(again.row, d.row)) continue;
      d.revision++;
      d.row = again.row;
      result.decisions.push({
        delivery_id: event.delivery_id,
        event_id: d.event_id,
        event_time: d.event_time,
        eventTimeMs: d.t,
        revision: d.revision,
        row: again.row,
      });
    }
  }

  private decide(
    state: DeliveryState,
    eventId: string,
    t: number,
  ): { ok: true; row: Float32Array } | { ok: false; missing: NotReady } {
    // The events up to t and, at t, those ordered at or before this one (ties by event_id).
    let count = upperBound(state.events, t);
    while (
      count > 0 &&
      state.events[count - 1]!.eventTimeMs === t &&
      state.events[count - 1]!.event_id > eventId
    )
      count--;
    // The stop scan settled up to SETTLE_MS behind t, advanced every SETTLE_STEP_MS of event time: each
    // decision scans the last minutes instead of the whole history.
    const settleAt = t - SETTLE_MS;
    state.index ??= indexHistory(state.events);
    if (state.settled === undefined || state.settled.before < settleAt - SETTLE_STEP_MS)
      state.settled = settleStops(state.index.gps, settleAt, state.settled);
    const features = computeFeaturesSorted(state.events, count, t, state.folded, state.settled, state.index);
    if (!features.ok) return features;
    return { ok: true, row: featureVector(features.features, new Float32Array(N_FEATURES)) };
  }

  private afterEffects(effects: Output[], result: DecideResult): void {
    for (const effect of effects) {
      if (effect.kind === 'result') {
        result.windowResults.push({ window: effect.window, revision: effect.revision });
      } else if (effect.kind === 'expired') {
        const state = this.deliveries.get(effect.key);
        if (state) {
          this.historyEvents -= state.events.length;
          this.revisable -= state.decided.size;
          this.undecidedCount -= state.undecided.size;
          this.deliveries.delete(effect.key);
        }
      }
    }
    this.prune();
  }

  /**
   * Decisions no accepted event could precede any more are no longer revisable, and the history before the
   * fold line (the earliest time an event can still be accepted at: watermark − longest window − allowed
   * lateness) is folded: per delivery, state holds the last minutes, not the whole delivery.
   */
  private prune(): void {
    const wm = this.engine.watermark();
    // Pruning changes every delivery at once: it waits for an open snapshot job (nothing pruned is needed
    // any more, so keeping it a little longer changes no decision) and catches up when the job ends.
    if (wm === null || this.job) return;
    // On a grid of watermark, one step at a time (pruning walks every delivery): the state is then the same
    // whenever the steps run — late after a job, or as the watermark crossed them.
    const target = Math.floor((wm - this.horizonMs) / PRUNE_STEP_MS) * PRUNE_STEP_MS;
    if (!(target > this.prunedBefore)) return;
    let next = Math.floor(this.prunedBefore / PRUNE_STEP_MS) * PRUNE_STEP_MS + PRUNE_STEP_MS;
    // A jump of the watermark (idleness released, end of input) prunes at once.
    if (!Number.isFinite(next) || (target - next) / PRUNE_STEP_MS >= MAX_PRUNE_STEPS) next = target;
    for (; next <= target; next += PRUNE_STEP_MS) this.pruneAt(next);
  }

  /** Drops decisions before `before` and folds the history before the fold line that goes with it. */
  private pruneAt(before: number): void {
    this.prunedBefore = before;
    // wm − speed window − lateness, for the watermark at which `before` = wm − horizon
    const finalBefore = before + this.horizonMs - SPEED_WINDOW_MS - this.allowedLatenessMs;
    for (const [key, state] of this.deliveries) {
      const revisable = this.revisable;
      const undecided = this.undecidedCount;
      for (const [id, d] of state.decided) {
        if (d.t < before) {
          state.decided.delete(id);
          this.revisable--;
        }
      }
      for (const [id, t] of state.undecided) {
        if (t < before) {
          state.undecided.delete(id);
          this.undecidedCount--;
        }
      }
      let changed = revisable !== this.revisable || undecided !== this.undecidedCount;
      if (state.events.length > 0 && state.events[0]!.eventTimeMs < finalBefore - SPEED_WINDOW_MS) {
        const kept = foldHistory(state.events, state.folded, finalBefore);
        this.historyEvents -= state.events.length - kept.length;
        state.events = kept;
        state.settled = undefined;
        state.index = undefined;
        changed = true;
      }
      if (changed) this.captured.delete(key);
    }
  }
}

/** pathSpeedKmh over the speed window's points (the same micrometre sums: the same float). */
function pointsSpeedKmh(events: readonly StreamEvent<EnginePoint>[]): number {
  if (events.length < 2) return 0;
  let um = 0;
  for (let i = 1; i < events.length; i++) {
    const a = events[i - 1]!.payload as readonly [number, number];
    const b = events[i]!.payload as readonly [number, number];
    um += segmentUm(a[0], a[1], b[0], b[1]);
  }
  return speedKmh(um, events[0]!.eventTime, events[events.length - 1]!.eventTime);
}

const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Float32 rows as base64: the exact bits in 4 bytes each instead of a 17-digit double in JSON. */
function encodeRows(rows: Float32Array): string {
  return Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength).toString('base64');
}

function decodeRows(path: string, value: unknown, count: number): Float32Array[] {
  const text = str(path, value);
  const bytes = count * N_FEATURES * 4;
  if (!BASE64_RE.test(text) || Math.floor((text.length * 3) / 4) - (text.match(/=/g)?.length ?? 0) !== bytes)
    bad(path, `base64 of ${count} rows of ${N_FEATURES} float32`);
  // Copied into an aligned buffer of its own (Buffer may be a slice of a shared pool).
  const all = new Float32Array(new Uint8Array(Buffer.from(text, 'base64')).buffer);
  const rows = new Array<Float32Array>(count);
  for (let i = 0; i < count; i++) rows[i] = all.slice(i * N_FEATURES, (i + 1) * N_FEATURES);
  return rows;
}

/** Orders a decided event (t, id) against an event: < 0 when the decided one comes first. */
function byTimeKey(t: number, id: string, e: DeliveryEvent): number {
  return t - e.eventTimeMs || (id < e.event_id ? -1 : id > e.event_id ? 1 : 0);
}

/** Index of the event (t, id) in a sorted history, or -1. */
function historyIndex(events: readonly DeliveryEvent[], t: number, id: string): number {
  let lo = 0;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const e = events[mid]!;
    if (e.eventTimeMs < t || (e.eventTimeMs === t && e.event_id < id)) lo = mid + 1;
    else hi = mid;
  }
  const e = events[lo];
  return e !== undefined && e.eventTimeMs === t && e.event_id === id ? lo : -1;
}

/** Index of the first event with event time > t. */
function upperBound(events: readonly DeliveryEvent[], t: number): number {
  let lo = 0;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (events[mid]!.eventTimeMs <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Where an event goes in a sorted history; most arrive in order, so search from the end. */
function insertionIndex(events: readonly DeliveryEvent[], e: DeliveryEvent): number {
  let i = events.length;
  while (i > 0 && byTime(events[i - 1]!, e) > 0) i--;
  return i;
}

function sameRow(a: Float32Array, b: Float32Array): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
