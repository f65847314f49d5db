/**
 * The `external` inference mode: predictions from a StreamInfer server over its WebSocket endpoint.
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
import { ExternalInferenceError } from './errors';
import { checkPin, type HttpSide, httpGet } from './external-http';
import { type ExternalBackendOptions, resolveExternalOptions, type Settings } from './external-options';
import { answered, newConn, opened, type Conn as PoolConn, pace } from './external-pacing';
import type { InputBinding } from './external-wire';
import { backoffDelay, encodePredict, isRetryable, readAnswer } from './external-wire';
import type { InferenceBackend, ModelPin } from './inference';

export type { ExternalBackendOptions } from './external-options';

type Conn = PoolConn<Call>;

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
  /** What prepare()'s GETs need (external-http.ts). */
  private readonly http: HttpSide;

  constructor(
    private readonly settings: Settings,
    options: ExternalBackendOptions,
  ) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    this.clock = options.clock ?? (() => performance.now());
    this.sleep = options.sleep ?? realSleep;
    this.random = options.random ?? Math.random;
    this.http = { settings, sleep: this.sleep, random: this.random, closed: () => this.closed };
  }

  get inflight(): number {
    return this.calls.size;
  }

  get queued(): number {
    return this.queue.length - this.queueHead;
  }

  async start(): Promise<void> {
    for (let index = 0; index < this.settings.connections; index++) {
      this.conns.push(newConn(index, this.settings.perConnection));
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
    checkPin(pin);
    if (this.closed) throw new ExternalInferenceError('closed', 'the external backend is closed');
    const path = `/v2/models/${encodeURIComponent(pin.model)}/versions/${encodeURIComponent(pin.version)}`;
    await httpGet(this.http, `${path}/ready`, pin);
    if (this.settings.frames !== 'binary') return;
    const metadata = (await httpGet(this.http, path, pin)) as {
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
        checkPin(pin);
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
      let isOpen = false;
      let failure: Error | undefined;
      ws.on('open', () => {
        isOpen = true;
        opened(conn, this.settings.perConnection);
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
        if (!isOpen) resolve(failure ?? new Error(`closed during the handshake (code ${code})`));
        if (this.closed) return;
        if (isOpen) {
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
          // Additive increase (external-pacing.ts).
          if (call.conn === conn) answered(conn);
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
          const paced = pace(
            conn,
            call.generation,
            answer.code,
            answer.retryAfterMs,
            this.settings.backoff,
            this.clock,
          );
          this.retry(call, answer.code, cause, answer.retryAfterMs, paced);
        } else {
          this.settle(call, cause);
          this.pump();
        }
        return;
      }
    }
  }
}
