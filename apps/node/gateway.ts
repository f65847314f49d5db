/**
 * The gateway: this node's transport. uWebSockets.js routes, WebSocket upgrade and backpressure callbacks,
 * HTTP bodies, every callback behind the transport guard. A request's life is in the request path it hands
 * to (request-path.ts): admission (decode → route → limits → ring record), answers (response ring → Reply),
 * pending (answer order), shadow, node-status. Around it: the data port (listener.ts), the WebSocket
 * connections (connections.ts) and their frames (ws-frames.ts), HTTP requests (http-requests.ts), whose
 * limits a request is charged to (client-limits.ts) and every answer's send (gateway-transport.ts). Control
 * endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import { MetricsShard } from '../../libs/metrics';
import { decodePathSegment, encodeError, encodeV2Error } from '../../libs/protocol';
import type { NodeTls } from '../../libs/registry';
import { sharedClock as clock, type RingBuffer } from '../../libs/ring';
import type { Admission } from './admission';
import type { Answers } from './answers';
import { ClientLimits } from './client-limits';
import { Connections } from './connections';
import { GatewayTransport } from './gateway-transport';
import { forwardControl, openExchange, readBody } from './http-exchange';
import { HttpRequests } from './http-requests';
import type { ControlRequest, ControlResponse, NodeStartOptions } from './ipc';
import { isMutual, Listener } from './listener';
import type { NodeStatus } from './node-status';
import type { PendingRequests } from './pending';
import type { Connection } from './request';
import { createRequestPath } from './request-path';
import type { ModelTable } from './table';
import { Tenants } from './tenants';
import { TransportGuard } from './transport-guard';
import { WsFrames } from './ws-frames';

export { KEY_REVOKED_CLOSE_CODE } from './connections';
export { PROTOCOL_VIOLATION_CLOSE_CODE } from './ws-frames';

const SERVER_VERSION: string = (require('../../../package.json') as { version: string }).version;

export interface GatewayHooks {
  forwardControl(request: ControlRequest, reply: (response: ControlResponse) => void): void;
  /** Mutual TLS only: the host's listening socket, from the supervisor, for the node's node:tls server. */
  listenHandle(): Promise<unknown>;
}

export class Gateway {
  private readonly metrics: MetricsShard;
  private readonly hardFrameLimit: number;
  /** Every uWS callback runs behind it: an exception answers 500 / closes one socket, never the node. */
  readonly guard: TransportGuard;
  private readonly transport: GatewayTransport;
  private readonly clients: ClientLimits;
  private readonly connections: Connections;
  private readonly frames: WsFrames;
  private readonly http: HttpRequests;
  private readonly listener: Listener;
  readonly pending: PendingRequests;
  readonly admission: Admission;
  readonly answers: Answers;
  readonly status: NodeStatus;
  /** Tenants of the API keys file (none: anonymous traffic, as without `--api-keys`). */
  readonly tenants: Tenants;

  constructor(
    private readonly options: NodeStartOptions,
    table: ModelTable,
    responses: RingBuffer,
    metricsBuffer: SharedArrayBuffer,
    logger: Logger,
    private readonly hooks: GatewayHooks,
  ) {
    this.metrics = new MetricsShard(metricsBuffer, 0);
    this.tenants = new Tenants(this.metrics, clock);
    this.tenants.apply(options.tenants);
    // Frames above our own limit get a typed error; only frames far above it are cut at the protocol level.
    this.hardFrameLimit = Math.max(options.maxPayloadBytes * 4, 16 * 1024 * 1024);
    this.guard = new TransportGuard(logger);
    const draining = (): boolean => this.admission.draining;
    // The app is made here with every route: their handlers reach the pieces below only once it listens.
    this.listener = new Listener(
      options.tls,
      options,
      (tls) => this.makeApp(tls),
      this.guard,
      logger,
      () => hooks.listenHandle(),
      draining,
    );
    this.transport = new GatewayTransport(options, this.guard, this.metrics, logger, this.tenants, draining);
    const path = createRequestPath(options, table, responses, this.metrics, this.transport, clock);
    this.pending = path.pending;
    this.admission = path.admission;
    this.answers = path.answers;
    this.status = path.status;
    this.clients = new ClientLimits(options, this.listener);
    this.connections = new Connections(
      options,
      this.transport.sockets,
      this.clients,
      this.tenants,
      this.metrics,
      this.pending,
      this.admission,
      logger,
    );
    this.frames = new WsFrames(
      options,
      this.admission,
      path.replies,
      this.answers,
      this.clients,
      this.metrics,
      logger,
    );
    this.http = new HttpRequests(
      options,
      this.admission,
      path.replies,
      this.answers,
      this.status,
      this.clients,
      this.tenants,
      this.metrics,
      this.guard,
    );
  }

  listen(host: string, port: number): Promise<number> {
    return this.listener.listen(host, port);
  }

  /** The TLS files this node serves now (undefined: plain). */
  get tlsInUse(): NodeTls | undefined {
    return this.listener.tlsInUse;
  }

  /** A certificate reload: see Listener.useTls. */
  useTls(tls: NodeTls | undefined): void {
    this.listener.useTls(tls);
  }

  startAnswering(): void {
    this.answers.start();
  }

  /** A plain app, or a TLS one on the given files (mutual TLS: plain, behind the relay), with every route. */
  private makeApp(tls: NodeTls | undefined): uWS.TemplatedApp {
    const app =
      tls && !isMutual(tls)
        ? uWS.SSLApp({ cert_file_name: tls.certFile, key_file_name: tls.keyFile })
        : uWS.App();
    this.routes(app);
    return app;
  }

  private routes(app: uWS.TemplatedApp): void {
    const guard = this.guard;
    app.ws<Connection>(
      '/ws',
      this.wsBehavior('/ws', (ws, message, isBinary) => this.frames.onMessage(ws, message, isBinary)),
    );
    app.post(
      '/predict',
      guard.http('POST /predict', (res, req) => this.http.infer(res, req, undefined, 'POST /predict')),
    );
    for (const pattern of ['/v2/models/:name/infer', '/v2/models/:name/versions/:version/infer'])
      this.v2Route(app, 'post', pattern, (res, req, name, version, route) =>
        this.http.infer(res, req, { model: name, version }, route),
      );
    for (const [pattern, ready] of [
      ['/v2/models/:name', false],
      ['/v2/models/:name/ready', true],
      ['/v2/models/:name/versions/:version', false],
      ['/v2/models/:name/versions/:version/ready', true],
    ] as const) {
      this.v2Route(app, 'get', pattern, (res, req, name, version) =>
        this.http.model(res, req, name, version, ready),
      );
    }
    const serverMetadata = JSON.stringify({ name: 'streaminfer', version: SERVER_VERSION, extensions: [] });
    app.get(
      '/v2',
      guard.http('GET /v2', (res) => this.http.reply(res, 200, serverMetadata)),
    );
    const usePost = encodeError(null, 'method_not_allowed', 'use POST /predict');
    app.any(
      '/predict',
      guard.http('ANY /predict', (res) => this.http.reply(res, 405, usePost)),
    );
    // The admin API (/api/*) and /metrics have their own listener in the supervisor: here /api/* is a 404.
    const control = ['/health', '/v2/health/*', ...(this.options.metricsOnDataPort ? ['/metrics'] : [])];
    for (const pattern of control) {
      const route = `ANY ${pattern}`;
      app.any(
        pattern,
        guard.http(route, (res, req) => forwardControl(res, req, route, guard, this.hooks.forwardControl)),
      );
    }
    if (this.options.testHooks) this.testRoutes(app);
    app.any(
      '/*',
      guard.http('ANY /*', (res, req) => {
        const path = req.getUrl();
        this.http.reply(
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
          if (!guard.admits(res)) return;
          this.connections.upgrade(res, req, context);
        } catch (error) {
          guard.httpFailed(upgradeRoute, res, error);
        }
      },
      open: (ws) => {
        try {
          this.connections.opened(ws);
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
          this.connections.drained(ws);
        } catch (error) {
          guard.wsFailed(drainRoute, ws, error);
        }
      },
      close: (ws) => {
        try {
          this.connections.closed(ws);
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
    app: uWS.TemplatedApp,
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
    app[method](
      pattern,
      this.guard.http(route, (res, req) => {
        const name = decodePathSegment(req.getParameter(0));
        const version = hasVersion ? decodePathSegment(req.getParameter(1)) : undefined;
        if (name === undefined || (hasVersion && version === undefined)) {
          this.http.reply(
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
  private testRoutes(app: uWS.TemplatedApp): void {
    app.any(
      '/debug/throw',
      this.guard.http('ANY /debug/throw', (res, req) => {
        if (req.getMethod() !== 'post') throw new Error('test hook: thrown in a route handler');
        const exchange = openExchange(res, 'ANY /debug/throw', this.guard);
        readBody(exchange, 'ANY /debug/throw', this.options.maxPayloadBytes, this.guard, () => {
          throw new Error('test hook: thrown in a body callback');
        });
      }),
    );
    app.ws<Connection>(
      '/debug/ws',
      this.wsBehavior('/debug/ws', () => {
        throw new Error('test hook: thrown in a WebSocket message handler');
      }),
    );
  }

  /** Rolling reload: no new connections here while this node swaps (the other nodes take them). */
  stopListening(): void {
    this.listener.stop();
  }

  async resumeListening(): Promise<void> {
    await this.listener.resume();
  }

  /** Stop accepting: close the listen socket; new requests on open connections are answered `unavailable`. */
  stopAccepting(): void {
    this.admission.draining = true;
    this.listener.stop();
  }

  closeConnections(): void {
    this.connections.closeAll();
    this.answers.stop();
  }

  /**
   * A configuration reload, at COMMIT (the node has updated its options): new rate limit and in-flight cap
   * for every client, the payload limit, trusted proxies, the rate-limit key, the error coalescing window
   * and the protocol-error limit, from the next request on; the connection caps from the next upgrade on.
   */
  applySettings(): void {
    this.connections.applyTenants();
    this.admission.setMaxPayloadBytes(this.options.maxPayloadBytes);
    const now = clock();
    this.connections.reconfigure(this.clients.reconfigure(now), now);
  }
}
