import * as ort from 'onnxruntime-node';
import { Rng } from '../../libs/rng';
import { digits, modelFile } from '../models/data';
import type { ServerHandle } from './harness';
import { startServer, WsClient } from './harness';

/** Rows checked: the same seeded sample on every run and host, so a failure reproduces. */
const SAMPLE = 150;
const SEED = 20240611;

/** SAMPLE distinct rows drawn with a fixed seed (partial Fisher–Yates). */
function sampleRows(n: number): number[] {
  const rng = new Rng(SEED);
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = 0; i < SAMPLE; i++) {
    const j = rng.int(i, n - 1);
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order.slice(0, SAMPLE);
}

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
    const rows = sampleRows(data.n);
    // The sample holds every digit, so each class's answer is compared.
    expect(new Set(rows.map((row) => data.labels[row])).size).toBe(10);
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
