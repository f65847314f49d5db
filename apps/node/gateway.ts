/**
 * The gateway: this node's transport. uWebSockets.js routes, WebSocket upgrade and backpressure callbacks,
 * HTTP bodies, every callback behind the transport guard. A request's life is in the rooms it hands to:
 * admission (decode → route → limits → ring record), answers (response ring → Reply), pending (answer order),
 * shadow, node-status. Control endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { ResolvedBackpressureOptions } from '../../libs/backpressure';
import {
  ClientState,
  ClientTable,
  ConsumerSignal,
  SLOW_CONSUMER_CLOSE_CODE,
  validateBackpressureOptions,
} from '../../libs/backpressure';
import { MetricsShard } from '../../libs/metrics';
import { decodePathSegment, encodeError, encodeV2Error, encodeWarning } from '../../libs/protocol';
import { sharedClock as clock, type RingBuffer } from '../../libs/ring';
import type { Admission } from './admission';
import { Rejection, SHED, UNROUTED_SLOT } from './admission';
import type { Answers } from './answers';
import { EpochOrder } from './epoch-order';
import { forwardControl, httpClientKey, openExchange, readBody, writeJson } from './http-exchange';
import type { ControlRequest, ControlResponse, NodeStartOptions } from './ipc';
import type { NodeStatus } from './node-status';
import type { PendingRequests } from './pending';
import type { Replies } from './reply';
import type { Connection, HeldAnswer, HttpExchange } from './request';
import { PROTOCOL_WS } from './request';
import type { RoomsTransport } from './rooms';
import { createRooms } from './rooms';
import type { ModelTable } from './table';
import { TransportGuard } from './transport-guard';

const SERVER_VERSION: string = (require('../../../package.json') as { version: string }).version;
/** HTTP clients (by address) whose limits are remembered; idle ones are forgotten after this long. */
const HTTP_CLIENTS_MAX = 100_000;
const HTTP_CLIENT_IDLE_MS = 60_000;

export interface GatewayHooks {
  forwardControl(request: ControlRequest, reply: (response: ControlResponse) => void): void;
}

export class Gateway implements RoomsTransport {
  private readonly app: uWS.TemplatedApp;
  private listenSocket: uWS.us_listen_socket | undefined;
  private listenPort = 0;
  private readonly sockets = new Set<uWS.WebSocket<Connection>>();
  private nextConnectionId = 1;
  private readonly metrics: MetricsShard;
  private readonly hardFrameLimit: number;
  private backpressure: ResolvedBackpressureOptions;
  private readonly httpClients: ClientTable<string>;
  readonly transportCounters = { slowConsumerWarnings: 0, slowConsumerCloses: 0 };
  /** Every uWS callback runs behind it: an exception answers 500 / closes one socket, never the node. */
  readonly guard: TransportGuard;
  private readonly replies: Replies;
  readonly pending: PendingRequests;
  readonly admission: Admission;
  readonly answers: Answers;
  readonly status: NodeStatus;

  constructor(
    private readonly options: NodeStartOptions,
    table: ModelTable,
    responses: RingBuffer,
    metricsBuffer: SharedArrayBuffer,
    private readonly logger: Logger,
    private readonly hooks: GatewayHooks,
  ) {
    this.backpressure = clientLimits(options.backpressure);
    this.httpClients = new ClientTable<string>(
      HTTP_CLIENTS_MAX,
      HTTP_CLIENT_IDLE_MS,
      (now) => new ClientState(this.backpressure, now),
    );
    this.metrics = new MetricsShard(metricsBuffer, 0);
    // Frames above our own limit get a typed error; only frames far above it are cut at the protocol level.
    this.hardFrameLimit = Math.max(options.maxPayloadBytes * 4, 16 * 1024 * 1024);
    this.guard = new TransportGuard(logger);
    const rooms = createRooms(options, table, responses, this.metrics, this, clock);
    this.replies = rooms.replies;
    this.pending = rooms.pending;
    this.admission = rooms.admission;
    this.answers = rooms.answers;
    this.status = rooms.status;
    this.app = uWS.App();
    this.routes();
  }

  wsConnections(): number {
    return this.sockets.size;
  }

  private get draining(): boolean {
    return this.admission.draining;
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

  startAnswering(): void {
    this.answers.start();
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
    for (const pattern of ['/v2/models/:name/infer', '/v2/models/:name/versions/:version/infer'])
      this.v2Route('post', pattern, (res, req, name, version, route) =>
        this.onHttpInfer(res, req, { model: name, version }, route),
      );
    for (const [pattern, ready] of [
      ['/v2/models/:name', false],
      ['/v2/models/:name/ready', true],
      ['/v2/models/:name/versions/:version', false],
      ['/v2/models/:name/versions/:version/ready', true],
    ] as const) {
      this.v2Route('get', pattern, (res, _req, name, version) => {
        const { status, body } = this.status.v2Model(name, version, ready, this.draining);
        this.replyHttp(res, status, body);
      });
    }
    const serverMetadata = JSON.stringify({ name: 'streaminfer', version: SERVER_VERSION, extensions: [] });
    this.app.get(
      '/v2',
      guard.http('GET /v2', (res) => this.replyHttp(res, 200, serverMetadata)),
    );
    const usePost = encodeError(null, 'method_not_allowed', 'use POST /predict');
    this.app.any(
      '/predict',
      guard.http('ANY /predict', (res) => this.replyHttp(res, 405, usePost)),
    );
    for (const pattern of ['/health', '/metrics', '/api/*', '/v2/health/*']) {
      const route = `ANY ${pattern}`;
      this.app.any(
        pattern,
        guard.http(route, (res, req) =>
          forwardControl(res, req, route, this.options.maxPayloadBytes, guard, this.hooks.forwardControl),
        ),
      );
    }
    if (this.options.testHooks) this.testRoutes();
    this.app.any(
      '/*',
      guard.http('ANY /*', (res, req) => {
        const path = req.getUrl();
        this.replyHttp(
          res,
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
              protocol: PROTOCOL_WS,
              id: this.nextConnectionId++,
              ws: undefined,
              closed: false,
              client: new ClientState(this.backpressure, clock()),
              order: new EpochOrder<HeldAnswer>(this.pending.holdLimits),
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
          ws.getUserData().ws = ws;
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
          this.pending.connectionClosed(connection);
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
        const exchange = openExchange(res, 'ANY /debug/throw', this.guard);
        readBody(exchange, 'ANY /debug/throw', this.options.maxPayloadBytes, this.guard, () => {
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

  // ---------------------------------------------------------------- requests

  private onWsMessage(ws: uWS.WebSocket<Connection>, message: ArrayBuffer, isBinary: boolean): void {
    const startedAt = clock();
    const connection = ws.getUserData();
    const replies = this.replies;
    const result = this.admission.admitFrame(
      message,
      isBinary,
      startedAt,
      isBinary ? replies.wsBinary : replies.wsJson,
      connection,
      connection.client,
    );
    if (result instanceof Rejection) this.answers.reject(connection, replies.wsJson, result, startedAt);
  }

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
    const exchange = openExchange(res, route, this.guard);
    const reply = v2 ? this.replies.httpV2 : this.replies.httpJson;
    const clientKey = httpClientKey(res, req, this.options.backpressure.trustForwardedFor);
    const declared = Number(req.getHeader('content-length') || '0');
    const tooLarge = (): void =>
      this.answers.reject(exchange, reply, this.admission.bodyTooLarge(), startedAt, true);
    if (declared > this.options.maxPayloadBytes) {
      tooLarge();
      return;
    }
    readBody(exchange, route, this.options.maxPayloadBytes, this.guard, (body) => {
      if (body === undefined) {
        tooLarge();
        return;
      }
      const client = this.httpClients.get(clientKey, clock());
      const result = v2
        ? this.admission.admitV2(body, v2.model, v2.version, startedAt, reply, exchange, client)
        : this.admission.admitJson(body, startedAt, reply, exchange, client);
      if (result instanceof Rejection) this.answers.reject(exchange, reply, result, startedAt);
    });
  }

  /** An answer with no request behind it (metadata, 404, 405). */
  private replyHttp(res: uWS.HttpResponse, status: number, body: string, close = false): void {
    writeJson(res, status, body, close || this.draining);
  }

  /** Every answer to an HTTP request goes through here (Transport): never on an aborted exchange. */
  sendHttp(
    exchange: HttpExchange,
    status: number,
    body: string,
    close: boolean,
    retryAfterMs?: number,
  ): void {
    if (!exchange.aborted) writeJson(exchange.res, status, body, close || this.draining, retryAfterMs);
  }

  /**
   * Every WebSocket send goes through here: corked, never on a closed socket, and followed by the
   * slow-consumer check — a client that stops reading is warned, then closed with 1013, so its unsent
   * answers never grow server memory without bound.
   */
  sendWs(connection: Connection, message: string | Uint8Array, isBinary: boolean): void {
    const ws = connection.ws;
    if (connection.closed || ws === undefined) return;
    ws.cork(() => {
      ws.send(message, isBinary);
    });
    this.observeConsumer(connection);
  }

  /** Unsent bytes (buffered by uWS, or held across a reload) against the slow-consumer limits. */
  observeConsumer(connection: Connection): void {
    const ws = connection.ws!;
    const signal = connection.client.observeBufferedAmount(
      ws.getBufferedAmount() + connection.order.heldBytes,
    );
    if (signal === ConsumerSignal.Ok) return;
    if (signal === ConsumerSignal.Warn) {
      this.transportCounters.slowConsumerWarnings++;
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
    this.transportCounters.slowConsumerCloses++;
    this.metrics.recordShed(UNROUTED_SLOT, SHED.slow_consumer);
    connection.closed = true;
    this.logger.warn(
      { connection: connection.id, buffered: ws.getBufferedAmount(), held: connection.order.heldBytes },
      'slow consumer closed (1013)',
    );
    ws.end(SLOW_CONSUMER_CLOSE_CODE, 'slow consumer: unread answers passed the limit');
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
    this.admission.draining = true;
    if (this.listenSocket) {
      uWS.us_listen_socket_close(this.listenSocket);
      this.listenSocket = undefined;
    }
  }

  closeConnections(): void {
    for (const ws of [...this.sockets]) {
      if (!ws.getUserData().closed) ws.end(1001, 'server shutting down');
    }
    this.answers.stop();
  }

  /**
   * A configuration reload, at COMMIT (the node has updated its options): new rate limit and in-flight cap
   * for every client, and the payload limit, from the next request on.
   */
  applySettings(): void {
    this.admission.setMaxPayloadBytes(this.options.maxPayloadBytes);
    this.backpressure = clientLimits(this.options.backpressure);
    const now = clock();
    for (const ws of this.sockets) ws.getUserData().client.reconfigure(this.backpressure, now);
    this.httpClients.forEachState((client) => client.reconfigure(this.backpressure, now));
  }
}

/** A client's limits (rate, in-flight cap, slow consumer) from the node's backpressure settings. */
function clientLimits(backpressure: NodeStartOptions['backpressure']): ResolvedBackpressureOptions {
  return validateBackpressureOptions({
    rateLimitRps: backpressure.rateLimitRps,
    rateLimitBurst: backpressure.rateLimitBurst,
    modelErrorPenalty: backpressure.modelErrorPenalty,
    maxInflightPerClient: backpressure.maxInflightPerClient,
    maxModelQueue: backpressure.maxModelQueue,
    slowConsumerWarnBytes: backpressure.slowConsumerWarnBytes,
    slowConsumerCloseBytes: backpressure.slowConsumerCloseBytes,
  });
}
