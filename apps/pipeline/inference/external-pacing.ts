/**
 * One connection of the external backend's pool and how it paces itself against the server's per-client
 * limits: `rate_limited` pauses it and spaces its sends, `overloaded` halves its in-flight window,
 * `client_queue_full` teaches it the server's in-flight cap, and every answer grows the window again.
 */
import type WebSocket from 'ws';
import type { ErrorCode } from '../../../libs/protocol';
import type { BackoffOptions } from './external-wire';

export interface Conn<C = unknown> {
  readonly index: number;
  ws: WebSocket | undefined;
  open: boolean;
  /** Calls whose current attempt is on this connection. */
  readonly sent: Set<C>;
  /** Connection attempts that failed in a row (the reconnect backoff's exponent). */
  failures: number;
  everOpened: boolean;
  /** Congestion window: calls this connection may have in flight now (floor), 1 ≤ window ≤ ceiling. */
  window: number;
  /** The most in flight here: maxInflightPerConnection, lowered to the server's cap once it tells us. */
  ceiling: number;
  /** No send on this connection before then (clock ms): a rate-limit pause, then the spacing. */
  nextSendAt: number;
  /** Least time between two sends here (ms), learnt from `rate_limited`; 0 = unpaced. */
  spacingMs: number;
  /** Bumped whenever the connection slows down: only a refusal of a call sent since slows it again. */
  generation: number;
}

/** A connection not opened yet, its window at `ceiling`. */
export function newConn<C>(index: number, ceiling: number): Conn<C> {
  return {
    index,
    ws: undefined,
    open: false,
    sent: new Set(),
    failures: 0,
    everOpened: false,
    window: ceiling,
    ceiling,
    nextSendAt: 0,
    spacingMs: 0,
    generation: 0,
  };
}

/** Just opened: a new connection is a new client to the server, with a fresh rate bucket and in-flight count. */
export function opened(conn: Conn, ceiling: number): void {
  conn.open = true;
  conn.failures = 0;
  conn.ceiling = ceiling;
  conn.window = conn.ceiling;
  conn.nextSendAt = 0;
  conn.spacingMs = 0;
}

/** An answer on this connection: one more in flight per window's worth of answers; spacing shrinks 3%. */
export function answered(conn: Conn): void {
  conn.window = Math.min(conn.ceiling, conn.window + 1 / conn.window);
  conn.spacingMs = conn.spacingMs < 0.05 ? 0 : conn.spacingMs * 0.97;
}

/**
 * A connection's response to a shed answer of a call sent at its generation `sentAt`; true when it now
 * paces the retry itself.
 */
export function pace(
  conn: Conn,
  sentAt: number,
  code: ErrorCode,
  retryAfterMs: number | undefined,
  backoff: BackoffOptions,
  clock: () => number,
): boolean {
  // Calls sent before the last slow-down were refused for the old pace: they say nothing new.
  const fresh = sentAt === conn.generation;
  switch (code) {
    case 'client_queue_full':
      // The server holds fewer of ours than we do (answers in transit), so this bound never undershoots
      // its cap: the sent set still counts the refused call.
      conn.ceiling = Math.max(1, Math.min(conn.ceiling, conn.sent.size - 1));
      conn.window = Math.min(conn.window, conn.ceiling);
      return true;
    case 'rate_limited': {
      const wait = retryAfterMs ?? backoff.baseMs;
      if (fresh) {
        conn.generation++;
        conn.spacingMs = Math.min(backoff.maxMs, Math.max(wait, conn.spacingMs * 2, 1));
      }
      conn.nextSendAt = Math.max(conn.nextSendAt, clock() + wait);
      return true;
    }
    case 'overloaded':
      if (fresh) {
        conn.generation++;
        conn.window = Math.max(1, conn.window / 2);
      }
      return false;
    default:
      return false;
  }
}
