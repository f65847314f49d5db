import { float32Text } from './float32-text';
import { encodeResultRecord, encodeResultText } from './json-answer';
import { encodeV2Response } from './kserve';
import { encodeResultHead, encodeResultWithHead } from './responses';
import type { DType, ModelSignature } from './signature';
import {
  decodeOutputsFlat,
  decodeResult,
  RESPONSE_HEADER_BYTES,
  writeOutputSectionHeader,
  writeResponseHeader,
} from './wire';

interface Output {
  dtype: DType;
  dims: number[];
  values: unknown[];
  index?: number;
}

const header = { requestId: 1, slot: 1, queueMs: 1, computeMs: 1, batchSize: 1, workerIndex: 0 };
const utf8 = new TextEncoder();

/** A response record with these outputs, as a worker writes it. */
function record(outputs: Output[]): { bytes: Uint8Array; view: DataView } {
  const bytes = new Uint8Array(1 << 16);
  const view = new DataView(bytes.buffer);
  writeResponseHeader(view, 0, header, 0, outputs.length);
  let at = RESPONSE_HEADER_BYTES;
  outputs.forEach((output, i) => {
    const encoded = output.values.map((v) => (output.dtype === 'string' ? utf8.encode(v as string) : v));
    const size = { float32: 4, float64: 8, int32: 4, int64: 8, uint8: 1, bool: 1, string: 0 }[output.dtype];
    const byteLength =
      output.dtype === 'string'
        ? (encoded as Uint8Array[]).reduce((s, b) => s + 4 + b.length, 0)
        : size * output.values.length;
    let data = writeOutputSectionHeader(view, at, output.index ?? i, output.dims, byteLength);
    for (const v of encoded) {
      switch (output.dtype) {
        case 'float32':
          view.setFloat32(data, v as number, true);
          break;
        case 'float64':
          view.setFloat64(data, v as number, true);
          break;
        case 'int32':
          view.setInt32(data, v as number, true);
          break;
        case 'int64':
          view.setBigInt64(data, BigInt(v as number), true);
          break;
        case 'uint8':
          view.setUint8(data, v as number);
          break;
        case 'bool':
          view.setUint8(data, v ? 1 : 0);
          break;
        case 'string': {
          const b = v as Uint8Array;
          view.setUint32(data, b.length, true);
          bytes.set(b, data + 4);
          data += 4 + b.length - size;
          break;
        }
      }
      data += size;
    }
    at = data;
  });
  return { bytes, view };
}

function signatureOf(outputs: Output[], names?: string[], labels?: string[]): ModelSignature {
  const signature = {
    inputs: [{ name: 'x', dtype: 'float32', shape: [1] }],
    outputs: outputs.map((o, i) => ({ name: names?.[i] ?? `out${i}`, dtype: o.dtype, shape: o.dims })),
  } as unknown as ModelSignature;
  if (labels) signature.labels = labels;
  return signature;
}

/** The text JSON.stringify(decodeResult(...)) gave before, float32 values printed shortest instead. */
function expected(bytes: Uint8Array, view: DataView, signature: ModelSignature): string {
  const old = JSON.stringify(decodeResult(bytes, view, 0, signature));
  const float32 = signature.outputs.every((o) => o.dtype !== 'float32');
  if (float32) return old;
  // Re-print the old result's numbers as float32Text (the only difference; the other outputs in these cases
  // hold small integers, which print the same either way).
  return JSON.stringify(decodeResult(bytes, view, 0, signature), (_key, value: unknown) =>
    typeof value === 'number' ? `@f32:${float32Text(value)}` : value,
  ).replace(/"@f32:([^"]*)"/g, (_m, text: string) => text);
}

let seed = 7;
const random = (): number => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return seed / 2 ** 32;
};

describe('JSON answers written from the response record', () => {
  test('a float32 vector: the shortest round-trip text per value, the rest as encodeResultWithHead', () => {
    const values = Array.from({ length: 256 }, () => Math.fround(random() * 2 - 1));
    values.push(Math.fround(0.1), 1, -0, 0, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY);
    values.push(Math.fround(3.4e38), Math.fround(1e-45), Math.fround(1e-7), Math.fround(1e11));
    const outputs: Output[] = [{ dtype: 'float32', dims: [values.length], values }];
    const { bytes, view } = record(outputs);
    const signature = signatureOf(outputs);
    const head = encodeResultHead('bench', 'v1 ✓', 3);
    const text = encodeResultRecord('req-é', head, bytes, view, 0, signature, 12.3456);
    const parsed = JSON.parse(text) as { result: (number | null)[] };
    const old = JSON.parse(
      encodeResultWithHead('req-é', head, decodeResult(bytes, view, 0, signature), 12.3456),
    ) as { result: (number | null)[] };
    expect({ ...parsed, result: [] }).toEqual({ ...old, result: [] });
    parsed.result.forEach((v, i) => {
      const exact = values[i]!;
      if (Number.isFinite(exact)) expect(Math.fround(v!)).toBe(exact === 0 ? 0 : exact);
      else expect(v).toBeNull();
    });
    expect(text).toContain('"result":[');
    expect(text).toContain(',0.1,1,0,0,null,null,null,3.4e+38,1e-45,1e-7,1e+11]');
    expect(text.length).toBeLessThan(JSON.stringify(old).length);
    // numeric ids print as numbers
    expect(
      encodeResultRecord(42, head, bytes, view, 0, signature, 1).startsWith('{"id":42,"model":"bench"'),
    ).toBe(true);
  });

  test.each<[string, Output[], string[] | undefined, string[] | undefined]>([
    [
      'float64 keeps the double text',
      [{ dtype: 'float64', dims: [5], values: [0.1, 1 / 3, -0, Number.NaN, 1e300] }],
      undefined,
      undefined,
    ],
    [
      'int32',
      [{ dtype: 'int32', dims: [4], values: [0, -1, 2 ** 31 - 1, -(2 ** 31)] }],
      undefined,
      undefined,
    ],
    ['int64', [{ dtype: 'int64', dims: [3], values: [0, -5, 2 ** 53] }], undefined, undefined],
    ['uint8', [{ dtype: 'uint8', dims: [3], values: [0, 7, 255] }], undefined, undefined],
    ['bool', [{ dtype: 'bool', dims: [2], values: [true, false] }], undefined, undefined],
    [
      'strings, escaped and non-ASCII',
      [{ dtype: 'string', dims: [3], values: ['a"b\\c\n', 'ünï ✓ 🙂', ''] }],
      undefined,
      undefined,
    ],
    ['a scalar (rank 0)', [{ dtype: 'float32', dims: [], values: [Math.fround(2.5)] }], undefined, undefined],
    ['an empty vector', [{ dtype: 'float32', dims: [0], values: [] }], undefined, undefined],
    [
      'nested float32 [2,3,2]',
      [
        {
          dtype: 'float32',
          dims: [2, 3, 2],
          values: Array.from({ length: 12 }, () => Math.fround(random())),
        },
      ],
      undefined,
      undefined,
    ],
    ['nested int32 [3,0]', [{ dtype: 'int32', dims: [3, 0], values: [] }], undefined, undefined],
    [
      'several outputs keyed by name',
      [
        { dtype: 'float32', dims: [2], values: [Math.fround(0.25), Math.fround(0.7)] },
        { dtype: 'int64', dims: [1], values: [3] },
        { dtype: 'string', dims: [], values: ['ok'] },
      ],
      ['scores', 'class', 'note ✓'],
      undefined,
    ],
    [
      'numeric and duplicate output names (object key order)',
      [
        { dtype: 'float32', dims: [1], values: [Math.fround(0.3)] },
        { dtype: 'int32', dims: [1], values: [1] },
        { dtype: 'int32', dims: [1], values: [2] },
      ],
      ['b', '7', 'b'],
      undefined,
    ],
    [
      'a classifier: label + probabilities',
      [{ dtype: 'float32', dims: [4], values: [0.1, 0.6, 0.6, 0.2].map(Math.fround) }],
      undefined,
      ['zero', 'one', 'two', 'three'],
    ],
    [
      'a classifier with NaN first and too few labels',
      [{ dtype: 'float32', dims: [3], values: [Number.NaN, 0.5, 0.9].map(Math.fround) }],
      undefined,
      ['a'],
    ],
    [
      'a classifier over int64',
      [{ dtype: 'int64', dims: [3], values: [1, 9, 3] }],
      undefined,
      ['a', 'b', 'c'],
    ],
    [
      'a classifier over a matrix (the general decoder picks the label)',
      [{ dtype: 'float32', dims: [2, 2], values: [0.1, 0.2, 0.3, 0.4].map(Math.fround) }],
      undefined,
      ['a', 'b'],
    ],
    [
      'a classifier with a scalar output',
      [{ dtype: 'float32', dims: [], values: [Math.fround(0.4)] }],
      undefined,
      ['a'],
    ],
  ])(
    '%s: as JSON.stringify(decodeResult(...)) with float32 printed shortest',
    (_name, outputs, names, labels) => {
      const { bytes, view } = record(outputs);
      const signature = signatureOf(outputs, names, labels);
      const text = encodeResultText(bytes, view, 0, signature);
      expect(text).toBe(expected(bytes, view, signature));
      expect(JSON.parse(text)).toBeDefined();
    },
  );

  test('a large answer grows the buffer and the next small one is still right', () => {
    const big: Output[] = [
      { dtype: 'float64', dims: [4000], values: Array.from({ length: 4000 }, () => -random() * 1e-300) },
    ];
    const a = record(big);
    expect(encodeResultText(a.bytes, a.view, 0, signatureOf(big))).toBe(
      JSON.stringify(decodeResult(a.bytes, a.view, 0, signatureOf(big))),
    );
    const small: Output[] = [{ dtype: 'int32', dims: [1], values: [5] }];
    const b = record(small);
    expect(encodeResultText(b.bytes, b.view, 0, signatureOf(small))).toBe('[5]');
  });

  test('Open Inference Protocol answers: FP32 data shortest, the rest as JSON.stringify of the same object', () => {
    const outputs: Output[] = [
      { dtype: 'float32', dims: [3], values: [Math.fround(0.1), Number.NaN, -0] },
      { dtype: 'int64', dims: [2], values: [4, 5] },
    ];
    const { bytes, view } = record(outputs);
    const flat = decodeOutputsFlat(bytes, view, 0, signatureOf(outputs, ['p', 'q']));
    const text = encodeV2Response('m', '1', 'id-1', flat);
    expect(text).toBe(
      '{"model_name":"m","model_version":"1","id":"id-1","outputs":[' +
        '{"name":"p","datatype":"FP32","shape":[1,3],"data":[0.1,null,0]},' +
        '{"name":"q","datatype":"INT64","shape":[1,2],"data":[4,5]}]}',
    );
    expect(encodeV2Response('m', '1', null, [])).toBe(
      JSON.stringify({ model_name: 'm', model_version: '1', outputs: [] }),
    );
  });
});
