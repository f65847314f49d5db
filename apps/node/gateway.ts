/**
 * The gateway: this node's main thread. Terminates WebSocket and HTTP (uWebSockets.js), decodes and validates
 * requests, writes them into the request ring of their model version, drains the shared response ring and
 * answers. It never runs a model; control endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
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
  ShadowOutput,
} from '../../libs/protocol';
import {
  bindBinaryRequest,
  bindRequest,
  decodeBinaryRequest,
  decodeOutputsFlat,
  decodePathSegment,
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
  outputsAgree,
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
import { sharedClock as clock, type Doorbell, type RingBuffer } from '../../libs/ring';
import type { EpochHoldLimits, HoldRelease } from './epoch-order';
import { EPOCH_HOLD_MAX_BYTES, EPOCH_HOLD_MAX_MS, EpochOrder } from './epoch-order';
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
import { TransportGuard } from './transport-guard';

const SERVER_VERSION: string = (require('../../../package.json') as { version: string }).version;
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
  /** Answer order across a reload: newer-epoch answers held (bounded) behind this connection's older ones. */
  order: EpochOrder<HeldAnswer>;
}

interface HeldAnswer {
  pending: Pending;
  body: string | Uint8Array;
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
  /** The WebSocket connection's state (undefined for HTTP and shadow copies): kept here, since a closed
   * uWS socket may no longer be asked for it. */
  connection: Connection | undefined;
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
  readonly counters = {
    inflightWarnings: 0,
    slowConsumerWarnings: 0,
    slowConsumerCloses: 0,
    answersHeld: 0,
    holdReleases: { time: 0, bytes: 0 } as Record<HoldRelease, number>,
  };
  /** Every uWS callback runs behind it: an exception answers 500 / closes one socket, never the node. */
  readonly guard: TransportGuard;
  private readonly holdLimits: EpochHoldLimits;
  /** WebSocket connections with answers held across a reload (see EpochOrder), for the time bound. */
  private readonly heldConnections = new Map<Connection, uWS.WebSocket<Connection>>();
  private holdTimer: NodeJS.Timeout | undefined;
  /** The request the drain loop is answering, so a failure there still answers it. */
  private answering: Pending | undefined;
  private readonly shadowCounters = new Map<string, { agree: number; disagree: number; skipped: number }>();
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
    this.guard = new TransportGuard(logger);
    // Tests shorten the time bound (STREAMINFER_TEST_HOLD_MS, honoured only with test hooks on).
    const testHoldMs = options.testHooks ? Number(process.env.STREAMINFER_TEST_HOLD_MS) : Number.NaN;
    this.holdLimits = {
      maxHoldMs: testHoldMs > 0 ? testHoldMs : EPOCH_HOLD_MAX_MS,
      maxHoldBytes: EPOCH_HOLD_MAX_BYTES,
    };
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
    const guard = this.guard;
    this.app.ws<Connection>(
      '/ws',
      this.wsBehavior('/ws', (ws, message, isBinary) => this.onWsMessage(ws, message, isBinary)),
    );
    this.app.post(
      '/predict',
      guard.http('POST /predict', (res, req) => this.onHttpInfer(res, req, undefined, 'POST /predict')),
    );
    this.v2Route('post', '/v2/models/:name/infer', (res, req, name, version, route) =>
      this.onHttpInfer(res, req, { model: name, version }, route),
    );
    this.v2Route('post', '/v2/models/:name/versions/:version/infer', (res, req, name, version, route) =>
      this.onHttpInfer(res, req, { model: name, version }, route),
    );
    this.v2Route('get', '/v2/models/:name', (res, _req, name, version) =>
      this.onV2Model(res, name, version, false),
    );
    this.v2Route('get', '/v2/models/:name/ready', (res, _req, name, version) =>
      this.onV2Model(res, name, version, true),
    );
    this.v2Route('get', '/v2/models/:name/versions/:version', (res, _req, name, version) =>
      this.onV2Model(res, name, version, false),
    );
    this.v2Route('get', '/v2/models/:name/versions/:version/ready', (res, _req, name, version) =>
      this.onV2Model(res, name, version, true),
    );
    this.app.get(
      '/v2',
      guard.http('GET /v2', (res) =>
        this.replyHttp(
          res,
          undefined,
          200,
          JSON.stringify({ name: 'streaminfer', version: SERVER_VERSION, extensions: [] }),
        ),
      ),
    );
    this.app.any(
      '/predict',
      guard.http('ANY /predict', (res) =>
        this.replyHttp(res, undefined, 405, encodeError(null, 'method_not_allowed', 'use POST /predict')),
      ),
    );
    for (const pattern of ['/health', '/metrics', '/api/*', '/v2/health/*']) {
      const route = `ANY ${pattern}`;
      this.app.any(
        pattern,
        guard.http(route, (res, req) => this.onControl(res, req, route)),
      );
    }
    if (this.options.testHooks) this.testRoutes();
    this.app.any(
      '/*',
      guard.http('ANY /*', (res, req) => {
        const path = req.getUrl();
        this.replyHttp(
          res,
          undefined,
          404,
          encodeError(null, 'not_found', `no route for ${req.getMethod().toUpperCase()} ${path}`),
        );
      }),
    );
  }

  /**
   * The WebSocket behaviour of a route, every callback behind the guard: a failure closes only that socket
   * (1011). Built once per route; the message path adds a try/catch and nothing else.
   */
  private wsBehavior(
    path: string,
    onMessage: (ws: uWS.WebSocket<Connection>, message: ArrayBuffer, isBinary: boolean) => void,
  ): uWS.WebSocketBehavior<Connection> {
    const guard = this.guard;
    const upgradeRoute = `ws ${path} upgrade`;
    const openRoute = `ws ${path} open`;
    const messageRoute = `ws ${path} message`;
    const drainRoute = `ws ${path} drain`;
    const closeRoute = `ws ${path} close`;
    return {
      maxPayloadLength: this.hardFrameLimit,
      idleTimeout: 120,
      sendPingsAutomatically: true,
      // Above our own slow-consumer limit, so that limit (warn, then 1013) always acts first.
      maxBackpressure:
        this.options.backpressure.slowConsumerCloseBytes + 2 * this.options.maxPayloadBytes + 1024 * 1024,
      upgrade: (res, req, context) => {
        try {
          if (this.draining) {
            res.writeStatus('503 Service Unavailable').end('server is shutting down');
            return;
          }
          res.upgrade<Connection>(
            {
              id: this.nextConnectionId++,
              closed: false,
              client: this.newClient(clock()),
              order: new EpochOrder<HeldAnswer>(this.holdLimits),
            },
            req.getHeader('sec-websocket-key'),
            req.getHeader('sec-websocket-protocol'),
            req.getHeader('sec-websocket-extensions'),
            context,
          );
        } catch (error) {
          guard.httpFailed(upgradeRoute, res, error);
        }
      },
      open: (ws) => {
        try {
          this.sockets.add(ws);
        } catch (error) {
          guard.wsFailed(openRoute, ws, error);
        }
      },
      message: (ws, message, isBinary) => {
        try {
          onMessage(ws, message, isBinary);
        } catch (error) {
          guard.wsFailed(messageRoute, ws, error);
        }
      },
      drain: (ws) => {
        try {
          // The client caught up: let the slow-consumer episode end.
          const connection = ws.getUserData();
          connection.client.observeBufferedAmount(ws.getBufferedAmount() + connection.order.heldBytes);
        } catch (error) {
          guard.wsFailed(drainRoute, ws, error);
        }
      },
      close: (ws) => {
        try {
          const connection = ws.getUserData();
          connection.closed = true;
          connection.order.clear();
          this.heldConnections.delete(connection);
          this.sockets.delete(ws);
        } catch (error) {
          guard.record(closeRoute, error);
        }
      },
    };
  }

  /**
   * An Open Inference Protocol route with `:name` (and `:version`) parameters: both are percent-decoded by
   * one helper, and a malformed escape is `400 bad_request`, never an exception.
   */
  private v2Route(
    method: 'get' | 'post',
    pattern: string,
    handler: (
      res: uWS.HttpResponse,
      req: uWS.HttpRequest,
      name: string,
      version: string | undefined,
      route: string,
    ) => void,
  ): void {
    const route = `${method.toUpperCase()} ${pattern}`;
    const hasVersion = pattern.includes(':version');
    this.app[method](
      pattern,
      this.guard.http(route, (res, req) => {
        const name = decodePathSegment(req.getParameter(0));
        const version = hasVersion ? decodePathSegment(req.getParameter(1)) : undefined;
        if (name === undefined || (hasVersion && version === undefined)) {
          this.replyHttp(
            res,
            undefined,
            400,
            encodeV2Error('bad_request', 'malformed percent-escape in the model name or version of the path'),
            method === 'post',
          );
          return;
        }
        handler(res, req, name, version, route);
      }),
    );
  }

  /**
   * STREAMINFER_TEST_HOOKS only: handlers that throw on purpose, so tests can prove the guard keeps the node
   * up. `/debug/throw` throws in the route handler (GET) or in the body callback (POST); `/debug/ws` throws
   * on every message.
   */
  private testRoutes(): void {
    this.app.any(
      '/debug/throw',
      this.guard.http('ANY /debug/throw', (res, req) => {
        if (req.getMethod() !== 'post') throw new Error('test hook: thrown in a route handler');
        const state: HttpState = { aborted: false };
        this.onAborted(res, state, 'ANY /debug/throw');
        this.readBody(res, state, 'ANY /debug/throw', () => {
          throw new Error('test hook: thrown in a body callback');
        });
      }),
    );
    this.app.ws<Connection>(
      '/debug/ws',
      this.wsBehavior('/debug/ws', () => {
        throw new Error('test hook: thrown in a WebSocket message handler');
      }),
    );
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
    const connection = ws.getUserData();
    const client = connection.client;
    if (isBinary) {
      // Tensor frame: its byte views are valid only during this callback, and admission copies them now.
      const request = this.decodeOrFail(
        () => decodeBinaryRequest(message, { model: this.defaultModel }),
        startedAt,
        ws,
      );
      if (request)
        this.admitDecoded(request, request, startedAt, ws, undefined, undefined, client, connection);
      return;
    }
    // The ArrayBuffer is only valid during this callback: decoding copies it into a string.
    this.admit(decoder.decode(message), startedAt, ws, undefined, undefined, client, connection);
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
    route: string,
  ): void {
    const startedAt = clock();
    const state: HttpState = { aborted: false, v2: v2 !== undefined };
    this.onAborted(res, state, route);
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
    this.readBody(res, state, route, (body) => {
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
      if (loaded && !this.draining) {
        this.replyHttp(res, undefined, 200, JSON.stringify({ name, ready: true }));
        return;
      }
      // Not ready: the same shape, plus the typed error every 4xx carries.
      const code = this.draining ? 'unavailable' : model ? 'unknown_version' : 'unknown_model';
      const error = this.draining
        ? 'server is shutting down'
        : `no model "${name}"${version ? ` version "${version}"` : ''} loaded`;
      this.replyHttp(res, undefined, 404, JSON.stringify({ name, ready: false, error, code }));
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

  /** Marks the request aborted when the client goes away (guarded like every uWS callback). */
  private onAborted(res: uWS.HttpResponse, state: HttpState, route: string): void {
    res.onAborted(() => {
      try {
        state.aborted = true;
      } catch (error) {
        this.guard.record(`${route} aborted`, error);
      }
    });
  }

  /**
   * Collects a request body (copying each chunk: uWS reuses them); undefined when it exceeds the limit.
   * `done` runs inside the body callback, so it is guarded here: a failure answers `500 internal`.
   */
  private readBody(
    res: uWS.HttpResponse,
    state: HttpState,
    route: string,
    done: (body: string | undefined) => void,
  ): void {
    const chunks: Buffer[] = [];
    let total = 0;
    let finished = false;
    res.onData((chunk, isLast) => {
      try {
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
      } catch (error) {
        finished = true;
        this.guard.httpFailed(`${route} body`, res, error);
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

  private onControl(res: uWS.HttpResponse, req: uWS.HttpRequest, route: string): void {
    const state: HttpState = { aborted: false };
    this.onAborted(res, state, route);
    const request: ControlRequest = {
      method: req.getMethod().toUpperCase(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      body: '',
      remoteAddress: decoder.decode(res.getRemoteAddressAsText()),
      authorization: req.getHeader('authorization'),
      forwardedFor: req.getHeader('x-forwarded-for'),
      forwarded: req.getHeader('forwarded'),
    };
    const forward = (): void => {
      this.hooks.forwardControl(request, (response) => {
        // Runs from the supervisor's IPC answer, outside any uWS callback: guarded the same way.
        try {
          if (state.aborted) return;
          res.cork(() => {
            res
              .writeStatus(httpStatusLine(response.status))
              .writeHeader('content-type', response.contentType);
            if (response.headers)
              for (const [name, value] of Object.entries(response.headers)) res.writeHeader(name, value);
            res.end(response.body);
          });
        } catch (error) {
          this.guard.httpFailed(`${route} reply`, res, error);
        }
      });
    };
    if (request.method === 'GET' || request.method === 'HEAD') {
      forward();
      return;
    }
    this.readBody(res, state, route, (body) => {
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
    connection?: Connection,
  ): void {
    const request = this.decodeOrFail(
      () => decodeRequest(text, { model: this.defaultModel }),
      startedAt,
      ws,
      res,
      http,
    );
    if (request) this.admitDecoded(request, undefined, startedAt, ws, res, http, client, connection);
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
    connection?: Connection,
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
      connection?.order.admitted(this.epoch);
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
        connection,
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
      connection: undefined,
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
    output: ShadowOutput | undefined,
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
    this.observeConsumer(ws, connection);
  }

  /** Unsent bytes (buffered by uWS, or held across a reload) against the slow-consumer limits. */
  private observeConsumer(ws: uWS.WebSocket<Connection>, connection: Connection): void {
    const signal = connection.client.observeBufferedAmount(
      ws.getBufferedAmount() + connection.order.heldBytes,
    );
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
      { connection: connection.id, buffered: ws.getBufferedAmount(), held: connection.order.heldBytes },
      'slow consumer closed (1013)',
    );
    ws.end(SLOW_CONSUMER_CLOSE_CODE, 'slow consumer: unread answers passed the limit');
  }

  // ---------------------------------------------------------------- responses

  /**
   * The drain loop is not a uWS callback, but a throw there would end the node just the same: guarded, and
   * the request being answered gets `internal` instead of nothing.
   */
  private readonly onResponse = (offset: number): boolean => {
    try {
      return this.answerResponse(offset);
    } catch (error) {
      this.guard.record('response', error);
      const pending = this.answering;
      this.answering = undefined;
      if (pending === undefined) return true;
      try {
        if (pending.shadowSide) this.finishInternal(pending);
        else
          this.complete(
            pending,
            pending.http?.v2
              ? encodeV2Error('internal', 'internal error while answering; it was logged')
              : encodeError(pending.clientId, 'internal', 'internal error while answering; it was logged'),
            500,
          );
      } catch (again) {
        this.guard.record('response', again);
      }
      return true;
    }
  };

  private answerResponse(offset: number): boolean {
    const ring = this.responses;
    const view = ring.view;
    const requestId = readResponseRequestId(view, offset);
    const pending = this.pending.get(requestId);
    if (!pending) return true; // answered already (sweeper, dead worker) — drop the late duplicate
    this.pending.delete(requestId);
    this.answering = pending;
    const now = clock();
    const latencyMs = now - pending.startedAt;
    const status = readResponseStatus(view, offset);
    const runtime = this.slots[pending.slot]!;
    if (pending.shadow) {
      this.settleShadow(
        pending.shadow,
        pending.shadowSide ? 'candidate' : 'primary',
        status === 0 ? readFirstOutput(ring.bytes, view, offset, runtime.model.signature) : undefined,
      );
      if (pending.shadowSide) {
        this.answering = undefined;
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
    this.answering = undefined;
    this.complete(pending, body, httpStatus);
    return true;
  }

  private complete(pending: Pending, body: string | Uint8Array, httpStatus: number): void {
    this.metrics.addInflight(pending.slot, -1);
    this.answered++;
    const runtime = this.slots[pending.slot];
    if (runtime) {
      runtime.admitted--;
      runtime.guard.onCompleted(1, clock());
    }
    pending.client?.onCompleted();
    const connection = pending.connection;
    if (connection === undefined) {
      // HTTP carries one request at a time per connection: nothing to order.
      this.deliver(pending, body, httpStatus);
    } else if (connection.order.answered(pending.epoch)) {
      this.deliver(pending, body, httpStatus);
      if (connection.order.heldCount > 0) this.deliverReady(connection);
    } else if (!connection.closed) {
      this.hold(connection, pending, body);
    }
    if (this.pending.size === 0) this.onIdle?.();
  }

  private deliver(pending: Pending, body: string | Uint8Array, httpStatus: number): void {
    if (pending.ws) this.sendWs(pending.ws, body, typeof body !== 'string');
    else if (pending.res) this.replyHttp(pending.res, pending.http, httpStatus, body as string);
  }

  /**
   * A reload committed while this connection's older-epoch requests still compute: hold this newer answer
   * so the connection never sees an old version after a new one — bounded in bytes here, in time by the
   * hold timer; held bytes count as unsent bytes for the slow-consumer limit.
   */
  private hold(connection: Connection, pending: Pending, body: string | Uint8Array): void {
    const ws = pending.ws!;
    const bytes = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
    this.counters.answersHeld++;
    if (connection.order.hold(pending.epoch, { pending, body }, bytes, clock()) === 'bytes') {
      this.releaseHeld(connection, 'bytes');
      return;
    }
    this.heldConnections.set(connection, ws);
    this.observeConsumer(ws, connection);
    this.scheduleHoldTimer();
  }

  private deliverReady(connection: Connection): void {
    const ready = connection.order.takeReady();
    if (ready) for (const { pending, body } of ready) this.deliver(pending, body, 200);
    if (connection.order.heldCount === 0) this.heldConnections.delete(connection);
  }

  /** A bound ran out: deliver what is held; the older answers will come after (see EpochOrder). */
  private releaseHeld(connection: Connection, reason: HoldRelease): void {
    this.counters.holdReleases[reason]++;
    this.heldConnections.delete(connection);
    for (const { pending, body } of connection.order.releaseAll()) this.deliver(pending, body, 200);
  }

  private scheduleHoldTimer(): void {
    if (this.holdTimer !== undefined) return;
    let next = Number.POSITIVE_INFINITY;
    for (const connection of this.heldConnections.keys()) {
      const at = connection.order.releaseAt;
      if (at !== undefined && at < next) next = at;
    }
    if (next === Number.POSITIVE_INFINITY) return;
    this.holdTimer = setTimeout(this.onHoldTimer, Math.max(1, next - clock()));
    this.holdTimer.unref();
  }

  private readonly onHoldTimer = (): void => {
    this.holdTimer = undefined;
    try {
      const now = clock();
      for (const connection of [...this.heldConnections.keys()]) {
        if (connection.closed || connection.order.heldCount === 0) this.heldConnections.delete(connection);
        else if (connection.order.expired(now)) this.releaseHeld(connection, 'time');
      }
      this.scheduleHoldTimer();
    } catch (error) {
      this.guard.record('answer hold timer', error);
    }
  };

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
        try {
          this.answerWithError(requestId, 'deadline_exceeded', 'no worker answered before the deadline');
        } catch (error) {
          this.guard.record('sweep', error);
        }
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
        'Shadow mode: candidate answers compared with the stable answer by dtype (top-1 for classifiers, exact for integers and strings, relative 1e-4 for floats; NaN never agrees).',
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
        'streaminfer_answers_held_total',
        'Answers of a new model-table epoch held on their WebSocket connection until its older-epoch answers were out.',
        'counter',
        [{ value: this.counters.answersHeld, labels: {} }],
      ),
      metricJson(
        'streaminfer_answer_hold_releases_total',
        'Held answers delivered early because a bound ran out (time or bytes): older answers on that connection come after them.',
        'counter',
        [
          { value: this.counters.holdReleases.time, labels: { reason: 'time' } },
          { value: this.counters.holdReleases.bytes, labels: { reason: 'bytes' } },
        ],
      ),
      this.guard.metric(),
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
    if (this.holdTimer) clearTimeout(this.holdTimer);
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
  primary: ShadowOutput | undefined;
  candidate: ShadowOutput | undefined;
  /** Sides still to answer. */
  open: number;
}

const ROUTE_INDEX: Record<RouteKind, number> = { stable: 0, canary: 1, pinned: 2 };

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
