import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { decodeBinaryRequest, encodeBinaryFrame } from '../../libs/protocol';
import {
  BODY_KINDS,
  binaryBodyFactory,
  bodyFactory,
  readBinaryAnswerHeader,
  readJsonAnswerHeader,
} from '../../loadtest/harness/bodies';
import { generate, type LoadgenOptions } from '../../loadtest/harness/loadgen';
import { parsePrometheusText } from '../../loadtest/harness/metrics';
import { splitByWeight } from '../../loadtest/harness/run-load';
import { LoadStats, mergePartials, summarizeCounts } from '../../loadtest/harness/stats';

function frameBuffer(b: Buffer): ArrayBuffer {
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
}

describe('binary bodies', () => {
  it('bench-model: a valid tensor frame with the id in place and the same floats as the JSON body', () => {
    const f = binaryBodyFactory('bench-model', 2, {
      inputSize: 16,
      version: '1',
      extra: { priority: 'high' },
    });
    const json = JSON.parse(bodyFactory('bench-model', 2, { inputSize: 16 })(7)) as { input: number[] };
    for (const id of [7, 20_000_123, 123_456_789_012_345]) {
      const req = decodeBinaryRequest(frameBuffer(f(id)));
      expect(req.id).toBe(id);
      expect(req.model).toBe('bench');
      expect(req.version).toBe('1');
      expect(req.priority).toBe('high');
      expect(req.tensors).toHaveLength(1);
      expect(req.tensors[0]!.dims).toEqual([16]);
      expect(req.tensors[0]!.dtype).toBe('float32');
    }
    // the frame's one float32 [16] tensor starts its data
    const data = decodeBinaryRequest(frameBuffer(f(7))).data!;
    const values = Array.from(new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + 16 * 4)));
    expect(values).toEqual(json.input.map((x) => Math.fround(x)));
  });

  it('each request is a fresh buffer: later requests do not change earlier ones', () => {
    const f = binaryBodyFactory('echo-floats', 0, { inputSize: 4 });
    const a = f(1);
    const b = f(99);
    expect(decodeBinaryRequest(frameBuffer(a)).id).toBe(1);
    expect(decodeBinaryRequest(frameBuffer(b)).id).toBe(99);
  });

  it('ids wider than the slot fall back to a full encode', () => {
    const f = binaryBodyFactory('echo-floats', 0, { inputSize: 2 });
    const id = 2 ** 53 - 1; // 16 digits … Number.MAX_SAFE_INTEGER
    expect(decodeBinaryRequest(frameBuffer(f(id))).id).toBe(id);
    const wide = 1e17; // 18 digits: wider than the slot
    expect(decodeBinaryRequest(frameBuffer(f(wide))).id).toBe(wide);
  });

  it('text has a binary (string tensor) form; unknown kinds throw', () => {
    const req = decodeBinaryRequest(frameBuffer(binaryBodyFactory('text', 1)(3)));
    expect(req.model).toBe('upper');
    expect(req.tensors[0]!.dtype).toBe('string');
    expect(() => binaryBodyFactory('nope', 0)).toThrow(/unknown body kind/);
    expect(Object.values(BODY_KINDS).every((k) => typeof k.binaryPool === 'function')).toBe(true);
  });

  it('readJsonAnswerHeader reads the text before the result, errors and odd texts whole', () => {
    const answer = '{"id":7,"model":"bench","version":"2","epoch":0,"result":[0.1,0.2],"latency_ms":1.5}';
    expect(readJsonAnswerHeader(Buffer.from(answer))).toEqual({
      id: 7,
      model: 'bench',
      version: '2',
      epoch: 0,
    });
    const error = '{"id":"a","type":"error","code":"overloaded","message":"full","retry_after_ms":5}';
    expect(readJsonAnswerHeader(Buffer.from(error))).toEqual(JSON.parse(error));
    // an error whose message mentions the key (escaped quotes: not the key itself) is read whole
    const odd = '{"id":1,"type":"error","code":"bad_request","message":"x,\\"result\\":y"}';
    expect(readJsonAnswerHeader(Buffer.from(odd))).toEqual(JSON.parse(odd));
    expect(readJsonAnswerHeader(Buffer.from('[1]'))).toBeUndefined();
    expect(readJsonAnswerHeader(Buffer.from('{"id":1,"result":'))).toEqual({ id: 1 });
    expect(readJsonAnswerHeader(Buffer.from('nope'))).toBeUndefined();
  });

  it('readBinaryAnswerHeader reads the header only, and rejects what is not a frame', () => {
    const frame = Buffer.from(
      encodeBinaryFrame({ id: 42, model: 'bench', version: '1', outputs: [] }, [
        { bytes: new Uint8Array(64) },
      ]),
    );
    expect(readBinaryAnswerHeader(frame)).toMatchObject({ id: 42, version: '1' });
    expect(readBinaryAnswerHeader(Buffer.from('{"id":1}'))).toBeUndefined();
    expect(readBinaryAnswerHeader(frame.subarray(0, 6))).toBeUndefined();
  });
});

describe('error latency and retry_after_ms in the stats', () => {
  it('records per-code latency and retry_after distributions and merges them', () => {
    const a = new LoadStats();
    const b = new LoadStats();
    a.startEpochMs = b.startEpochMs = 1000;
    a.recordError('rate_limited', 1100, 500, 3);
    a.recordError('rate_limited', 1100, 1500, 10);
    b.recordError('rate_limited', 1200, 2500, 3);
    b.recordError('overloaded', 1200, 900, 61);
    b.recordError('client_timeout', 1300); // no latency, no retry_after
    const part = (s: LoadStats) =>
      s.toPartial({
        connections: 1,
        connectionsOpened: 1,
        connectFailures: [],
        closes: [],
        startEpochMs: 1000,
        endEpochMs: 2000,
        stoppedBy: 'completed',
        cpuPct: 1,
      });
    const wire = JSON.parse(JSON.stringify([part(a), part(b)]));
    const r = mergePartials(wire, {
      url: 'ws://x',
      body: 'echo-floats',
      requestsPerConnection: 1,
      inFlightPerConnection: 1,
      ratePerConnection: null,
      warmupPerConnection: 0,
      binary: true,
      totalRequests: 5,
    });
    expect(r.errorLatencyMs?.['rate_limited']?.count).toBe(3);
    expect(r.errorLatencyMs?.['rate_limited']?.max).toBeCloseTo(2.5, 1);
    expect(r.errorLatencyMs?.['client_timeout']).toBeUndefined();
    expect(r.retryAfterMs?.['rate_limited']).toMatchObject({ count: 3, min: 3, p50: 3, max: 10 });
    expect(r.retryAfterMs?.['overloaded']).toMatchObject({ count: 1, min: 61, max: 61 });
    expect(r.binary).toBe(true);
    expect(r.totalRequests).toBe(5);
    expect(r.startEpochMs).toBe(1000);
  });

  it('summarizeCounts', () => {
    expect(summarizeCounts({})).toBeUndefined();
    expect(summarizeCounts({ '1': 1, '5': 2, '10': 1 })).toEqual({
      count: 4,
      min: 1,
      p50: 5,
      p90: 10,
      max: 10,
      mean: 5.25,
    });
  });
});

describe('helpers', () => {
  it('splitByWeight keeps the total and follows the weights', () => {
    expect(splitByWeight(800, [32, 32])).toEqual([400, 400]);
    expect(splitByWeight(10, [2, 1])).toEqual([7, 3]);
    expect(splitByWeight(5, [0, 0])).toEqual([3, 2]);
    expect(splitByWeight(7, [1, 1, 1]).reduce((a, b) => a + b, 0)).toBe(7);
  });

  it('metrics parser reads special values case-insensitively (prom-client writes "Nan")', () => {
    const s = parsePrometheusText('a Nan\nb -inf\nc +Inf\n');
    expect(Number.isNaN(s[0]!.value)).toBe(true);
    expect(s[1]!.value).toBe(Number.NEGATIVE_INFINITY);
    expect(s[2]!.value).toBe(Number.POSITIVE_INFINITY);
  });
});

/**
 * A server that answers binary requests with binary frames, sheds every 3rd request with a JSON
 * `overloaded` error carrying retry_after_ms = 30, and never answers ids ending in 99.
 */
async function binaryServer(): Promise<{ url: string; close: () => Promise<void>; arrivals: number[] }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const arrivals: number[] = [];
  wss.on('connection', (ws) => {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      arrivals.push(Date.now());
      const id = isBinary
        ? (decodeBinaryRequest(frameBuffer(data)).id as number)
        : (JSON.parse(data.toString()) as { id: number }).id;
      const seq = id % 10_000_000;
      if (seq % 100 === 99) return;
      if (seq % 3 === 0) {
        ws.send(
          JSON.stringify({ id, type: 'error', code: 'overloaded', message: 'busy', retry_after_ms: 30 }),
        );
        return;
      }
      ws.send(
        encodeBinaryFrame({ id, model: 'bench', version: '7', outputs: [] }, [{ bytes: new Uint8Array(32) }]),
      );
    });
  });
  const port = (wss.address() as AddressInfo).port;
  return {
    url: `ws://127.0.0.1:${port}/ws`,
    close: () => new Promise((r) => wss.close(() => r())),
    arrivals,
  };
}

function merged(p: Awaited<ReturnType<typeof generate>>, o: LoadgenOptions) {
  return mergePartials([p], {
    url: o.url,
    body: o.body,
    requestsPerConnection: o.requestsPerConnection,
    inFlightPerConnection: o.inFlightPerConnection ?? 1,
    ratePerConnection: null,
    warmupPerConnection: o.warmupPerConnection ?? 0,
    binary: o.binary,
    totalRequests: o.totalRequests,
  });
}

describe('load generator: binary frames, shared budget, retry_after, early finish', () => {
  let server: Awaited<ReturnType<typeof binaryServer>>;
  beforeAll(async () => {
    server = await binaryServer();
  });
  afterAll(async () => {
    await server.close();
  });

  it('sends binary frames, reads binary answers by header, counts JSON errors with latency and retry_after', async () => {
    const o: LoadgenOptions = {
      url: server.url,
      connections: 2,
      requestsPerConnection: 9,
      body: 'bench-model',
      bodyOptions: { inputSize: 8 },
      binary: true,
      timeLimitMs: 5000,
    };
    const r = merged(await generate(o), o);
    expect(r.ok).toBe(12);
    expect(r.versions).toEqual({ '7': 12 });
    expect(r.errors).toEqual({ overloaded: 6 });
    expect(r.unmatched).toBe(0);
    expect(r.errorLatencyMs?.['overloaded']?.count).toBe(6);
    expect(r.retryAfterMs?.['overloaded']).toMatchObject({ count: 6, min: 30, max: 30 });
    expect(r.binary).toBe(true);
  });

  it('a shared budget: the connections send exactly totalRequests between them', async () => {
    const o: LoadgenOptions = {
      url: server.url,
      connections: 4,
      requestsPerConnection: 1,
      totalRequests: 23,
      body: 'echo-floats',
      binary: true,
      timeLimitMs: 5000,
    };
    const r = merged(await generate(o), o);
    expect(r.sent).toBe(23);
    expect(r.ok + r.errorCount).toBe(23);
    expect(r.notSent).toBe(0);
    expect(r.stoppedBy).toBe('completed');
  });

  it('honours retry_after_ms: the next request waits that long', async () => {
    const o: LoadgenOptions = {
      url: server.url,
      connections: 1,
      requestsPerConnection: 7,
      body: 'echo-floats',
      honorRetryAfter: true,
      timeLimitMs: 5000,
    };
    const t0 = Date.now();
    const r = merged(await generate(o), o);
    // seq 3 and 6 are shed with retry_after_ms 30: two pauses of 30 ms
    expect(r.errors).toEqual({ overloaded: 2 });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(60);
    expect(r.durationMs).toBeGreaterThanOrEqual(55);
  });

  it('finishes early on request and lets what is in flight be answered', async () => {
    const o: LoadgenOptions = {
      url: server.url,
      connections: 2,
      requestsPerConnection: 100_000,
      ratePerConnection: 200,
      inFlightPerConnection: 8,
      body: 'echo-floats',
      timeLimitMs: 10_000,
    };
    let finish!: () => void;
    const p = generate(
      o,
      async () => {},
      () => {},
      new Promise<void>((r) => {
        finish = r;
      }),
    );
    setTimeout(() => finish(), 300);
    const r = merged(await p, o);
    expect(r.stoppedBy).toBe('stop_request');
    expect(r.durationMs).toBeLessThan(3000);
    expect(r.sent).toBeGreaterThan(20);
    // the unanswered ids (…99) are the only client_timeouts; nothing planned counts as notSent
    expect(r.errors['client_timeout'] ?? 0).toBeLessThanOrEqual(2);
    expect(r.notSent).toBe(0);
  });
});
