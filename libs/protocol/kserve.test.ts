import {
  decodePathSegment,
  decodeV2Request,
  encodeV2Response,
  type ModelSignature,
  ProtocolError,
  parseSignature,
  v2ModelMetadata,
} from './index';

const digits: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'pixels', dtype: 'float32', shape: [2, 2] }],
    outputs: [{ name: 'p', dtype: 'float32', shape: [3] }],
  },
  'm',
);

const limits = { maxElements: 1 << 16 };

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    if (error instanceof ProtocolError) return error.code;
    throw error;
  }
  return 'no error';
}

test('flat data with a batch dimension of 1 becomes the nested per-item value', () => {
  const request = decodeV2Request(
    JSON.stringify({
      id: 'r1',
      inputs: [{ name: 'pixels', shape: [1, 2, 2], datatype: 'FP32', data: [1, 2, 3, 4] }],
    }),
    'm',
    '2',
    digits,
    limits,
  );
  expect(request).toMatchObject({
    id: 'r1',
    model: 'm',
    version: '2',
    inputs: {
      pixels: [
        [1, 2],
        [3, 4],
      ],
    },
  });
  const noBatch = decodeV2Request(
    JSON.stringify({
      inputs: [
        {
          name: 'pixels',
          shape: [2, 2],
          datatype: 'FP32',
          data: [
            [1, 2],
            [3, 4],
          ],
        },
      ],
    }),
    'm',
    undefined,
    digits,
    limits,
  );
  expect(noBatch.inputs).toEqual({
    pixels: [
      [1, 2],
      [3, 4],
    ],
  });
});

test.each([
  ['{', 'bad_request'],
  ['{"inputs": []}', 'bad_request'],
  ['{"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [1,2,3,4]}]}', 'bad_request'],
  [
    '{"inputs": [{"name": "pixels", "shape": [1,2,2], "datatype": "INT32", "data": [1,2,3,4]}]}',
    'dtype_mismatch',
  ],
  [
    '{"inputs": [{"name": "pixels", "shape": [1,2,2], "datatype": "FP16", "data": [1,2,3,4]}]}',
    'dtype_mismatch',
  ],
  [
    '{"inputs": [{"name": "pixels", "shape": [2,2,2], "datatype": "FP32", "data": [1,2,3,4,5,6,7,8]}]}',
    'shape_mismatch',
  ],
  [
    '{"inputs": [{"name": "pixels", "shape": [1,2,2], "datatype": "FP32", "data": [1,2,3]}]}',
    'shape_mismatch',
  ],
  [
    '{"id": 5, "inputs": [{"name": "pixels", "shape": [1,2,2], "datatype": "FP32", "data": [1,2,3,4]}]}',
    'bad_request',
  ],
])('%s → %s', (body, expected) => {
  expect(code(() => decodeV2Request(body, 'm', undefined, digits, limits))).toBe(expected);
});

test('answers and metadata use the protocol shapes', () => {
  expect(
    JSON.parse(
      encodeV2Response('m', '2', 'r1', [{ name: 'p', dtype: 'float32', dims: [3], data: [0.5, 0.25, 0.25] }]),
    ),
  ).toEqual({
    model_name: 'm',
    model_version: '2',
    id: 'r1',
    outputs: [{ name: 'p', datatype: 'FP32', shape: [1, 3], data: [0.5, 0.25, 0.25] }],
  });
  expect(v2ModelMetadata('m', ['1', '2'], digits)).toEqual({
    name: 'm',
    versions: ['1', '2'],
    platform: 'onnxruntime_onnx',
    inputs: [{ name: 'pixels', datatype: 'FP32', shape: [-1, 2, 2] }],
    outputs: [{ name: 'p', datatype: 'FP32', shape: [-1, 3] }],
  });
});

test('decodePathSegment: percent-decodes a route parameter; a malformed escape is undefined, never a throw', () => {
  expect(decodePathSegment('digits')).toBe('digits');
  expect(decodePathSegment('my%20model')).toBe('my model');
  expect(decodePathSegment('%00')).toBe('\u0000');
  expect(decodePathSegment('')).toBe('');
  expect(decodePathSegment(undefined)).toBeUndefined();
  for (const bad of ['%', '%E0%A4%A', '%zz', 'a%2', '%ED%A0%80', '%C0'])
    expect(decodePathSegment(bad)).toBeUndefined();
});
