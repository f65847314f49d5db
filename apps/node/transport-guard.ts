/**
 * The transport boundary: every uWebSockets.js callback runs inside one of these guards. An exception thrown
 * in a uWS callback would otherwise end the whole node process (every connection on it); here it answers
 * `500 internal` (or closes only that WebSocket with 1011), is logged with its route, counted in
 * `streaminfer_handler_errors_total{route}`, and the node keeps serving.
 *
 * Wrappers are built once per route at registration: the per-request cost is a try/catch, no allocation.
 */
import type * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { MetricJson } from '../../libs/metrics';
import { metricJson } from '../../libs/metrics';
import { encodeError } from '../../libs/protocol';

/** A WebSocket closed because its handler failed: "internal error" (RFC 6455). */
export const WS_INTERNAL_ERROR_CODE = 1011;

export type HttpHandler = (res: uWS.HttpResponse, req: uWS.HttpRequest) => void;

export class TransportGuard {
  private readonly errors = new Map<string, number>();
  /**
   * Mutual TLS: whether a request came through the node's TLS relay (it closes the connection when not).
   * Checked here, before any route's handler and at every upgrade, so no route can be reached without it.
   */
  admit: ((res: uWS.HttpResponse) => boolean) | undefined;

  constructor(private readonly logger: Logger) {}

  /** A route handler that never throws into uWS. */
  http(route: string, handler: HttpHandler): HttpHandler {
    return (res, req) => {
      try {
        if (this.admit !== undefined && !this.admit(res)) return;
        handler(res, req);
      } catch (error) {
        this.httpFailed(route, res, error);
      }
    };
  }

  /** The admit check of a WebSocket upgrade (routes made with `http` check it themselves). */
  admits(res: uWS.HttpResponse): boolean {
    return this.admit === undefined || this.admit(res);
  }

  /**
   * Counts and logs a failure on an HTTP response, then answers `500 internal` and closes the connection
   * (its state is unknown now) — unless it was answered or aborted already, which uWS reports by throwing.
   */
  httpFailed(route: string, res: uWS.HttpResponse, error: unknown): void {
    this.record(route, error);
    try {
      res.cork(() => {
        res
          .writeStatus('500 Internal Server Error')
          .writeHeader('content-type', 'application/json')
          .end(encodeError(null, 'internal', `internal error while serving ${route}; it was logged`), true);
      });
    } catch {
      // Answered or aborted before the failure: there is no one left to tell.
    }
  }

  /** Counts and logs a failure in a WebSocket callback and closes only that socket (1011). */
  wsFailed<T>(route: string, ws: uWS.WebSocket<T>, error: unknown): void {
    this.record(route, error);
    try {
      ws.end(WS_INTERNAL_ERROR_CODE, 'internal error');
    } catch {
      // Closed already.
    }
  }

  /** A failure outside any request (response drain, timers): counted and logged, nothing to answer. */
  record(route: string, error: unknown): void {
    this.errors.set(route, (this.errors.get(route) ?? 0) + 1);
    try {
      this.logger.error(
        {
          route,
          err: error instanceof Error ? { message: error.message, stack: error.stack } : String(error),
        },
        'handler error (the node keeps serving)',
      );
    } catch {
      // A logger that fails must not turn a counted error into a dead node.
    }
  }

  count(route: string): number {
    return this.errors.get(route) ?? 0;
  }

  metric(): MetricJson {
    return metricJson(
      'streaminfer_handler_errors_total',
      'Exceptions caught at the transport boundary (answered 500 internal or closed with 1011), by route.',
      'counter',
      [...this.errors].map(([route, value]) => ({ value, labels: { route } })),
    );
  }
}
