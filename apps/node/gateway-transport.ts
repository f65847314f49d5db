/**
 * The gateway's Transport: every answer's send. WebSocket sends are corked, never on a closed socket, and
 * followed by the slow-consumer check; HTTP answers are never written on an aborted exchange. It also keeps the
 * open sockets and the figures the request path's status reads of the transport.
 */
import type * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import { ConsumerSignal, SLOW_CONSUMER_CLOSE_CODE } from '../../libs/backpressure';
import type { MetricsShard } from '../../libs/metrics';
import { encodeWarning } from '../../libs/protocol';
import { SHED, UNROUTED_SLOT } from './admission';
import { writeJson } from './http-exchange';
import type { NodeStartOptions } from './ipc';
import type { Connection, HttpExchange } from './request';
import type { RequestPathTransport } from './request-path';
import type { Tenants } from './tenants';
import type { TransportGuard } from './transport-guard';

export class GatewayTransport implements RequestPathTransport {
  readonly transportCounters = {
    slowConsumerWarnings: 0,
    slowConsumerCloses: 0,
  };
  /** The open WebSocket connections (Connections adds and removes them). */
  readonly sockets = new Set<uWS.WebSocket<Connection>>();

  /** `draining`: the node stopped accepting, so every HTTP answer closes its connection. */
  constructor(
    private readonly options: NodeStartOptions,
    readonly guard: TransportGuard,
    private readonly metrics: MetricsShard,
    private readonly logger: Logger,
    private readonly tenants: Tenants,
    private readonly draining: () => boolean,
  ) {}

  wsConnections(): number {
    return this.sockets.size;
  }

  tenantNames(): ReadonlyArray<string | undefined> {
    return this.tenants.names;
  }

  /** Every answer to an HTTP request goes through here (Transport): never on an aborted exchange. */
  sendHttp(
    exchange: HttpExchange,
    status: number,
    body: string,
    close: boolean,
    retryAfterMs?: number,
  ): void {
    if (!exchange.aborted) writeJson(exchange.res, status, body, close || this.draining(), retryAfterMs);
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
}
