/**
 * HTTP plumbing of the transport: an exchange that knows when its client went away, guarded body reading,
 * the one place a response is written, and the forwarding of the data port's control requests (health,
 * readiness, and /metrics with metricsOnDataPort) to the supervisor. The admin API is not here: it has its own
 * listener in the supervisor (libs/admin).
 */
import type * as uWS from 'uWebSockets.js';
import { encodeError, httpStatusLine } from '../../libs/protocol';
import type { ControlRequest, ControlResponse } from './ipc';
import type { HttpExchange } from './request';
import { PROTOCOL_HTTP } from './request';
import type { TransportGuard } from './transport-guard';

const decoder = new TextDecoder();

/** One HTTP exchange, marked aborted when the client goes away (guarded like every uWS callback). */
export function openExchange(res: uWS.HttpResponse, route: string, guard: TransportGuard): HttpExchange {
  const exchange: HttpExchange = { protocol: PROTOCOL_HTTP, res, aborted: false, tenant: undefined };
  res.onAborted(() => {
    try {
      exchange.aborted = true;
    } catch (error) {
      guard.record(`${route} aborted`, error);
    }
  });
  return exchange;
}

/** The client's address as text. */
export function remoteAddress(res: uWS.HttpResponse): string {
  return decoder.decode(res.getRemoteAddressAsText());
}

/**
 * Collects a request body (copying each chunk: uWS reuses them); undefined when it exceeds `maxBytes`.
 * `done` runs inside the body callback, so it is guarded here: a failure answers `500 internal`.
 */
export function readBody(
  exchange: HttpExchange,
  route: string,
  maxBytes: number,
  guard: TransportGuard,
  done: (body: string | undefined) => void,
): void {
  const chunks: Buffer[] = [];
  let total = 0;
  let finished = false;
  const res = exchange.res;
  res.onData((chunk, isLast) => {
    try {
      if (finished || exchange.aborted) return;
      total += chunk.byteLength;
      if (total > maxBytes) {
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
      guard.httpFailed(`${route} body`, res, error);
    }
  });
}

/** Writes one JSON response, corked; `close` (or a draining node) asks the client to close. */
export function writeJson(
  res: uWS.HttpResponse,
  status: number,
  body: string,
  close: boolean,
  retryAfterMs?: number,
): void {
  res.cork(() => {
    res.writeStatus(httpStatusLine(status)).writeHeader('content-type', 'application/json');
    if (retryAfterMs !== undefined)
      res.writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))));
    if (close) res.writeHeader('connection', 'close');
    res.end(body, close);
  });
}

/**
 * A control request (health, readiness, metrics: all GET) handed to the supervisor, its answer written back.
 * Any other method is answered here (405) and the connection closed, its body left unread.
 */
export function forwardControl(
  res: uWS.HttpResponse,
  req: uWS.HttpRequest,
  route: string,
  guard: TransportGuard,
  forward: (request: ControlRequest, reply: (response: ControlResponse) => void) => void,
): void {
  const exchange = openExchange(res, route, guard);
  const request: ControlRequest = {
    method: req.getMethod().toUpperCase(),
    path: req.getUrl(),
    query: req.getQuery() ?? '',
    body: '',
  };
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    writeJson(res, 405, encodeError(null, 'method_not_allowed', `use GET ${request.path}`), true);
    return;
  }
  forward(request, (response) => {
    // Runs from the supervisor's IPC answer, outside any uWS callback: guarded the same way.
    try {
      if (exchange.aborted) return;
      res.cork(() => {
        res.writeStatus(httpStatusLine(response.status)).writeHeader('content-type', response.contentType);
        if (response.headers)
          for (const [name, value] of Object.entries(response.headers)) res.writeHeader(name, value);
        res.end(response.body);
      });
    } catch (error) {
      guard.httpFailed(`${route} reply`, res, error);
    }
  });
}
