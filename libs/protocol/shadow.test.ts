import type { DType, ModelSignature, ShadowOutput } from './index';
import {
  outputsAgree,
  parseSignature,
  readFirstOutput,
  utf8Length,
  writeOutputSectionHeader,
  writeResponseHeader,
} from './index';
import { SHADOW_FLOAT_TOLERANCE } from './shadow';

const header = { requestId: 1, slot: 1, queueMs: 0, computeMs: 0, batchSize: 1, workerIndex: 0 };

function signature(dtype: DType, labels?: string[]): ModelSignature {
  return parseSignature(
    {
      inputs: [{ name: 'x', dtype: 'float32', shape: [-1] }],
      outputs: [{ name: 'y', dtype, shape: [-1] }],
      ...(labels ? { labels } : {}),
    },
    'm',
  );
}

/** A response record with one output section of `dtype`, as a worker writes it. */
function record(dtype: DType, values: Array<number | bigint | string | boolean>): [Uint8Array, DataView] {
  const bytes = new Uint8Array(4096);
  const view = new DataView(bytes.buffer);
  writeResponseHeader(view, 0, header, 0, 1);
  let length = 0;
  if (dtype === 'string') for (const v of values) length += 4 + utf8Length(v as string);
  else length = values.length * { float32: 4, float64: 8, int32: 4, int64: 8, uint8: 1, bool: 1 }[dtype];
  let at = writeOutputSectionHeader(view, 24, 0, [values.length], length);
  for (const value of values) {
    switch (dtype) {
      case 'float32':
        view.setFloat32(at, value as number, true);
        at += 4;
        break;
      case 'float64':
        view.setFloat64(at, value as number, true);
        at += 8;
        break;
      case 'int32':
        view.setInt32(at, value as number, true);
        at += 4;
        break;
      case 'int64':
        view.setBigInt64(at, BigInt(value as number | bigint), true);
        at += 8;
        break;
      case 'uint8':
        view.setUint8(at, value as number);
        at += 1;
        break;
      case 'bool':
        view.setUint8(at, value ? 1 : 0);
        at += 1;
        break;
      case 'string': {
        const encoded = new TextEncoder().encode(value as string);
        view.setUint32(at, encoded.length, true);
        bytes.set(encoded, at + 4);
        at += 4 + encoded.length;
        break;
      }
    }
  }
  return [bytes, view];
}

function read(
  dtype: DType,
  values: Array<number | bigint | string | boolean>,
  labels?: string[],
): ShadowOutput {
  const [bytes, view] = record(dtype, values);
  return readFirstOutput(bytes, view, 0, signature(dtype, labels))!;
}

function agree(
  dtype: DType,
  a: Array<number | bigint | string | boolean>,
  b: Array<number | bigint | string | boolean>,
  classifier = false,
): boolean {
  return outputsAgree(read(dtype, a), read(dtype, b), classifier);
}

test('readFirstOutput decodes by the real dtype (not as float32)', () => {
  expect(read('float64', [0.1, 1e300])).toMatchObject({
    dtype: 'float64',
    values: new Float64Array([0.1, 1e300]),
  });
  expect(read('int32', [-7, 2 ** 30])).toMatchObject({
    dtype: 'int32',
    values: new Int32Array([-7, 2 ** 30]),
  });
  expect(read('int64', [2n ** 60n + 1n])).toMatchObject({ dtype: 'int64' });
  expect((read('int64', [2n ** 60n + 1n]).values as BigInt64Array)[0]).toBe(2n ** 60n + 1n);
  expect(read('uint8', [255, 0])).toMatchObject({ dtype: 'uint8', values: new Int32Array([255, 0]) });
  expect(read('bool', [true, false])).toMatchObject({ dtype: 'bool', values: new Int32Array([1, 0]) });
  expect(read('string', ['héllo', ''])).toMatchObject({ dtype: 'string', values: ['héllo', ''] });
  const bytes = new Uint8Array(64);
  const view = new DataView(bytes.buffer);
  writeResponseHeader(view, 0, header, 0, 0);
  expect(readFirstOutput(bytes, view, 0, signature('float32'))).toBeUndefined();
});

test('float32 and float64: equal within the stated tolerance, not beyond', () => {
  for (const dtype of ['float32', 'float64'] as const) {
    expect(agree(dtype, [1, 2, 3], [1, 2, 3])).toBe(true);
    expect(agree(dtype, [1000, 0.5], [1000 * (1 + SHADOW_FLOAT_TOLERANCE / 2), 0.5])).toBe(true);
    expect(agree(dtype, [1000, 0.5], [1000 * (1 + SHADOW_FLOAT_TOLERANCE * 4), 0.5])).toBe(false);
    expect(agree(dtype, [0.001], [0.001 + SHADOW_FLOAT_TOLERANCE / 2])).toBe(true);
    expect(agree(dtype, [0.001], [0.001 + SHADOW_FLOAT_TOLERANCE * 2])).toBe(false);
    expect(agree(dtype, [Infinity], [Infinity])).toBe(true);
    expect(agree(dtype, [Infinity], [-Infinity])).toBe(false);
    expect(agree(dtype, [1, 2], [1, 2, 3])).toBe(false);
  }
});

test('float64 is compared at float64 precision: a difference float32 would round away is seen', () => {
  // 1e8 and 1e8 + 1e5 are distinct float64s differing by 1e-3 relative: outside the tolerance.
  expect(agree('float64', [1e8], [1e8 + 1e5])).toBe(false);
  // Read as float32 bytes (the old behaviour), the float64 record would have been garbage or skipped.
  expect(read('float64', [1e8 + 1e5]).values[0]).toBe(1e8 + 1e5);
});

test('NaN never counts as agreement: floats, classifiers, NaN on both sides', () => {
  for (const dtype of ['float32', 'float64'] as const) {
    expect(agree(dtype, [Number.NaN], [Number.NaN])).toBe(false);
    expect(agree(dtype, [1, Number.NaN], [1, 2])).toBe(false);
    expect(agree(dtype, [1, 2], [1, Number.NaN])).toBe(false);
    expect(agree(dtype, [0.1, 0.9, Number.NaN], [0.1, 0.9, Number.NaN], true)).toBe(false);
    expect(agree(dtype, [Number.NaN, 0.9], [0.2, 0.8], true)).toBe(false);
  }
});

test('classifiers agree on top-1, whatever the probabilities', () => {
  const labels = ['a', 'b', 'c'];
  const a = read('float32', [0.1, 0.7, 0.2], labels);
  expect(outputsAgree(a, read('float32', [0.3, 0.4, 0.3], labels), true)).toBe(true);
  expect(outputsAgree(a, read('float32', [0.5, 0.4, 0.1], labels), true)).toBe(false);
  expect(agree('float64', [0.1, 0.7, 0.2], [0.3, 0.4, 0.3], true)).toBe(true);
  expect(agree('int32', [1, 9, 2], [0, 5, 1], true)).toBe(true);
  expect(agree('int64', [1, 9, 2], [10, 5, 1], true)).toBe(false);
});

test('integers, uint8 and bool are compared exactly', () => {
  expect(agree('int32', [1, -2, 3], [1, -2, 3])).toBe(true);
  expect(agree('int32', [1, -2, 3], [1, -2, 4])).toBe(false);
  expect(agree('int64', [2n ** 60n], [2n ** 60n])).toBe(true);
  // Equal as float64 numbers, different as int64: exactness matters.
  expect(agree('int64', [2n ** 60n], [2n ** 60n + 1n])).toBe(false);
  expect(agree('uint8', [255, 0], [255, 0])).toBe(true);
  expect(agree('uint8', [255, 0], [254, 0])).toBe(false);
  expect(agree('bool', [true, false], [true, false])).toBe(true);
  expect(agree('bool', [true, false], [true, true])).toBe(false);
});

test('strings are compared exactly', () => {
  expect(agree('string', ['\u00e9'], ['e\u0301'])).toBe(false); // precomposed vs combining: different strings
});

test('different dtypes or outputs never agree', () => {
  expect(outputsAgree(read('int32', [1]), read('float32', [1]), false)).toBe(false);
  const a = read('float32', [1]);
  expect(outputsAgree(a, { ...a, index: 1 }, false)).toBe(false);
});
