/**
 * Embedded inference answers exactly what a StreamInfer server answers: the same rows of the shipped delay-risk
 * model through the pipeline's embedded backend, the server's Open Inference Protocol endpoint and its WebSocket
 * protocol, equal to float32 tolerance.
 */
import { createEmbeddedBackend } from '../../apps/pipeline/inference/embedded';
import type { InferenceBackend } from '../../apps/pipeline/inference/inference';
import type { ServerHandle } from './harness';
import { MODELS_DIR, postJson, startServer, WsClient } from './harness';

const PIN = { model: 'delay-risk', version: '1' };
/** [speed_5m_kmh, distance_remaining_km, stops, traffic_alerts_10m, minutes_to_promised] */
const ROWS = [
  [32, 1.2, 0, 0, 25],
  [8, 6.5, 2, 3, 10],
  [18, 3.0, 1, 1, 12],
  [0, 9.0, 4, 5, -5],
  [45, 0.2, 0, 0, 40],
  [12.5, 4.25, 3, 2, 3.5],
];

let server: ServerHandle;
let backend: InferenceBackend;
beforeAll(async () => {
  [server, backend] = await Promise.all([
    startServer({ models: ['delay-risk'], args: ['--model', 'delay-risk'] }),
    createEmbeddedBackend({ modelsDir: MODELS_DIR, pins: [PIN] }),
  ]);
});
afterAll(async () => {
  await backend?.close();
  if (server) expect(await server.stop()).toEqual({ code: 0, signal: null });
});

test('the embedded backend predicts what the server answers over HTTP (v2) and WebSocket', async () => {
  const embedded = await Promise.all(ROWS.map((row) => backend.predict(PIN, new Float32Array(row))));
  const client = await WsClient.connect(server.wsUrl);
  try {
    for (const [i, row] of ROWS.entries()) {
      const http = await postJson(`${server.url}/v2/models/delay-risk/versions/1/infer`, {
        inputs: [{ name: 'features', shape: [1, 5], datatype: 'FP32', data: row }],
      });
      expect(http.status).toBe(200);
      const outputs = http.body.outputs as Array<{ name: string; data: number[] }>;
      expect(outputs[0]!.name).toBe('risk');
      const viaHttp = outputs[0]!.data[0]!;
      const ws = await client.request({ id: i, model: 'delay-risk', version: '1', input: row });
      expect(ws).toMatchObject({ model: 'delay-risk', version: '1' });
      const viaWs = (ws.result as { risk: number[] } | number[] | Record<string, unknown>) ?? {};
      const wsValue = firstNumber(viaWs);
      expect(embedded[i]).toBeCloseTo(viaHttp, 6);
      expect(embedded[i]).toBeCloseTo(wsValue, 6);
    }
  } finally {
    client.close();
  }
  // The rows are not all one answer: the comparison can fail.
  expect(new Set(embedded.map((risk) => risk.toFixed(4))).size).toBeGreaterThan(2);
});

/** The first number in a JSON result, whatever its nesting ({risk: [x]}, [[x]], x). */
function firstNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (Array.isArray(value)) return firstNumber(value[0]);
  if (value && typeof value === 'object') return firstNumber(Object.values(value)[0]);
  throw new Error(`no number in ${JSON.stringify(value)}`);
}
