/**
 * Requests admitted and not yet answered, by ring request id, and the order their answers leave in: on a
 * WebSocket connection an answer of a newer model-table epoch is held (bounded, see EpochOrder) until that
 * connection's older-epoch answers are out.
 */
import type { EpochHoldLimits, HoldRelease } from './epoch-order';
import type { Connection, PendingRequest } from './request';
import { PROTOCOL_WS } from './request';

export class PendingRequests {
  private readonly byId = new Map<number, PendingRequest>();
  /** WebSocket connections with answers held across a reload, for the time bound. */
  private readonly heldConnections = new Set<Connection>();
  private holdTimer: NodeJS.Timeout | undefined;
  readonly counters = {
    answersHeld: 0,
    holdReleases: { time: 0, bytes: 0 } as Record<HoldRelease, number>,
  };

  constructor(
    readonly holdLimits: EpochHoldLimits,
    private readonly clock: () => number,
    /** Held bytes count as unsent bytes: the transport checks the slow-consumer limits again. */
    private readonly observeConsumer: (connection: Connection) => void,
    private readonly onTimerError: (error: unknown) => void,
  ) {}

  get size(): number {
    return this.byId.size;
  }

  /** Registers an admitted request; its connection (if any) counts it for answer order. */
  add(requestId: number, request: PendingRequest): void {
    this.byId.set(requestId, request);
    const peer = request.peer;
    if (peer !== undefined && peer.protocol === PROTOCOL_WS) peer.order.admitted(request.epoch);
  }

  /** Removes and returns a request (undefined when it was answered already: drop the late duplicate). */
  take(requestId: number): PendingRequest | undefined {
    const request = this.byId.get(requestId);
    if (request !== undefined) this.byId.delete(requestId);
    return request;
  }

  /** Ring request ids now pending (a copy: answering them removes them). */
  requestIds(): number[] {
    return [...this.byId.keys()];
  }

  /** Ring request ids of requests still pending at `now`, past their deadline by `graceMs`. */
  overdue(now: number, graceMs: number): number[] {
    const ids: number[] = [];
    for (const [requestId, request] of this.byId) if (now > request.deadlineAt + graceMs) ids.push(requestId);
    return ids;
  }

  /** Sends an answer now, or holds it behind older-epoch answers of its connection. */
  deliverInOrder(request: PendingRequest, body: string | Uint8Array, httpStatus: number): void {
    const peer = request.peer;
    if (peer === undefined) return;
    if (peer.protocol !== PROTOCOL_WS) {
      // HTTP carries one request at a time per connection, an in-process call is one request: nothing to order.
      request.reply.send(peer, body, httpStatus);
    } else if (peer.order.answered(request.epoch)) {
      request.reply.send(peer, body, httpStatus);
      if (peer.order.heldCount > 0) this.deliverReady(peer);
    } else if (!peer.closed) {
      this.hold(peer, request, body);
    }
  }

  /** The connection closed: nothing held for it is sent. */
  connectionClosed(connection: Connection): void {
    connection.order.clear();
    this.heldConnections.delete(connection);
  }

  stop(): void {
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
  }

  /**
   * A reload committed while this connection's older-epoch requests still compute: hold this newer answer
   * so the connection never sees an old version after a new one — bounded in bytes here, in time by the
   * hold timer; held bytes count as unsent bytes for the slow-consumer limit.
   */
  private hold(connection: Connection, request: PendingRequest, body: string | Uint8Array): void {
    const bytes = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
    this.counters.answersHeld++;
    if (connection.order.hold(request.epoch, { request, body }, bytes, this.clock()) === 'bytes') {
      this.releaseHeld(connection, 'bytes');
      return;
    }
    this.heldConnections.add(connection);
    this.observeConsumer(connection);
    this.scheduleHoldTimer();
  }

  private deliverReady(connection: Connection): void {
    const ready = connection.order.takeReady();
    if (ready) for (const { request, body } of ready) request.reply.send(connection, body, 200);
    if (connection.order.heldCount === 0) this.heldConnections.delete(connection);
  }

  /** A bound ran out: deliver what is held; the older answers will come after (see EpochOrder). */
  private releaseHeld(connection: Connection, reason: HoldRelease): void {
    this.counters.holdReleases[reason]++;
    this.heldConnections.delete(connection);
    for (const { request, body } of connection.order.releaseAll()) request.reply.send(connection, body, 200);
  }

  private scheduleHoldTimer(): void {
    if (this.holdTimer !== undefined) return;
    let next = Number.POSITIVE_INFINITY;
    for (const connection of this.heldConnections) {
      const at = connection.order.releaseAt;
      if (at !== undefined && at < next) next = at;
    }
    if (next === Number.POSITIVE_INFINITY) return;
    this.holdTimer = setTimeout(this.onHoldTimer, Math.max(1, next - this.clock()));
    this.holdTimer.unref();
  }

  private readonly onHoldTimer = (): void => {
    this.holdTimer = undefined;
    try {
      const now = this.clock();
      for (const connection of [...this.heldConnections]) {
        if (connection.closed || connection.order.heldCount === 0) this.heldConnections.delete(connection);
        else if (connection.order.expired(now)) this.releaseHeld(connection, 'time');
      }
      this.scheduleHoldTimer();
    } catch (error) {
      this.onTimerError(error);
    }
  };
}
