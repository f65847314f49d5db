/**
 * The WebSocket connections of a node: who gets in at the upgrade (API key, the node's and the address's
 * connection caps, the tenant's share), the bookkeeping of open and closed sockets, what a reload changes for
 * the open ones (limits, revoked keys), and closing them all at shutdown.
 */
import type * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import {
  ErrorCoalescer,
  ProtocolViolations,
  type ResolvedBackpressureOptions,
} from '../../libs/backpressure';
import type { MetricsShard } from '../../libs/metrics';
import { ERROR_CODES, encodeError, errorCodeIndex } from '../../libs/protocol';
import { sharedClock as clock } from '../../libs/ring';
import { answeredSubprotocol, bearerKey, hashKey, subprotocolKey } from '../../libs/tenants';
import { type Admission, SHED, UNROUTED_SLOT } from './admission';
import type { ClientLimits } from './client-limits';
import { EpochOrder } from './epoch-order';
import { writeJson } from './http-exchange';
import type { NodeStartOptions } from './ipc';
import type { PendingRequests } from './pending';
import type { Connection, HeldAnswer } from './request';
import { PROTOCOL_WS } from './request';
import type { TenantState, Tenants } from './tenants';

/** Wire indexes of error codes: 1-based, 0 is `ok`. */
export const CODE_SLOTS = ERROR_CODES.length + 1;
const UNAUTHORIZED_CODE = errorCodeIndex('unauthorized');
/** WebSocket close code and reason for a connection whose key a reload removed. */
export const KEY_REVOKED_CLOSE_CODE = 1008;
const MISSING_KEY =
  'an API key is required: send Authorization: Bearer <key> (browsers: the subprotocols "streaminfer" and "bearer.<key>")';
/** A refused upgrade's Retry-After: places free up as other connections close, which nobody can predict. */
const CONNECTION_RETRY_MS = 1000;

export class Connections {
  /** Open WebSocket connections per client address (for maxConnectionsPerIp). */
  private readonly openByAddress = new Map<string, number>();
  private nextConnectionId = 1;

  /** `sockets`: the open sockets, shared with the transport that sends to them. */
  constructor(
    private readonly options: NodeStartOptions,
    private readonly sockets: Set<uWS.WebSocket<Connection>>,
    private readonly clients: ClientLimits,
    private readonly tenants: Tenants,
    private readonly metrics: MetricsShard,
    private readonly pending: PendingRequests,
    private readonly admission: Admission,
    private readonly logger: Logger,
  ) {}

  /** An upgrade the transport guard admitted: refused with a typed answer, or upgraded with a fresh Connection. */
  upgrade(res: uWS.HttpResponse, req: uWS.HttpRequest, context: uWS.us_socket_context_t): void {
    if (this.admission.draining) {
      res.writeStatus('503 Service Unavailable').end('server is shutting down');
      return;
    }
    const address = this.clients.addressOf(res, req);
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
        client: this.clients.newClient(clock()),
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
  }

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

  opened(ws: uWS.WebSocket<Connection>): void {
    const connection = ws.getUserData();
    connection.ws = ws;
    this.sockets.add(ws);
    if (connection.tenant) connection.tenant.open++;
    this.openByAddress.set(connection.address, (this.openByAddress.get(connection.address) ?? 0) + 1);
  }

  /** The client caught up: let the slow-consumer episode end. */
  drained(ws: uWS.WebSocket<Connection>): void {
    const connection = ws.getUserData();
    connection.client.observeBufferedAmount(ws.getBufferedAmount() + connection.order.heldBytes);
  }

  closed(ws: uWS.WebSocket<Connection>): void {
    const connection = ws.getUserData();
    connection.closed = true;
    this.pending.connectionClosed(connection);
    if (this.sockets.delete(ws)) {
      if (connection.tenant) connection.tenant.open--;
      const open = (this.openByAddress.get(connection.address) ?? 1) - 1;
      if (open > 0) this.openByAddress.set(connection.address, open);
      else this.openByAddress.delete(connection.address);
    }
  }

  /** Shutdown: every open connection is closed (1001). */
  closeAll(): void {
    for (const ws of [...this.sockets]) {
      if (!ws.getUserData().closed) ws.end(1001, 'server shutting down');
    }
  }

  /**
   * A configuration reload, for the open connections: new limits, error coalescing window and violation
   * limits from their next frame on (`limits`: the clients' new ones).
   */
  reconfigure(limits: ResolvedBackpressureOptions, now: number): void {
    const { errorCoalesceMs, maxProtocolErrorsPerSecond, maxRateLimitedPerSecond } =
      this.options.backpressure;
    for (const ws of this.sockets) {
      const connection = ws.getUserData();
      connection.client.reconfigure(limits, now);
      connection.coalescer.setWindow(errorCoalesceMs);
      connection.violations.setLimit(maxProtocolErrorsPerSecond);
      connection.rateLimitViolations.setLimit(maxRateLimitedPerSecond);
    }
  }

  /** A reload's tenants (see revocationOf). */
  applyTenants(): void {
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
