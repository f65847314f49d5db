/**
 * The gateway: this node's transport. uWebSockets.js routes, WebSocket upgrade and backpressure callbacks,
 * HTTP bodies, every callback behind the transport guard. A request's life is in the rooms it hands to:
 * admission (decode → route → limits → ring record), answers (response ring → Reply), pending (answer order),
 * shadow, node-status. Control endpoints are forwarded to the supervisor.
 */

import * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import { clientKey, ProxyTrust } from '../../libs/address';
import type { ResolvedBackpressureOptions } from '../../libs/backpressure';
import {
  ClientState,
  ClientTable,
  ConsumerSignal,
  ErrorCoalescer,
  ProtocolViolations,
  SLOW_CONSUMER_CLOSE_CODE,
  validateBackpressureOptions,
} from '../../libs/backpressure';
import { MetricsShard } from '../../libs/metrics';
import {
  decodePathSegment,
  ERROR_CODES,
  encodeError,
  encodeV2Error,
  encodeWarning,
  errorCodeIndex,
  httpStatusOf,
} from '../../libs/protocol';
import type { NodeTls } from '../../libs/registry';
import { sharedClock as clock, type RingBuffer } from '../../libs/ring';
import { answeredSubprotocol, bearerKey, hashKey, subprotocolKey } from '../../libs/tenants';
import type { Admission } from './admission';
import { Rejection, SHED, UNROUTED_SLOT } from './admission';
import type { Answers } from './answers';
import { EpochOrder } from './epoch-order';
import { forwardControl, openExchange, readBody, remoteAddress, writeJson } from './http-exchange';
import type { ControlRequest, ControlResponse, NodeStartOptions } from './ipc';
import type { NodeStatus } from './node-status';
import type { PendingRequests } from './pending';
import type { Replies } from './reply';
import type { Connection, HeldAnswer, HttpExchange } from './request';
import { PROTOCOL_HTTP, PROTOCOL_WS } from './request';
import type { RoomsTransport } from './request-path';
import { createRooms } from './request-path';
import type { ModelTable } from './table';
import { type TenantState, Tenants } from './tenants';
import { TlsRelay } from './tls-relay';
import { TransportGuard } from './transport-guard';

const SERVER_VERSION: string = (require('../../../package.json') as { version: string }).version;
/** Clients by address (HTTP, and WebSocket with rateLimitKey `ip`) whose limits are remembered; idle ones are forgotten after this long. */
const ADDRESS_CLIENTS_MAX = 100_000;
const ADDRESS_CLIENT_IDLE_MS = 60_000;
/** Wire indexes of error codes: 1-based, 0 is `ok`. */
const CODE_SLOTS = ERROR_CODES.length + 1;
/**
 * Protocol errors by wire index: what the client got wrong before admission (malformed frames, unknown
 * models or versions, bad requests, oversize, a model its tenant may not use) — the 400, 403, 404 and 413
 * codes; never rate_limited, overloaded, unavailable or the model's own failures.
 */
const PROTOCOL_ERROR = Uint8Array.from({ length: CODE_SLOTS }, (_, index) => {
  const code = ERROR_CODES[index - 1];
  if (code === undefined) return 0;
  const status = httpStatusOf(code);
  return status === 400 || status === 403 || status === 404 || status === 413 ? 1 : 0;
});
const RATE_LIMITED_CODE = errorCodeIndex('rate_limited');
const UNAUTHORIZED_CODE = errorCodeIndex('unauthorized');
const FORBIDDEN_CODE = errorCodeIndex('forbidden');
/** WebSocket close code and reason for a connection whose key a reload removed. */
export const KEY_REVOKED_CLOSE_CODE = 1008;
const MISSING_KEY =
  'an API key is required: send Authorization: Bearer <key> (browsers: the subprotocols "streaminfer" and "bearer.<key>")';
/** A refused upgrade's Retry-After: places free up as other connections close, which nobody can predict. */
const CONNECTION_RETRY_MS = 1000;
/** WebSocket close code for a connection that keeps violating the protocol (RFC 6455 "policy violation"). */
export const PROTOCOL_VIOLATION_CLOSE_CODE = 1008;

export interface GatewayHooks {
  forwardControl(request: ControlRequest, reply: (response: ControlResponse) => void): void;
  /** Mutual TLS only: the host's listening socket, from the supervisor, for the node's node:tls server. */
  listenHandle(): Promise<unknown>;
}

/** With a client CA the port is node:tls relaying to a plain app (tls-relay.ts): uWS cannot require one. */
function isMutual(tls: NodeTls | undefined): boolean {
  return tls?.clientCaFile !== undefined;
}

export class Gateway implements RoomsTransport {
  /** The app taking new connections: plain, or TLS with the certificate last loaded (see useTls). */
  private app: uWS.TemplatedApp;
  private tls: NodeTls | undefined;
  /**
   * Apps replaced by a certificate reload: their listen sockets are closed, their open connections still
   * served. Kept referenced for as long as the node lives (one per certificate reload).
   */
  private readonly retiredApps: uWS.TemplatedApp[] = [];
  private listenSocket: uWS.us_listen_socket | undefined;
  private listenPort = 0;
  /** Mutual TLS: node:tls on the host's port, relaying to this node's plain app on 127.0.0.1 (made at first listen). */
  private relay: TlsRelay | undefined;
  /** Counts stops (rolls, drains): a listen that waited for the shared handle across one does not accept. */
  private listenGeneration = 0;
  private readonly sockets = new Set<uWS.WebSocket<Connection>>();
  private nextConnectionId = 1;
  private readonly metrics: MetricsShard;
  private readonly hardFrameLimit: number;
  private backpressure: ResolvedBackpressureOptions;
  /** Limits by client address: every HTTP client, and WebSocket connections with rateLimitKey `ip`. */
  private readonly addressClients: ClientTable<string>;
  /** Who may speak for another address (X-Forwarded-For), from trustedProxies / trustForwardedFor. */
  private proxies: ProxyTrust;
  /** Open WebSocket connections per client address (for maxConnectionsPerIp). */
  private readonly openByAddress = new Map<string, number>();
  readonly transportCounters = {
    slowConsumerWarnings: 0,
    slowConsumerCloses: 0,
  };
  /** Every uWS callback runs behind it: an exception answers 500 / closes one socket, never the node. */
  readonly guard: TransportGuard;
  private readonly replies: Replies;
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
    private readonly logger: Logger,
    private readonly hooks: GatewayHooks,
  ) {
    this.backpressure = clientLimits(options.backpressure);
    this.addressClients = new ClientTable<string>(
      ADDRESS_CLIENTS_MAX,
      ADDRESS_CLIENT_IDLE_MS,
      (now) => new ClientState(this.backpressure, now),
    );
    this.proxies = proxyTrustOf(options.backpressure);
    this.metrics = new MetricsShard(metricsBuffer, 0);
    this.tenants = new Tenants(this.metrics, clock);
    this.tenants.apply(options.tenants);
    // Frames above our own limit get a typed error; only frames far above it are cut at the protocol level.
    this.hardFrameLimit = Math.max(options.maxPayloadBytes * 4, 16 * 1024 * 1024);
    this.guard = new TransportGuard(logger);
    const rooms = createRooms(options, table, responses, this.metrics, this, clock);
    this.replies = rooms.replies;
    this.pending = rooms.pending;
    this.admission = rooms.admission;
    this.answers = rooms.answers;
    this.status = rooms.status;
    this.tls = options.tls;
    this.app = this.makeApp(options.tls);
  }

  wsConnections(): number {
    return this.sockets.size;
  }

  tenantNames(): ReadonlyArray<string | undefined> {
    return this.tenants.names;
  }

  private get draining(): boolean {
    return this.admission.draining;
  }

  // ---------------------------------------------------------------- listening

  listen(host: string, port: number): Promise<number> {
    if (isMutual(this.tls)) return this.listenMutual(port);
    try {
      this.listenSocket = bind(this.app, host, port);
      this.listenPort = uWS.us_socket_local_port(this.listenSocket);
      return Promise.resolve(this.listenPort);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Mutual TLS: the plain app listens on 127.0.0.1 at a port of its own, once, for the node's life; node:tls
   * takes the host's port (the shared handle) and relays there. From then on every request and upgrade must
   * come through the relay (the guard's admit check): the inner port is reachable by anyone on the host.
   */
  private async listenMutual(port: number): Promise<number> {
    if (!this.relay) {
      const inner = bind(this.app, '127.0.0.1', 0);
      const innerPort = uWS.us_socket_local_port(inner);
      const relay = new TlsRelay(this.tls!, innerPort, this.logger);
      this.relay = relay;
      this.guard.admit = (res) => relay.admit(res);
      this.logger.info({ innerPort }, 'mutual TLS: node:tls on the data port, relaying to the inner port');
    }
    this.listenPort = port;
    if (this.relay.accepting) return port;
    const generation = this.listenGeneration;
    const handle = await this.hooks.listenHandle();
    // A roll or a drain that began while the handle was on its way: this node must not accept now.
    if (generation !== this.listenGeneration || this.draining || this.relay.accepting) {
      (handle as { close?: () => void } | undefined)?.close?.();
      return port;
    }
    await this.relay.listen(handle);
    return port;
  }

  /** Takes new connections now (not during a roll, a drain, or before the first listen). */
  private get listening(): boolean {
    return this.relay ? this.relay.accepting : this.listenSocket !== undefined;
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

  /** The TLS files this node serves now (undefined: plain). */
  get tlsInUse(): NodeTls | undefined {
    return this.tls;
  }

  /**
   * A certificate reload: a fresh app on the new files, with the same routes, listens on the same port
   * (SO_REUSEPORT) before the old listen socket closes, so no connection attempt finds the port closed;
   * connections the old app holds stay open and keep being served, new ones get the new certificate.
   * While the node does not listen (a roll, a drain, not started yet) only the app is replaced: the next
   * listen uses it. The caller has checked the files; should the new listen fail, the old app stays.
   * Mutual TLS: the node:tls server takes the new files (setSecureContext): same effect, same port.
   */
  useTls(tls: NodeTls | undefined): void {
    if (isMutual(tls) !== isMutual(this.tls))
      throw new Error('turning mutual TLS (tlsClientCa) on or off needs a restart');
    if (isMutual(tls)) {
      this.relay?.setFiles(tls!);
      this.tls = tls;
      return;
    }
    const fresh = this.makeApp(tls);
    const oldSocket = this.listenSocket;
    if (oldSocket) {
      this.listenSocket = bind(fresh, this.options.host, this.listenPort);
      uWS.us_listen_socket_close(oldSocket);
    }
    this.retiredApps.push(this.app);
    this.app = fresh;
    this.tls = tls;
  }

  startAnswering(): void {
    this.answers.start();
  }

  private routes(app: uWS.TemplatedApp): void {
    const guard = this.guard;
    app.ws<Connection>(
      '/ws',
      this.wsBehavior('/ws', (ws, message, isBinary) => this.onWsMessage(ws, message, isBinary)),
    );
    app.post(
      '/predict',
      guard.http('POST /predict', (res, req) => this.onHttpInfer(res, req, undefined, 'POST /predict')),
    );
    for (const pattern of ['/v2/models/:name/infer', '/v2/models/:name/versions/:version/infer'])
      this.v2Route(app, 'post', pattern, (res, req, name, version, route) =>
        this.onHttpInfer(res, req, { model: name, version }, route),
      );
    for (const [pattern, ready] of [
      ['/v2/models/:name', false],
      ['/v2/models/:name/ready', true],
      ['/v2/models/:name/versions/:version', false],
      ['/v2/models/:name/versions/:version/ready', true],
    ] as const) {
      this.v2Route(app, 'get', pattern, (res, req, name, version) => {
        if (this.tenants.enabled) {
          // A model's metadata and readiness are the tenant's business only for the models it may use.
          const tenant = this.httpTenant(res, req, true);
          if (tenant === undefined) return;
          if (!tenant.allows(name)) {
            this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, FORBIDDEN_CODE, 0, tenant.metricsIndex);
            this.replyHttp(
              res,
              403,
              encodeV2Error('forbidden', `tenant "${tenant.name}" may not use model "${name}"`),
            );
            return;
          }
        }
        const { status, body } = this.status.v2Model(name, version, ready, this.draining);
        this.replyHttp(res, status, body);
      });
    }
    const serverMetadata = JSON.stringify({ name: 'streaminfer', version: SERVER_VERSION, extensions: [] });
    app.get(
      '/v2',
      guard.http('GET /v2', (res) => this.replyHttp(res, 200, serverMetadata)),
    );
    const usePost = encodeError(null, 'method_not_allowed', 'use POST /predict');
    app.any(
      '/predict',
      guard.http('ANY /predict', (res) => this.replyHttp(res, 405, usePost)),
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
          if (!guard.admits(res)) return;
          if (this.draining) {
            res.writeStatus('503 Service Unavailable').end('server is shutting down');
            return;
          }
          const address = this.addressOf(res, req);
          const protocols = req.getHeader('sec-websocket-protocol');
          let tenant: TenantState | undefined;
          let keyHash = '';
          if (this.tenants.enabled) {
            // Hashed once here; the connection's frames only read its tenant.
            const key = bearerKey(req.getHeader('authorization')) ?? subprotocolKey(protocols);
            if (key !== undefined) keyHash = hashKey(key);
            tenant = key === undefined ? undefined : this.tenants.ofHash(keyHash);
            if (tenant === undefined) {
              this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_WS, UNAUTHORIZED_CODE, 0);
              writeJson(
                res,
                401,
                encodeError(null, 'unauthorized', key === undefined ? MISSING_KEY : 'unknown API key'),
                true,
              );
              return;
            }
          }
          if (this.refuseUpgrade(res, address)) return;
          if (tenant !== undefined && !tenant.underConnectionCap) {
            tenant.upgrades++;
            this.metrics.recordShed(UNROUTED_SLOT, SHED.tenant_connection_cap, tenant.metricsIndex);
            writeJson(
              res,
              429,
              encodeError(
                null,
                'rate_limited',
                `tenant "${tenant.name}" is at its limit of ${tenant.spec.maxConnections} WebSocket connections on this host (this node's share is in use); retry later`,
                CONNECTION_RETRY_MS,
              ),
              true,
              CONNECTION_RETRY_MS,
            );
            return;
          }
          const backpressure = this.options.backpressure;
          res.upgrade<Connection>(
            {
              protocol: PROTOCOL_WS,
              id: this.nextConnectionId++,
              ws: undefined,
              closed: false,
              client: new ClientState(this.backpressure, clock()),
              address,
              coalescer: new ErrorCoalescer(backpressure.errorCoalesceMs, CODE_SLOTS),
              violations: new ProtocolViolations(backpressure.maxProtocolErrorsPerSecond),
              rateLimitViolations: new ProtocolViolations(backpressure.maxRateLimitedPerSecond),
              order: new EpochOrder<HeldAnswer>(this.pending.holdLimits),
              tenant,
              keyHash,
            },
            req.getHeader('sec-websocket-key'),
            // Never a `bearer.<key>` entry: the browser form of a key is answered `streaminfer`.
            answeredSubprotocol(protocols),
            req.getHeader('sec-websocket-extensions'),
            context,
          );
        } catch (error) {
          guard.httpFailed(upgradeRoute, res, error);
        }
      },
      open: (ws) => {
        try {
          const connection = ws.getUserData();
          connection.ws = ws;
          this.sockets.add(ws);
          if (connection.tenant) connection.tenant.open++;
          this.openByAddress.set(connection.address, (this.openByAddress.get(connection.address) ?? 0) + 1);
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
          if (this.sockets.delete(ws)) {
            if (connection.tenant) connection.tenant.open--;
            const open = (this.openByAddress.get(connection.address) ?? 1) - 1;
            if (open > 0) this.openByAddress.set(connection.address, open);
            else this.openByAddress.delete(connection.address);
          }
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

  // ---------------------------------------------------------------- requests

  /**
   * A WebSocket upgrade past the node's cap (503 overloaded) or the address's (429 rate_limited) is refused
   * with a typed JSON body and Retry-After; true when refused.
   */
  private refuseUpgrade(res: uWS.HttpResponse, address: string): boolean {
    const { maxConnections, maxConnectionsPerIp } = this.options.backpressure;
    let status: number;
    let body: string;
    if (maxConnections > 0 && this.sockets.size >= maxConnections) {
      this.metrics.recordShed(UNROUTED_SLOT, SHED.connection_cap);
      status = 503;
      body = encodeError(
        null,
        'overloaded',
        `this node holds its limit of ${maxConnections} WebSocket connections; retry later or on another node`,
        CONNECTION_RETRY_MS,
      );
    } else {
      const open = this.openByAddress.get(address) ?? 0;
      if (maxConnectionsPerIp === 0 || open < maxConnectionsPerIp) return false;
      this.metrics.recordShed(UNROUTED_SLOT, SHED.connection_cap_ip);
      status = 429;
      body = encodeError(
        null,
        'rate_limited',
        `${address} already has ${open} WebSocket connections open here (limit ${maxConnectionsPerIp})`,
        CONNECTION_RETRY_MS,
      );
    }
    writeJson(res, status, body, true, CONNECTION_RETRY_MS);
    return true;
  }

  /** The client's address as limits key it: behind trusted proxies, the rightmost untrusted XFF hop. */
  private addressOf(res: uWS.HttpResponse, req: uWS.HttpRequest): string {
    return clientKey(this.proxies.clientAddress(this.peerAddress(res), req.getHeader('x-forwarded-for')));
  }

  /** The peer's address: the TCP peer's, or behind the mutual-TLS relay the real client's. */
  private peerAddress(res: uWS.HttpResponse): string {
    return this.relay ? this.relay.peerOf(res) : remoteAddress(res);
  }

  /** Whose limits a frame is charged to: its connection's, or its address's (rateLimitKey `ip`). */
  private clientOf(connection: Connection, now: number): ClientState {
    return this.options.backpressure.rateLimitKey === 'ip'
      ? this.addressClients.get(connection.address, now)
      : connection.client;
  }

  private onWsMessage(ws: uWS.WebSocket<Connection>, message: ArrayBuffer, isBinary: boolean): void {
    const connection = ws.getUserData();
    // Closed for protocol violations (or as a slow consumer): what is still in flight on the wire is dropped.
    if (connection.closed) return;
    const startedAt = clock();
    const replies = this.replies;
    const result = this.admission.admitFrame(
      message,
      isBinary,
      startedAt,
      isBinary ? replies.wsBinary : replies.wsJson,
      connection,
      this.clientOf(connection, startedAt),
    );
    if (result instanceof Rejection) this.rejectFrame(ws, connection, result, startedAt);
  }

  /**
   * A refused frame: a protocol error past the connection's limit closes it (1008) unanswered; an id-less
   * error is coalesced with identical ones (answered once per window, with the count suppressed); the rest
   * are answered one by one. Every frame is counted in the request metrics, answered or not.
   */
  private rejectFrame(
    ws: uWS.WebSocket<Connection>,
    connection: Connection,
    rejection: Rejection,
    startedAt: number,
  ): void {
    const codeIndex = errorCodeIndex(rejection.error.code);
    if (PROTOCOL_ERROR[codeIndex] === 1 && connection.violations.record(startedAt)) {
      this.countUnanswered(rejection, codeIndex, startedAt);
      this.closeForViolations(ws, connection, false);
      return;
    }
    // A client that keeps sending after being told to wait: each refusal would still cost an answer.
    if (codeIndex === RATE_LIMITED_CODE && connection.rateLimitViolations.record(startedAt)) {
      this.countUnanswered(rejection, codeIndex, startedAt);
      this.closeForViolations(ws, connection, true);
      return;
    }
    let suppressed = 0;
    if (rejection.id === null) {
      suppressed = connection.coalescer.offer(codeIndex, startedAt);
      if (suppressed < 0) {
        this.countUnanswered(rejection, codeIndex, startedAt);
        return;
      }
    }
    this.answers.reject(connection, this.replies.wsJson, rejection, startedAt, false, suppressed);
  }

  private countUnanswered(rejection: Rejection, codeIndex: number, startedAt: number): void {
    this.metrics.recordRequest(rejection.slot, PROTOCOL_WS, codeIndex, (clock() - startedAt) / 1000);
  }

  private closeForViolations(
    ws: uWS.WebSocket<Connection>,
    connection: Connection,
    rateLimited: boolean,
  ): void {
    const backpressure = this.options.backpressure;
    const limit = rateLimited
      ? backpressure.maxRateLimitedPerSecond
      : backpressure.maxProtocolErrorsPerSecond;
    connection.closed = true;
    this.metrics.recordShed(UNROUTED_SLOT, rateLimited ? SHED.rate_limit_violation : SHED.protocol_violation);
    this.logger.warn(
      { connection: connection.id, address: connection.address, limit },
      rateLimited
        ? 'connection closed for sending past its rate limit (1008)'
        : 'connection closed for protocol violations (1008)',
    );
    ws.end(
      PROTOCOL_VIOLATION_CLOSE_CODE,
      rateLimited
        ? `more than ${limit} requests refused by the rate limit in one second`
        : `more than ${limit} protocol errors in one second`,
    );
  }

  /**
   * One HTTP inference request: `/predict` (our JSON) or, with `v2`, the Open Inference Protocol's
   * `/v2/models/{name}[/versions/{v}]/infer`. Same limits and admission as WebSocket requests; the client is
   * its address (behind trusted proxies, the rightmost untrusted X-Forwarded-For hop).
   */
  private onHttpInfer(
    res: uWS.HttpResponse,
    req: uWS.HttpRequest,
    v2: { model: string; version: string | undefined } | undefined,
    route: string,
  ): void {
    const startedAt = clock();
    let tenant: TenantState | undefined;
    if (this.tenants.enabled) {
      tenant = this.httpTenant(res, req, v2 !== undefined);
      if (tenant === undefined) return;
    }
    const exchange = openExchange(res, route, this.guard);
    exchange.tenant = tenant;
    const reply = v2 ? this.replies.httpV2 : this.replies.httpJson;
    const client = this.addressClients.get(this.addressOf(res, req), startedAt);
    const declared = Number(req.getHeader('content-length') || '0');
    const tooLarge = (): void =>
      this.answers.reject(exchange, reply, this.admission.bodyTooLarge(client, exchange), startedAt, true);
    if (declared > this.options.maxPayloadBytes) {
      tooLarge();
      return;
    }
    readBody(exchange, route, this.options.maxPayloadBytes, this.guard, (body) => {
      if (body === undefined) {
        tooLarge();
        return;
      }
      const result = v2
        ? this.admission.admitV2(body, v2.model, v2.version, startedAt, reply, exchange, client)
        : this.admission.admitJson(body, startedAt, reply, exchange, client);
      if (result instanceof Rejection) this.answers.reject(exchange, reply, result, startedAt);
    });
  }

  /**
   * The tenant of an HTTP request, from its `Authorization: Bearer` key (hashed per request: about a
   * microsecond, see docs/serving/tenants.md); undefined when refused — answered 401 from the headers, the body unread
   * and the connection closed.
   */
  private httpTenant(res: uWS.HttpResponse, req: uWS.HttpRequest, v2: boolean): TenantState | undefined {
    const key = bearerKey(req.getHeader('authorization'));
    const tenant = this.tenants.lookup(key);
    if (tenant !== undefined) return tenant;
    this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, UNAUTHORIZED_CODE, 0);
    const message =
      key === undefined ? 'an API key is required: send Authorization: Bearer <key>' : 'unknown API key';
    writeJson(
      res,
      401,
      v2 ? encodeV2Error('unauthorized', message) : encodeError(null, 'unauthorized', message),
      true,
    );
    return undefined;
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
    this.listenGeneration++;
    this.relay?.stopAccepting();
    if (this.listenSocket) {
      uWS.us_listen_socket_close(this.listenSocket);
      this.listenSocket = undefined;
    }
  }

  async resumeListening(): Promise<void> {
    if (this.listening || this.draining) return;
    await this.listen(this.options.host, this.listenPort);
  }

  /** Stop accepting: close the listen socket; new requests on open connections are answered `unavailable`. */
  stopAccepting(): void {
    this.admission.draining = true;
    this.listenGeneration++;
    this.relay?.stopAccepting();
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
   * for every client, the payload limit, trusted proxies, the rate-limit key, the error coalescing window
   * and the protocol-error limit, from the next request on; the connection caps from the next upgrade on.
   */
  applySettings(): void {
    this.applyTenants();
    this.admission.setMaxPayloadBytes(this.options.maxPayloadBytes);
    this.backpressure = clientLimits(this.options.backpressure);
    this.proxies = proxyTrustOf(this.options.backpressure);
    const { errorCoalesceMs, maxProtocolErrorsPerSecond, maxRateLimitedPerSecond } =
      this.options.backpressure;
    const now = clock();
    for (const ws of this.sockets) {
      const connection = ws.getUserData();
      connection.client.reconfigure(this.backpressure, now);
      connection.coalescer.setWindow(errorCoalesceMs);
      connection.violations.setLimit(maxProtocolErrorsPerSecond);
      connection.rateLimitViolations.setLimit(maxRateLimitedPerSecond);
    }
    this.addressClients.forEachState((client) => client.reconfigure(this.backpressure, now));
  }
  /** A reload's tenants (see revocationOf). */
  private applyTenants(): void {
    this.tenants.apply(this.options.tenants);
    for (const ws of [...this.sockets]) {
      const connection = ws.getUserData();
      if (connection.closed) continue;
      const outcome = revocationOf(connection, this.tenants);
      if ('close' in outcome) {
        connection.closed = true;
        this.logger.info(
          { connection: connection.id, tenant: connection.tenant?.name, reason: outcome.close },
          'connection closed: its API key is no longer valid (1008)',
        );
        ws.end(KEY_REVOKED_CLOSE_CODE, outcome.close);
        continue;
      }
      if (outcome.tenant === connection.tenant) continue;
      if (connection.tenant) connection.tenant.open--;
      connection.tenant = outcome.tenant;
      if (outcome.tenant) outcome.tenant.open++;
    }
  }
}

/**
 * The tenants of a reload, for one open connection: a connection whose key no tenant holds any more is closed (1008 "key
 * revoked"), as is an anonymous one once keys are required; a key moved to another tenant moves its
 * connection with it. New keys work for the next upgrade.
 */
function revocationOf(
  connection: Connection,
  tenants: Tenants,
): { close: string } | { tenant: TenantState | undefined } {
  if (!tenants.enabled) return { tenant: undefined };
  if (connection.tenant === undefined) return { close: 'an API key is now required' };
  const tenant = tenants.ofHash(connection.keyHash ?? '');
  return tenant === undefined ? { close: 'key revoked' } : { tenant };
}

/** Listens (uWS calls back at once); throws when the port cannot be bound. */
function bind(app: uWS.TemplatedApp, host: string, port: number): uWS.us_listen_socket {
  const bound: { socket?: uWS.us_listen_socket } = {};
  app.listen(host, port, (socket) => {
    if (socket) bound.socket = socket;
  });
  if (!bound.socket)
    throw new Error(
      `could not listen on ${host}:${port} (port in use by a non-reusable socket, or permission denied)`,
    );
  return bound.socket;
}

/** trustedProxies when set; else the deprecated trustForwardedFor (any peer is the one proxy); else no one. */
function proxyTrustOf(backpressure: NodeStartOptions['backpressure']): ProxyTrust {
  if (backpressure.trustedProxies !== undefined) return ProxyTrust.fromText(backpressure.trustedProxies);
  return backpressure.trustForwardedFor ? ProxyTrust.anyPeer() : ProxyTrust.none();
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
