/** The embedded inference backend on the shipped delay-risk model: the interface, retries under overload, close. */
import * as path from 'node:path';
import { ProtocolError } from '../../../libs/protocol';
import { PipelineIoError } from '../errors';
import { createEmbeddedBackend } from './embedded';
import type { ModelPin } from './inference';

const MODELS_DIR = path.resolve(__dirname, '../../../../models');
const PIN: ModelPin = { model: 'delay-risk', version: '1' };

function row(i: number): Float32Array {
  return new Float32Array([5 + (i % 40), 0.5 + (i % 13), i % 4, i % 3, (i % 50) - 10]);
}

describe('createEmbeddedBackend options', () => {
  test.each([
    [{ modelsDir: '' }, /modelsDir/],
    [{ modelsDir: '/no/such/dir' }, /not a directory/],
    [{ modelsDir: MODELS_DIR, workers: 0 }, /workers/],
    [{ modelsDir: MODELS_DIR, workers: 1.5 }, /workers/],
    [{ modelsDir: MODELS_DIR, device: 'gpu' }, /device/],
    [{ modelsDir: MODELS_DIR, intraOpThreads: -1 }, /intraOpThreads/],
    [{ modelsDir: MODELS_DIR, retry: { maxAttempts: 0 } }, /retry.maxAttempts/],
    [{ modelsDir: MODELS_DIR, retry: { baseDelayMs: 50, maxDelayMs: 10 } }, /retry.maxDelayMs/],
    [{ modelsDir: MODELS_DIR, closeDrainMs: -1 }, /closeDrainMs/],
    [{ modelsDir: MODELS_DIR, pins: [{ model: 'delay-risk' }] }, /pin/],
  ])('%j is refused invalid_options before anything starts', async (options, message) => {
    const attempt = createEmbeddedBackend(options as never);
    await expect(attempt).rejects.toBeInstanceOf(PipelineIoError);
    await expect(attempt).rejects.toMatchObject({
      code: 'invalid_options',
      message: expect.stringMatching(message),
    });
  });

  test('a pin that cannot be loaded fails the start with its typed error', async () => {
    await expect(
      createEmbeddedBackend({ modelsDir: MODELS_DIR, pins: [{ model: 'delay-risk', version: '7' }] }),
    ).rejects.toMatchObject({ name: 'ProtocolError', code: 'unknown_version' });
  });
});

describe('embedded backend', () => {
  test('predicts P(late) per row, batched across concurrent calls; inflight counts calls', async () => {
    const backend = await createEmbeddedBackend({ modelsDir: MODELS_DIR, pins: [PIN] });
    try {
      expect(backend.mode).toBe('embedded');
      const single = await backend.predict(PIN, row(11));
      expect(typeof single).toBe('number');
      const calls = Array.from({ length: 1000 }, (_, i) => backend.predict(PIN, row(i)));
      expect(backend.inflight).toBe(1000);
      const risks = await Promise.all(calls);
      expect(backend.inflight).toBe(0);
      expect(risks[11]).toBe(single);
      for (const risk of risks) expect(risk >= 0 && risk <= 1).toBe(true);
      expect(backend.batchStats(PIN)!.meanBatchSize).toBeGreaterThan(1);
      await expect(backend.predict({ model: 'delay-risk', version: '2' }, row(1))).rejects.toMatchObject({
        code: 'unknown_version',
      });
      await expect(backend.prepare({ model: 'delay-risk', version: '2' })).rejects.toMatchObject({
        code: 'unknown_version',
      });
    } finally {
      await backend.close();
    }
  });

  test('overloaded answers are retried with backoff, never dropped', async () => {
    // A queue of 8 per version: most of 600 concurrent calls are refused overloaded at first.
    const backend = await createEmbeddedBackend({
      modelsDir: MODELS_DIR,
      pins: [PIN],
      maxModelQueue: 8,
      retry: { maxAttempts: 1000, baseDelayMs: 1, maxDelayMs: 20 },
    });
    try {
      const risks = await Promise.all(Array.from({ length: 600 }, (_, i) => backend.predict(PIN, row(i))));
      expect(risks).toHaveLength(600);
      expect(backend.retries).toBeGreaterThan(0);
    } finally {
      await backend.close();
    }
  });

  test('retries exhausted: the overloaded answer itself, typed', async () => {
    const backend = await createEmbeddedBackend({
      modelsDir: MODELS_DIR,
      pins: [PIN],
      maxModelQueue: 1,
      retry: { maxAttempts: 1 },
    });
    try {
      const settled = await Promise.allSettled(
        Array.from({ length: 200 }, (_, i) => backend.predict(PIN, row(i))),
      );
      const refused = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
      expect(refused.length).toBeGreaterThan(0);
      for (const { reason } of refused) {
        expect(reason).toBeInstanceOf(ProtocolError);
        expect(reason.code).toBe('overloaded');
      }
    } finally {
      await backend.close();
    }
  });

  test('close() with predictions in flight (some sleeping in a backoff) settles them all, promptly', async () => {
    const backend = await createEmbeddedBackend({
      modelsDir: MODELS_DIR,
      pins: [PIN],
      maxModelQueue: 16,
      closeDrainMs: 0,
      retry: { maxAttempts: 1000, baseDelayMs: 500, maxDelayMs: 60_000 },
    });
    const settled = Promise.allSettled(Array.from({ length: 3000 }, (_, i) => backend.predict(PIN, row(i))));
    const started = Date.now();
    await backend.close();
    const results = await settled;
    expect(Date.now() - started).toBeLessThan(5000);
    const codes = new Set(
      results.map((r) => (r.status === 'fulfilled' ? 'ok' : (r.reason as ProtocolError).code)),
    );
    for (const code of codes) expect(['ok', 'unavailable']).toContain(code);
    expect(codes.has('unavailable')).toBe(true);
    expect(backend.inflight).toBe(0);
    await expect(backend.predict(PIN, row(1))).rejects.toMatchObject({ code: 'unavailable' });
  });
});
