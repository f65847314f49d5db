import WebSocket from 'ws';
import { decodeBinaryResponse, encodeBinaryFrame, encodeBinaryRequest } from '../../libs/protocol';
import type { ServerHandle } from './harness';
import { startServer } from './harness';

let server: ServerHandle;
beforeAll(async () => {
  server = await startServer({ models: ['echo', 'digits'] });
});
afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

function exchange(frames: Uint8Array[]): Promise<Array<{ binary: boolean; data: Buffer }>> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(server.wsUrl);
    const answers: Array<{ binary: boolean; data: Buffer }> = [];
    socket.on('message', (data: Buffer, isBinary) => {
      answers.push({ binary: isBinary, data });
      if (answers.length === frames.length) {
        socket.close();
        resolve(answers);
      }
    });
    socket.on('open', () => {
      for (const frame of frames) socket.send(frame, { binary: true });
    });
    socket.on('error', reject);
  });
}

test('binary tensor frames: echo and digits answer with binary frames holding the raw outputs', async () => {
  const floats = Float32Array.from([1.5, -2, 3.25]);
  const pixels = Float32Array.from({ length: 64 }, (_, i) => (i * 7) % 17);
  const answers = await exchange([
    encodeBinaryRequest({ id: 1, model: 'echo' }, [
      { name: 'input', dtype: 'float32', dims: [3], data: floats },
    ]),
    encodeBinaryRequest({ id: 2, model: 'digits', version: '1' }, [
      { name: 'pixels', dtype: 'float32', dims: [64], data: pixels },
    ]),
  ]);
  const byId = new Map(answers.map((answer) => [decodeBinaryResponse(answer.data).header.id, answer]));
  const echo = decodeBinaryResponse(byId.get(1)!.data);
  expect(byId.get(1)!.binary).toBe(true);
  expect(echo.header).toMatchObject({ id: 1, model: 'echo', version: '1' });
  expect(Array.from(echo.tensors[0]!.data as Float32Array)).toEqual([1.5, -2, 3.25]);
  const digits = decodeBinaryResponse(byId.get(2)!.data);
  expect(digits.header).toMatchObject({ id: 2, model: 'digits', version: '1' });
  expect(typeof digits.header.label).toBe('string');
  expect(digits.tensors[0]!.dims).toEqual([10]);
});

test('bad binary frames get typed JSON errors and the connection carries on', async () => {
  const answers = await exchange([
    encodeBinaryFrame({ id: 5, model: 'digits', inputs: [{ name: 'pixels', dims: [63] }] }, [
      { bytes: new Uint8Array(63 * 4) },
    ]),
    encodeBinaryRequest({ id: 6, model: 'digits' }, [
      { name: 'pixels', dtype: 'float32', dims: [64], data: new Float32Array(64).fill(Number.NaN) },
    ]),
    Uint8Array.from([0x53, 1, 0xff, 0xff]),
    encodeBinaryRequest({ id: 8, model: 'echo' }, [
      { name: 'input', dtype: 'float32', dims: [1], data: Float32Array.from([4]) },
    ]),
  ]);
  const json = answers
    .filter((a) => !a.binary)
    .map((a) => JSON.parse(a.data.toString()) as { id: unknown; code: string });
  expect(json).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ id: 5, code: 'shape_mismatch' }),
      expect.objectContaining({ id: 6, code: 'bad_request' }),
      expect.objectContaining({ id: null, code: 'bad_request' }),
    ]),
  );
  const ok = answers.filter((a) => a.binary).map((a) => decodeBinaryResponse(a.data));
  expect(ok).toHaveLength(1);
  expect(Array.from(ok[0]!.tensors[0]!.data as Float32Array)).toEqual([4]);
});
