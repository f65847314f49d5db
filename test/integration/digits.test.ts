import * as ort from 'onnxruntime-node';
import { digits, modelFile } from '../models/data';
import type { ServerHandle } from './harness';
import { startServer, WsClient } from './harness';

/** Rows checked per run: a different deterministic sample each day, so the whole set is covered over time. */
const SAMPLE = 150;

let server: ServerHandle;
beforeAll(async () => {
  server = await startServer({ models: ['digits'], args: ['--workers', '2', '--model', 'digits'] });
});
afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

test.each(['1', '2'])(
  'served digits v%s answers equal the in-process answers of the same ONNX file',
  async (version) => {
    const data = digits();
    const offset = Math.floor(Date.now() / 86400000) % data.n;
    const rows = Array.from({ length: SAMPLE }, (_, i) => (offset + i * 12) % data.n);
    const pixelsOf = (row: number): number[] => Array.from(data.pixels.subarray(row * 64, row * 64 + 64));
    const session = await ort.InferenceSession.create(modelFile('digits', version));
    const batch = new Float32Array(rows.length * 64);
    rows.forEach((row, i) => batch.set(pixelsOf(row), i * 64));
    const expected = (await session.run({ pixels: new ort.Tensor('float32', batch, [rows.length, 64]) }))
      .probabilities!.data as Float32Array;
    await session.release();
    const client = await WsClient.connect(server.wsUrl);
    const answers = await Promise.all(
      rows.map((row, i) => client.request({ id: i, model: 'digits', version, input: pixelsOf(row) })),
    );
    client.close();
    answers.forEach((answer, i) => {
      expect(answer).toMatchObject({ id: i, model: 'digits', version });
      const result = answer.result as { label: string; probabilities: number[] };
      const want = Array.from(expected.subarray(i * 10, i * 10 + 10));
      // Same file, same runtime: batch composition may differ, so allow float rounding only.
      result.probabilities.forEach((p, k) => expect(p).toBeCloseTo(want[k]!, 5));
      expect(result.label).toBe(String(want.indexOf(Math.max(...want))));
    });
  },
);

test('the default digits version is 2; requests may pin 1', async () => {
  const client = await WsClient.connect(server.wsUrl);
  const pixels = Array.from(digits().pixels.subarray(0, 64));
  expect(await client.request({ id: 1, model: 'digits', input: pixels })).toMatchObject({ version: '2' });
  expect(await client.request({ id: 2, model: 'digits', version: '1', input: pixels })).toMatchObject({
    version: '1',
  });
  expect(await client.request({ id: 3, model: 'digits', input: pixels.slice(1) })).toMatchObject({
    code: 'shape_mismatch',
  });
  client.close();
});
