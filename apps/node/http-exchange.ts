/**
 * HTTP plumbing of the transport: an exchange that knows when its client went away, guarded body reading,
 * the one place a response is written, and the forwarding of control requests to the supervisor.
 */
import type * as uWS from 'uWebSockets.js';
import { encodeError, httpStatusLine, httpStatusOf } from '../../libs/protocol';
import { type AdminPolicy, checkAdminRequest } from './admin-auth';
import type { ControlRequest, ControlResponse } from './ipc';
import type { HttpExchange } from './request';
import { PROTOCOL_HTTP } from './request';
import type { TransportGuard } from './transport-guard';

const decoder = new TextDecoder();

/** One HTTP exchange, marked aborted when the client goes away (guarded like every uWS callback). */
export function openExchange(res: uWS.HttpResponse, route: string, guard: TransportGuard): HttpExchange {
  const exchange: HttpExchange = { protocol: PROTOCOL_HTTP, res, aborted: false };
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

/** Admin requests the node refused from their headers, before reading a body (by code). */
export type AdminRefusals = Record<'unauthorized' | 'forbidden' | 'unsupported_media_type', number>;

/**
 * A control request (health, metrics, admin API) handed to the supervisor, its answer written back. An admin
 * request (`/api/*`) is decided from its headers first (admin-auth.ts): a refusal is answered here, the body
 * left unread (the connection is closed) and nothing goes to the supervisor.
 */
export function forwardControl(
  res: uWS.HttpResponse,
  req: uWS.HttpRequest,
  route: string,
  maxBytes: number,
  guard: TransportGuard,
  forward: (request: ControlRequest, reply: (response: ControlResponse) => void) => void,
  admin: AdminPolicy,
  refusals: AdminRefusals,
  peerAddress: string = remoteAddress(res),
): void {
  const exchange = openExchange(res, route, guard);
  const request: ControlRequest = {
    method: req.getMethod().toUpperCase(),
    path: req.getUrl(),
    query: req.getQuery() ?? '',
    body: '',
    remoteAddress: peerAddress,
    authorization: req.getHeader('authorization'),
    forwardedFor: req.getHeader('x-forwarded-for'),
    forwarded: req.getHeader('forwarded'),
    host: req.getHeader('host'),
    origin: req.getHeader('origin'),
    contentType: req.getHeader('content-type'),
  };
  if (request.path.startsWith('/api/')) {
    const decision = checkAdminRequest(admin, request);
    if (!decision.ok) {
      refusals[decision.code]++;
      writeJson(
        res,
        httpStatusOf(decision.code),
        encodeError(null, decision.code, decision.reason),
        request.method !== 'GET' && request.method !== 'HEAD',
      );
      return;
    }
  }
  const send = (): void => {
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
  };
  if (request.method === 'GET' || request.method === 'HEAD') {
    send();
    return;
  }
  readBody(exchange, route, maxBytes, guard, (body) => {
    if (body === undefined) {
      if (!exchange.aborted)
        writeJson(res, 413, encodeError(null, 'payload_too_large', 'admin request body too large'), true);
      return;
    }
    request.body = body;
    send();
  });
}
