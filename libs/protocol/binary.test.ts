import { isBinaryFrame } from './binary';
import {
  bindBinaryRequest,
  decodeBinaryRequest,
  decodeBinaryResponse,
  encodeBinaryAnswer,
  encodeBinaryFrame,
  encodeBinaryRequest,
  type ModelSignature,
  ProtocolError,
  parseSignature,
  RESPONSE_HEADER_BYTES,
  writeOutputSectionHeader,
  writeResponseHeader,
} from './index';

const digits: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'pixels', dtype: 'float32', shape: [64] }],
    outputs: [{ name: 'probabilities', dtype: 'float32', shape: [10] }],
    labels: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
  },
  'digits',
);
const upper = parseSignature(
  {
    inputs: [{ name: 'text', dtype: 'string', shape: [] }],
    outputs: [{ name: 'text_out', dtype: 'string', shape: [] }],
  },
  'upper',
);

function buffer(frame: Uint8Array): ArrayBuffer {
  return frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
}

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    if (error instanceof ProtocolError) return error.code;
    throw error;
  }
  return 'no error';
}

test('a float request round-trips and binds with raw bytes, 8-byte aligned', () => {
  const pixels = Float32Array.from({ length: 64 }, (_, i) => i % 17);
  const frame = encodeBinaryRequest({ id: 7, model: 'digits', version: '1' }, [
    { name: 'pixels', dtype: 'float32', dims: [64], data: pixels },
  ]);
  expect(isBinaryFrame(buffer(frame))).toBe(true);
  const request = decodeBinaryRequest(buffer(frame));
  expect(request).toMatchObject({ id: 7, model: 'digits', version: '1', priority: 'normal' });
  expect(request.data!.byteOffset % 8).toBe(0);
  const bound = bindBinaryRequest(request, digits, { maxElements: 1 << 20 });
  expect(bound.inputMask).toBe(1);
  expect(Array.from(new Float32Array(bound.inputs[0]!.raw!.slice().buffer))).toEqual(Array.from(pixels));
});

test('string tensors are length-prefixed UTF-8 and validated', () => {
  const frame = encodeBinaryRequest({ id: 'a' }, [
    { name: 'text', dtype: 'string', dims: [], data: ['héllo'] },
  ]);
  const bound = bindBinaryRequest(decodeBinaryRequest(buffer(frame)), upper, { maxElements: 100 });
  expect(bound.inputs[0]!.byteLength).toBe(4 + 6);
  const bad = encodeBinaryFrame({ id: 1, inputs: [{ name: 'text', dtype: 'string', dims: [] }] }, [
    { bytes: Uint8Array.from([2, 0, 0, 0, 0xc3, 0x28]) },
  ]);
  expect(code(() => bindBinaryRequest(decodeBinaryRequest(buffer(bad)), upper, { maxElements: 100 }))).toBe(
    'bad_request',
  );
});

test.each([
  ['wrong magic', () => decodeBinaryRequest(Uint8Array.from([1, 2, 3, 4, 5]).buffer), 'bad_request'],
  [
    'header not JSON',
    () => decodeBinaryRequest(buffer(Uint8Array.from([0x53, 1, 3, 0, 0x7b, 0x7b, 0x7b, 0]))),
    'bad_request',
  ],
  [
    'header length past the end',
    () => decodeBinaryRequest(buffer(Uint8Array.from([0x53, 1, 200, 0]))),
    'bad_request',
  ],
  [
    'data shorter than dims say',
    () =>
      bindBinaryRequest(
        decodeBinaryRequest(
          buffer(
            encodeBinaryFrame({ id: 1, inputs: [{ name: 'pixels', dims: [64] }] }, [
              { bytes: new Uint8Array(16) },
            ]),
          ),
        ),
        digits,
        { maxElements: 1000 },
      ),
    'shape_mismatch',
  ],
  ['no inputs', () => decodeBinaryRequest(buffer(encodeBinaryFrame({ id: 1 }, []))), 'bad_request'],
])('%s', (_name, fn, expected) => {
  expect(code(fn)).toBe(expected);
});

test('binding checks names, dims, dtype and finiteness', () => {
  const bind = (
    dims: number[],
    data: Float32Array,
    name = 'pixels',
    dtype: 'float32' | 'int32' = 'float32',
  ) =>
    bindBinaryRequest(
      decodeBinaryRequest(buffer(encodeBinaryRequest({ id: 1 }, [{ name, dtype, dims, data }]))),
      digits,
      { maxElements: 1000 },
    );
  expect(code(() => bind([63], new Float32Array(63)))).toBe('shape_mismatch');
  expect(code(() => bind([64], new Float32Array(64), 'nope'))).toBe('bad_request');
  expect(code(() => bind([64], new Float32Array(64), 'pixels', 'int32'))).toBe('dtype_mismatch');
  const nan = new Float32Array(64);
  nan[5] = Number.NaN;
  expect(code(() => bind([64], nan))).toBe('bad_request');
  const inf = new Float32Array(64);
  inf[63] = Number.POSITIVE_INFINITY;
  expect(code(() => bind([64], inf))).toBe('bad_request');
});

test('answers carry raw outputs and the classifier label', () => {
  const bytes = new Uint8Array(256);
  const view = new DataView(bytes.buffer);
  writeResponseHeader(
    view,
    0,
    { requestId: 1, slot: 1, queueMs: 0, computeMs: 0, batchSize: 1, workerIndex: 0 },
    0,
    1,
  );
  let at = writeOutputSectionHeader(view, RESPONSE_HEADER_BYTES, 0, [10], 40);
  for (let i = 0; i < 10; i++, at += 4) view.setFloat32(at, i === 3 ? 0.9 : 0.01, true);
  const frame = encodeBinaryAnswer(bytes, view, 0, digits, {
    id: 'q',
    model: 'digits',
    version: '2',
    epoch: 2,
    latency_ms: 1.23456,
  });
  const decoded = decodeBinaryResponse(frame);
  expect(decoded.header).toMatchObject({
    id: 'q',
    model: 'digits',
    version: '2',
    epoch: 2,
    label: '3',
    latency_ms: 1.235,
  });
  expect(decoded.tensors[0]!.dims).toEqual([10]);
  expect((decoded.tensors[0]!.data as Float32Array)[3]).toBeCloseTo(0.9, 6);
});
