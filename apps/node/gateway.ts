/**
 * The gateway: this node's main thread. Terminates WebSocket and HTTP (uWebSockets.js), decodes and validates
 * requests, writes them into the request ring of their model version, drains the shared response ring and
 * answers. It never runs a model; control endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { MetricJson, SlotDescription } from '../../libs/metrics';
import { MetricsShard, nodeMetricsJson } from '../../libs/metrics';
import type { ErrorCode, InferenceRequest, RequestId } from '../../libs/protocol';
import {
  bindRequest,
  decodeRequest,
  decodeResult,
  encodeError,
  encodeResult,
  errorCodeIndex,
  httpStatusLine,
  httpStatusOf,
  PRIORITY_CODE,
  ProtocolError,
  RequestError,
  readComputeMs,
  readErrorResponse,
  readQueueMs,
  readResponseEpoch,
  readResponseRequestId,
  readResponseStatus,
  requestRecordBytes,
  writeRequestRecord,
} from '../../libs/protocol';
import type { Doorbell, RingBuffer } from '../../libs/ring';
import type { ControlRequest, ControlResponse, ModelStatus, NodeHealth, NodeStartOptions } from './ipc';
import type { ModelRuntime, SlotRuntime } from './models';
import { queueDepth } from './models';

const clock = (): number => performance.timeOrigin + performance.now();
const decoder = new TextDecoder();
const PROTOCOL_WS = 0;
const PROTOCOL_HTTP = 1;
/** Slot 0 counts requests that never reached a model (bad JSON, unknown model). */
export const UNROUTED_SLOT = 0;
const SWEEP_INTERVAL_MS = 1000;
/** A request still unanswered this long after its deadline is answered by the gateway itself (never hangs). */
const SWEEP_GRACE_MS = 5000;

interface Connection {
  id: number;
  closed: boolean;
  inflight: number;
}

interface HttpState {
  aborted: boolean;
}

interface Pending {
  clientId: RequestId;
  slot: number;
  startedAt: number;
  deadlineAt: number;
  ws: uWS.WebSocket<Connection> | undefined;
  res: uWS.HttpResponse | undefined;
  http: HttpState | undefined;
}

export interface GatewayHooks {
  forwardControl(request: ControlRequest, reply: (response: ControlResponse) => void): void;
}

export class Gateway {
  private readonly app: uWS.TemplatedApp;
  private listenSocket: uWS.us_listen_socket | undefined;
  private readonly pending = new Map<number, Pending>();
  private readonly sockets = new Set<uWS.WebSocket<Connection>>();
  private nextRequestId = 1;
  private nextConnectionId = 1;
  private draining = false;
  private drainLoopRunning = false;
  private readonly metrics: MetricsShard;
  private readonly hardFrameLimit: number;
  private sweepTimer: NodeJS.Timeout | undefined;
  private onIdle: (() => void) | undefined;
  private readonly ringsToNotify = new Set<Doorbell>();
  private notifyScheduled = false;
  defaultModel: string;
  epoch = 0;
  answered = 0;

  constructor(
    private readonly options: NodeStartOptions,
    private readonly models: Map<string, ModelRuntime>,
    private readonly slots: Array<SlotRuntime | undefined>,
    private readonly responses: RingBuffer,
    metricsBuffer: SharedArrayBuffer,
    private readonly logger: Logger,
    private readonly hooks: GatewayHooks,
  ) {
    this.defaultModel = options.defaultModel;
    this.metrics = new MetricsShard(metricsBuffer, 0);
    // Frames above our own limit get a typed error; only frames far above it are cut at the protocol level.
    this.hardFrameLimit = Math.max(options.maxPayloadBytes * 4, 16 * 1024 * 1024);
    this.app = uWS.App();
    this.routes();
  }

  // ---------------------------------------------------------------- listening

  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.app.listen(host, port, (socket) => {
        if (!socket) {
          reject(
            new Error(
              `could not listen on ${host}:${port} (port in use by a non-reusable socket, or permission denied)`,
            ),
          );
          return;
        }
        this.listenSocket = socket;
        resolve(uWS.us_socket_local_port(socket));
      });
    });
  }

  startDrainLoop(): void {
    if (this.drainLoopRunning) return;
    this.drainLoopRunning = true;
    void this.drainResponses();
    this.sweepTimer = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  private routes(): void {
    this.app.ws<Connection>('/ws', {
      maxPayloadLength: this.hardFrameLimit,
      idleTimeout: 120,
      sendPingsAutomatically: true,
      maxBackpressure: 64 * 1024 * 1024,
      upgrade: (res, req, context) => {
        if (this.draining) {
          res.writeStatus('503 Service Unavailable').end('server is shutting down');
          return;
        }
        res.upgrade<Connection>(
          { id: this.nextConnectionId++, closed: false, inflight: 0 },
          req.getHeader('sec-websocket-key'),
          req.getHeader('sec-websocket-protocol'),
          req.getHeader('sec-websocket-extensions'),
          context,
        );
      },
      open: (ws) => {
        this.sockets.add(ws);
      },
      message: (ws, message, isBinary) => this.onWsMessage(ws, message, isBinary),
      close: (ws) => {
        ws.getUserData().closed = true;
        this.sockets.delete(ws);
      },
    });
    this.app.post('/predict', (res, req) => this.onHttpPredict(res, req));
    this.app.any('/predict', (res) =>
      this.replyHttp(res, undefined, 405, encodeError(null, 'method_not_allowed', 'use POST /predict')),
    );
    for (const pattern of ['/health', '/metrics', '/api/*', '/v2/*', '/v2']) {
      this.app.any(pattern, (res, req) => this.onControl(res, req));
    }
    this.app.any('/*', (res, req) => {
      const path = req.getUrl();
      this.replyHttp(
        res,
        undefined,
        404,
        encodeError(null, 'not_found', `no route for ${req.getMethod().toUpperCase()} ${path}`),
      );
    });
  }

  // ---------------------------------------------------------------- WebSocket

  private onWsMessage(ws: uWS.WebSocket<Connection>, message: ArrayBuffer, isBinary: boolean): void {
    const startedAt = clock();
    if (isBinary) {
      this.rejectWs(
        ws,
        null,
        UNROUTED_SLOT,
        startedAt,
        new ProtocolError('bad_request', 'binary frames are not supported; send JSON text frames'),
      );
      return;
    }
    if (message.byteLength > this.options.maxPayloadBytes) {
      const id = sniffId(message);
      this.rejectWs(
        ws,
        id,
        UNROUTED_SLOT,
        startedAt,
        new ProtocolError(
          'payload_too_large',
          `frame of ${message.byteLength} bytes exceeds the ${this.options.maxPayloadBytes}-byte limit`,
        ),
      );
      return;
    }
    // The ArrayBuffer is only valid during this callback: decoding copies it into a string.
    const text = decoder.decode(message);
    this.admit(text, startedAt, ws, undefined, undefined);
  }

  private rejectWs(
    ws: uWS.WebSocket<Connection>,
    id: RequestId,
    slot: number,
    startedAt: number,
    error: ProtocolError,
  ): void {
    this.metrics.recordRequest(slot, PROTOCOL_WS, errorCodeIndex(error.code), (clock() - startedAt) / 1000);
    if (!ws.getUserData().closed)
      ws.send(encodeError(id, error.code, error.message, error.retryAfterMs), false);
  }

  // ---------------------------------------------------------------- HTTP

  private onHttpPredict(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const startedAt = clock();
    const state: HttpState = { aborted: false };
    res.onAborted(() => {
      state.aborted = true;
    });
    const declared = Number(req.getHeader('content-length') || '0');
    if (declared > this.options.maxPayloadBytes) {
      this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, errorCodeIndex('payload_too_large'), 0);
      this.replyHttp(
        res,
        state,
        413,
        encodeError(
          null,
          'payload_too_large',
          `body of ${declared} bytes exceeds the ${this.options.maxPayloadBytes}-byte limit`,
        ),
        true,
      );
      return;
    }
    this.readBody(res, state, (body) => {
      if (body === undefined) {
        this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, errorCodeIndex('payload_too_large'), 0);
        this.replyHttp(
          res,
          state,
          413,
          encodeError(
            null,
            'payload_too_large',
            `body exceeds the ${this.options.maxPayloadBytes}-byte limit`,
          ),
          true,
        );
        return;
      }
      this.admit(body, startedAt, undefined, res, state);
    });
  }

  /** Collects a request body (copying each chunk: uWS reuses them); undefined when it exceeds the limit. */
  private readBody(res: uWS.HttpResponse, state: HttpState, done: (body: string | undefined) => void): void {
    const chunks: Buffer[] = [];
    let total = 0;
    let finished = false;
    res.onData((chunk, isLast) => {
      if (finished || state.aborted) return;
      total += chunk.byteLength;
      if (total > this.options.maxPayloadBytes) {
        finished = true;
        done(undefined);
        return;
      }
      chunks.push(Buffer.from(new Uint8Array(chunk)));
      if (isLast) {
        finished = true;
        done(chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks).toString('utf8'));
      }
    });
  }

  private replyHttp(
    res: uWS.HttpResponse,
    state: HttpState | undefined,
    status: number,
    body: string,
    close = false,
    headers?: Record<string, string>,
  ): void {
    if (state?.aborted) return;
    res.cork(() => {
      res.writeStatus(httpStatusLine(status)).writeHeader('content-type', 'application/json');
      if (headers) for (const [name, value] of Object.entries(headers)) res.writeHeader(name, value);
      if (close || this.draining) res.writeHeader('connection', 'close');
      res.end(body, close);
    });
  }

  private onControl(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const state: HttpState = { aborted: false };
    res.onAborted(() => {
      state.aborted = true;
    });
    const request: ControlRequest = {
      method: req.getMethod().toUpperCase(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      body: '',
      remoteAddress: decoder.decode(res.getRemoteAddressAsText()),
      authorization: req.getHeader('authorization'),
    };
    const forward = (): void => {
      this.hooks.forwardControl(request, (response) => {
        if (state.aborted) return;
        res.cork(() => {
          res.writeStatus(httpStatusLine(response.status)).writeHeader('content-type', response.contentType);
          if (response.headers)
            for (const [name, value] of Object.entries(response.headers)) res.writeHeader(name, value);
          res.end(response.body);
        });
      });
    };
    if (request.method === 'GET' || request.method === 'HEAD') {
      forward();
      return;
    }
    this.readBody(res, state, (body) => {
      if (body === undefined) {
        this.replyHttp(
          res,
          state,
          413,
          encodeError(null, 'payload_too_large', 'admin request body too large'),
          true,
        );
        return;
      }
      request.body = body;
      forward();
    });
  }

  // ---------------------------------------------------------------- admission (both protocols)

  private admit(
    text: string,
    startedAt: number,
    ws: uWS.WebSocket<Connection> | undefined,
    res: uWS.HttpResponse | undefined,
    http: HttpState | undefined,
  ): void {
    const protocol = ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    let request: InferenceRequest;
    try {
      request = decodeRequest(text, { model: this.defaultModel });
    } catch (error) {
      this.fail(
        ws,
        res,
        http,
        protocol,
        error instanceof RequestError ? error.requestId : null,
        UNROUTED_SLOT,
        startedAt,
        asProtocolError(error),
      );
      return;
    }
    let slot = UNROUTED_SLOT;
    try {
      if (this.draining)
        throw new ProtocolError('unavailable', 'server is shutting down; retry on another instance');
      const runtime = this.resolve(request);
      slot = runtime.slot;
      const bound = bindRequest(request, runtime.model.signature, {
        maxElements: Math.floor(this.options.maxPayloadBytes / 4),
      });
      const length = requestRecordBytes(bound);
      const ring = runtime.rings[PRIORITY_CODE[request.priority]]!;
      if (length > ring.maxRecordBytes)
        throw new ProtocolError(
          'payload_too_large',
          `request of ${length} bytes exceeds the model's record limit`,
        );
      const offset = ring.reserve(length);
      if (offset < 0) {
        this.metrics.recordShed(slot, 5);
        throw new ProtocolError(
          'overloaded',
          `model ${runtime.model.name} version ${runtime.version} queue is full`,
          100,
        );
      }
      const requestId = this.nextRequestId;
      this.nextRequestId = this.nextRequestId >= 0xfffffffe ? 1 : this.nextRequestId + 1;
      const deadlineAt = startedAt + (request.deadlineMs ?? this.options.requestTimeoutMs);
      try {
        writeRequestRecord(
          ring.view,
          ring.bytes,
          offset,
          { requestId, slot, priority: request.priority, enqueuedAt: startedAt, deadlineAt },
          bound,
        );
      } finally {
        // A reservation must always be committed; a record that failed to encode is still well-framed.
        ring.commit(undefined, false);
        this.scheduleNotify(runtime.doorbell);
      }
      this.pending.set(requestId, { clientId: request.id, slot, startedAt, deadlineAt, ws, res, http });
      this.metrics.addInflight(slot, 1);
      if (ws) ws.getUserData().inflight++;
    } catch (error) {
      this.fail(ws, res, http, protocol, request.id, slot, startedAt, asProtocolError(error));
    }
  }

  /**
   * Workers are woken once per event-loop turn, not once per request: every frame uWS read in this turn is
   * already in the ring when the notify goes out, so a worker claims them as one batch.
   */
  private scheduleNotify(doorbell: Doorbell): void {
    this.ringsToNotify.add(doorbell);
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(this.flushNotifies);
  }

  private readonly flushNotifies = (): void => {
    this.notifyScheduled = false;
    for (const doorbell of this.ringsToNotify) doorbell.ring();
    this.ringsToNotify.clear();
  };

  private resolve(request: InferenceRequest): SlotRuntime {
    const name = request.model ?? this.defaultModel;
    const model = this.models.get(name);
    if (!model)
      throw new ProtocolError(
        'unknown_model',
        `unknown model "${name}"; available: ${[...this.models.keys()].join(', ')}`,
      );
    const version =
      request.version === undefined || request.version === 'stable' || request.version === 'default'
        ? model.entry.defaultVersion
        : request.version;
    const runtime = model.versions.get(version);
    if (!runtime) {
      throw new ProtocolError(
        'unknown_version',
        `model "${name}" has no version "${version}"; available: ${[...model.versions.keys()].join(', ')}`,
      );
    }
    return runtime;
  }

  private fail(
    ws: uWS.WebSocket<Connection> | undefined,
    res: uWS.HttpResponse | undefined,
    http: HttpState | undefined,
    protocol: number,
    id: RequestId,
    slot: number,
    startedAt: number,
    error: ProtocolError,
  ): void {
    this.metrics.recordRequest(slot, protocol, errorCodeIndex(error.code), (clock() - startedAt) / 1000);
    const body = encodeError(id, error.code, error.message, error.retryAfterMs);
    if (ws) {
      if (!ws.getUserData().closed) ws.send(body, false);
      return;
    }
    if (res) {
      const headers =
        error.retryAfterMs !== undefined
          ? { 'retry-after': String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))) }
          : undefined;
      this.replyHttp(res, http, httpStatusOf(error.code), body, false, headers);
    }
  }

  // ---------------------------------------------------------------- responses

  private readonly onResponse = (offset: number): boolean => {
    const ring = this.responses;
    const view = ring.view;
    const requestId = readResponseRequestId(view, offset);
    const pending = this.pending.get(requestId);
    if (!pending) return true; // answered already (sweeper, dead worker) — drop the late duplicate
    this.pending.delete(requestId);
    const now = clock();
    const latencyMs = now - pending.startedAt;
    const status = readResponseStatus(view, offset);
    const runtime = this.slots[pending.slot]!;
    const protocol = pending.ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    let body: string;
    let httpStatus = 200;
    if (status === 0) {
      const result = decodeResult(ring.bytes, view, offset, runtime.model.signature);
      body = encodeResult(
        pending.clientId,
        runtime.model.name,
        runtime.version,
        readResponseEpoch(view, offset),
        result,
        latencyMs,
      );
      this.metrics.recordQueueAndCompute(
        pending.slot,
        readQueueMs(view, offset) / 1000,
        readComputeMs(view, offset) / 1000,
      );
    } else {
      const error = readErrorResponse(ring.bytes, view, offset);
      body = encodeError(pending.clientId, error.code, error.message);
      httpStatus = httpStatusOf(error.code);
    }
    this.metrics.recordRequest(pending.slot, protocol, status, latencyMs / 1000);
    this.complete(pending, body, httpStatus);
    return true;
  };

  private complete(pending: Pending, body: string, httpStatus: number): void {
    this.metrics.addInflight(pending.slot, -1);
    this.answered++;
    const ws = pending.ws;
    if (ws) {
      const connection = ws.getUserData();
      connection.inflight--;
      if (!connection.closed) {
        let status = 1;
        ws.cork(() => {
          status = ws.send(body, false);
        });
        // 2 = dropped by uWS's backpressure limit: never silent.
        if (status === 2) {
          this.logger.warn({ connection: connection.id }, 'client is not reading; closing it (1013)');
          ws.end(1013, 'client too slow: send buffer limit reached');
        }
      }
    } else if (pending.res) {
      this.replyHttp(pending.res, pending.http, httpStatus, body);
    }
    if (this.pending.size === 0) this.onIdle?.();
  }

  /** Answers a request the workers will never answer (dead worker, sweeper, shutdown timeout). */
  answerWithError(requestId: number, code: ErrorCode, message: string): boolean {
    const pending = this.pending.get(requestId);
    if (!pending) return false;
    this.pending.delete(requestId);
    const protocol = pending.ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    this.metrics.recordRequest(
      pending.slot,
      protocol,
      errorCodeIndex(code),
      (clock() - pending.startedAt) / 1000,
    );
    this.complete(pending, encodeError(pending.clientId, code, message), httpStatusOf(code));
    return true;
  }

  private async drainResponses(): Promise<void> {
    const ring = this.responses;
    while (this.drainLoopRunning) {
      const sequence = ring.writeSequence();
      if (ring.pendingRecords() === 0) {
        await ring.waitForData(sequence, 500);
        continue;
      }
      this.drainNow();
    }
  }

  /** Answers everything already in the response ring. */
  drainNow(): void {
    while (this.responses.pendingRecords() > 0) {
      if (this.responses.claim(this.onResponse, 4096) === 0) break;
    }
  }

  private sweep(): void {
    const now = clock();
    for (const [requestId, pending] of this.pending) {
      if (now > pending.deadlineAt + SWEEP_GRACE_MS) {
        this.answerWithError(requestId, 'deadline_exceeded', 'no worker answered before the deadline');
      }
    }
  }

  // ---------------------------------------------------------------- status, metrics, shutdown

  get inflight(): number {
    return this.pending.size;
  }

  get wsConnections(): number {
    return this.sockets.size;
  }

  setDefaultModel(model: string): void {
    if (!this.models.has(model))
      throw new ProtocolError(
        'unknown_model',
        `unknown model "${model}"; available: ${[...this.models.keys()].join(', ')}`,
      );
    this.defaultModel = model;
  }

  modelStatus(): ModelStatus[] {
    return [...this.models.values()].map(({ entry, versions }) => {
      const status: ModelStatus = {
        name: entry.name,
        description: entry.description,
        defaultVersion: entry.defaultVersion,
        inputs: entry.signature.inputs,
        outputs: entry.signature.outputs,
        versions: [...versions.values()].map((runtime) => {
          const version = {
            version: runtime.version,
            slot: runtime.slot,
            executionProvider: runtime.executionProvider,
            loadedWorkers: runtime.loadedWorkers,
          };
          return runtime.fallbackReason ? { ...version, fallbackReason: runtime.fallbackReason } : version;
        }),
      };
      if (entry.signature.labels) status.labels = entry.signature.labels;
      return status;
    });
  }

  health(nodeIndex: number, state: NodeHealth['state'], workers: number, workersReady: number): NodeHealth {
    return {
      nodeIndex,
      pid: process.pid,
      state,
      workers,
      workersReady,
      defaultModel: this.defaultModel,
      models: this.modelStatus(),
      inflight: this.pending.size,
      wsConnections: this.sockets.size,
      epoch: this.epoch,
    };
  }

  metricsJson(buffer: SharedArrayBuffer): MetricJson[] {
    const slots: SlotDescription[] = [
      { slot: UNROUTED_SLOT, model: '', version: '', queueDepth: 0, executionProvider: '', alias: '' },
    ];
    for (const runtime of this.slots) {
      if (!runtime) continue;
      slots.push({
        slot: runtime.slot,
        model: runtime.model.name,
        version: runtime.version,
        queueDepth: queueDepth(runtime),
        executionProvider: runtime.executionProvider,
        alias: runtime.version === runtime.model.defaultVersion ? 'stable' : '',
      });
    }
    return nodeMetricsJson(buffer, slots, { wsConnections: this.sockets.size, epoch: this.epoch });
  }

  /** Stop accepting: close the listen socket; new requests on open connections are answered `unavailable`. */
  stopAccepting(): void {
    this.draining = true;
    if (this.listenSocket) {
      uWS.us_listen_socket_close(this.listenSocket);
      this.listenSocket = undefined;
    }
  }

  /** Resolves when every admitted request is answered, or after timeoutMs (then the rest are answered `unavailable`). */
  async waitForIdle(timeoutMs: number): Promise<number> {
    if (this.pending.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.onIdle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.onIdle = undefined;
    this.drainNow();
    let abandoned = 0;
    for (const requestId of [...this.pending.keys()]) {
      if (this.answerWithError(requestId, 'unavailable', 'server shut down before this request was computed'))
        abandoned++;
    }
    return abandoned;
  }

  closeConnections(): void {
    for (const ws of [...this.sockets]) {
      if (!ws.getUserData().closed) ws.end(1001, 'server shutting down');
    }
    this.drainLoopRunning = false;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
  }
}

function asProtocolError(error: unknown): ProtocolError {
  if (error instanceof ProtocolError) return error;
  return new ProtocolError('internal', `internal error: ${(error as Error)?.message ?? String(error)}`);
}

/** Best-effort id from the start of a frame we will not parse, so an oversize error can still be matched. */
function sniffId(message: ArrayBuffer): RequestId {
  const head = decoder.decode(new Uint8Array(message, 0, Math.min(256, message.byteLength)));
  const match = /"id"\s*:\s*(-?\d+(?:\.\d+)?|"((?:[^"\\]|\\.){0,256})")/.exec(head);
  if (!match) return null;
  return match[2] !== undefined ? match[2] : Number(match[1]);
}
