/**
 * The external backend against a tiny fake server (ws + http on one port) whose misbehaviour each test
 * scripts: shed answers, a dropped connection, duplicate answers, silence. The real server is in
 * test/integration/pipeline-external.test.ts.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type WebSocket, WebSocketServer } from 'ws';
import { decodeBinaryRequest, encodeBinaryFrame, encodeBinaryRequest } from '../../../libs/protocol';
import { ExternalInferenceError } from './errors';
import type { ExternalBackend, ExternalBackendOptions } from './external';
import { createExternalBackend } from './external';
import { backoffDelay, encodePredict, firstNumber, readAnswer } from './external-wire';

const PIN = { model: 'delay-risk', version: '1' };

interface Received {
  id: number;
  model: string;
  version: string;
  row: number[];
  binary: boolean;
  socket: WebSocket;
  /** performance.now() when it arrived. */
  at: number;
}

/** What the fake does with one request: answer it (value), an error code, or nothing (the test decides). */
type Script = (
  request: Received,
  attempt: number,
) => { value: number } | { code: string; retryAfterMs?: number } | 'hold';

class FakeServer {
  readonly server = http.createServer((req, res) => this.onHttp(req, res));
  readonly wss = new WebSocketServer({ server: this.server });
  readonly attempts = new Map<number, number>();
  readonly held: Received[] = [];
  readonly log: Received[] = [];
  /** Outstanding requests per socket, and the most seen at once (per socket and in all). */
  readonly outstanding = new Map<WebSocket, number>();
  maxPerSocket = 0;
  maxTotal = 0;
  firstSendOrder: number[] = [];
  connections = 0;
  script: Script = (request) => ({ value: expectedFor(request.row) });
  /** Called after each request is recorded (drop the socket, answer twice, …). */
  after: (request: Received) => void = () => {};

  constructor(private readonly served = new Set(['delay-risk/1'])) {
    this.wss.on('connection', (socket) => {
      this.connections++;
      this.outstanding.set(socket, 0);
      socket.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(socket, data, isBinary));
      socket.on('close', () => this.outstanding.delete(socket));
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `ws://127.0.0.1:${(this.server.address() as AddressInfo).port}/ws`;
  }

  close(): Promise<void> {
    for (const client of this.wss.clients) client.terminate();
    this.wss.close();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  answer(request: Received, value: number): void {
    this.done(request.socket);
    if (request.binary) {
      const data = new Float32Array([value]);
      request.socket.send(
        encodeBinaryFrame(
          {
            id: request.id,
            model: request.model,
            version: request.version,
            epoch: 0,
            latency_ms: 1,
            outputs: [{ name: 'risk', dtype: 'float32', dims: [1] }],
          },
          [{ bytes: new Uint8Array(data.buffer) }],
        ),
      );
    } else {
      request.socket.send(
        JSON.stringify({
          id: request.id,
          model: request.model,
          version: request.version,
          epoch: 0,
          result: [value],
          latency_ms: 1,
        }),
      );
    }
  }

  private done(socket: WebSocket): void {
    const left = this.outstanding.get(socket);
    if (left !== undefined) this.outstanding.set(socket, Math.max(0, left - 1));
  }

  private onMessage(socket: WebSocket, data: Buffer, isBinary: boolean): void {
    let request: Received;
    if (isBinary) {
      const copy = data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength) as ArrayBuffer;
      const decoded = decodeBinaryRequest(copy);
      // one float32 tensor: the first of the frame's data
      const tensor = decoded.tensors[0]!;
      const row = Array.from(new Float32Array(decoded.data!.slice(0, 4 * tensor.dims[0]!).buffer));
      request = {
        id: decoded.id as number,
        model: decoded.model!,
        version: decoded.version!,
        row,
        binary: true,
        socket,
        at: performance.now(),
      };
    } else {
      const body = JSON.parse(data.toString()) as {
        id: number;
        model: string;
        version: string;
        input: number[];
      };
      request = {
        id: body.id,
        model: body.model,
        version: body.version,
        row: body.input,
        binary: false,
        socket,
        at: performance.now(),
      };
    }
    this.log.push(request);
    const attempt = (this.attempts.get(request.id) ?? 0) + 1;
    this.attempts.set(request.id, attempt);
    if (attempt === 1) this.firstSendOrder.push(request.id);
    this.outstanding.set(socket, (this.outstanding.get(socket) ?? 0) + 1);
    this.maxPerSocket = Math.max(this.maxPerSocket, this.outstanding.get(socket)!);
    let total = 0;
    for (const count of this.outstanding.values()) total += count;
    this.maxTotal = Math.max(this.maxTotal, total);
    const action = this.script(request, attempt);
    if (action === 'hold') this.held.push(request);
    else if ('value' in action) setImmediate(() => this.answer(request, action.value));
    else {
      setImmediate(() => {
        this.done(socket);
        const retry = action.retryAfterMs === undefined ? '' : `,"retry_after_ms":${action.retryAfterMs}`;
        socket.send(
          `{"id":${request.id},"type":"error","code":"${action.code}","message":"scripted"${retry}}`,
        );
      });
    }
    this.after(request);
  }

  private onHttp(req: http.IncomingMessage, res: http.ServerResponse): void {
    const match = /^\/v2\/models\/([^/]+)\/versions\/([^/]+)(\/ready)?$/.exec(req.url ?? '');
    if (!match) {
      res.writeHead(404).end('{"error":"no route","code":"not_found"}');
      return;
    }
    const [, model, version, ready] = match;
    if (!this.served.has(`${model}/${version}`)) {
      const code = [...this.served].some((key) => key.startsWith(`${model}/`))
        ? 'unknown_version'
        : 'unknown_model';
      res.writeHead(404).end(JSON.stringify({ name: model, ready: false, error: 'not loaded', code }));
      return;
    }
    res.writeHead(200).end(
      ready
        ? JSON.stringify({ name: model, ready: true })
        : JSON.stringify({
            name: model,
            versions: [version],
            inputs: [{ name: 'features', datatype: 'FP32', shape: [-1, 5] }],
          }),
    );
  }
}

/** A deterministic stand-in for the model: the answer tells which row it was for. */
function expectedFor(row: number[]): number {
  return Math.fround(row[0]! / 1000);
}

function rowOf(i: number): Float32Array {
  return new Float32Array([i, 1, 2, 3, 4]);
}

const sleeps: number[] = [];
const fastSleep = (ms: number): Promise<void> => {
  sleeps.push(ms);
  return new Promise((resolve) => setTimeout(resolve, Math.min(ms, 3)));
};

let fake: FakeServer;
let backend: ExternalBackend | undefined;

function fakeUrl(): string {
  return `ws://127.0.0.1:${(fake.server.address() as AddressInfo).port}/ws`;
}

async function open(options: Partial<ExternalBackendOptions> = {}): Promise<ExternalBackend> {
  const url = await fake.listen();
  backend = await createExternalBackend({
    url,
    sleep: fastSleep,
    backoff: { baseMs: 10, maxMs: 200 },
    ...options,
  });
  return backend;
}

beforeEach(() => {
  sleeps.length = 0;
  fake = new FakeServer();
});

afterEach(async () => {
  await backend?.close();
  backend = undefined;
  await fake.close();
});

async function rejection(promise: Promise<unknown>): Promise<ExternalInferenceError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(ExternalInferenceError);
    return error as ExternalInferenceError;
  }
  throw new Error('expected a rejection');
}

describe('external backend against a fake server', () => {
  test('every call names the pin and is answered by id; binary frames (when asked) after prepare', async () => {
    const json = await open();
    await json.prepare(PIN);
    expect(await json.predict(PIN, rowOf(9))).toBe(expectedFor([9]));
    expect(fake.log.map((r) => r.binary)).toEqual([false]);
    await json.close();
    fake.log.length = 0;
    const b = await createExternalBackend({ url: fakeUrl(), frames: 'binary' });
    backend = b;
    expect(b.mode).toBe('external');
    const before = await b.predict(PIN, rowOf(7));
    await b.prepare(PIN);
    const after = await Promise.all([1, 2, 3].map((i) => b.predict(PIN, rowOf(i))));
    expect(before).toBe(expectedFor([7]));
    expect(after).toEqual([1, 2, 3].map((i) => expectedFor([i])));
    expect(fake.log.map((r) => [r.model, r.version, r.binary])).toEqual([
      ['delay-risk', '1', false],
      ['delay-risk', '1', true],
      ['delay-risk', '1', true],
      ['delay-risk', '1', true],
    ]);
    expect(fake.log.map((r) => r.id).sort()).toEqual([1, 2, 3, 4]);
    // And a frames value that is neither is refused up front.
    await expect(
      createExternalBackend({ url: 'ws://127.0.0.1:1/ws', frames: 'xml' as 'json' }),
    ).rejects.toMatchObject({ code: 'invalid_options' });
    expect(b.inflight).toBe(0);
  });

  test('in flight stays under maxInflight in all and per connection; the rest waits FIFO, none lost', async () => {
    fake.script = () => 'hold';
    const b = await open({ connections: 2, maxInflight: 6 });
    await b.prepare(PIN);
    const calls = Array.from({ length: 200 }, (_, i) => b.predict(PIN, rowOf(i)));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(b.inflight).toBe(6);
    expect(b.queued).toBe(194);
    // Answer whatever is held, a few at a time and out of order, until all 200 are done.
    while (fake.firstSendOrder.length < 200 || fake.held.length > 0) {
      const batch = fake.held.splice(0).reverse();
      for (const request of batch) fake.answer(request, expectedFor(request.row));
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const values = await Promise.all(calls);
    expect(values).toEqual(Array.from({ length: 200 }, (_, i) => expectedFor([i])));
    expect(fake.maxTotal).toBeLessThanOrEqual(6);
    expect(fake.maxPerSocket).toBeLessThanOrEqual(3);
    // FIFO: the calls left the queue in the order they were made (two sockets may reorder arrivals a little).
    fake.firstSendOrder.forEach((id, position) => expect(Math.abs(id - (position + 1))).toBeLessThan(6));
  });

  test('overloaded and unavailable back off per call; rate_limited pauses and spaces the connection', async () => {
    fake.script = (request, attempt) => {
      if (attempt === 1) return { code: 'overloaded' };
      if (attempt === 2) return { code: 'rate_limited', retryAfterMs: 60 };
      if (attempt === 3) return { code: 'unavailable' };
      return { value: expectedFor(request.row) };
    };
    const b = await open({
      connections: 1,
      maxInflight: 4,
      random: () => 0,
      backoff: { baseMs: 10, maxMs: 80 },
    });
    const values = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => b.predict(PIN, rowOf(i))));
    expect(values).toEqual([0, 1, 2, 3, 4, 5].map((i) => expectedFor([i])));
    for (const count of fake.attempts.values()) expect(count).toBe(4);
    expect(b.stats.retries).toEqual({ overloaded: 6, rate_limited: 6, unavailable: 6 });
    // random() = 0 → half the exponential ceiling: 5 ms after the first attempt, 20 after the third.
    expect(sleeps.filter((ms) => ms === 5)).toHaveLength(6);
    expect(sleeps.filter((ms) => ms === 20)).toHaveLength(6);
    // Attempts 3 and 4 only go out after their call was rate_limited: the first no sooner than 60 ms
    // after the first refusal, and then at most one send per 60 ms on the connection.
    const attemptOf = (r: Received): number => fake.log.filter((o) => o.id === r.id).indexOf(r) + 1;
    const limitedAt = Math.min(...fake.log.filter((r) => attemptOf(r) === 2).map((r) => r.at));
    const paced = fake.log.filter((r) => attemptOf(r) >= 3).map((r) => r.at);
    expect(paced).toHaveLength(12);
    expect(paced[0]! - limitedAt).toBeGreaterThanOrEqual(55);
    for (let i = 1; i < paced.length; i++) expect(paced[i]! - paced[i - 1]!).toBeGreaterThanOrEqual(55);
  });

  test('a connection dropped mid-flight reconnects and re-sends; every id is answered exactly once', async () => {
    let dropped = false;
    fake.script = (request, attempt) =>
      !dropped && attempt === 1 && request.id % 3 === 0 ? 'hold' : { value: expectedFor(request.row) };
    fake.after = (request) => {
      // Once 24 requests are in (8 held, under the 16 slots), cut every connection with requests held on it.
      if (!dropped && request.id >= 24) {
        dropped = true;
        setImmediate(() => {
          for (const socket of fake.wss.clients) socket.terminate();
          fake.held.length = 0;
        });
      }
    };
    const b = await open({ connections: 2, maxInflight: 16 });
    const answers = new Map<number, number>();
    const calls = Array.from({ length: 300 }, (_, i) =>
      b.predict(PIN, rowOf(i)).then((value) => {
        answers.set(i, (answers.get(i) ?? 0) + 1);
        return value;
      }),
    );
    const values = await Promise.all(calls);
    expect(values).toEqual(Array.from({ length: 300 }, (_, i) => expectedFor([i])));
    expect([...answers.values()].every((count) => count === 1)).toBe(true);
    expect(answers.size).toBe(300);
    expect(b.stats.resent).toBeGreaterThanOrEqual(8);
    expect(b.stats.retries).toEqual({});
    expect(b.stats.reconnects).toBeGreaterThanOrEqual(1);
    expect(fake.connections).toBeGreaterThanOrEqual(3);
    expect(b.inflight).toBe(0);
  });

  test('a second answer for an id already answered is ignored', async () => {
    fake.after = (request) => setTimeout(() => fake.answer(request, 99), 1);
    const b = await open({ connections: 1 });
    const values = await Promise.all([1, 2, 3].map((i) => b.predict(PIN, rowOf(i))));
    expect(values).toEqual([1, 2, 3].map((i) => expectedFor([i])));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(b.stats.duplicates).toBe(3);
    expect(b.stats.answered).toBe(3);
  });

  test('unknown_model and bad_request are not retried; shedding past maxAttempts is retries_exhausted', async () => {
    fake.script = (request) =>
      request.model === 'nope'
        ? { code: 'unknown_model' }
        : request.row[0] === 1
          ? { code: 'bad_request' }
          : { code: 'overloaded' };
    const b = await open({ maxAttempts: 3 });
    const unknown = await rejection(b.predict({ model: 'nope', version: '1' }, rowOf(5)));
    expect(unknown.code).toBe('rejected');
    expect(unknown.serverCode).toBe('unknown_model');
    const bad = await rejection(b.predict(PIN, rowOf(1)));
    expect([bad.code, bad.serverCode]).toEqual(['rejected', 'bad_request']);
    const shed = await rejection(b.predict(PIN, rowOf(2)));
    expect([shed.code, shed.serverCode]).toEqual(['retries_exhausted', 'overloaded']);
    expect([...fake.attempts.values()]).toEqual([1, 1, 3]);
  });

  test('an answer from another version than the pin is refused, never used', async () => {
    fake.script = () => 'hold';
    const b = await open();
    const call = b.predict(PIN, rowOf(1));
    await new Promise((resolve) => setTimeout(resolve, 20));
    const request = fake.held[0]!;
    request.version = '2';
    fake.answer(request, 0.5);
    const error = await rejection(call);
    expect(error.code).toBe('bad_answer');
  });

  test('a silent attempt times out and is retried', async () => {
    fake.script = (request, attempt) => (attempt === 1 ? 'hold' : { value: expectedFor(request.row) });
    const b = await open({ requestTimeoutMs: 50 });
    expect(await b.predict(PIN, rowOf(4))).toBe(expectedFor([4]));
    expect(b.stats.retries).toEqual({ timeout: 1 });
    // The first attempt's late answer is a duplicate, ignored.
    fake.answer(fake.held[0]!, 123);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(b.stats.duplicates).toBe(1);
  });

  test('prepare checks the fake serves the version, typed when it does not', async () => {
    const b = await open();
    await expect(b.prepare(PIN)).resolves.toBeUndefined();
    const version = await rejection(b.prepare({ model: 'delay-risk', version: '9' }));
    expect([version.code, version.serverCode]).toEqual(['not_served', 'unknown_version']);
    const model = await rejection(b.prepare({ model: 'nope', version: '1' }));
    expect([model.code, model.serverCode]).toEqual(['not_served', 'unknown_model']);
    const alias = await rejection(b.prepare({ model: 'delay-risk', version: '' }));
    expect(alias.code).toBe('invalid_options');
  });

  test('close() rejects queued and in-flight calls with `closed`, and later calls too', async () => {
    fake.script = () => 'hold';
    const b = await open({ connections: 1, maxInflight: 2 });
    const calls = Array.from({ length: 10 }, (_, i) => rejection(b.predict(PIN, rowOf(i))));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(b.inflight).toBe(2);
    await b.close();
    const errors = await Promise.all(calls);
    expect(errors.map((error) => error.code)).toEqual(Array(10).fill('closed'));
    expect((await rejection(b.predict(PIN, rowOf(1)))).code).toBe('closed');
    expect(b.inflight).toBe(0);
    expect(b.queued).toBe(0);
  });

  test('bad options fail before any I/O; no fake at all is `unreachable`', async () => {
    for (const options of [
      { url: 'http://127.0.0.1:1/ws' },
      { url: 'not a url' },
      { url: 'ws://127.0.0.1:1/ws', connections: 0 },
      { url: 'ws://127.0.0.1:1/ws', maxInflight: 2.5 },
      { url: 'ws://127.0.0.1:1/ws', backoff: { baseMs: 10, maxMs: 1 } },
    ]) {
      expect((await rejection(createExternalBackend(options))).code).toBe('invalid_options');
    }
    const url = await fake.listen();
    await fake.close();
    fake = new FakeServer();
    expect((await rejection(createExternalBackend({ url, sleep: fastSleep }))).code).toBe('unreachable');
  });
});

describe('external wire rules', () => {
  test('backoff doubles to its cap, jitter stays within [ceiling/2, ceiling], retry_after is a floor', () => {
    const backoff = { baseMs: 10, maxMs: 100 };
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, backoff, () => 1))).toEqual([
      10, 20, 40, 80, 100, 100,
    ]);
    expect(backoffDelay(3, backoff, () => 0)).toBe(20);
    expect(backoffDelay(1, backoff, () => 0, 500)).toBe(500);
  });

  test('answers: first number of a result, errors with known codes, warnings, garbage', () => {
    expect(firstNumber([[0.25, 1]])).toBe(0.25);
    expect(firstNumber({ risk: [0.5] })).toBe(0.5);
    expect(firstNumber('x')).toBeUndefined();
    expect(
      readAnswer(
        Buffer.from('{"id":3,"type":"error","code":"overloaded","message":"m","retry_after_ms":40}'),
        false,
      ),
    ).toEqual({
      kind: 'error',
      id: 3,
      code: 'overloaded',
      message: 'm',
      retryAfterMs: 40,
    });
    expect(
      readAnswer(Buffer.from('{"id":3,"type":"error","code":"weird","message":"m"}'), false),
    ).toMatchObject({ code: 'internal' });
    expect(readAnswer(Buffer.from('{"type":"warning","code":"c","message":"m"}'), false).kind).toBe(
      'warning',
    );
    expect(readAnswer(Buffer.from('nope'), false).kind).toBe('garbage');
    expect(readAnswer(Buffer.from([1, 2, 3]), true).kind).toBe('garbage');
  });

  test('binary frames: byte for byte the protocol encoder, and answers read like the protocol decoder', () => {
    const row = new Float32Array([30, 2.5, 1, 0, -10.25]);
    const pin = { model: 'délai', version: '7' };
    const ours = encodePredict(42, pin, row, 5000, { name: 'features' }) as Buffer;
    const theirs = encodeBinaryRequest({ id: 42, model: 'délai', version: '7', deadline_ms: 5000 }, [
      { name: 'features', dtype: 'float32', dims: [5], data: row },
    ]);
    expect(Buffer.compare(ours, Buffer.from(theirs))).toBe(0);
    const decoded = decodeBinaryRequest(
      ours.buffer.slice(ours.byteOffset, ours.byteOffset + ours.length) as ArrayBuffer,
    );
    expect([decoded.id, decoded.model, decoded.version, decoded.deadlineMs]).toEqual([
      42,
      'délai',
      '7',
      5000,
    ]);
    expect(JSON.parse(encodePredict(3, pin, row, 5000, undefined) as string)).toEqual({
      id: 3,
      model: 'délai',
      version: '7',
      deadline_ms: 5000,
      input: [30, 2.5, 1, 0, -10.25],
    });
    for (const [dtype, data] of [
      ['float32', new Float32Array([0.1, 9])],
      ['float64', new Float64Array([0.1, 9])],
      ['int32', new Int32Array([-7, 9])],
    ] as const) {
      const frame = encodeBinaryFrame(
        { id: 9, model: 'm', version: '2', epoch: 1, outputs: [{ name: 'o', dtype, dims: [2] }] },
        [{ bytes: new Uint8Array(data.buffer) }],
      );
      expect(readAnswer(Buffer.from(frame), true)).toEqual({
        kind: 'result',
        id: 9,
        value: data[0],
        version: '2',
      });
    }
    const truncated = Buffer.from(
      encodeBinaryFrame({ id: 9, outputs: [{ name: 'o', dtype: 'float64', dims: [1] }] }, []),
    );
    expect(readAnswer(truncated, true)).toMatchObject({ kind: 'result', value: undefined });
  });
});
