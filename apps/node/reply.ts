/**
 * How a request is answered: one strategy object per protocol, made once per gateway and picked by the
 * request's `reply` field (nothing is allocated per request). A Reply encodes a success from the response
 * record or a typed error in its protocol's shape, and sends it to its kind of peer through the transport.
 */
import type { ErrorCode, RequestId } from '../../libs/protocol';
import {
  decodeOutputsFlat,
  encodeBinaryAnswer,
  encodeError,
  encodeResultHead,
  encodeResultRecord,
  encodeV2Error,
  encodeV2Response,
  outputSectionHeaderBytes,
  ProtocolError,
  RESPONSE_HEADER_BYTES,
  readFirstOutput,
} from '../../libs/protocol';
import type { RingBuffer } from '../../libs/ring';
import type { Slot } from './models';
import type {
  Connection,
  HttpExchange,
  InProcessCall,
  Peer,
  PendingRequest,
  Reply,
  Transport,
} from './request';

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
    // The head (model, version, epoch) is the same for every answer of a slot within an epoch: encoded once.
    if (slot.resultHeadEpoch !== request.epoch) {
      slot.resultHead = encodeResultHead(slot.model.name, slot.version, request.epoch);
      slot.resultHeadEpoch = request.epoch;
    }
    // Written straight from the record: float32 outputs print their shortest round-trip text (json-answer.ts).
    return encodeResultRecord(
      request.id,
      slot.resultHead,
      ring.bytes,
      ring.view,
      offset,
      slot.model.signature,
      latencyMs,
    );
  }

  error(id: RequestId, code: ErrorCode, message: string, retryAfterMs?: number, suppressed?: number): string {
    return encodeError(id, code, message, retryAfterMs, suppressed);
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

/** The body of an in-process success: the output itself travels on the call, nothing is encoded. */
const IN_PROCESS_ANSWERED = new Uint8Array(0);
/** Separates the fields of an in-process error body (codes and numbers never hold it). */
const FIELD = '\n';

/**
 * An in-process caller (apps/node/embedded): a success copies the first output out of the response ring onto
 * the call; an error's shape in this protocol is `code \n retryAfterMs \n message`, split again only when it is
 * settled (no JSON either way). `send` settles the call's promise; there is no transport.
 */
class InProcessReply implements Reply {
  success(request: PendingRequest, slot: Slot, ring: RingBuffer, offset: number): Uint8Array {
    (request.peer as InProcessCall).output = firstOutputOf(ring, offset, slot);
    return IN_PROCESS_ANSWERED;
  }

  error(_id: RequestId, code: ErrorCode, message: string, retryAfterMs?: number): string {
    return `${code}${FIELD}${retryAfterMs ?? ''}${FIELD}${message}`;
  }

  send(peer: Peer, body: string | Uint8Array): void {
    const call = peer as InProcessCall;
    if (typeof body === 'string') {
      const first = body.indexOf(FIELD);
      const second = body.indexOf(FIELD, first + 1);
      const retry = body.slice(first + 1, second);
      call.failure = new ProtocolError(
        body.slice(0, first) as ErrorCode,
        body.slice(second + 1),
        retry === '' ? undefined : Number(retry),
      );
    }
    call.settle();
  }

  warn(): void {}
}

/**
 * The first output of a successful response as float32 values: float32 outputs are copied as they are, other
 * numeric ones converted; a string output cannot be answered in-process (a typed error, not a throw).
 */
function firstOutputOf(ring: RingBuffer, offset: number, slot: Slot): Float32Array {
  const view = ring.view;
  const signature = slot.model.signature;
  if (view.getUint8(offset + 7) > 0) {
    const section = offset + RESPONSE_HEADER_BYTES;
    const byteLength = view.getUint32(section, true);
    const rank = view.getUint8(section + 4);
    if (signature.outputs[view.getUint8(section + 5)]?.dtype === 'float32' && byteLength % 4 === 0) {
      const data = section + outputSectionHeaderBytes(rank);
      // slice() copies into a fresh, aligned buffer: the ring's bytes are reused once this record is claimed.
      return new Float32Array(ring.bytes.slice(data, data + byteLength).buffer);
    }
  }
  const output = readFirstOutput(ring.bytes, view, offset, signature);
  if (output === undefined) throw new ProtocolError('model_error', 'the model answered no output');
  if (output.dtype === 'string')
    throw new ProtocolError('type_mismatch', `output ${output.index} is text; in-process calls read numbers`);
  if (output.dtype === 'int64') return Float32Array.from(output.values, Number);
  return Float32Array.from(output.values);
}

export interface Replies {
  wsJson: Reply;
  wsBinary: Reply;
  httpJson: Reply;
  httpV2: Reply;
  silent: Reply;
  /** In-process calls (apps/node/embedded). */
  inProcess: Reply;
}

export function createReplies(transport: Transport): Replies {
  return {
    wsJson: new WsJsonReply(transport),
    wsBinary: new WsBinaryReply(transport),
    httpJson: new HttpJsonReply(transport),
    httpV2: new HttpV2Reply(transport),
    silent: new SilentReply(transport),
    inProcess: new InProcessReply(),
  };
}
