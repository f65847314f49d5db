/**
 * The headless node on the shipped delay-risk model: calls go through the server's admission, rings and
 * micro-batcher (batches > 1 under concurrency), typed rejections, worker death and close never leave a call
 * hanging.
 */
import * as path from 'node:path';
import { ProtocolError } from '../../libs/protocol';
import { EmbeddedNode } from './embedded';
import type { WorkerThreads } from './worker-threads';

const MODELS_DIR = path.resolve(__dirname, '../../../models');
const MODEL = 'delay-risk';

/** A plausible feature row: [speed_5m_kmh, distance_remaining_km, stops, traffic_alerts_10m, minutes_to_promised]. */
function row(i: number): Float32Array {
  return new Float32Array([5 + (i % 40), 0.5 + (i % 13), i % 4, i % 3, (i % 50) - 10]);
}

async function outcomes(calls: Promise<Float32Array>[]): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const settled of await Promise.allSettled(calls)) {
    const key =
      settled.status === 'fulfilled'
        ? 'ok'
        : settled.reason instanceof ProtocolError
          ? settled.reason.code
          : `untyped: ${String(settled.reason)}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

describe('embedded node', () => {
  let node: EmbeddedNode;
  beforeAll(async () => {
    node = EmbeddedNode.start({ modelsDir: MODELS_DIR, workers: 1 });
    await node.prepare(MODEL, '1');
  });
  afterAll(() => node.close());

  test('answers one row with the first output, the same row twice the same way', async () => {
    const first = await node.infer(MODEL, '1', row(7));
    expect(first).toBeInstanceOf(Float32Array);
    expect(first.length).toBe(1);
    // P(late): a probability.
    expect(first[0]).toBeGreaterThanOrEqual(0);
    expect(first[0]).toBeLessThanOrEqual(1);
    expect(await node.infer(MODEL, '1', row(7))).toEqual(first);
    expect(node.inflight).toBe(0);
  });

  test('2,000 concurrent calls all resolve, batched by the workers (mean batch size > 1)', async () => {
    const before = node.batchStats(MODEL, '1')!;
    const rows = Array.from({ length: 2000 }, (_, i) => row(i));
    const answers = await Promise.all(rows.map((r) => node.infer(MODEL, '1', r)));
    const after = node.batchStats(MODEL, '1')!;
    expect(answers).toHaveLength(2000);
    // Batching must not mix rows up: each answer is its own row's (equal rows, equal answers).
    for (let i = 0; i < 2000; i += 97) expect(await node.infer(MODEL, '1', rows[i]!)).toEqual(answers[i]);
    const batches = after.batches - before.batches;
    const items = after.items - before.items;
    expect(items).toBe(2000);
    expect(items / batches).toBeGreaterThan(1);
  });

  test('an unknown model or version is a typed rejection, at prepare and at infer', async () => {
    await expect(node.prepare(MODEL, '99')).rejects.toMatchObject({ code: 'unknown_version' });
    await expect(node.prepare('no-such-model', '1')).rejects.toMatchObject({ code: 'unknown_model' });
    await expect(node.prepare('../models', '1')).rejects.toMatchObject({ code: 'unknown_model' });
    await expect(node.infer(MODEL, '99', row(1))).rejects.toMatchObject({ code: 'unknown_version' });
    await expect(node.infer('echo', '1', row(1))).rejects.toMatchObject({ code: 'unknown_model' });
    await expect(node.infer(MODEL, '1', new Float32Array(4))).rejects.toMatchObject({
      code: 'shape_mismatch',
    });
    await expect(node.infer(MODEL, '1', new Float32Array([Number.NaN, 1, 1, 1, 1]))).rejects.toMatchObject({
      code: 'bad_request',
    });
    const notARow = [1, 2, 3, 4, 5] as unknown as Float32Array;
    await expect(node.infer(MODEL, '1', notARow)).rejects.toBeInstanceOf(ProtocolError);
    // Still serving after all of that.
    expect((await node.infer(MODEL, '1', row(3))).length).toBe(1);
  });

  test('a worker that dies mid-batch fails the calls it held (internal); the others resolve; none hangs', async () => {
    const threads = (node as unknown as { threads: WorkerThreads }).threads;
    expect(threads.crashWorker(0)).toBe(true);
    const counts = await outcomes(Array.from({ length: 300 }, (_, i) => node.infer(MODEL, '1', row(i))));
    expect(Object.keys(counts).sort()).toEqual(expect.arrayContaining(['internal']));
    expect((counts.internal ?? 0) + (counts.ok ?? 0)).toBe(300);
    // The replacement worker reloaded the model: the node serves again.
    expect((await node.infer(MODEL, '1', row(5))).length).toBe(1);
  });
});

describe('embedded node options and close', () => {
  test('bad options are a typed error before anything starts', () => {
    expect(() => EmbeddedNode.start({ modelsDir: '/no/such/dir' })).toThrow(ProtocolError);
    expect(() => EmbeddedNode.start({ modelsDir: MODELS_DIR, workers: 0 })).toThrow(/workers/);
    expect(() => EmbeddedNode.start({ modelsDir: MODELS_DIR, device: 'tpu' })).toThrow(/device/);
    expect(() => EmbeddedNode.start({ modelsDir: MODELS_DIR, ringBytes: 100_000 })).toThrow(/power of two/);
  });

  test('close() with calls in flight settles every call; later calls and prepares are refused unavailable', async () => {
    // The bench model (~71 MFLOP a row) keeps its worker busy long after close() is called.
    const node = EmbeddedNode.start({ modelsDir: MODELS_DIR, workers: 1 });
    await node.prepare('bench', '1');
    const first = await node.infer('bench', '1', new Float32Array(256).fill(0.5));
    expect(first.length).toBe(256);
    const calls = Array.from({ length: 300 }, (_, i) =>
      node.infer('bench', '1', new Float32Array(256).fill(i / 300)),
    );
    const settled = outcomes(calls);
    await node.close();
    const counts = await settled;
    expect(counts.unavailable).toBeGreaterThan(0);
    expect((counts.ok ?? 0) + (counts.unavailable ?? 0)).toBe(300);
    expect(node.inflight).toBe(0);
    await expect(node.infer(MODEL, '1', row(1))).rejects.toMatchObject({ code: 'unavailable' });
    await expect(node.prepare(MODEL, '1')).rejects.toMatchObject({ code: 'unavailable' });
  });

  test('release unloads a version (its model too, when it was the last): calls are refused, a new prepare loads it again', async () => {
    const node = EmbeddedNode.start({ modelsDir: MODELS_DIR, workers: 1 });
    try {
      await node.prepare(MODEL, '1');
      expect(node.has(MODEL, '1')).toBe(true);
      await node.release(MODEL, '1');
      expect(node.has(MODEL, '1')).toBe(false);
      await expect(node.infer(MODEL, '1', row(1))).rejects.toMatchObject({ code: 'unknown_model' });
      await node.prepare(MODEL, '1');
      expect((await node.infer(MODEL, '1', row(1))).length).toBe(1);
    } finally {
      await node.close();
    }
  });
});
