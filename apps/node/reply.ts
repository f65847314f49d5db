/**
 * How a request is answered: one strategy object per protocol, made once per gateway and picked by the
 * request's `reply` field (nothing is allocated per request). A Reply encodes a success from the response
 * record or a typed error in its protocol's shape, and sends it to its kind of peer through the transport.
 */
import type { ErrorCode, RequestId } from '../../libs/protocol';
import {
  decodeOutputsFlat,
  decodeResult,
  encodeBinaryAnswer,
  encodeError,
  encodeResultHead,
  encodeResultWithHead,
  encodeV2Error,
  encodeV2Response,
} from '../../libs/protocol';
import type { RingBuffer } from '../../libs/ring';
import type { Slot } from './models';
import type { Connection, HttpExchange, Peer, PendingRequest, Reply, Transport } from './request';

/** WebSocket, JSON answers. */
class WsJsonReply implements Reply {
  constructor(protected readonly transport: Transport) {}

  success(
    request: PendingRequest,
    slot: Slot,
    ring: RingBuffer,
    offset: number,
    latencyMs: number,
  ): string | Uint8Array {
    const result = decodeResult(ring.bytes, ring.view, offset, slot.model.signature);
    // The head (model, version, epoch) is the same for every answer of a slot within an epoch: encoded once.
    if (slot.resultHeadEpoch !== request.epoch) {
      slot.resultHead = encodeResultHead(slot.model.name, slot.version, request.epoch);
      slot.resultHeadEpoch = request.epoch;
    }
    return encodeResultWithHead(request.id, slot.resultHead, result, latencyMs);
  }

  error(id: RequestId, code: ErrorCode, message: string, retryAfterMs?: number): string {
    return encodeError(id, code, message, retryAfterMs);
  }

  send(
    peer: Peer,
    body: string | Uint8Array,
    _httpStatus: number,
    _close?: boolean,
    _retryAfterMs?: number,
  ): void {
    this.transport.sendWs(peer as Connection, body, typeof body !== 'string');
  }

  warn(peer: Peer, frame: string): void {
    this.transport.sendWs(peer as Connection, frame, false);
  }
}

/** WebSocket, binary tensor frames (the request was one); errors stay JSON. */
class WsBinaryReply extends WsJsonReply {
  override success(
    request: PendingRequest,
    slot: Slot,
    ring: RingBuffer,
    offset: number,
    latencyMs: number,
  ): Uint8Array {
    return encodeBinaryAnswer(ring.bytes, ring.view, offset, slot.model.signature, {
      id: request.id,
      model: slot.model.name,
      version: slot.version,
      epoch: request.epoch,
      latency_ms: latencyMs,
    });
  }
}

/** HTTP `/predict`, our JSON. */
class HttpJsonReply extends WsJsonReply {
  override send(
    peer: Peer,
    body: string | Uint8Array,
    httpStatus: number,
    close = false,
    retryAfterMs?: number,
  ): void {
    this.transport.sendHttp(peer as HttpExchange, httpStatus, body as string, close, retryAfterMs);
  }

  override warn(): void {}
}

/** HTTP, the Open Inference Protocol's JSON shapes. */
class HttpV2Reply extends HttpJsonReply {
  override success(request: PendingRequest, slot: Slot, ring: RingBuffer, offset: number): string {
    return encodeV2Response(
      slot.model.name,
      slot.version,
      typeof request.id === 'string' ? request.id : null,
      decodeOutputsFlat(ring.bytes, ring.view, offset, slot.model.signature),
    );
  }

  override error(_id: RequestId, code: ErrorCode, message: string): string {
    return encodeV2Error(code, message);
  }
}

/** A shadow copy: computed and compared, never sent. */
class SilentReply extends WsJsonReply {
  override send(): void {}
  override warn(): void {}
}

export interface Replies {
  wsJson: Reply;
  wsBinary: Reply;
  httpJson: Reply;
  httpV2: Reply;
  silent: Reply;
}

export function createReplies(transport: Transport): Replies {
  return {
    wsJson: new WsJsonReply(transport),
    wsBinary: new WsBinaryReply(transport),
    httpJson: new HttpJsonReply(transport),
    httpV2: new HttpV2Reply(transport),
    silent: new SilentReply(transport),
  };
}
