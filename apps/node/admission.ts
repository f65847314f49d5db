/**
 * Admission, the same for every protocol: charge the client's rate limit (every frame or body, before a byte
 * of it is decoded) → decode → route → in-flight cap → model queue bound by priority → validate against the
 * model → one record into the ring of the request's priority. A refused request is returned as a Rejection
 * (answered by the caller), never thrown; nothing is written then.
 */
import type { ClientState } from '../../libs/backpressure';
import { AdmissionCode, CONSUMER_FALLING_BEHIND, resolveDeadline } from '../../libs/backpressure';
import type { MetricsShard, ShedReason } from '../../libs/metrics';
import { SHED_REASONS } from '../../libs/metrics';
import type { BinaryRequest, InferenceRequest, RequestId } from '../../libs/protocol';
import {
  bindBinaryRequest,
  bindRequest,
  decodeBinaryRequest,
  decodeJsonRequest,
  decodeV2Request,
  encodeWarning,
  modelUnavailable,
  PRIORITY_CODE,
  ProtocolError,
  RequestError,
  requestRecordBytes,
  unknownModel,
} from '../../libs/protocol';
import type { RouteDecision, RouteKind } from '../../libs/registry';
import { route, routingKeyDraw } from '../../libs/registry';
import { clampPriority } from '../../libs/tenants';
import { sniffFrameId } from './frame-id';
import type { NodeStartOptions } from './ipc';
import type { ServedModel, Slot } from './models';
import type { PendingRequests } from './pending';
import type { Peer, PendingRequest, Reply } from './request';
import { PROTOCOL_WS } from './request';
import type { RingWriter } from './ring-writer';
import type { Shadow } from './shadow';

/** Slot 0 counts requests that never reached a model (bad JSON, unknown model). */
export const UNROUTED_SLOT = 0;
/** Distinct `rate_limited` waits kept (a wait is at most 1000 / rate ms, in whole ms). */
const RATE_LIMITED_ERRORS_MAX = 4096;
/** No client may ask for a deadline further away than this. */
const MAX_DEADLINE_MS = 3_600_000;
/** Shed reasons as indexes of SHED_REASONS (metrics). */
export const SHED = Object.fromEntries(SHED_REASONS.map((reason, index) => [reason, index])) as Record<
  ShedReason,
  number
>;
const ROUTE_INDEX: Record<RouteKind, number> = { stable: 0, canary: 1, pinned: 2 };
const decoder = new TextDecoder();

/** A refused request: the typed error, the client's id when readable, the slot it counts against. */
export class Rejection {
  constructor(
    readonly error: ProtocolError,
    readonly id: RequestId,
    readonly slot: number,
  ) {}
}

/** What admission reads of the model table (it never writes it). */
export interface RoutingTable {
  readonly models: Map<string, ServedModel>;
  readonly epoch: number;
  readonly defaultModel: string;
  /** Why a model (or version) this host failed to load is unavailable; undefined when it is not known so. */
  unavailableReason(model: string, version?: string): string | undefined;
}

export class Admission {
  /** Set when the node drains: every request is refused `unavailable`. */
  draining = false;
  /** Set while the host is fenced from its fleet (in doubt about a reload): every request is refused `fenced`. */
  fence: string | undefined;
  readonly counters = { inflightWarnings: 0 };
  /** Reused for every routing decision (no allocation per request). */
  private readonly decision: RouteDecision = { version: '', route: 'stable', shadowVersion: undefined };
  /** `rate_limited` errors by wait (ms), for the rate they were made at (errors are immutable). */
  private readonly rateLimitedErrors = new Map<number, ProtocolError>();
  private rateLimitedRps = -1;
  /** Element cap per input: no input can hold more float32s than a maximal payload. */
  private readonly bindLimits: { maxElements: number };

  constructor(
    private readonly options: NodeStartOptions,
    private readonly table: RoutingTable,
    private readonly metrics: MetricsShard,
    private readonly writer: RingWriter,
    private readonly pending: PendingRequests,
    private readonly shadow: Shadow,
    private readonly clock: () => number,
  ) {
    this.bindLimits = { maxElements: Math.floor(options.maxPayloadBytes / 4) };
  }

  /** A configuration reload changed the payload limit. */
  setMaxPayloadBytes(bytes: number): void {
    this.bindLimits.maxElements = Math.floor(bytes / 4);
  }

  /**
   * An HTTP body over the payload limit (declared, or counted while reading). It is charged like any
   * request: past the rate limit it is answered `rate_limited`.
   */
  bodyTooLarge(client: ClientState, peer: Peer): Rejection {
    const limited = this.charge(client, null, peer);
    if (limited !== undefined) return limited;
    return new Rejection(
      new ProtocolError('payload_too_large', `body exceeds the ${this.options.maxPayloadBytes}-byte limit`),
      null,
      UNROUTED_SLOT,
    );
  }

  /**
   * A WebSocket frame: a tensor frame (binary) or JSON. Charged first, valid or not; its bytes are valid only
   * during the uWS callback, and decoding copies them now.
   */
  admitFrame(
    message: ArrayBuffer,
    isBinary: boolean,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    const now = this.clock();
    if (!client.takeToken(now)) return this.rateLimited(client, sniffFrameId(message, isBinary), peer);
    // The tenant's share after the client's own limit: one client past its own rate spends none of it.
    const tenant = peer.tenant;
    if (tenant !== undefined && !tenant.takeToken(now))
      return this.tenantRateLimited(peer, sniffFrameId(message, isBinary));
    if (message.byteLength > this.options.maxPayloadBytes) {
      return new Rejection(
        new ProtocolError(
          'payload_too_large',
          `frame of ${message.byteLength} bytes exceeds the ${this.options.maxPayloadBytes}-byte limit`,
        ),
        sniffFrameId(message, isBinary),
        UNROUTED_SLOT,
      );
    }
    if (!isBinary) return this.decodeJson(decoder.decode(message), startedAt, reply, peer, client);
    let request: BinaryRequest;
    try {
      request = decodeBinaryRequest(message, { model: this.table.defaultModel });
    } catch (error) {
      return decodeRejection(error);
    }
    return this.admitDecoded(request, request, startedAt, reply, peer, client);
  }

  /** Our JSON request (`POST /predict`; WebSocket text frames come through admitFrame). */
  admitJson(
    text: string,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    return this.charge(client, null, peer) ?? this.decodeJson(text, startedAt, reply, peer, client);
  }

  private decodeJson(
    text: string,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    let request: InferenceRequest;
    try {
      request = decodeJsonRequest(text, { model: this.table.defaultModel });
    } catch (error) {
      return decodeRejection(error);
    }
    return this.admitDecoded(request, undefined, startedAt, reply, peer, client);
  }

  /** An Open Inference Protocol body for `model` (and `version`) from the path. */
  admitV2(
    body: string,
    modelName: string,
    version: string | undefined,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    const limited = this.charge(client, null, peer);
    if (limited !== undefined) return limited;
    const model = this.table.models.get(modelName);
    if (!model) return new Rejection(this.missingModel(modelName, version), null, UNROUTED_SLOT);
    let request: InferenceRequest;
    try {
      request = decodeV2Request(body, modelName, version, model.entry.signature, this.bindLimits);
    } catch (error) {
      return decodeRejection(error);
    }
    return this.admitDecoded(request, undefined, startedAt, reply, peer, client);
  }

  /**
   * An in-process call (apps/node/embedded): its tensors are already typed arrays, so nothing is decoded; they
   * are bound and copied into the ring as a binary frame's are.
   */
  admitTensors(
    request: BinaryRequest,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    return (
      this.charge(client, request.id, peer) ??
      this.admitDecoded(request, request, startedAt, reply, peer, client)
    );
  }

  /**
   * One token of the client's bucket, then one of its tenant's share, before anything is decoded; the
   * rejection when either has none left.
   */
  private charge(client: ClientState, id: RequestId, peer: Peer): Rejection | undefined {
    const now = this.clock();
    if (!client.takeToken(now)) return this.rateLimited(client, id, peer);
    const tenant = peer.tenant;
    return tenant === undefined || tenant.takeToken(now) ? undefined : this.tenantRateLimited(peer, id);
  }

  /** Counted against no model: the request was never decoded, so it was never routed. */
  private rateLimited(client: ClientState, id: RequestId, peer: Peer): Rejection {
    this.metrics.recordShed(UNROUTED_SLOT, SHED.rate_limited, peer.tenant?.metricsIndex ?? 0);
    return new Rejection(this.rateLimitedError(client.retryAfterMs), id, UNROUTED_SLOT);
  }

  /** Past the tenant's rate over the host (its share on this node is spent). */
  private tenantRateLimited(peer: Peer, id: RequestId): Rejection {
    const tenant = peer.tenant!;
    this.metrics.recordShed(UNROUTED_SLOT, SHED.tenant_rate_limited, tenant.metricsIndex);
    return new Rejection(tenant.rateLimitedError(), id, UNROUTED_SLOT);
  }

  /**
   * The `rate_limited` error for a wait, made once per distinct wait and rate: under a flood past the limit,
   * building a new error per frame was the largest cost of refusing it (1.2 µs of ~3.4 µs of JS per frame).
   */
  private rateLimitedError(retryAfterMs: number): ProtocolError {
    const rps = this.options.backpressure.rateLimitRps;
    const cache = this.rateLimitedErrors;
    if (rps !== this.rateLimitedRps || cache.size >= RATE_LIMITED_ERRORS_MAX) {
      cache.clear();
      this.rateLimitedRps = rps;
    }
    let error = cache.get(retryAfterMs);
    if (error === undefined) {
      error = new ProtocolError(
        'rate_limited',
        `more than ${rps} requests per second from this client`,
        retryAfterMs,
      );
      cache.set(retryAfterMs, error);
    }
    return error;
  }

  private admitDecoded(
    request: InferenceRequest,
    binary: BinaryRequest | undefined,
    startedAt: number,
    reply: Reply,
    peer: Peer,
    client: ClientState,
  ): PendingRequest | Rejection {
    const id = request.id;
    const tenant = peer.tenant;
    const tenantIndex = tenant?.metricsIndex ?? 0;
    if (this.draining) {
      this.metrics.recordShed(UNROUTED_SLOT, SHED.shutting_down, tenantIndex);
      return new Rejection(
        new ProtocolError('unavailable', 'server is shutting down; retry on another instance'),
        id,
        UNROUTED_SLOT,
      );
    }
    if (this.fence !== undefined) {
      this.metrics.recordShed(UNROUTED_SLOT, SHED.fenced, tenantIndex);
      return new Rejection(
        new ProtocolError(
          'fenced',
          `this host is fenced from its fleet (${this.fence}); retry on another host`,
        ),
        id,
        UNROUTED_SLOT,
      );
    }
    let priority = request.priority;
    if (tenant !== undefined) {
      const name = request.model ?? this.table.defaultModel;
      // Whether the model exists or not: a tenant learns nothing of the models it may not use.
      if (!tenant.allows(name))
        return new Rejection(
          new ProtocolError('forbidden', `tenant "${tenant.name}" may not use model "${name}"`),
          id,
          UNROUTED_SLOT,
        );
      priority = clampPriority(priority, tenant.spec.maxPriority);
    }
    const slot = this.resolve(request);
    if (slot instanceof ProtocolError) return new Rejection(slot, id, UNROUTED_SLOT);
    const slotIndex = slot.index;
    const metrics = this.metrics;
    const backpressure = this.options.backpressure;
    metrics.recordRoute(slotIndex, ROUTE_INDEX[this.decision.route]);
    const now = this.clock();
    // The token was paid before decoding; the in-flight cap needs a routed request.
    if (client.inflightFull) {
      metrics.recordShed(slotIndex, SHED.client_queue_full, tenantIndex);
      return new Rejection(
        new ProtocolError(
          'client_queue_full',
          `this client already has ${client.inflight} requests in flight (limit ${backpressure.maxInflightPerClient}); wait for answers`,
        ),
        id,
        slotIndex,
      );
    }
    if (slot.guard.tryAdmit(slot.admitted, priority, now) === AdmissionCode.ModelQueueFull) {
      metrics.recordShed(slotIndex, SHED.model_queue_full, tenantIndex);
      return new Rejection(
        new ProtocolError(
          'overloaded',
          `model ${slot.model.name} version ${slot.version} is at its queue limit for ${priority} priority`,
          slot.guard.retryAfterMs,
        ),
        id,
        slotIndex,
      );
    }
    let bound: ReturnType<typeof bindRequest>;
    try {
      bound = binary
        ? bindBinaryRequest(binary, slot.model.signature, this.bindLimits)
        : bindRequest(request, slot.model.signature, this.bindLimits);
    } catch (error) {
      return new Rejection(asProtocolError(error), id, slotIndex);
    }
    const length = requestRecordBytes(bound);
    const ring = slot.rings[PRIORITY_CODE[priority]]!;
    if (length > ring.maxRecordBytes) {
      return new Rejection(
        new ProtocolError('payload_too_large', `request of ${length} bytes exceeds the model's record limit`),
        id,
        slotIndex,
      );
    }
    const offset = ring.reserve(length);
    if (offset < 0) {
      metrics.recordShed(slotIndex, SHED.ring_full, tenantIndex);
      return new Rejection(
        new ProtocolError(
          'overloaded',
          `model ${slot.model.name} version ${slot.version} queue is full`,
          slot.guard.estimateRetryAfterMs(slot.admitted, now),
        ),
        id,
        slotIndex,
      );
    }
    const requestId = this.writer.takeRequestId();
    const deadlineAt = resolveDeadline(
      request.deadlineMs,
      this.options.requestTimeoutMs,
      MAX_DEADLINE_MS,
      startedAt,
    );
    try {
      this.writer.write(
        ring,
        offset,
        slot.doorbell,
        { requestId, slot: slotIndex, priority, enqueuedAt: startedAt, deadlineAt },
        bound,
      );
    } catch (error) {
      return new Rejection(asProtocolError(error), id, slotIndex);
    }
    slot.admitted++;
    const shadowVersion = this.decision.shadowVersion;
    const pair =
      shadowVersion !== undefined
        ? this.shadow.mirror(
            slot,
            shadowVersion,
            this.decision.route !== 'canary',
            bound,
            startedAt,
            deadlineAt,
            now,
          )
        : undefined;
    const admitted: PendingRequest = {
      id,
      slot: slotIndex,
      priority,
      epoch: this.table.epoch,
      startedAt,
      deadlineAt,
      reply,
      peer,
      client,
      shadow: pair,
      shadowSide: false,
      judged: this.decision.route !== 'pinned',
    };
    this.pending.add(requestId, admitted);
    metrics.addInflight(slotIndex, 1);
    if (client.onAdmitted() && peer.protocol === PROTOCOL_WS) {
      this.counters.inflightWarnings++;
      reply.warn(
        peer,
        encodeWarning(
          CONSUMER_FALLING_BEHIND,
          `${client.inflight} requests in flight; at ${backpressure.maxInflightPerClient} new ones are rejected`,
        ),
      );
    }
    return admitted;
  }

  /** A model not in the table: `model_unavailable` when this host failed to load it, else `unknown_model`. */
  private missingModel(name: string, version: string | undefined): ProtocolError {
    const reason = this.table.unavailableReason(name, version);
    return reason === undefined
      ? unknownModel(name, this.table.models.keys())
      : modelUnavailable(name, undefined, reason);
  }

  /** The slot a request routes to, or the typed error saying why none. */
  private resolve(request: InferenceRequest): Slot | ProtocolError {
    const models = this.table.models;
    const name = request.model ?? this.table.defaultModel;
    const model = models.get(name);
    if (!model) return this.missingModel(name, request.version);
    const draw = request.routingKey !== undefined ? routingKeyDraw(request.routingKey) : Math.random();
    let decision: RouteDecision;
    try {
      decision = route(model, request.version, draw, this.decision);
    } catch (error) {
      return new ProtocolError('unknown_version', `model "${name}": ${(error as Error).message}`);
    }
    const slot = model.versions.get(decision.version);
    if (slot) return slot;
    const reason = this.table.unavailableReason(name, decision.version);
    if (reason !== undefined) return modelUnavailable(name, decision.version, reason);
    const loaded = [...model.versions.keys()].join(', ');
    const known = model.entry.versions.some((entry) => entry.version === decision.version);
    return new ProtocolError(
      'unknown_version',
      known
        ? `model "${name}" version "${decision.version}" is not loaded; loaded: ${loaded}`
        : `model "${name}" has no version "${decision.version}"; loaded: ${loaded}`,
    );
  }
}

export function asProtocolError(error: unknown): ProtocolError {
  if (error instanceof ProtocolError) return error;
  return new ProtocolError('internal', `internal error: ${(error as Error)?.message ?? String(error)}`);
}

/** A malformed request, answered with its id when it was readable. */
function decodeRejection(error: unknown): Rejection {
  return new Rejection(
    asProtocolError(error),
    error instanceof RequestError ? error.requestId : null,
    UNROUTED_SLOT,
  );
}
