/**
 * The `external` inference mode: predictions from a StreamInfer serving cluster over its WebSocket endpoint.
 *
 * A small pool of connections carries at most `maxInflight` calls in all (and `maxInflightPerConnection` on
 * each, to stay under the server's per-client in-flight cap); further calls wait in a FIFO queue here,
 * never dropped. Every request names the pinned model and version and carries its own id; answers are
 * matched by id, in any order. A shed answer (overloaded, unavailable, …) is retried with exponential
 * backoff and jitter while the call keeps its slot, so retries never let more work in. A dropped connection
 * reconnects with backoff and its in-flight calls are sent again (on another open connection at once, or on
 * this one once it is back); an answer to an id already answered is ignored.
 *
 * Each connection paces itself, because the server limits each client (connection): `rate_limited`
 * pauses it for the server's `retry_after_ms` and spaces its sends (at least that far apart, doubling while
 * it is still refused, shrinking 3% with every answer, so it settles just under the limit); `overloaded`
 * halves its in-flight window, every answer grows it again (additive increase); `client_queue_full`
 * teaches it the server's in-flight cap. Without this a burst against a 100 rps limit is mostly refused.
 */
import type { Logger } from 'pino';
import pino from 'pino';
import WebSocket from 'ws';
import type { ErrorCode } from '../../../libs/protocol';
import { ExternalInferenceError } from './external-errors';
import type { BackoffOptions, InputBinding } from './external-wire';
import { backoffDelay, encodePredict, httpBaseOf, isRetryable, readAnswer } from './external-wire';
import type { InferenceBackend, ModelPin } from './inference';

export interface ExternalBackendOptions {
  /** The cluster's WebSocket endpoint, e.g. `ws://127.0.0.1:8000/ws`. */
  url: string;
  /** Connections in the pool (default 2). */
  connections?: number;
  /** Calls in flight in all, retries and re-sends included (default 64). */
  maxInflight?: number;
  /**
   * Calls in flight on one connection (default ceil(maxInflight / connections)). Keep it at or under the
   * server's per-client cap (`STREAMINFER_MAX_QUEUE_SIZE`); an answer `client_queue_full` is retried.
   */
  maxInflightPerConnection?: number;
  /** One attempt's time limit, also sent as the request's `deadline_ms` (default 10,000). */
  requestTimeoutMs?: number;
  /** Retry and reconnect delays (default 25 ms doubling to 2 s). */
  backoff?: BackoffOptions;
  /** Attempts per call before it rejects `retries_exhausted` (default 10); a lost connection counts one. */
  maxAttempts?: number;
  /**
   * Request encoding (default `json`). `binary` sends the row's float32 bytes in a tensor frame (for pins
   * prepared first, whose model has one float32 input). For delay-risk's 5 features JSON measured faster
   * end to end against a 1-node server (67k vs 53k predicts/s), so it is the default.
   */
  frames?: 'json' | 'binary';
  logger?: Pick<Logger, 'warn' | 'info' | 'debug'>;
  /** Injectable for tests: time (ms, monotonic), waiting (backoff, reconnect, pauses), the jitter source. */
  clock?: () => number;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

/** Counters for metrics and tests (an optional member beyond InferenceBackend). */
export interface ExternalBackendStats {
  /** Request frames sent (first attempts, retries and re-sends). */
  sent: number;
  /** Calls answered with a value. */
  answered: number;
  /** Calls that rejected (closed ones included). */
  failed: number;
  /** Shed or timed-out attempts sent again, by server code (`timeout` for our own limit). */
  retries: Record<string, number>;
  /** Calls sent again because their connection dropped. */
  resent: number;
  /** Connections opened again after a drop or a failed attempt. */
  reconnects: number;
  /** Answers for an id already answered (or no longer asked for): ignored. */
  duplicates: number;
}

export interface ExternalBackend extends InferenceBackend {
  readonly mode: 'external';
  /** Calls waiting for a slot (not yet sent). */
  readonly queued: number;
  readonly stats: ExternalBackendStats;
}

interface Settings {
  url: URL;
  httpBase: string;
  connections: number;
  maxInflight: number;
  perConnection: number;
  requestTimeoutMs: number;
  backoff: BackoffOptions;
  maxAttempts: number;
  frames: 'json' | 'binary';
}

interface Call {
  readonly id: number;
  readonly pin: ModelPin;
  readonly row: Float32Array;
  readonly resolve: (value: number) => void;
  readonly reject: (error: Error) => void;
  attempts: number;
  /** The connection the current attempt went out on; undefined while waiting (queue, backoff, reconnect). */
  conn: Conn | undefined;
  timer: NodeJS.Timeout | undefined;
  /** The connection's `generation` when this attempt went out. */
  generation: number;
}

interface Conn {
  readonly index: number;
  ws: WebSocket | undefined;
  open: boolean;
  /** Calls whose current attempt is on this connection. */
  readonly sent: Set<Call>;
  /** Connection attempts that failed in a row (the reconnect backoff's exponent). */
  failures: number;
  everOpened: boolean;
  /** Congestion window: calls this connection may have in flight now (floor), 1 ≤ window ≤ ceiling. */
  window: number;
  /** The most in flight here: maxInflightPerConnection, lowered to the server's cap once it tells us. */
  ceiling: number;
  /** No send on this connection before then (clock ms): a rate-limit pause, then the spacing. */
  nextSendAt: number;
  /** Least time between two sends here (ms), learnt from `rate_limited`; 0 = unpaced. */
  spacingMs: number;
  /** Bumped whenever the connection slows down: only a refusal of a call sent since slows it again. */
  generation: number;
}

const DEFAULTS = {
  connections: 2,
  maxInflight: 64,
  requestTimeoutMs: 10_000,
  backoff: { baseMs: 25, maxMs: 2_000 },
  maxAttempts: 10,
} as const;

function fail(message: string): never {
  throw new ExternalInferenceError('invalid_options', message);
}

function positiveInt(name: string, value: number | undefined, fallback: number): number {
  const resolved = value ?? fallback;
  if (!Number.isInteger(resolved) || resolved < 1) fail(`${name} must be an integer >= 1 (got ${resolved})`);
  return resolved;
}

/** Options are checked before any I/O so a bad config fails at start, not on the first event. */
export function resolveExternalOptions(options: ExternalBackendOptions): Settings {
  if (typeof options !== 'object' || options === null) fail('options must be an object');
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    fail(`url must be a ws:// or wss:// URL (got ${String(options.url)})`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    fail(`url must be a ws:// or wss:// URL (got ${options.url})`);
  const connections = positiveInt('connections', options.connections, DEFAULTS.connections);
  const maxInflight = positiveInt('maxInflight', options.maxInflight, DEFAULTS.maxInflight);
  const perConnection = positiveInt(
    'maxInflightPerConnection',
    options.maxInflightPerConnection,
    Math.ceil(maxInflight / connections),
  );
  const requestTimeoutMs = positiveInt(
    'requestTimeoutMs',
    options.requestTimeoutMs,
    DEFAULTS.requestTimeoutMs,
  );
  const maxAttempts = positiveInt('maxAttempts', options.maxAttempts, DEFAULTS.maxAttempts);
  const frames = options.frames ?? 'json';
  if (frames !== 'json' && frames !== 'binary')
    fail(`frames must be "json" or "binary" (got ${String(frames)})`);
  const backoff = options.backoff ?? DEFAULTS.backoff;
  if (
    typeof backoff !== 'object' ||
    backoff === null ||
    !Number.isFinite(backoff.baseMs) ||
    !Number.isFinite(backoff.maxMs) ||
    backoff.baseMs < 0 ||
    backoff.maxMs < backoff.baseMs
  ) {
    fail(`backoff must be {baseMs >= 0, maxMs >= baseMs} (got ${JSON.stringify(backoff)})`);
  }
  return {
    url,
    httpBase: httpBaseOf(url),
    connections,
    maxInflight,
    perConnection,
    requestTimeoutMs,
    backoff: { baseMs: backoff.baseMs, maxMs: backoff.maxMs },
    maxAttempts,
    frames,
  };
}

const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Opens the pool and resolves once at least one connection is open (the others keep trying in the
 * background); rejects `unreachable` when none could open, `invalid_options` before any I/O.
 */
export async function createExternalBackend(options: ExternalBackendOptions): Promise<ExternalBackend> {
  const backend = new ExternalInferenceBackend(resolveExternalOptions(options), options);
  await backend.start();
  return backend;
}

function pinKey(pin: ModelPin): string {
  return `${pin.model}\u0000${pin.version}`;
}

class ExternalInferenceBackend implements ExternalBackend {
  readonly mode = 'external' as const;
  readonly stats: ExternalBackendStats = {
    sent: 0,
    answered: 0,
    failed: 0,
    retries: {},
    resent: 0,
    reconnects: 0,
    duplicates: 0,
  };
  private readonly logger: Pick<Logger, 'warn' | 'info' | 'debug'>;
  private readonly clock: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private readonly conns: Conn[] = [];
  /** Calls not yet given a slot, oldest first. */
  private queue: Call[] = [];
  private queueHead = 0;
  /** Calls holding a slot but no connection (after a backoff or a drop), oldest first. */
  private ready: Call[] = [];
  /** Every call holding a slot, by wire id: the one place answers are matched. */
  private readonly calls = new Map<number, Call>();
  /** With `frames: 'binary'`, pins prepare() found a single float32 input for: those go as tensor frames. */
  private readonly bindings = new Map<string, InputBinding>();
  private nextId = 1;
  private closed = false;
  /** A pump is scheduled for when the earliest paused connection may send again. */
  private wakeScheduled = false;

  constructor(
    private readonly settings: Settings,
    options: ExternalBackendOptions,
  ) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    this.clock = options.clock ?? (() => performance.now());
    this.sleep = options.sleep ?? realSleep;
    this.random = options.random ?? Math.random;
  }

  get inflight(): number {
    return this.calls.size;
  }

  get queued(): number {
    return this.queue.length - this.queueHead;
  }

  async start(): Promise<void> {
    for (let index = 0; index < this.settings.connections; index++) {
      const ceiling = this.settings.perConnection;
      this.conns.push({
        index,
        ws: undefined,
        open: false,
        sent: new Set(),
        failures: 0,
        everOpened: false,
        window: ceiling,
        ceiling,
        nextSendAt: 0,
        spacingMs: 0,
        generation: 0,
      });
    }
    const first = await Promise.all(this.conns.map((conn) => this.connect(conn)));
    if (first.every((error) => error !== undefined)) {
      this.closed = true;
      for (const conn of this.conns) conn.ws?.terminate();
      const cause = first[0];
      throw new ExternalInferenceError(
        'unreachable',
        `no connection to ${this.settings.url.href} could be opened: ${cause?.message}`,
        { cause },
      );
    }
  }

  async prepare(pin: ModelPin): Promise<void> {
    this.checkPin(pin);
    if (this.closed) throw new ExternalInferenceError('closed', 'the external backend is closed');
    const path = `/v2/models/${encodeURIComponent(pin.model)}/versions/${encodeURIComponent(pin.version)}`;
    await this.httpGet(`${path}/ready`, pin);
    if (this.settings.frames !== 'binary') return;
    const metadata = (await this.httpGet(path, pin)) as {
      inputs?: Array<{ name?: unknown; datatype?: unknown }>;
    };
    // One float32 input: send binary tensor frames. Anything else keeps JSON, where the server binds `input`.
    const inputs = Array.isArray(metadata.inputs) ? metadata.inputs : [];
    const only = inputs[0];
    if (inputs.length === 1 && only && typeof only.name === 'string' && only.datatype === 'FP32')
      this.bindings.set(pinKey(pin), { name: only.name });
    else this.bindings.delete(pinKey(pin));
  }

  predict(pin: ModelPin, row: Float32Array): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (this.closed) {
        this.stats.failed++;
        reject(new ExternalInferenceError('closed', 'the external backend is closed'));
        return;
      }
      try {
        this.checkPin(pin);
        if (!(row instanceof Float32Array) || row.length === 0)
          throw new ExternalInferenceError('invalid_options', 'row must be a non-empty Float32Array');
      } catch (error) {
        this.stats.failed++;
        reject(error);
        return;
      }
      const call: Call = {
        id: this.nextId++,
        pin: { model: pin.model, version: pin.version },
        // A copy: the caller may reuse its buffer while the call waits in the queue or for a retry.
        row: row.slice(),
        resolve,
        reject,
        attempts: 0,
        conn: undefined,
        timer: undefined,
        generation: 0,
      };
      this.queue.push(call);
      this.pump();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const error = new ExternalInferenceError(
      'closed',
      'the external backend was closed before an answer came',
    );
    for (let i = this.queueHead; i < this.queue.length; i++) this.settle(this.queue[i]!, error);
    this.queue = [];
    this.queueHead = 0;
    this.ready = [];
    for (const call of [...this.calls.values()]) this.settle(call, error);
    await Promise.all(
      this.conns.map(
        (conn) =>
          new Promise<void>((resolve) => {
            const ws = conn.ws;
            conn.open = false;
            if (!ws || ws.readyState === WebSocket.CLOSED) {
              resolve();
              return;
            }
            // A peer that never completes the closing handshake must not hold close() up.
            const timer = setTimeout(() => ws.terminate(), 1_000);
            ws.once('close', () => {
              clearTimeout(timer);
              resolve();
            });
            if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
            else ws.close(1000, 'client closing');
          }),
      ),
    );
  }

  // ------------------------------------------------------------------ scheduling

  /**
   * Sends what can go now: first the calls holding a slot (they are older than anything queued), then
   * queued calls while there are slots. Stops at the first that no connection takes: none would take the
   * next one either, so each answer costs O(connections), not O(calls waiting).
   */
  private pump(): void {
    if (this.closed) return;
    let sent = 0;
    while (sent < this.ready.length && this.trySend(this.ready[sent]!)) sent++;
    if (sent > 0) this.ready.splice(0, sent);
    if (this.ready.length > 0) return;
    while (this.calls.size < this.settings.maxInflight && this.queueHead < this.queue.length) {
      const call = this.queue[this.queueHead]!;
      this.calls.set(call.id, call);
      if (!this.trySend(call)) {
        this.calls.delete(call.id);
        break;
      }
      this.queue[this.queueHead++] = undefined as unknown as Call;
    }
    if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
  }

  /** Sends `call` on the open connection that may send now with the most room in its window, if any. */
  private trySend(call: Call): boolean {
    let best: Conn | undefined;
    let bestRoom = 0;
    let wakeAt = Number.POSITIVE_INFINITY;
    const now = this.clock();
    for (const conn of this.conns) {
      // A socket already closing would swallow the frame; its close event re-sends what it holds.
      if (!conn.open || conn.ws?.readyState !== WebSocket.OPEN) continue;
      if (conn.nextSendAt > now) {
        wakeAt = Math.min(wakeAt, conn.nextSendAt);
        continue;
      }
      const room = Math.floor(conn.window) - conn.sent.size;
      if (room > bestRoom) {
        best = conn;
        bestRoom = room;
      }
    }
    if (!best) {
      if (wakeAt !== Number.POSITIVE_INFINITY) this.wakeAt(wakeAt - now);
      return false;
    }
    const frame = encodePredict(
      call.id,
      call.pin,
      call.row,
      this.settings.requestTimeoutMs,
      this.bindings.get(pinKey(call.pin)),
    );
    call.attempts++;
    call.conn = best;
    call.generation = best.generation;
    if (best.spacingMs > 0) best.nextSendAt = now + best.spacingMs;
    best.sent.add(call);
    this.stats.sent++;
    call.timer = setTimeout(() => this.onTimeout(call), this.settings.requestTimeoutMs);
    best.ws!.send(frame);
    return true;
  }

  private wakeAt(delayMs: number): void {
    if (this.wakeScheduled) return;
    this.wakeScheduled = true;
    void this.sleep(Math.max(1, delayMs)).then(() => {
      this.wakeScheduled = false;
      this.pump();
    });
  }

  /** Takes a call off its connection (its answer or its attempt is over). */
  private detach(call: Call): void {
    if (call.timer !== undefined) clearTimeout(call.timer);
    call.timer = undefined;
    call.conn?.sent.delete(call);
    call.conn = undefined;
  }

  private settle(call: Call, outcome: number | Error): void {
    this.detach(call);
    this.calls.delete(call.id);
    if (typeof outcome === 'number') {
      this.stats.answered++;
      call.resolve(outcome);
    } else {
      this.stats.failed++;
      call.reject(outcome);
    }
  }

  /**
   * Another attempt, holding the slot meanwhile; or `retries_exhausted`. `paced`: the connection's window
   * or pause already slows the sending down, so the call waits in `ready`, not in a backoff of its own.
   */
  private retry(call: Call, reason: string, cause: Error, retryAfterMs?: number, paced = false): void {
    this.detach(call);
    if (this.settleIfExhausted(call, cause)) {
      this.pump();
      return;
    }
    this.stats.retries[reason] = (this.stats.retries[reason] ?? 0) + 1;
    if (paced) {
      this.ready.push(call);
      this.pump();
      return;
    }
    const delay = backoffDelay(call.attempts, this.settings.backoff, this.random, retryAfterMs);
    void this.sleep(delay).then(() => {
      if (this.closed || this.calls.get(call.id) !== call || call.conn !== undefined) return;
      // Behind the calls already waiting for a connection (an answer, a reconnect or a pause's end).
      this.ready.push(call);
      this.pump();
    });
    // Its connection has room again: a parked call may take it.
    this.pump();
  }

  private onTimeout(call: Call): void {
    call.timer = undefined;
    if (this.calls.get(call.id) !== call) return;
    this.retry(
      call,
      'timeout',
      new ExternalInferenceError(
        'retries_exhausted',
        `no answer within ${this.settings.requestTimeoutMs} ms`,
      ),
    );
  }

  // ------------------------------------------------------------------ connections

  /** Opens `conn` once; resolves with the error when this attempt failed (a reconnect is then scheduled). */
  private connect(conn: Conn): Promise<Error | undefined> {
    return new Promise((resolve) => {
      const ws = new WebSocket(this.settings.url, {
        perMessageDeflate: false,
        handshakeTimeout: this.settings.requestTimeoutMs,
        // Answers are a few hundred bytes; a bound keeps a confused peer from growing memory.
        maxPayload: 8 * 1024 * 1024,
      });
      conn.ws = ws;
      let opened = false;
      let failure: Error | undefined;
      ws.on('open', () => {
        opened = true;
        conn.open = true;
        conn.failures = 0;
        // A new connection is a new client to the server: fresh rate bucket and in-flight count.
        conn.ceiling = this.settings.perConnection;
        conn.window = conn.ceiling;
        conn.nextSendAt = 0;
        conn.spacingMs = 0;
        if (conn.everOpened) this.stats.reconnects++;
        conn.everOpened = true;
        resolve(undefined);
        this.pump();
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(conn, data, isBinary));
      ws.on('error', (error) => {
        failure = error;
      });
      ws.on('close', (code: number, reason: Buffer) => {
        if (conn.ws !== ws) return;
        conn.ws = undefined;
        conn.open = false;
        if (!opened) resolve(failure ?? new Error(`closed during the handshake (code ${code})`));
        if (this.closed) return;
        if (opened) {
          this.logger.warn(
            { connection: conn.index, code, reason: reason.toString(), inflight: conn.sent.size },
            'external inference connection dropped; reconnecting',
          );
          this.onDrop(conn);
        } else {
          this.logger.debug(
            { connection: conn.index, err: failure?.message },
            'external inference connection failed',
          );
        }
        this.scheduleReconnect(conn);
      });
    });
  }

  /** A call out of attempts is settled `retries_exhausted` (with the last cause); says whether it was. */
  private settleIfExhausted(call: Call, cause: Error): boolean {
    if (call.attempts < this.settings.maxAttempts) return false;
    this.settle(
      call,
      new ExternalInferenceError(
        'retries_exhausted',
        `no answer after ${call.attempts} attempts (last: ${cause.message})`,
        {
          cause,
          serverCode: cause instanceof ExternalInferenceError ? cause.serverCode : undefined,
        },
      ),
    );
    return true;
  }

  /** The calls in flight on a dropped connection go out again (each drop counts as an attempt). */
  private onDrop(conn: Conn): void {
    const lost = [...conn.sent];
    const cause = new ExternalInferenceError(
      'retries_exhausted',
      'the connection dropped with the call in flight',
    );
    for (const call of lost) {
      this.detach(call);
      if (this.settleIfExhausted(call, cause)) continue;
      this.stats.resent++;
      this.ready.push(call);
    }
    this.pump();
  }

  private scheduleReconnect(conn: Conn): void {
    conn.failures++;
    const delay = backoffDelay(conn.failures, this.settings.backoff, this.random);
    void this.sleep(delay).then(() => {
      if (this.closed || conn.ws !== undefined) return;
      void this.connect(conn);
    });
  }

  private onMessage(conn: Conn, data: Buffer, isBinary: boolean): void {
    const answer = readAnswer(data, isBinary);
    switch (answer.kind) {
      case 'warning':
        this.logger.debug({ connection: conn.index, code: answer.code }, answer.message);
        return;
      case 'garbage':
        this.logger.warn({ connection: conn.index }, `external inference: ${answer.reason}`);
        return;
      case 'result': {
        const call = typeof answer.id === 'number' ? this.calls.get(answer.id) : undefined;
        if (!call) {
          this.stats.duplicates++;
          return;
        }
        if (answer.value === undefined || !Number.isFinite(answer.value)) {
          this.settle(
            call,
            new ExternalInferenceError(
              'bad_answer',
              `the answer to ${call.pin.model}@${call.pin.version} holds no number`,
            ),
          );
        } else if (answer.version !== call.pin.version) {
          // The pin is the contract: a value from another version must never enter this epoch.
          this.settle(
            call,
            new ExternalInferenceError(
              'bad_answer',
              `asked ${call.pin.model}@${call.pin.version}, answered by version ${String(answer.version)}`,
            ),
          );
        } else {
          if (call.conn === conn) {
            // Additive increase: one more in flight per window's worth of answers; spacing shrinks 3%.
            conn.window = Math.min(conn.ceiling, conn.window + 1 / conn.window);
            conn.spacingMs = conn.spacingMs < 0.05 ? 0 : conn.spacingMs * 0.97;
          }
          // The risk is the model's float32 output: binary frames carry it exactly, JSON answers print the
          // shortest decimal of the same float32 — fround makes both the same number (and the same alert).
          this.settle(call, Math.fround(answer.value));
        }
        this.pump();
        return;
      }
      case 'error': {
        const call = typeof answer.id === 'number' ? this.calls.get(answer.id) : undefined;
        // An error for an attempt we already gave up on (timed out, resent elsewhere) says nothing now.
        if (!call || call.conn !== conn) {
          if (answer.id === null || answer.id === undefined)
            this.logger.warn({ connection: conn.index, code: answer.code }, answer.message);
          else this.stats.duplicates++;
          return;
        }
        const cause = new ExternalInferenceError(
          isRetryable(answer.code) ? 'retries_exhausted' : 'rejected',
          `${call.pin.model}@${call.pin.version}: ${answer.code}: ${answer.message}`,
          { serverCode: answer.code },
        );
        if (isRetryable(answer.code)) {
          const paced = this.pace(conn, call, answer.code, answer.retryAfterMs);
          this.retry(call, answer.code, cause, answer.retryAfterMs, paced);
        } else {
          this.settle(call, cause);
          this.pump();
        }
        return;
      }
    }
  }

  /** A connection's response to a shed answer of `call`; true when it now paces the retry itself. */
  private pace(conn: Conn, call: Call, code: ErrorCode, retryAfterMs: number | undefined): boolean {
    // Calls sent before the last slow-down were refused for the old pace: they say nothing new.
    const fresh = call.generation === conn.generation;
    switch (code) {
      case 'client_queue_full':
        // The server holds fewer of ours than we do (answers in transit), so this bound never undershoots
        // its cap: the sent set still counts the refused call.
        conn.ceiling = Math.max(1, Math.min(conn.ceiling, conn.sent.size - 1));
        conn.window = Math.min(conn.window, conn.ceiling);
        return true;
      case 'rate_limited': {
        const wait = retryAfterMs ?? this.settings.backoff.baseMs;
        if (fresh) {
          conn.generation++;
          conn.spacingMs = Math.min(this.settings.backoff.maxMs, Math.max(wait, conn.spacingMs * 2, 1));
        }
        conn.nextSendAt = Math.max(conn.nextSendAt, this.clock() + wait);
        return true;
      }
      case 'overloaded':
        if (fresh) {
          conn.generation++;
          conn.window = Math.max(1, conn.window / 2);
        }
        return false;
      default:
        return false;
    }
  }

  // ------------------------------------------------------------------ prepare

  private checkPin(pin: ModelPin): void {
    if (
      typeof pin !== 'object' ||
      pin === null ||
      typeof pin.model !== 'string' ||
      pin.model.length === 0 ||
      typeof pin.version !== 'string' ||
      pin.version.length === 0
    ) {
      throw new ExternalInferenceError(
        'invalid_options',
        'a pin needs a non-empty model and an explicit version',
      );
    }
  }

  /** GET on the cluster's HTTP side; retried while unreachable or draining, typed otherwise. */
  private async httpGet(path: string, pin: ModelPin): Promise<unknown> {
    let lastError: Error | undefined;
    for (let attempt = 1; attempt <= this.settings.maxAttempts; attempt++) {
      if (this.closed) throw new ExternalInferenceError('closed', 'the external backend is closed');
      let status: number;
      let body: Record<string, unknown> = {};
      try {
        const response = await fetch(`${this.settings.httpBase}${path}`, {
          signal: AbortSignal.timeout(this.settings.requestTimeoutMs),
        });
        status = response.status;
        const text = await response.text();
        try {
          const parsed = JSON.parse(text) as unknown;
          if (typeof parsed === 'object' && parsed !== null) body = parsed as Record<string, unknown>;
        } catch {
          // Not JSON: the status alone decides.
        }
      } catch (error) {
        lastError = error as Error;
        await this.sleep(backoffDelay(attempt, this.settings.backoff, this.random));
        continue;
      }
      if (status === 200) return body;
      const code = serverCodeOf(body);
      if (status === 404 && (code === 'unknown_model' || code === 'unknown_version')) {
        throw new ExternalInferenceError(
          'not_served',
          `the cluster at ${this.settings.httpBase} does not serve ${pin.model} version ${pin.version}: ${String(body.error ?? code)}`,
          { serverCode: code },
        );
      }
      if (code === 'unavailable' || status === 503 || status === 429) {
        lastError = new Error(`${path}: HTTP ${status} ${code ?? ''}`);
        await this.sleep(backoffDelay(attempt, this.settings.backoff, this.random));
        continue;
      }
      throw new ExternalInferenceError(
        'rejected',
        `${path} answered HTTP ${status}${code ? ` ${code}` : ''}`,
        code ? { serverCode: code } : undefined,
      );
    }
    throw new ExternalInferenceError(
      'unreachable',
      `the cluster at ${this.settings.httpBase} did not answer ${path}: ${lastError?.message}`,
      { cause: lastError },
    );
  }
}

/** The stable code an HTTP error body carries (`{"error": "...", "code": "..."}`). */
function serverCodeOf(body: Record<string, unknown>): ErrorCode | undefined {
  return typeof body.code === 'string' ? (body.code as ErrorCode) : undefined;
}
