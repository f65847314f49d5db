/**
 * The gateway: this node's main thread. Terminates WebSocket and HTTP (uWebSockets.js), decodes and validates
 * requests, writes them into the request ring of their model version, drains the shared response ring and
 * answers. It never runs a model; control endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { ResolvedBackpressureOptions } from '../../libs/backpressure';
import {
  AdmissionCode,
  ClientState,
  ClientTable,
  CONSUMER_FALLING_BEHIND,
  ConsumerSignal,
  ModelQueueGuard,
  resolveDeadline,
  SLOW_CONSUMER_CLOSE_CODE,
  validateBackpressureOptions,
} from '../../libs/backpressure';
import type { MetricJson, ShedReason, SlotDescription } from '../../libs/metrics';
import { MetricsShard, metricJson, nodeMetricsJson, SHED_REASONS } from '../../libs/metrics';
import type {
  BinaryRequest,
  BoundRequest,
  ErrorCode,
  InferenceRequest,
  RequestId,
} from '../../libs/protocol';
import {
  argmax,
  bindBinaryRequest,
  bindRequest,
  decodeBinaryRequest,
  decodeOutputsFlat,
  decodeRequest,
  decodeResult,
  decodeV2Request,
  encodeBinaryAnswer,
  encodeError,
  encodeResultHead,
  encodeResultWithHead,
  encodeV2Error,
  encodeV2Response,
  encodeWarning,
  errorCodeIndex,
  httpStatusLine,
  httpStatusOf,
  PRIORITY_CODE,
  ProtocolError,
  RequestError,
  readComputeMs,
  readErrorResponse,
  readFirstOutput,
  readQueueMs,
  readResponseRequestId,
  readResponseStatus,
  requestRecordBytes,
  v2ModelMetadata,
  writeRequestRecord,
} from '../../libs/protocol';
import type { RouteDecision, RouteKind } from '../../libs/registry';
import { route, routingKeyDraw } from '../../libs/registry';
import type { Doorbell, RingBuffer } from '../../libs/ring';
import type {
  ControlRequest,
  ControlResponse,
  ModelStatus,
  NodeHealth,
  NodeSettings,
  NodeStartOptions,
} from './ipc';
import type { ModelRuntime, SlotRuntime } from './models';
import { queueDepth } from './models';

const SERVER_VERSION: string = (require('../../../package.json') as { version: string }).version;
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
  /** Rate limit, in-flight cap and slow-consumer state of this connection. */
  client: ClientState;
}

interface HttpState {
  aborted: boolean;
  /** Open Inference Protocol request: answers and errors use its JSON shapes. */
  v2?: boolean;
}

interface Pending {
  clientId: RequestId;
  slot: number;
  startedAt: number;
  deadlineAt: number;
  ws: uWS.WebSocket<Connection> | undefined;
  res: uWS.HttpResponse | undefined;
  http: HttpState | undefined;
  /** Undefined for shadow copies: they count against no client. */
  client: ClientState | undefined;
  /** The model-table epoch the request was routed in: its answer reports it. */
  epoch: number;
  /** Shadow mode: the comparison this request (or its mirror) feeds. */
  shadow: ShadowPair | undefined;
  /** True for the mirrored copy: computed and compared, never answered. */
  shadowSide: boolean;
  /** Answer with a binary tensor frame (the request was one). */
  binary: boolean;
}

/** Shed reasons as indexes of SHED_REASONS (metrics). */
const SHED = Object.fromEntries(SHED_REASONS.map((reason, index) => [reason, index])) as Record<
  ShedReason,
  number
>;
/** No client may ask for a deadline further away than this. */
const MAX_DEADLINE_MS = 3_600_000;
/** HTTP clients (by address) whose limits are remembered; idle ones are forgotten after this long. */
const HTTP_CLIENTS_MAX = 100_000;
const HTTP_CLIENT_IDLE_MS = 60_000;

export interface GatewayHooks {
  forwardControl(request: ControlRequest, reply: (response: ControlResponse) => void): void;
}

export class Gateway {
  private readonly app: uWS.TemplatedApp;
  private listenSocket: uWS.us_listen_socket | undefined;
  private listenPort = 0;
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
  private backpressure: ResolvedBackpressureOptions;
  private readonly httpClients: ClientTable<string>;
  readonly counters = { inflightWarnings: 0, slowConsumerWarnings: 0, slowConsumerCloses: 0 };
  private readonly shadowCounters = new Map<string, { agree: number; disagree: number; skipped: number }>();
  /** Unanswered client requests per routing epoch (at most two epochs are live around a reload). */
  private readonly epochPending = new Map<number, number>();
  private deferred: Array<{ pending: Pending; body: string | Uint8Array; httpStatus: number }> = [];
  /** Reused for every routing decision (no allocation per request). */
  private readonly decision: RouteDecision = { version: '', route: 'stable', shadowVersion: undefined };
  private readonly ringsToNotify = new Set<Doorbell>();
  private readonly rungThisTurn = new Set<Doorbell>();
  /** Element cap per input: no input can hold more float32s than a maximal payload. */
  private readonly bindLimits: { maxElements: number };
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
    this.bindLimits = { maxElements: Math.floor(options.maxPayloadBytes / 4) };
    this.backpressure = validateBackpressureOptions({
      rateLimitRps: options.backpressure.rateLimitRps,
      rateLimitBurst: options.backpressure.rateLimitBurst,
      maxInflightPerClient: options.backpressure.maxInflightPerClient,
      maxModelQueue: options.backpressure.maxModelQueue,
      slowConsumerWarnBytes: options.backpressure.slowConsumerWarnBytes,
      slowConsumerCloseBytes: options.backpressure.slowConsumerCloseBytes,
    });
    this.httpClients = new ClientTable<string>(HTTP_CLIENTS_MAX, HTTP_CLIENT_IDLE_MS, (now) =>
      this.newClient(now),
    );
    this.metrics = new MetricsShard(metricsBuffer, 0);
    // Frames above our own limit get a typed error; only frames far above it are cut at the protocol level.
    this.hardFrameLimit = Math.max(options.maxPayloadBytes * 4, 16 * 1024 * 1024);
    this.app = uWS.App();
    this.routes();
  }

  newClient(now: number): ClientState {
    return new ClientState(this.backpressure, now);
  }

  /** A guard per model version: queue bound by priority, Retry-After from the measured drain rate. */
  newModelGuard(now: number): ModelQueueGuard {
    return new ModelQueueGuard(this.backpressure, now);
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
        this.listenPort = uWS.us_socket_local_port(socket);
        resolve(this.listenPort);
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
      // Above our own slow-consumer limit, so that limit (warn, then 1013) always acts first.
      maxBackpressure:
        this.options.backpressure.slowConsumerCloseBytes + 2 * this.options.maxPayloadBytes + 1024 * 1024,
      upgrade: (res, req, context) => {
        if (this.draining) {
          res.writeStatus('503 Service Unavailable').end('server is shutting down');
          return;
        }
        res.upgrade<Connection>(
          { id: this.nextConnectionId++, closed: false, client: this.newClient(clock()) },
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
      drain: (ws) => {
        // The client caught up: let the slow-consumer episode end.
        ws.getUserData().client.observeBufferedAmount(ws.getBufferedAmount());
      },
      close: (ws) => {
        ws.getUserData().closed = true;
        this.sockets.delete(ws);
      },
    });
    this.app.post('/predict', (res, req) => this.onHttpInfer(res, req, undefined));
    this.app.post('/v2/models/:name/infer', (res, req) =>
      this.onHttpInfer(res, req, {
        model: decodeURIComponent(req.getParameter(0) ?? ''),
        version: undefined,
      }),
    );
    this.app.post('/v2/models/:name/versions/:version/infer', (res, req) =>
      this.onHttpInfer(res, req, {
        model: decodeURIComponent(req.getParameter(0) ?? ''),
        version: decodeURIComponent(req.getParameter(1) ?? ''),
      }),
    );
    this.app.get('/v2/models/:name', (res, req) =>
      this.onV2Model(res, decodeURIComponent(req.getParameter(0) ?? ''), undefined, false),
    );
    this.app.get('/v2/models/:name/ready', (res, req) =>
      this.onV2Model(res, decodeURIComponent(req.getParameter(0) ?? ''), undefined, true),
    );
    this.app.get('/v2/models/:name/versions/:version', (res, req) =>
      this.onV2Model(
        res,
        decodeURIComponent(req.getParameter(0) ?? ''),
        decodeURIComponent(req.getParameter(1) ?? ''),
        false,
      ),
    );
    this.app.get('/v2/models/:name/versions/:version/ready', (res, req) =>
      this.onV2Model(
        res,
        decodeURIComponent(req.getParameter(0) ?? ''),
        decodeURIComponent(req.getParameter(1) ?? ''),
        true,
      ),
    );
    this.app.get('/v2', (res) =>
      this.replyHttp(
        res,
        undefined,
        200,
        JSON.stringify({ name: 'streaminfer', version: SERVER_VERSION, extensions: [] }),
      ),
    );
    this.app.any('/predict', (res) =>
      this.replyHttp(res, undefined, 405, encodeError(null, 'method_not_allowed', 'use POST /predict')),
    );
    for (const pattern of ['/health', '/metrics', '/api/*', '/v2/health/*']) {
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
    if (message.byteLength > this.options.maxPayloadBytes) {
      const id = isBinary ? null : sniffId(message);
      this.fail(
        ws,
        undefined,
        undefined,
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
    const client = ws.getUserData().client;
    if (isBinary) {
      // Tensor frame: its byte views are valid only during this callback, and admission copies them now.
      const request = this.decodeOrFail(
        () => decodeBinaryRequest(message, { model: this.defaultModel }),
        startedAt,
        ws,
      );
      if (request) this.admitDecoded(request, request, startedAt, ws, undefined, undefined, client);
      return;
    }
    // The ArrayBuffer is only valid during this callback: decoding copies it into a string.
    this.admit(decoder.decode(message), startedAt, ws, undefined, undefined, client);
  }

  // ---------------------------------------------------------------- HTTP

  /**
   * One HTTP inference request: `/predict` (our JSON) or, with `v2`, the Open Inference Protocol's
   * `/v2/models/{name}[/versions/{v}]/infer`. Same limits and admission as WebSocket requests.
   */
  private onHttpInfer(
    res: uWS.HttpResponse,
    req: uWS.HttpRequest,
    v2: { model: string; version: string | undefined } | undefined,
  ): void {
    const startedAt = clock();
    const state: HttpState = { aborted: false, v2: v2 !== undefined };
    res.onAborted(() => {
      state.aborted = true;
    });
    const clientKey = this.httpClientKey(res, req);
    const declared = Number(req.getHeader('content-length') || '0');
    const tooLarge = (): void => {
      this.fail(
        undefined,
        res,
        state,
        null,
        UNROUTED_SLOT,
        startedAt,
        new ProtocolError('payload_too_large', `body exceeds the ${this.options.maxPayloadBytes}-byte limit`),
        true,
      );
    };
    if (declared > this.options.maxPayloadBytes) {
      tooLarge();
      return;
    }
    this.readBody(res, state, (body) => {
      if (body === undefined) {
        tooLarge();
        return;
      }
      const client = this.httpClients.get(clientKey, clock());
      if (!v2) {
        this.admit(body, startedAt, undefined, res, state, client);
        return;
      }
      const model = this.models.get(v2.model);
      if (!model) {
        this.fail(
          undefined,
          res,
          state,
          null,
          UNROUTED_SLOT,
          startedAt,
          new ProtocolError(
            'unknown_model',
            `unknown model "${v2.model}"; available: ${[...this.models.keys()].join(', ')}`,
          ),
        );
        return;
      }
      const request = this.decodeOrFail(
        () => decodeV2Request(body, v2.model, v2.version, model.entry.signature),
        startedAt,
        undefined,
        res,
        state,
      );
      if (request) this.admitDecoded(request, undefined, startedAt, undefined, res, state, client);
    });
  }

  /** Open Inference Protocol metadata and readiness, answered from this node's model table (the host's). */
  private onV2Model(res: uWS.HttpResponse, name: string, version: string | undefined, ready: boolean): void {
    const model = this.models.get(name);
    const loaded = model !== undefined && (version === undefined || model.versions.has(version));
    if (ready) {
      this.replyHttp(
        res,
        undefined,
        loaded && !this.draining ? 200 : 404,
        JSON.stringify({ name, ready: loaded && !this.draining }),
      );
      return;
    }
    if (!model || !loaded) {
      this.replyHttp(
        res,
        undefined,
        404,
        encodeV2Error(
          model ? 'unknown_version' : 'unknown_model',
          `no model "${name}"${version ? ` version "${version}"` : ''} loaded`,
        ),
      );
      return;
    }
    const versions = version === undefined ? [...model.versions.keys()] : [version];
    this.replyHttp(
      res,
      undefined,
      200,
      JSON.stringify(v2ModelMetadata(name, versions, model.entry.signature)),
    );
  }

  /** An HTTP client is its address, or the first X-Forwarded-For hop when the operator trusts the proxy. */
  private httpClientKey(res: uWS.HttpResponse, req: uWS.HttpRequest): string {
    if (this.options.backpressure.trustForwardedFor) {
      const forwarded = req.getHeader('x-forwarded-for');
      if (forwarded) return forwarded.split(',')[0]!.trim();
    }
    return decoder.decode(res.getRemoteAddressAsText());
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
    client: ClientState,
  ): void {
    const request = this.decodeOrFail(
      () => decodeRequest(text, { model: this.defaultModel }),
      startedAt,
      ws,
      res,
      http,
    );
    if (request) this.admitDecoded(request, undefined, startedAt, ws, res, http, client);
  }

  /** Runs a decoder; a malformed request is answered right here (with its id when readable) and yields undefined. */
  private decodeOrFail<T>(
    decode: () => T,
    startedAt: number,
    ws: uWS.WebSocket<Connection> | undefined,
    res?: uWS.HttpResponse,
    http?: HttpState,
  ): T | undefined {
    try {
      return decode();
    } catch (error) {
      const id = error instanceof RequestError ? error.requestId : null;
      this.fail(ws, res, http, id, UNROUTED_SLOT, startedAt, asProtocolError(error));
      return undefined;
    }
  }

  /**
   * Admission, the same for every protocol: route → client limits (rate, in-flight) → model queue bound by
   * priority → validate against the model → one record into the ring of the request's priority.
   */
  private admitDecoded(
    request: InferenceRequest,
    binary: BinaryRequest | undefined,
    startedAt: number,
    ws: uWS.WebSocket<Connection> | undefined,
    res: uWS.HttpResponse | undefined,
    http: HttpState | undefined,
    client: ClientState,
  ): void {
    let slot = UNROUTED_SLOT;
    try {
      if (this.draining) {
        this.metrics.recordShed(slot, SHED.shutting_down);
        throw new ProtocolError('unavailable', 'server is shutting down; retry on another instance');
      }
      const runtime = this.resolve(request);
      slot = runtime.slot;
      this.metrics.recordRoute(slot, ROUTE_INDEX[this.decision.route]);
      const now = clock();
      const clientDecision = client.tryAcquire(now);
      if (clientDecision === AdmissionCode.RateLimited) {
        this.metrics.recordShed(slot, SHED.rate_limited);
        throw new ProtocolError(
          'rate_limited',
          `more than ${this.options.backpressure.rateLimitRps} requests per second from this client`,
          client.retryAfterMs,
        );
      }
      if (clientDecision === AdmissionCode.ClientQueueFull) {
        this.metrics.recordShed(slot, SHED.client_queue_full);
        throw new ProtocolError(
          'client_queue_full',
          `this client already has ${client.inflight} requests in flight (limit ${this.options.backpressure.maxInflightPerClient}); wait for answers`,
        );
      }
      if (runtime.guard.tryAdmit(runtime.admitted, request.priority, now) === AdmissionCode.ModelQueueFull) {
        this.metrics.recordShed(slot, SHED.model_queue_full);
        throw new ProtocolError(
          'overloaded',
          `model ${runtime.model.name} version ${runtime.version} is at its queue limit for ${request.priority} priority`,
          runtime.guard.retryAfterMs,
        );
      }
      const bound = binary
        ? bindBinaryRequest(binary, runtime.model.signature, this.bindLimits)
        : bindRequest(request, runtime.model.signature, this.bindLimits);
      const length = requestRecordBytes(bound);
      const ring = runtime.rings[PRIORITY_CODE[request.priority]]!;
      if (length > ring.maxRecordBytes) {
        throw new ProtocolError(
          'payload_too_large',
          `request of ${length} bytes exceeds the model's record limit`,
        );
      }
      const offset = ring.reserve(length);
      if (offset < 0) {
        this.metrics.recordShed(slot, SHED.ring_full);
        throw new ProtocolError(
          'overloaded',
          `model ${runtime.model.name} version ${runtime.version} queue is full`,
          runtime.guard.estimateRetryAfterMs(runtime.admitted, now),
        );
      }
      const requestId = this.nextRequestId;
      this.nextRequestId = this.nextRequestId >= 0xfffffffe ? 1 : this.nextRequestId + 1;
      const deadlineAt = resolveDeadline(
        request.deadlineMs,
        this.options.requestTimeoutMs,
        MAX_DEADLINE_MS,
        startedAt,
      );
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
      runtime.admitted++;
      const shadowVersion = this.decision.shadowVersion;
      const pair =
        shadowVersion !== undefined
          ? this.mirror(runtime, shadowVersion, bound, startedAt, deadlineAt, now)
          : undefined;
      this.epochPending.set(this.epoch, (this.epochPending.get(this.epoch) ?? 0) + 1);
      this.pending.set(requestId, {
        shadow: pair,
        shadowSide: false,
        epoch: this.epoch,
        clientId: request.id,
        slot,
        startedAt,
        deadlineAt,
        ws,
        res,
        http,
        client,
        binary: binary !== undefined,
      });
      this.metrics.addInflight(slot, 1);
      if (client.onAdmitted() && ws) {
        this.counters.inflightWarnings++;
        this.sendWs(
          ws,
          encodeWarning(
            CONSUMER_FALLING_BEHIND,
            `${client.inflight} requests in flight; at ${this.options.backpressure.maxInflightPerClient} new ones are rejected`,
          ),
          false,
        );
      }
    } catch (error) {
      this.fail(ws, res, http, request.id, slot, startedAt, asProtocolError(error));
    }
  }

  /**
   * Waking a worker costs a cross-thread notify, so it happens at most twice per event-loop turn and lane:
   * at the first request of the turn (the worker starts at once, in parallel with the rest of the turn) and,
   * if more requests followed, once at the end of the turn (the worker claims them as one batch).
   */
  private scheduleNotify(doorbell: Doorbell): void {
    if (!this.rungThisTurn.has(doorbell)) {
      this.rungThisTurn.add(doorbell);
      doorbell.ring();
    } else {
      this.ringsToNotify.add(doorbell);
    }
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(this.flushNotifies);
  }

  private readonly flushNotifies = (): void => {
    this.notifyScheduled = false;
    for (const doorbell of this.ringsToNotify) doorbell.ring();
    this.ringsToNotify.clear();
    this.rungThisTurn.clear();
  };

  private resolve(request: InferenceRequest): SlotRuntime {
    const name = request.model ?? this.defaultModel;
    const model = this.models.get(name);
    if (!model) {
      throw new ProtocolError(
        'unknown_model',
        `unknown model "${name}"; available: ${[...this.models.keys()].join(', ')}`,
      );
    }
    const draw = request.routingKey !== undefined ? routingKeyDraw(request.routingKey) : Math.random();
    let decision: RouteDecision;
    try {
      decision = route(model, request.version, draw, this.decision);
    } catch (error) {
      throw new ProtocolError('unknown_version', `model "${name}": ${(error as Error).message}`);
    }
    const runtime = model.versions.get(decision.version);
    if (!runtime) {
      const known = model.entry.versions.some((entry) => entry.version === decision.version);
      throw new ProtocolError(
        'unknown_version',
        known
          ? `model "${name}" version "${decision.version}" is not loaded; loaded: ${[...model.versions.keys()].join(', ')}`
          : `model "${name}" has no version "${decision.version}"; loaded: ${[...model.versions.keys()].join(', ')}`,
      );
    }
    return runtime;
  }

  /**
   * Shadow: a copy of a stable-served request goes to the candidate at the lowest priority (first to be
   * shed). Its answer is compared with the stable one and never sent. Returns the pair both sides fill.
   */
  private mirror(
    primary: SlotRuntime,
    version: string,
    bound: BoundRequest,
    startedAt: number,
    deadlineAt: number,
    now: number,
  ): ShadowPair | undefined {
    const target = this.models.get(primary.model.name)?.versions.get(version);
    const stats = this.shadowStats(primary.model.name);
    if (!target || target.guard.tryAdmit(target.admitted, 'shadow', now) !== AdmissionCode.Admit) {
      stats.skipped++;
      return undefined;
    }
    const ring = target.rings[0]!;
    const length = requestRecordBytes(bound);
    const offset = length <= ring.maxRecordBytes ? ring.reserve(length) : -1;
    if (offset < 0) {
      stats.skipped++;
      return undefined;
    }
    const requestId = this.nextRequestId;
    this.nextRequestId = this.nextRequestId >= 0xfffffffe ? 1 : this.nextRequestId + 1;
    try {
      writeRequestRecord(
        ring.view,
        ring.bytes,
        offset,
        { requestId, slot: target.slot, priority: 'low', enqueuedAt: startedAt, deadlineAt },
        bound,
      );
    } finally {
      ring.commit(undefined, false);
      this.scheduleNotify(target.doorbell);
    }
    target.admitted++;
    const pair: ShadowPair = {
      model: primary.model.name,
      classifier: primary.model.signature.labels !== undefined,
      primary: undefined,
      candidate: undefined,
      open: 2,
    };
    this.pending.set(requestId, {
      shadow: pair,
      shadowSide: true,
      epoch: this.epoch,
      clientId: null,
      slot: target.slot,
      startedAt,
      deadlineAt,
      ws: undefined,
      res: undefined,
      http: undefined,
      client: undefined,
      binary: false,
    });
    this.metrics.addInflight(target.slot, 1);
    return pair;
  }

  private shadowStats(model: string): { agree: number; disagree: number; skipped: number } {
    let stats = this.shadowCounters.get(model);
    if (!stats) {
      stats = { agree: 0, disagree: 0, skipped: 0 };
      this.shadowCounters.set(model, stats);
    }
    return stats;
  }

  /** One side of a shadow pair answered (undefined = it failed): compare once both have. */
  private settleShadow(
    pair: ShadowPair,
    side: 'primary' | 'candidate',
    output: Float32Array | undefined,
  ): void {
    pair[side] = output;
    pair.open--;
    if (pair.open > 0) return;
    const stats = this.shadowStats(pair.model);
    if (!pair.primary || !pair.candidate) {
      stats.skipped++;
      return;
    }
    if (outputsAgree(pair.primary, pair.candidate, pair.classifier)) stats.agree++;
    else stats.disagree++;
  }

  private fail(
    ws: uWS.WebSocket<Connection> | undefined,
    res: uWS.HttpResponse | undefined,
    http: HttpState | undefined,
    id: RequestId,
    slot: number,
    startedAt: number,
    error: ProtocolError,
    close = false,
  ): void {
    const protocol = ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    this.metrics.recordRequest(slot, protocol, errorCodeIndex(error.code), (clock() - startedAt) / 1000);
    const body = http?.v2
      ? encodeV2Error(error.code, error.message)
      : encodeError(id, error.code, error.message, error.retryAfterMs);
    if (ws) {
      this.sendWs(ws, body, false);
      return;
    }
    if (res) {
      const headers =
        error.retryAfterMs !== undefined
          ? { 'retry-after': String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))) }
          : undefined;
      this.replyHttp(res, http, httpStatusOf(error.code), body, close, headers);
    }
  }

  /**
   * Every WebSocket send goes through here: corked, never on a closed socket, and followed by the
   * slow-consumer check — a client that stops reading is warned, then closed with 1013, so its unsent
   * answers never grow server memory without bound.
   */
  private sendWs(ws: uWS.WebSocket<Connection>, message: string | Uint8Array, isBinary: boolean): void {
    const connection = ws.getUserData();
    if (connection.closed) return;
    ws.cork(() => {
      ws.send(message, isBinary);
    });
    const signal = connection.client.observeBufferedAmount(ws.getBufferedAmount());
    if (signal === ConsumerSignal.Ok) return;
    if (signal === ConsumerSignal.Warn) {
      this.counters.slowConsumerWarnings++;
      ws.cork(() => {
        ws.send(
          encodeWarning(
            'slow_consumer',
            `${ws.getBufferedAmount()} bytes of answers are waiting for you to read them; at ${this.options.backpressure.slowConsumerCloseBytes} the connection is closed (1013)`,
          ),
          false,
        );
      });
      return;
    }
    this.counters.slowConsumerCloses++;
    this.metrics.recordShed(UNROUTED_SLOT, SHED.slow_consumer);
    connection.closed = true;
    this.logger.warn(
      { connection: connection.id, buffered: ws.getBufferedAmount() },
      'slow consumer closed (1013)',
    );
    ws.end(SLOW_CONSUMER_CLOSE_CODE, 'slow consumer: unread answers passed the limit');
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
    if (pending.shadow) {
      this.settleShadow(
        pending.shadow,
        pending.shadowSide ? 'candidate' : 'primary',
        status === 0 ? readFirstOutput(view, offset) : undefined,
      );
      if (pending.shadowSide) {
        this.finishInternal(pending);
        return true;
      }
    }
    const protocol = pending.ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    let body: string | Uint8Array;
    let httpStatus = 200;
    if (status === 0 && pending.http?.v2) {
      body = encodeV2Response(
        runtime.model.name,
        runtime.version,
        typeof pending.clientId === 'string' ? pending.clientId : null,
        decodeOutputsFlat(ring.bytes, view, offset, runtime.model.signature),
      );
      this.metrics.recordQueueAndCompute(
        pending.slot,
        readQueueMs(view, offset) / 1000,
        readComputeMs(view, offset) / 1000,
      );
    } else if (status === 0 && pending.binary) {
      body = encodeBinaryAnswer(ring.bytes, view, offset, runtime.model.signature, {
        id: pending.clientId,
        model: runtime.model.name,
        version: runtime.version,
        epoch: pending.epoch,
        latency_ms: latencyMs,
      });
      this.metrics.recordQueueAndCompute(
        pending.slot,
        readQueueMs(view, offset) / 1000,
        readComputeMs(view, offset) / 1000,
      );
    } else if (status === 0) {
      const result = decodeResult(ring.bytes, view, offset, runtime.model.signature);
      if (runtime.resultHeadEpoch !== pending.epoch) {
        runtime.resultHead = encodeResultHead(runtime.model.name, runtime.version, pending.epoch);
        runtime.resultHeadEpoch = pending.epoch;
      }
      body = encodeResultWithHead(pending.clientId, runtime.resultHead, result, latencyMs);
      this.metrics.recordQueueAndCompute(
        pending.slot,
        readQueueMs(view, offset) / 1000,
        readComputeMs(view, offset) / 1000,
      );
    } else {
      const error = readErrorResponse(ring.bytes, view, offset);
      body = pending.http?.v2
        ? encodeV2Error(error.code, error.message)
        : encodeError(pending.clientId, error.code, error.message);
      httpStatus = httpStatusOf(error.code);
    }
    this.metrics.recordRequest(pending.slot, protocol, status, latencyMs / 1000);
    this.complete(pending, body, httpStatus);
    return true;
  };

  private complete(pending: Pending, body: string | Uint8Array, httpStatus: number): void {
    this.metrics.addInflight(pending.slot, -1);
    this.answered++;
    const runtime = this.slots[pending.slot];
    if (runtime) {
      runtime.admitted--;
      runtime.guard.onCompleted(1, clock());
    }
    pending.client?.onCompleted();
    const left = (this.epochPending.get(pending.epoch) ?? 1) - 1;
    if (left > 0) this.epochPending.set(pending.epoch, left);
    else this.epochPending.delete(pending.epoch);
    if (this.olderEpochPending(pending.epoch)) {
      // A reload committed while older requests are still computing: hold answers of the new epoch until
      // the old ones are out, so no connection sees an old-version answer after a new-version one.
      this.deferred.push({ pending, body, httpStatus });
    } else {
      this.deliver(pending, body, httpStatus);
      if (this.deferred.length > 0) this.flushDeferred();
    }
    if (this.pending.size === 0) this.onIdle?.();
  }

  private deliver(pending: Pending, body: string | Uint8Array, httpStatus: number): void {
    if (pending.ws) this.sendWs(pending.ws, body, typeof body !== 'string');
    else if (pending.res) this.replyHttp(pending.res, pending.http, httpStatus, body as string);
  }

  /** Whether requests routed in an epoch before `epoch` are still unanswered. */
  private olderEpochPending(epoch: number): boolean {
    if (this.epochPending.size === 0) return false;
    for (const older of this.epochPending.keys()) if (older < epoch) return true;
    return false;
  }

  private flushDeferred(): void {
    const held = this.deferred;
    this.deferred = [];
    held.sort((a, b) => a.pending.epoch - b.pending.epoch);
    for (const entry of held) {
      if (this.olderEpochPending(entry.pending.epoch)) this.deferred.push(entry);
      else this.deliver(entry.pending, entry.body, entry.httpStatus);
    }
  }

  /** Bookkeeping for a shadow copy that finished: nobody is answered. */
  private finishInternal(pending: Pending): void {
    this.metrics.addInflight(pending.slot, -1);
    const runtime = this.slots[pending.slot];
    if (runtime) {
      runtime.admitted--;
      runtime.guard.onCompleted(1, clock());
    }
    if (this.pending.size === 0) this.onIdle?.();
  }

  /** Answers a request the workers will never answer (dead worker, sweeper, shutdown timeout). */
  answerWithError(requestId: number, code: ErrorCode, message: string): boolean {
    const pending = this.pending.get(requestId);
    if (!pending) return false;
    this.pending.delete(requestId);
    if (pending.shadow)
      this.settleShadow(pending.shadow, pending.shadowSide ? 'candidate' : 'primary', undefined);
    if (pending.shadowSide) {
      this.finishInternal(pending);
      return true;
    }
    const protocol = pending.ws ? PROTOCOL_WS : PROTOCOL_HTTP;
    this.metrics.recordRequest(
      pending.slot,
      protocol,
      errorCodeIndex(code),
      (clock() - pending.startedAt) / 1000,
    );
    const body = pending.http?.v2
      ? encodeV2Error(code, message)
      : encodeError(pending.clientId, code, message);
    this.complete(pending, body, httpStatusOf(code));
    return true;
  }

  private async drainResponses(): Promise<void> {
    const ring = this.responses;
    while (this.drainLoopRunning) {
      const sequence = ring.writeSequence();
      if (ring.pendingRecords() === 0) {
        // The uWS sockets keep this process alive: no timer per wait.
        await ring.waitForData(sequence, 500, false);
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
    return [...this.models.values()].map(
      ({ entry, versions, stable, candidate, previousStable, canaryFraction, shadow }) => {
        const status: ModelStatus = {
          name: entry.name,
          description: entry.description,
          defaultVersion: stable,
          aliases: {
            stable,
            ...(candidate ? { candidate } : {}),
            ...(previousStable ? { previous_stable: previousStable } : {}),
          },
          canaryPercent: Math.round(canaryFraction * 10000) / 100,
          shadow,
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
      },
    );
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
        alias: this.models.get(runtime.model.name)?.stable === runtime.version ? 'stable' : '',
      });
    }
    const metrics = nodeMetricsJson(buffer, slots, { wsConnections: this.sockets.size, epoch: this.epoch });
    metrics.push(
      metricJson(
        'streaminfer_client_warnings_total',
        'Warnings sent to clients: consumer_falling_behind (in flight past 80% of the cap), slow_consumer (unread answers).',
        'counter',
        [
          { value: this.counters.inflightWarnings, labels: { code: 'consumer_falling_behind' } },
          { value: this.counters.slowConsumerWarnings, labels: { code: 'slow_consumer' } },
        ],
      ),
      metricJson(
        'streaminfer_shadow_comparisons_total',
        'Shadow mode: candidate answers compared with the stable answer (top-1 for classifiers).',
        'counter',
        [...this.shadowCounters].flatMap(([model, stats]) => [
          { value: stats.agree, labels: { model, agree: 'true' } },
          { value: stats.disagree, labels: { model, agree: 'false' } },
        ]),
      ),
      metricJson(
        'streaminfer_shadow_skipped_total',
        'Shadow copies not compared: shed under load (they go first) or failed.',
        'counter',
        [...this.shadowCounters].map(([model, stats]) => ({ value: stats.skipped, labels: { model } })),
      ),
      metricJson(
        'streaminfer_model_alias',
        'Registry aliases: which version stable, candidate and previous_stable point at.',
        'gauge',
        [...this.models.values()].flatMap((model) =>
          (
            [
              ['stable', model.stable],
              ['candidate', model.candidate],
              ['previous_stable', model.previousStable],
            ] as const
          )
            .filter(([, version]) => version !== undefined)
            .map(([alias, version]) => ({
              value: 1,
              labels: { model: model.entry.name, alias, version: version! },
            })),
        ),
        'max',
      ),
      metricJson(
        'streaminfer_canary_fraction',
        'Share of unpinned requests routed to the candidate.',
        'gauge',
        [...this.models.values()].map((model) => ({
          value: model.canaryFraction,
          labels: { model: model.entry.name },
        })),
        'max',
      ),
      metricJson(
        'streaminfer_slow_consumer_closes_total',
        'WebSocket clients closed with 1013 because their unread answers passed the limit.',
        'counter',
        [{ value: this.counters.slowConsumerCloses, labels: {} }],
      ),
    );
    return metrics;
  }

  /** Rolling reload: no new connections here while this node swaps (the other nodes take them). */
  stopListening(): void {
    if (this.listenSocket) {
      uWS.us_listen_socket_close(this.listenSocket);
      this.listenSocket = undefined;
    }
  }

  async resumeListening(): Promise<void> {
    if (this.listenSocket || this.draining) return;
    await this.listen(this.options.host, this.listenPort);
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

  /**
   * A configuration reload, at COMMIT: new payload limit, default deadline, rate limit, in-flight cap and model
   * queue bound for every client and model version from the next request on (requests already admitted keep
   * their deadline). The WebSocket layer's own frame and buffer caps and the slow-consumer thresholds are
   * fixed at start: the supervisor never changes those here (it reports them as needing a restart).
   */
  applySettings(settings: NodeSettings): void {
    const backpressure = validateBackpressureOptions({
      rateLimitRps: settings.backpressure.rateLimitRps,
      rateLimitBurst: settings.backpressure.rateLimitBurst,
      maxInflightPerClient: settings.backpressure.maxInflightPerClient,
      maxModelQueue: settings.backpressure.maxModelQueue,
      slowConsumerWarnBytes: this.backpressure.slowConsumerWarnBytes,
      slowConsumerCloseBytes: this.backpressure.slowConsumerCloseBytes,
    });
    const options = this.options;
    options.batch = settings.batch;
    options.maxPayloadBytes = settings.maxPayloadBytes;
    options.requestTimeoutMs = settings.requestTimeoutMs;
    options.shutdownTimeoutMs = settings.shutdownTimeoutMs;
    options.logLevel = settings.logLevel;
    options.backpressure = {
      ...settings.backpressure,
      slowConsumerWarnBytes: options.backpressure.slowConsumerWarnBytes,
      slowConsumerCloseBytes: options.backpressure.slowConsumerCloseBytes,
    };
    this.bindLimits.maxElements = Math.floor(settings.maxPayloadBytes / 4);
    this.backpressure = backpressure;
    const now = clock();
    for (const ws of this.sockets) ws.getUserData().client.reconfigure(backpressure, now);
    this.httpClients.forEachState((client) => client.reconfigure(backpressure, now));
    for (const runtime of this.slots)
      if (runtime) runtime.guard = runtime.guard.reconfigured(backpressure, now);
  }
}

interface ShadowPair {
  model: string;
  classifier: boolean;
  primary: Float32Array | undefined;
  candidate: Float32Array | undefined;
  /** Sides still to answer. */
  open: number;
}

const ROUTE_INDEX: Record<RouteKind, number> = { stable: 0, canary: 1, pinned: 2 };
/** Regressors agree when every output is within this relative tolerance. */
const SHADOW_TOLERANCE = 1e-4;

/** Top-1 agreement for classifiers; element-wise tolerance for everything else. */
export function outputsAgree(a: Float32Array, b: Float32Array, classifier: boolean): boolean {
  if (classifier) return argmax(a) === argmax(b);
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (Math.abs(a[i]! - b[i]!) > SHADOW_TOLERANCE * Math.max(1, Math.abs(a[i]!))) return false;
  }
  return true;
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
