/**
 * The node's request path without processes: admission (decode → route → limits → one ring record), answers
 * (response record → the bytes each protocol gets) and pending (by id, epoch order, close), over real rings,
 * a fake transport and a clock the test moves.
 */
import * as path from 'node:path';
import {
  ClientState,
  ErrorCoalescer,
  ModelQueueGuard,
  ProtocolViolations,
  validateBackpressureOptions,
} from '../../libs/backpressure';
import { MetricsShard, metricsBufferFor, readSlotTotals } from '../../libs/metrics';
import type { ErrorCode } from '../../libs/protocol';
import {
  decodeBinaryResponse,
  encodeBinaryRequest,
  errorResponseBytes,
  httpStatusOf,
  RESPONSE_HEADER_BYTES,
  writeErrorResponse,
  writeOutputSectionHeader,
  writeResponseHeader,
} from '../../libs/protocol';
import { readModel } from '../../libs/registry';
import { Doorbell, RingBuffer } from '../../libs/ring';
import { Admission, Rejection } from './admission';
import { Answers } from './answers';
import { EpochOrder } from './epoch-order';
import type { NodeStartOptions } from './ipc';
import type { ServedModel, Slot } from './models';
import { PendingRequests } from './pending';
import type { Replies } from './reply';
import { createReplies } from './reply';
import type { Connection, HeldAnswer, HttpExchange, PendingRequest, Transport } from './request';
import { PROTOCOL_HTTP, PROTOCOL_WS } from './request';
import { RingWriter } from './ring-writer';
import { Shadow } from './shadow';

const DIGITS = readModel(path.resolve(__dirname, '../../../models/digits'), 'digits');
const PIXELS = Array.from({ length: 64 }, (_, i) => i % 17);

interface Sent {
  to: 'ws' | 'http';
  status: number;
  body: string | Uint8Array;
  retryAfterMs?: number;
  close?: boolean;
}

/** A transport that records what would have gone on the wire. */
class FakeTransport implements Transport {
  readonly sent: Sent[] = [];
  sendWs(connection: Connection, body: string | Uint8Array): void {
    if (!connection.closed) this.sent.push({ to: 'ws', status: 200, body });
  }
  sendHttp(
    exchange: HttpExchange,
    status: number,
    body: string,
    close: boolean,
    retryAfterMs: number | undefined,
  ): void {
    if (!exchange.aborted) this.sent.push({ to: 'http', status, body, close, retryAfterMs });
  }
  json(index = -1): Record<string, unknown> {
    return JSON.parse(this.sent.at(index)!.body as string) as Record<string, unknown>;
  }
}

interface Limits {
  rateLimitRps?: number;
  rateLimitBurst?: number;
  maxInflightPerClient?: number;
  maxModelQueue?: number;
  ringBytes?: number;
  maxPayloadBytes?: number;
}

function world(limits: Limits = {}) {
  let now = 1_000_000;
  const clock = (): number => now;
  const backpressure = {
    rateLimitRps: limits.rateLimitRps ?? 0,
    rateLimitBurst: limits.rateLimitBurst ?? 0,
    maxInflightPerClient: limits.maxInflightPerClient ?? 100,
    maxModelQueue: limits.maxModelQueue ?? 100,
    slowConsumerWarnBytes: 1 << 20,
    slowConsumerCloseBytes: 4 << 20,
    trustForwardedFor: false,
    trustedProxies: undefined,
    rateLimitKey: 'connection',
    maxConnections: 0,
    maxConnectionsPerIp: 0,
    maxProtocolErrorsPerSecond: 0,
    maxRateLimitedPerSecond: 0,
    errorCoalesceMs: 0,
  };
  const options = {
    maxPayloadBytes: limits.maxPayloadBytes ?? 64 * 1024,
    requestTimeoutMs: 1000,
    backpressure,
    testHooks: false,
  } as unknown as NodeStartOptions;
  const resolved = validateBackpressureOptions({
    rateLimitRps: backpressure.rateLimitRps,
    rateLimitBurst: backpressure.rateLimitBurst,
    maxInflightPerClient: backpressure.maxInflightPerClient,
    maxModelQueue: backpressure.maxModelQueue,
  });
  const rings = [4, 1, 4].map((share) => {
    const ring = RingBuffer.create(Math.max(4096, (limits.ringBytes ?? 64 * 1024) / share));
    ring.setOwnerId(1);
    return ring;
  });
  const slot: Slot = {
    index: 1,
    model: DIGITS,
    version: '2',
    rings,
    doorbell: Doorbell.create(),
    guard: new ModelQueueGuard(resolved, now),
    admitted: 0,
    executionProvider: 'cpu',
    loadedWorkers: 1,
    retiring: false,
    resultHead: '',
    resultHeadEpoch: -1,
  };
  const model: ServedModel = {
    entry: DIGITS,
    versions: new Map([['2', slot]]),
    stable: '2',
    candidate: undefined,
    previousStable: undefined,
    canaryFraction: 0,
    shadow: false,
  };
  const slots: Array<Slot | undefined> = [];
  slots[1] = slot;
  const table = {
    models: new Map([['digits', model]]),
    slots,
    epoch: 3,
    defaultModel: 'digits',
    unavailableReason: () => undefined,
  };
  const metricsBuffer = metricsBufferFor(1);
  const metrics = new MetricsShard(metricsBuffer, 0);
  const transport = new FakeTransport();
  const replies: Replies = createReplies(transport);
  const pending = new PendingRequests(
    { maxHoldMs: 1000, maxHoldBytes: 1 << 20 },
    clock,
    () => undefined,
    (error) => {
      throw error;
    },
  );
  const writer = new RingWriter();
  const shadow = new Shadow(table, pending, writer, metrics, replies.silent);
  const admission = new Admission(options, table, metrics, writer, pending, shadow, clock);
  const responses = RingBuffer.create(256 * 1024);
  responses.setOwnerId(2);
  const errors: unknown[] = [];
  const answers = new Answers(responses, pending, slots, metrics, shadow, clock, (_where, error) =>
    errors.push(error),
  );
  const newClient = (): ClientState => new ClientState(resolved, now);
  const connection = (): Connection => ({
    protocol: PROTOCOL_WS,
    id: 1,
    ws: undefined,
    closed: false,
    client: newClient(),
    address: '127.0.0.1',
    coalescer: new ErrorCoalescer(0, 64),
    violations: new ProtocolViolations(0),
    rateLimitViolations: new ProtocolViolations(0),
    order: new EpochOrder<HeldAnswer>(pending.holdLimits),
  });
  const exchange = (): HttpExchange => ({ protocol: PROTOCOL_HTTP, res: undefined as never, aborted: false });
  const written = (): number => rings.reduce((total, ring) => total + ring.pendingRecords(), 0);
  const request = (id: number | string, extra: Record<string, unknown> = {}): string =>
    JSON.stringify({ id, model: 'digits', input: PIXELS, ...extra });
  /** Takes every request record the "worker" would claim, returning their ring request ids in order. */
  const claimAll = (): number[] => {
    const ids: number[] = [];
    for (const ring of [...rings].reverse())
      ring.claim((offset) => {
        ids.push(ring.view.getUint32(offset, true));
        return true;
      }, 4096);
    return ids;
  };
  /** What a worker writes for one request: ten probabilities (class 3 wins), or a typed error. */
  const respond = (requestId: number, error?: { code: ErrorCode; message: string }): void => {
    const header = { requestId, slot: 1, queueMs: 1, computeMs: 2, batchSize: 1, workerIndex: 0 };
    const length = error ? errorResponseBytes(error.message) : RESPONSE_HEADER_BYTES + 8 + 4 + 40;
    const offset = responses.reserve(length);
    if (error) writeErrorResponse(responses.view, responses.bytes, offset, header, error.code, error.message);
    else {
      writeResponseHeader(responses.view, offset, header, 0, 1);
      let at = writeOutputSectionHeader(responses.view, offset + RESPONSE_HEADER_BYTES, 0, [10], 40);
      for (let i = 0; i < 10; i++, at += 4) responses.view.setFloat32(at, i === 3 ? 0.9 : 0.01, true);
    }
    responses.commit(undefined, false);
  };
  return {
    admission,
    answers,
    pending,
    replies,
    transport,
    slot,
    table,
    rings,
    written,
    request,
    claimAll,
    respond,
    connection,
    exchange,
    newClient,
    errors,
    metricsBuffer,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

function rejected(result: PendingRequest | Rejection): Rejection {
  expect(result).toBeInstanceOf(Rejection);
  return result as Rejection;
}

const encoder = new TextEncoder();
const frame = (text: string): ArrayBuffer => encoder.encode(text).buffer as ArrayBuffer;

describe('admission', () => {
  test('an admitted request is one ring record and one pending request, with everything its answer needs', () => {
    const w = world();
    const ws = w.connection();
    const result = w.admission.admitJson(w.request(7), 100, w.replies.wsJson, ws, ws.client);
    expect(result).not.toBeInstanceOf(Rejection);
    const admitted = result as PendingRequest;
    expect(admitted).toMatchObject({ id: 7, slot: 1, priority: 'normal', epoch: 3, startedAt: 100 });
    expect(admitted.deadlineAt).toBe(1100);
    expect(admitted.reply).toBe(w.replies.wsJson);
    expect(admitted.peer).toBe(ws);
    expect(w.written()).toBe(1);
    expect(w.rings[1]!.pendingRecords()).toBe(1);
    expect(w.pending.size).toBe(1);
    expect(w.slot.admitted).toBe(1);
  });

  test('rate limited: the typed rejection, with Retry-After, and nothing written', () => {
    const w = world({ rateLimitRps: 1, rateLimitBurst: 1 });
    const client = w.newClient();
    const ws = w.connection();
    expect(w.admission.admitJson(w.request(1), 0, w.replies.wsJson, ws, client)).not.toBeInstanceOf(
      Rejection,
    );
    const refusal = rejected(w.admission.admitJson(w.request(2), 0, w.replies.wsJson, ws, client));
    expect(refusal.error.code).toBe('rate_limited');
    expect(refusal.error.retryAfterMs).toBeGreaterThan(0);
    // Charged before decoding, so a flood of bad frames buys nothing: never routed, so it counts against no model; a frame's id is sniffed.
    expect(refusal).toMatchObject({ id: null, slot: 0 });
    const frameRefusal = rejected(
      w.admission.admitFrame(frame(w.request(3)), false, 0, w.replies.wsJson, ws, client),
    );
    expect(frameRefusal).toMatchObject({ id: 3, slot: 0 });
    expect(frameRefusal.error.code).toBe('rate_limited');
    expect(w.written()).toBe(1);
    expect(w.pending.size).toBe(1);
  });

  test('every frame costs: malformed, unknown-model, oversize and binary garbage spend the bucket first', () => {
    const w = world({ rateLimitRps: 1, rateLimitBurst: 4, maxPayloadBytes: 128 });
    const ws = w.connection();
    const garbage = new Uint8Array([0x53, 1, 0xff, 0xff, 1, 2]).buffer as ArrayBuffer;
    const codes = [
      frame('x'),
      frame('{"id": 1, "model": "nope", "input": [1]}'),
      frame(`{"id": 2, "input": [${'1,'.repeat(100)}1]}`),
      garbage,
      frame('x'),
    ].map((message, i) =>
      rejected(w.admission.admitFrame(message, i === 3, 0, w.replies.wsJson, ws, ws.client)),
    );
    expect(codes.map((refusal) => refusal.error.code)).toEqual([
      'bad_request',
      'unknown_model',
      'payload_too_large',
      'bad_request',
      'rate_limited',
    ]);
    // A valid request finds the bucket empty too.
    expect(rejected(w.admission.admitJson(w.request(5), 0, w.replies.wsJson, ws, ws.client)).error.code).toBe(
      'rate_limited',
    );
    const v2 = rejected(
      w.admission.admitV2('{', 'nope', undefined, 0, w.replies.httpV2, w.exchange(), ws.client),
    );
    expect(v2.error.code).toBe('rate_limited');
    expect(w.written()).toBe(0);
  });

  test('at the in-flight cap a routed request is refused client_queue_full after paying its token', () => {
    const w = world({ rateLimitRps: 1, rateLimitBurst: 3, maxInflightPerClient: 1 });
    const ws = w.connection();
    expect(w.admission.admitJson(w.request(1), 0, w.replies.wsJson, ws, ws.client)).not.toBeInstanceOf(
      Rejection,
    );
    expect(rejected(w.admission.admitJson(w.request(2), 0, w.replies.wsJson, ws, ws.client)).error.code).toBe(
      'client_queue_full',
    );
    expect(ws.client.availableTokens(1_000_000)).toBeLessThan(1.01);
  });

  test('client queue full: the client already has its cap of requests in flight', () => {
    const w = world({ maxInflightPerClient: 2 });
    const ws = w.connection();
    for (const id of [1, 2])
      expect(w.admission.admitJson(w.request(id), 0, w.replies.wsJson, ws, ws.client)).not.toBeInstanceOf(
        Rejection,
      );
    const refusal = rejected(w.admission.admitJson(w.request(3), 0, w.replies.wsJson, ws, ws.client));
    expect(refusal.error.code).toBe('client_queue_full');
    expect(w.written()).toBe(2);
  });

  test('model queue full: overloaded with Retry-After; a high-priority request still has headroom', () => {
    const w = world({ maxModelQueue: 4 });
    w.slot.admitted = 4;
    const ws = w.connection();
    const refusal = rejected(w.admission.admitJson(w.request(1), 0, w.replies.wsJson, ws, ws.client));
    expect(refusal.error.code).toBe('overloaded');
    expect(refusal.error.message).toMatch(/queue limit for normal priority/);
    expect(refusal.error.retryAfterMs).toBeGreaterThan(0);
    expect(w.written()).toBe(0);
    const high = w.admission.admitJson(
      w.request(2, { priority: 'high' }),
      0,
      w.replies.wsJson,
      ws,
      ws.client,
    );
    expect(high).not.toBeInstanceOf(Rejection);
    expect(w.rings[2]!.pendingRecords()).toBe(1);
  });

  test('ring full: overloaded, and every record written belongs to a pending request', () => {
    const w = world({ ringBytes: 4096, maxModelQueue: 10_000, maxInflightPerClient: 10_000 });
    const ws = w.connection();
    let refusal: Rejection | undefined;
    let admitted = 0;
    for (let id = 0; id < 1000 && refusal === undefined; id++) {
      const result = w.admission.admitJson(w.request(id), 0, w.replies.wsJson, ws, ws.client);
      if (result instanceof Rejection) refusal = result;
      else admitted++;
    }
    expect(refusal?.error.code).toBe('overloaded');
    expect(refusal?.error.message).toMatch(/queue is full/);
    expect(admitted).toBeGreaterThan(0);
    expect(w.written()).toBe(admitted);
    expect(w.pending.size).toBe(admitted);
    console.log(`ring full after ${admitted} records in a 4096-byte ring`);
  });

  test('payload too large: a frame over the limit is refused before decoding, its id sniffed', () => {
    const w = world({ maxPayloadBytes: 128 });
    const ws = w.connection();
    const refusal = rejected(
      w.admission.admitFrame(frame(w.request('big')), false, 0, w.replies.wsJson, ws, ws.client),
    );
    expect(refusal.error.code).toBe('payload_too_large');
    expect(refusal).toMatchObject({ id: 'big', slot: 0 });
    expect(rejected(w.admission.bodyTooLarge(ws.client, ws)).error.code).toBe('payload_too_large');
    expect(w.written()).toBe(0);
  });

  test('draining, unknown model and malformed JSON: typed rejections, nothing written', () => {
    const w = world();
    const ws = w.connection();
    const unknown = rejected(
      w.admission.admitJson(w.request(1, { model: 'nope' }), 0, w.replies.wsJson, ws, ws.client),
    );
    expect(unknown.error.code).toBe('unknown_model');
    expect(unknown.error.message).toMatch(/available: digits/);
    expect(unknown.slot).toBe(0);
    const malformed = rejected(w.admission.admitJson('{"id": 4,', 0, w.replies.wsJson, ws, ws.client));
    expect(malformed.error.code).toBe('bad_request');
    w.admission.draining = true;
    const draining = rejected(w.admission.admitJson(w.request(5), 0, w.replies.wsJson, ws, ws.client));
    expect(draining.error.code).toBe('unavailable');
    expect(draining.id).toBe(5);
    expect(w.written()).toBe(0);
    expect(w.pending.size).toBe(0);
  });
});

describe('answers', () => {
  test('WebSocket JSON: the result with id, model, version and the epoch it was routed in', () => {
    const w = world();
    const ws = w.connection();
    w.admission.admitJson(w.request(7), 0, w.replies.wsJson, ws, ws.client);
    const [requestId] = w.claimAll();
    w.respond(requestId!);
    w.answers.drainNow();
    expect(w.transport.sent).toHaveLength(1);
    expect(w.transport.json()).toMatchObject({ id: 7, model: 'digits', version: '2', epoch: 3 });
    expect(w.transport.json()).toHaveProperty('result');
    expect(w.slot.admitted).toBe(0);
    expect(w.pending.size).toBe(0);
    expect(w.answers.answered).toBe(1);
  });

  test('WebSocket binary: a tensor frame back, errors stay JSON', () => {
    const w = world();
    const ws = w.connection();
    const request = encodeBinaryRequest({ id: 'b', model: 'digits' }, [
      { name: 'pixels', dtype: 'float32', dims: [64], data: Float32Array.from(PIXELS) },
    ]);
    const bytes = request.buffer.slice(
      request.byteOffset,
      request.byteOffset + request.byteLength,
    ) as ArrayBuffer;
    w.admission.admitFrame(bytes, true, 0, w.replies.wsBinary, ws, ws.client);
    w.admission.admitFrame(bytes, true, 0, w.replies.wsBinary, ws, ws.client);
    const [first, second] = w.claimAll();
    w.respond(first!);
    w.respond(second!, { code: 'deadline_exceeded', message: 'too late' });
    w.answers.drainNow();
    const answer = decodeBinaryResponse(w.transport.sent[0]!.body as Uint8Array);
    expect(answer.header).toMatchObject({ id: 'b', model: 'digits', version: '2', epoch: 3, label: '3' });
    expect(w.transport.json(1)).toMatchObject({ id: 'b', type: 'error', code: 'deadline_exceeded' });
  });

  test('HTTP JSON and Open Inference Protocol: status from the error code, body in each shape', () => {
    const w = world();
    w.admission.admitJson(w.request(9), 0, w.replies.httpJson, w.exchange(), w.newClient());
    w.admission.admitV2(
      JSON.stringify({ id: 'v', inputs: [{ name: 'pixels', shape: [64], datatype: 'FP32', data: PIXELS }] }),
      'digits',
      undefined,
      0,
      w.replies.httpV2,
      w.exchange(),
      w.newClient(),
    );
    w.admission.admitV2('{', 'digits', undefined, 0, w.replies.httpV2, w.exchange(), w.newClient());
    const [json, v2] = w.claimAll();
    w.respond(json!, { code: 'internal', message: 'boom' });
    w.respond(v2!);
    w.answers.drainNow();
    expect(w.transport.sent[0]).toMatchObject({ to: 'http', status: httpStatusOf('internal') });
    expect(w.transport.json(0)).toMatchObject({ id: 9, type: 'error', code: 'internal' });
    expect(w.transport.sent[1]).toMatchObject({ to: 'http', status: 200 });
    expect(w.transport.json(1)).toMatchObject({ model_name: 'digits', model_version: '2', id: 'v' });
  });

  test('a rejection is answered in its protocol, Retry-After carried to HTTP', () => {
    const w = world({ maxModelQueue: 1 });
    w.slot.admitted = 1;
    const exchange = w.exchange();
    const refusal = rejected(
      w.admission.admitJson(w.request(3), 0, w.replies.httpJson, exchange, w.newClient()),
    );
    w.answers.reject(exchange, w.replies.httpJson, refusal, 0);
    expect(w.transport.sent[0]).toMatchObject({ to: 'http', status: httpStatusOf('overloaded') });
    expect(w.transport.sent[0]!.retryAfterMs).toBeGreaterThan(0);
    expect(w.transport.json()).toMatchObject({ id: 3, code: 'overloaded' });
    const ws = w.connection();
    w.answers.reject(ws, w.replies.wsJson, w.admission.bodyTooLarge(ws.client, ws), 0);
    expect(w.transport.json()).toMatchObject({ id: null, type: 'error', code: 'payload_too_large' });
  });

  test('the node answers for a dead worker once; the late worker answer is dropped', () => {
    const w = world();
    const ws = w.connection();
    w.admission.admitJson(w.request(5), 0, w.replies.wsJson, ws, ws.client);
    const [requestId] = w.claimAll();
    expect(w.answers.answerWithError(requestId!, 'internal', 'worker died')).toBe(true);
    expect(w.answers.answerWithError(requestId!, 'internal', 'worker died')).toBe(false);
    w.respond(requestId!);
    w.answers.drainNow();
    expect(w.transport.sent).toHaveLength(1);
    expect(w.transport.json()).toMatchObject({ id: 5, code: 'internal' });
    expect(ws.client.inflight).toBe(0);
  });
});

describe('model errors cost their client', () => {
  test('a model_error answer takes the model error penalty from its client; other errors do not', () => {
    const w = world({ rateLimitRps: 10, rateLimitBurst: 10 });
    const ws = w.connection();
    for (const id of [1, 2])
      expect(w.admission.admitJson(w.request(id), 0, w.replies.wsJson, ws, ws.client)).not.toBeInstanceOf(
        Rejection,
      );
    const [first, second] = w.claimAll();
    w.respond(first!, { code: 'internal', message: 'worker 0 died while computing this request; retry' });
    w.answers.drainNow();
    expect(readSlotTotals(w.metricsBuffer, 1).clientModelErrors).toBe(0);
    w.respond(second!, {
      code: 'model_error',
      message: 'model run failed: indices element out of data bounds',
    });
    w.answers.drainNow();
    expect(w.transport.json()).toMatchObject({ id: 2, code: 'model_error' });
    expect(readSlotTotals(w.metricsBuffer, 1).clientModelErrors).toBe(1);
    // 10 tokens - 2 requests - 9 for the model error = -1: two tokens short, 200 ms at 10/s.
    const refusal = rejected(w.admission.admitJson(w.request(3), 0, w.replies.wsJson, ws, ws.client));
    expect(refusal.error).toMatchObject({ code: 'rate_limited', retryAfterMs: 200 });
    // Another client is untouched.
    const other = w.connection();
    expect(w.admission.admitJson(w.request(4), 0, w.replies.wsJson, other, other.client)).not.toBeInstanceOf(
      Rejection,
    );
  });
});

describe('pending', () => {
  test('by id: take removes, overdue finds requests past their deadline plus grace', () => {
    const w = world();
    const ws = w.connection();
    w.admission.admitJson(w.request(1, { deadline_ms: 50 }), 0, w.replies.wsJson, ws, ws.client);
    w.admission.admitJson(w.request(2), 0, w.replies.wsJson, ws, ws.client);
    const [short, long] = w.pending.requestIds();
    expect(w.pending.overdue(100, 10).length).toBeLessThanOrEqual(1);
    expect(w.pending.overdue(2000, 10)).toEqual([short, long]);
    expect(w.pending.take(short!)?.id).toBe(1);
    expect(w.pending.take(short!)).toBeUndefined();
    expect(w.pending.size).toBe(1);
  });

  test('epoch order: a newer-epoch answer waits for the older one on its connection, HTTP never waits', () => {
    const w = world();
    const ws = w.connection();
    w.admission.admitJson(w.request('old'), 0, w.replies.wsJson, ws, ws.client);
    w.table.epoch = 4;
    w.admission.admitJson(w.request('new'), 0, w.replies.wsJson, ws, ws.client);
    w.admission.admitJson(w.request('http'), 0, w.replies.httpJson, w.exchange(), w.newClient());
    const [old, fresh, http] = w.claimAll().sort((a, b) => a - b);
    w.respond(fresh!);
    w.respond(http!);
    w.answers.drainNow();
    expect(w.transport.sent.map((sent) => sent.to)).toEqual(['http']);
    expect(w.pending.counters.answersHeld).toBe(1);
    w.respond(old!);
    w.answers.drainNow();
    expect(w.transport.sent.slice(1).map((sent) => JSON.parse(sent.body as string).id)).toEqual([
      'old',
      'new',
    ]);
  });

  test('close: what a closed connection had held is never sent', () => {
    const w = world();
    const ws = w.connection();
    w.admission.admitJson(w.request('old'), 0, w.replies.wsJson, ws, ws.client);
    w.table.epoch = 4;
    w.admission.admitJson(w.request('new'), 0, w.replies.wsJson, ws, ws.client);
    const [old, fresh] = w.claimAll().sort((a, b) => a - b);
    w.respond(fresh!);
    w.answers.drainNow();
    ws.closed = true;
    w.pending.connectionClosed(ws);
    expect(ws.order.heldCount).toBe(0);
    w.respond(old!);
    w.answers.drainNow();
    expect(w.transport.sent).toHaveLength(0);
    expect(w.pending.size).toBe(0);
    w.pending.stop();
  });
});
