/**
 * One WebSocket frame into admission, and what a refused frame gets: an answer, one coalesced answer for
 * identical id-less errors, or past the connection's limits no answer and a close (1008).
 */
import type * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { MetricsShard } from '../../libs/metrics';
import { ERROR_CODES, errorCodeIndex, httpStatusOf } from '../../libs/protocol';
import { sharedClock as clock } from '../../libs/ring';
import { type Admission, Rejection, SHED, UNROUTED_SLOT } from './admission';
import type { Answers } from './answers';
import type { ClientLimits } from './client-limits';
import { CODE_SLOTS } from './connections';
import type { NodeStartOptions } from './ipc';
import type { Replies } from './reply';
import type { Connection } from './request';
import { PROTOCOL_WS } from './request';

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
/** WebSocket close code for a connection that keeps violating the protocol (RFC 6455 "policy violation"). */
export const PROTOCOL_VIOLATION_CLOSE_CODE = 1008;

export class WsFrames {
  constructor(
    private readonly options: NodeStartOptions,
    private readonly admission: Admission,
    private readonly replies: Replies,
    private readonly answers: Answers,
    private readonly clients: ClientLimits,
    private readonly metrics: MetricsShard,
    private readonly logger: Logger,
  ) {}

  onMessage(ws: uWS.WebSocket<Connection>, message: ArrayBuffer, isBinary: boolean): void {
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
      this.clients.of(connection, startedAt),
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
}
