/**
 * The request, one object from admission to answer (the node's pending record: no other per-request object
 * is made), the three kinds of peer an answer goes to, and the Reply (how an answer is encoded and sent, one
 * strategy per protocol: reply.ts) over the Transport (the gateway's corked sends).
 */
import type * as uWS from 'uWebSockets.js';
import type { ClientState, ErrorCoalescer, ProtocolViolations } from '../../libs/backpressure';
import type { ErrorCode, Priority, ProtocolError, RequestId, ShadowOutput } from '../../libs/protocol';
import type { RingBuffer } from '../../libs/ring';
import type { EpochOrder } from './epoch-order';
import type { Slot } from './models';
import type { TenantState } from './tenants';

/** Metrics protocol label of a peer. */
export const PROTOCOL_WS = 0;
export const PROTOCOL_HTTP = 1;
export const PROTOCOL_EMBEDDED = 2;

/** A WebSocket connection (uWS user data): its limits and its answer order across a reload. */
export interface Connection {
  readonly protocol: typeof PROTOCOL_WS;
  id: number;
  /** Set when uWS opens the socket; frames come only after that. */
  ws: uWS.WebSocket<Connection> | undefined;
  closed: boolean;
  /**
   * Slow-consumer state of this connection, and its rate limit and in-flight cap unless they belong to its
   * address (rateLimitKey `ip`: the gateway's per-address table).
   */
  client: ClientState;
  /**
   * The client's key: its address (the peer, or the rightmost untrusted X-Forwarded-For hop behind trusted
   * proxies); for IPv6 its /64.
   */
  readonly address: string;
  /** Identical id-less errors answered once per window. */
  readonly coalescer: ErrorCoalescer;
  /** Protocol errors per second: past the limit the connection is closed with 1008. */
  readonly violations: ProtocolViolations;
  /** `rate_limited` refusals per second, past `maxRateLimitedPerSecond` the connection is closed (1008). */
  readonly rateLimitViolations: ProtocolViolations;
  /** Answer order across a reload: newer-epoch answers held (bounded) behind this connection's older ones. */
  order: EpochOrder<HeldAnswer>;
  /** Its tenant (`--api-keys`), from the key at the upgrade; undefined for anonymous traffic. */
  tenant?: TenantState | undefined;
  /** SHA-256 of the key it presented ('' when anonymous): a reload that drops it closes the connection. */
  keyHash?: string;
}

/** One HTTP exchange: its response, and whether the client went away. */
export interface HttpExchange {
  readonly protocol: typeof PROTOCOL_HTTP;
  res: uWS.HttpResponse;
  aborted: boolean;
  /** Its tenant (`--api-keys`), from this request's key; undefined for anonymous traffic. */
  tenant?: TenantState | undefined;
}

/**
 * An in-process caller (apps/node/embedded: a headless node inside another process): one call, one answer,
 * which settles a promise instead of being encoded and sent. The in-process Reply (reply.ts) fills `output`
 * or `failure` and then settles the call.
 */
export interface InProcessCall {
  readonly protocol: typeof PROTOCOL_EMBEDDED;
  /** The first output of a successful answer, copied out of the response ring. */
  output: Float32Array | undefined;
  /** The typed error of a failed one. */
  failure: ProtocolError | undefined;
  /** Called exactly once, after `output` or `failure` is set: resolves or rejects the caller's promise. */
  settle(): void;
  /** In-process calls are anonymous. */
  readonly tenant?: undefined;
}

export type Peer = Connection | HttpExchange | InProcessCall;

export interface HeldAnswer {
  request: PendingRequest;
  body: string | Uint8Array;
}

/**
 * Both sides of a shadow comparison: the served answer (`primary`) and the mirrored copy's (`candidate`) —
 * the candidate version's, or stable's when the served request was a canary's (mirrorIsCandidate false).
 */
export interface ShadowPair {
  model: string;
  classifier: boolean;
  primary: ShadowOutput | undefined;
  candidate: ShadowOutput | undefined;
  mirrorIsCandidate: boolean;
  /** Why the mirrored side failed, when it did. */
  candidateFailure?: ErrorCode;
  /** Sides still to answer. */
  open: number;
}

export interface PendingRequest {
  /** The id the client gave (echoed in its answer); null when it gave none. */
  id: RequestId;
  /** The slot (loaded model version) it was routed to. */
  slot: number;
  priority: Priority;
  /** The model-table epoch it was routed in: its answer reports it. */
  epoch: number;
  startedAt: number;
  deadlineAt: number;
  /** How its answer is encoded and sent (one shared strategy per protocol). */
  reply: Reply;
  /** Where the answer goes; undefined for a shadow copy, which is never answered. */
  peer: Peer | undefined;
  /** Undefined for shadow copies: they count against no client. */
  client: ClientState | undefined;
  /** Shadow mode: the comparison this request (or its mirror) feeds. */
  shadow: ShadowPair | undefined;
  /** True for the mirrored copy: computed and compared, never answered. */
  shadowSide: boolean;
  /**
   * The router chose its version (route stable or canary, not pinned by the client): rollout checks may count
   * its answer (libs/rollout judge.ts). False for shadow copies (the shadow counters judge those).
   */
  judged: boolean;
}

/** What the transport (the gateway) does for a Reply: corked sends with their backpressure checks. */
export interface Transport {
  sendWs(connection: Connection, body: string | Uint8Array, binary: boolean): void;
  sendHttp(
    exchange: HttpExchange,
    status: number,
    body: string,
    close: boolean,
    retryAfterMs: number | undefined,
  ): void;
}

export interface Reply {
  /** The success answer of `request`, decoded from its response record at `offset`. */
  success(
    request: PendingRequest,
    slot: Slot,
    ring: RingBuffer,
    offset: number,
    latencyMs: number,
  ): string | Uint8Array;
  /**
   * A typed error in this protocol's shape (`id` is the client's, null when unknown); `suppressed`: identical
   * id-less errors coalesced into this one (WebSocket JSON only).
   */
  error(id: RequestId, code: ErrorCode, message: string, retryAfterMs?: number, suppressed?: number): string;
  send(
    peer: Peer,
    body: string | Uint8Array,
    httpStatus: number,
    close?: boolean,
    retryAfterMs?: number,
  ): void;
  /** A warning frame to the client (WebSocket only; HTTP has no channel for one). */
  warn(peer: Peer, frame: string): void;
}
