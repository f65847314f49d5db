import { digits } from '../models/data';
import type { ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;
beforeAll(async () => {
  server = await startServer({ models: ['digits', 'upper'], args: ['--model', 'digits'] });
});
afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

const pixels = Array.from(digits().pixels.subarray(64 * 7, 64 * 8));

test('Open Inference Protocol infer answers like the WebSocket path, for the default and a pinned version', async () => {
  const client = await WsClient.connect(server.wsUrl);
  const viaWs = await client.request({ id: 1, input: pixels, version: '1' });
  client.close();
  const response = await postJson(`${server.url}/v2/models/digits/versions/1/infer`, {
    id: 'k1',
    inputs: [{ name: 'pixels', shape: [1, 64], datatype: 'FP32', data: pixels }],
  });
  expect(response.status).toBe(200);
  expect(response.body).toMatchObject({ model_name: 'digits', model_version: '1', id: 'k1' });
  const outputs = response.body.outputs as Array<{
    name: string;
    datatype: string;
    shape: number[];
    data: number[];
  }>;
  expect(outputs[0]).toMatchObject({ name: 'probabilities', datatype: 'FP32', shape: [1, 10] });
  expect(outputs[0]!.data).toEqual((viaWs.result as { probabilities: number[] }).probabilities);
  const stable = await postJson(`${server.url}/v2/models/digits/infer`, {
    inputs: [{ name: 'pixels', shape: [64], datatype: 'FP32', data: pixels }],
  });
  expect(stable.body).toMatchObject({ model_version: '2' });
  const text = await postJson(`${server.url}/v2/models/upper/infer`, {
    inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['kserve'] }],
  });
  expect(text.body).toMatchObject({
    outputs: [{ name: 'text_out', datatype: 'BYTES', shape: [1], data: ['KSERVE'] }],
  });
});

test('errors use the protocol body with the stable code', async () => {
  const wrong = await postJson(`${server.url}/v2/models/digits/infer`, {
    inputs: [{ name: 'pixels', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] }],
  });
  expect(wrong.status).toBe(400);
  expect(wrong.body).toMatchObject({ code: 'shape_mismatch' });
  expect(typeof wrong.body.error).toBe('string');
  const missing = await postJson(`${server.url}/v2/models/nope/infer`, { inputs: [] });
  expect(missing.status).toBe(404);
  expect(missing.body).toMatchObject({ code: 'unknown_model' });
  const badVersion = await postJson(`${server.url}/v2/models/digits/versions/9/infer`, {
    inputs: [{ name: 'pixels', shape: [64], datatype: 'FP32', data: pixels }],
  });
  expect(badVersion.status).toBe(404);
  expect(badVersion.body).toMatchObject({ code: 'unknown_version' });
});

test('metadata, readiness and server endpoints', async () => {
  const metadata = await (await fetch(`${server.url}/v2/models/digits`)).json();
  expect(metadata).toEqual({
    name: 'digits',
    versions: ['1', '2'],
    platform: 'onnxruntime_onnx',
    inputs: [{ name: 'pixels', datatype: 'FP32', shape: [-1, 64] }],
    outputs: [{ name: 'probabilities', datatype: 'FP32', shape: [-1, 10] }],
  });
  expect((await fetch(`${server.url}/v2/models/digits/ready`)).status).toBe(200);
  expect((await fetch(`${server.url}/v2/models/digits/versions/7/ready`)).status).toBe(404);
  expect((await fetch(`${server.url}/v2/models/nope`)).status).toBe(404);
  expect(await (await fetch(`${server.url}/v2`)).json()).toMatchObject({ name: 'streaminfer' });
  expect((await fetch(`${server.url}/v2/health/live`)).status).toBe(200);
  expect((await fetch(`${server.url}/v2/health/ready`)).status).toBe(200);
});
