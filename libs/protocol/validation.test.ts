/**
 * The validation boundary: every decoder checks a request against the model's signature before
 * anything is copied or nested, and the worker-side record check refuses what slipped past anyway.
 */
import {
  bindBinaryRequest,
  bindRequest,
  checkRequestRecord,
  decodeBinaryRequest,
  decodeJsonRequest,
  decodeRequest,
  decodeV2Request,
  encodeBinaryFrame,
  encodeBinaryRequest,
  encodeResultText,
  encodeV2Response,
  findInputSection,
  httpStatusOf,
  type ModelSignature,
  ProtocolError,
  parseSignature,
  RESPONSE_HEADER_BYTES,
  readStrings,
  requestRecordBytes,
  sectionDataOffset,
  writeOutputSectionHeader,
  writeRequestRecord,
  writeResponseHeader,
} from './index';

const echo: ModelSignature = parseSignature(
  {
    inputs: [
      { name: 'input', dtype: 'float32', shape: [-1], optional: true },
      { name: 'text', dtype: 'string', shape: [], optional: true },
    ],
    outputs: [
      { name: 'output', dtype: 'float32', shape: [-1], from: 'input' },
      { name: 'text_out', dtype: 'string', shape: [], from: 'text' },
    ],
  },
  'echo',
);
const ids: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'ids', dtype: 'int64', shape: [4] }],
    outputs: [{ name: 'out', dtype: 'int64', shape: [4] }],
  },
  'ids',
);
const grid: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'cells', dtype: 'uint8', shape: [-1, -1] }],
    outputs: [{ name: 'out', dtype: 'uint8', shape: [-1, -1] }],
  },
  'grid',
);
const texts: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'words', dtype: 'string', shape: [-1] }],
    outputs: [{ name: 'out', dtype: 'string', shape: [-1] }],
  },
  'texts',
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

function buffer(frame: Uint8Array): ArrayBuffer {
  return frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
}

function u32(...values: number[]): Uint8Array {
  const bytes = new Uint8Array(4 * values.length);
  const view = new DataView(bytes.buffer);
  values.forEach((value, i) => view.setUint32(4 * i, value, true));
  return bytes;
}

function bindFrame(
  signature: ModelSignature,
  inputs: Array<Record<string, unknown>>,
  tensors: Uint8Array[],
): string {
  return code(() =>
    bindBinaryRequest(
      decodeBinaryRequest(
        buffer(
          encodeBinaryFrame(
            { id: 1, inputs },
            tensors.map((bytes) => ({ bytes })),
          ),
        ),
      ),
      signature,
      limits,
    ),
  );
}

describe('binary frames', () => {
  test('defect 1: a text tensor without dtype holding only a length prefix is refused', () => {
    expect(bindFrame(echo, [{ name: 'text', dims: [] }], [u32(100_000)])).toBe('bad_request');
    expect(bindFrame(echo, [{ name: 'text', dims: [], dtype: 'string' }], [u32(100_000)])).toBe(
      'bad_request',
    );
  });

  test('the dtype comes from the model when the frame gives none; numeric tensors must be elements × size', () => {
    // defect 2: 16 bytes (what float32 would need) for int64 [4]
    expect(bindFrame(ids, [{ name: 'ids', dims: [4] }], [new Uint8Array(16)])).toBe('shape_mismatch');
    expect(bindFrame(ids, [{ name: 'ids', dims: [4] }], [new Uint8Array(32)])).toBe('no error');
    // longer than the dims need (the frame has bytes no tensor accounts for)
    expect(bindFrame(ids, [{ name: 'ids', dims: [4] }], [new Uint8Array(48)])).toBe('shape_mismatch');
    expect(bindFrame(echo, [{ name: 'input', dims: [2] }], [new Uint8Array(16)])).toBe('shape_mismatch');
  });

  test('a frame dtype that differs from the model is dtype_mismatch (400)', () => {
    expect(bindFrame(ids, [{ name: 'ids', dims: [4], dtype: 'float64' }], [new Uint8Array(32)])).toBe(
      'dtype_mismatch',
    );
    expect(bindFrame(ids, [{ name: 'ids', dims: [4], dtype: 'float16' }], [new Uint8Array(32)])).toBe(
      'dtype_mismatch',
    );
    expect(httpStatusOf('dtype_mismatch')).toBe(400);
  });

  test('string prefixes must stay inside the tensor and account for every byte', () => {
    const word = (text: string) => [...u32(text.length), ...new TextEncoder().encode(text)];
    const ok = Uint8Array.from([...word('ab'), ...word('c')]);
    expect(bindFrame(texts, [{ name: 'words', dims: [2] }], [ok])).toBe('no error');
    // a prefix that runs past the frame, and one too few strings for the bytes there
    expect(bindFrame(texts, [{ name: 'words', dims: [2] }], [Uint8Array.from(word('ab'))])).toBe(
      'bad_request',
    );
    expect(bindFrame(texts, [{ name: 'words', dims: [1] }], [ok])).toBe('shape_mismatch');
    const twoTensors = bindFrame(
      texts,
      [{ name: 'words', dims: [1] }],
      [Uint8Array.from(word('abcdefgh')), Uint8Array.from(word('zz'))],
    );
    expect(twoTensors).toBe('shape_mismatch');
  });

  test('NUL in a string is refused', () => {
    const frame = encodeBinaryRequest({ id: 1 }, [
      { name: 'text', dtype: 'string', dims: [], data: ['a\u0000'] },
    ]);
    expect(code(() => bindBinaryRequest(decodeBinaryRequest(buffer(frame)), echo, limits))).toBe(
      'bad_request',
    );
  });

  test('rank equal to the signature, and a cap on every dim even when the product is 0', () => {
    expect(bindFrame(grid, [{ name: 'cells', dims: [3] }], [new Uint8Array(3)])).toBe('shape_mismatch');
    expect(bindFrame(grid, [{ name: 'cells', dims: [2147483648, 0] }], [])).toBe('payload_too_large');
    expect(bindFrame(grid, [{ name: 'cells', dims: [0, 4294967295] }], [])).toBe('payload_too_large');
    expect(bindFrame(grid, [{ name: 'cells', dims: [4294967296, 0] }], [])).toBe('shape_mismatch');
    expect(bindFrame(grid, [{ name: 'cells', dims: [2, 0] }], [])).toBe('no error');
  });
});

describe('JSON requests', () => {
  test('NUL in a string input is refused', () => {
    expect(code(() => bindRequest(decodeRequest('{"text":"a\\u0000b"}'), echo, limits))).toBe('bad_request');
    expect(
      code(() => bindRequest(decodeRequest('{"inputs":{"words":["x","\\u0000"]}}'), texts, limits)),
    ).toBe('bad_request');
  });

  test('nesting deeper than the rank is shape_mismatch, never a stack overflow', () => {
    const deep = `${'['.repeat(100_000)}1${']'.repeat(100_000)}`;
    expect(code(() => bindRequest(decodeJsonRequest(`{"input":${deep}}`), echo, limits))).toBe(
      'shape_mismatch',
    );
    expect(code(() => bindRequest(decodeRequest(`{"inputs":{"input":${deep}}}`), echo, limits))).toBe(
      'shape_mismatch',
    );
  });

  test('int64 inputs take exact decimal strings over the whole int64 range', () => {
    const text = '{"input":["9007199254740993","-9223372036854775808","9223372036854775807",5]}';
    const bound = bindRequest(decodeRequest(text), ids, limits);
    const bytes = new Uint8Array(requestRecordBytes(bound));
    const view = new DataView(bytes.buffer);
    const header = { requestId: 1, slot: 0, priority: 'normal' as const, enqueuedAt: 0, deadlineAt: 1 };
    writeRequestRecord(view, bytes, 0, header, bound);
    const data = sectionDataOffset(view, findInputSection(view, 0, bytes.length, 0));
    expect([0, 1, 2, 3].map((i) => view.getBigInt64(data + 8 * i, true))).toEqual([
      9007199254740993n,
      -9223372036854775808n,
      9223372036854775807n,
      5n,
    ]);
    for (const bad of ['"9223372036854775808"', '"1.5"', '"0x10"', '" 1"', '""', '"01"', String(2 ** 53)])
      expect([bad, code(() => bindRequest(decodeRequest(`{"input":[${bad},1,2,3]}`), ids, limits))]).toEqual([
        bad,
        'type_mismatch',
      ]);
  });
});

describe('Open Inference Protocol', () => {
  const v2 = (inputs: unknown, signature: ModelSignature = echo) =>
    code(() => decodeV2Request(JSON.stringify({ inputs }), 'm', undefined, signature, limits));

  test('defect 3: the shape is checked against the signature before anything is nested', () => {
    for (const shape of [
      [1, 10_000_000, 0],
      [1, 2147483648, 0],
    ]) {
      const started = performance.now();
      expect(v2([{ name: 'input', shape, datatype: 'FP32', data: [] }])).toBe('shape_mismatch');
      expect(performance.now() - started).toBeLessThan(50);
    }
    const started = performance.now();
    expect(v2([{ name: 'cells', shape: [1, 2147483648, 0], datatype: 'UINT8', data: [] }], grid)).toBe(
      'payload_too_large',
    );
    expect(v2([{ name: 'cells', shape: [1, 4294967296, 0], datatype: 'UINT8', data: [] }], grid)).toBe(
      'shape_mismatch',
    );
    expect(performance.now() - started).toBeLessThan(50);
    expect(v2([{ name: 'cells', shape: [1, 2, 0], datatype: 'UINT8', data: [] }], grid)).toBe('no error');
  });

  test('data nested deeper than the shape is shape_mismatch, never a stack overflow', () => {
    const deep = `${'['.repeat(100_000)}1${']'.repeat(100_000)}`;
    const body = `{"inputs":[{"name":"input","shape":[1,1],"datatype":"FP32","data":${deep}}]}`;
    expect(code(() => decodeV2Request(body, 'm', undefined, echo, limits))).toBe('shape_mismatch');
    expect(v2([{ name: 'input', shape: [1, 2], datatype: 'FP32', data: [[[1, 2]]] }])).toBe('shape_mismatch');
    expect(v2([{ name: 'input', shape: [1, 2], datatype: 'FP32', data: [[1, 2]] }])).toBe('no error');
  });

  test('a datatype that differs from the model is dtype_mismatch; none given is the model’s', () => {
    expect(v2([{ name: 'input', shape: [1, 2], datatype: 'INT32', data: [1, 2] }])).toBe('dtype_mismatch');
    expect(v2([{ name: 'input', shape: [1, 2], datatype: 'FP16', data: [1, 2] }])).toBe('dtype_mismatch');
    expect(v2([{ name: 'input', shape: [1, 2], data: [1, 2] }])).toBe('no error');
  });

  test('NUL in BYTES data is refused at bind', () => {
    const request = decodeV2Request(
      JSON.stringify({ inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['\u0000'] }] }),
      'm',
      undefined,
      echo,
      limits,
    );
    expect(code(() => bindRequest(request, echo, limits))).toBe('bad_request');
  });
});

describe('int64 outputs print their exact integer in JSON answers', () => {
  function int64Record(values: bigint[]): { bytes: Uint8Array; view: DataView } {
    const bytes = new Uint8Array(256);
    const view = new DataView(bytes.buffer);
    writeResponseHeader(
      view,
      0,
      { requestId: 1, slot: 0, queueMs: 0, computeMs: 0, batchSize: 1, workerIndex: 0 },
      0,
      1,
    );
    let at = writeOutputSectionHeader(view, RESPONSE_HEADER_BYTES, 0, [values.length], 8 * values.length);
    for (const value of values) {
      view.setBigInt64(at, value, true);
      at += 8;
    }
    return { bytes, view };
  }
  const values = [2n ** 53n + 1n, -(2n ** 53n) - 1n, 2n ** 63n - 1n, -(2n ** 63n), 2n ** 53n, -5n, 0n];
  const exact =
    '[9007199254740993,-9007199254740993,9223372036854775807,-9223372036854775808,9007199254740992,-5,0]';

  test('our JSON answers', () => {
    const { bytes, view } = int64Record(values);
    expect(encodeResultText(bytes, view, 0, ids)).toBe(exact);
  });

  test('Open Inference Protocol answers', () => {
    const text = encodeV2Response('ids', '1', null, [
      { name: 'out', dtype: 'int64', dims: [values.length], data: values.map((v) => Number(v)) },
    ]);
    // numbers within 2^53 print as JSON.stringify does; the exact values come from the record (decodeOutputsFlat)
    expect(text).toContain('"data":[9007199254740992,-9007199254740992');
    const exactText = encodeV2Response('ids', '1', null, [
      { name: 'out', dtype: 'int64', dims: [values.length], data: values },
    ]);
    expect(exactText).toContain(`"data":${exact}`);
  });
});

describe('the worker’s record check (defence in depth)', () => {
  function record(signature: ModelSignature, json: string): { bytes: Uint8Array; view: DataView } {
    const bound = bindRequest(decodeRequest(json), signature, limits);
    const bytes = new Uint8Array(requestRecordBytes(bound) + 64).fill(0x41);
    const view = new DataView(bytes.buffer);
    writeRequestRecord(
      view,
      bytes,
      0,
      { requestId: 1, slot: 0, priority: 'normal', enqueuedAt: 0, deadlineAt: 1 },
      bound,
    );
    return { bytes, view };
  }

  test('a valid record passes; strings are read within their section', () => {
    const { bytes, view } = record(echo, '{"input":[1,2],"text":"hello"}');
    const length = requestRecordBytes(
      bindRequest(decodeRequest('{"input":[1,2],"text":"hello"}'), echo, limits),
    );
    expect(checkRequestRecord(view, 0, length, echo)).toBe(0);
    const section = findInputSection(view, 0, length, 1);
    const out: string[] = [];
    expect(readStrings(bytes, view, section, 1, out)).toBe(true);
    expect(out).toEqual(['hello']);
  });

  test('a string prefix past its section, a short numeric tensor, a section past the record: refused', () => {
    const json = '{"text":"hello"}';
    const length = requestRecordBytes(bindRequest(decodeRequest(json), echo, limits));
    const a = record(echo, json);
    const section = findInputSection(a.view, 0, length, 1);
    a.view.setUint32(sectionDataOffset(a.view, section), 60, true);
    expect(checkRequestRecord(a.view, 0, length, echo)).not.toBe(0);
    const out: string[] = [];
    expect(readStrings(a.bytes, a.view, section, 1, out)).toBe(false);
    expect(out).toEqual([]);

    const idsJson = '{"input":[1,2,3,4]}';
    const idsLength = requestRecordBytes(bindRequest(decodeRequest(idsJson), ids, limits));
    const b = record(ids, idsJson);
    b.view.setUint32(24, 16, true);
    expect(checkRequestRecord(b.view, 0, idsLength - 16, ids)).not.toBe(0);
    const c = record(ids, idsJson);
    expect(checkRequestRecord(c.view, 0, idsLength - 1, ids)).not.toBe(0);
    expect(findInputSection(c.view, 0, 30, 0)).toBe(-1);
    const d = record(ids, idsJson);
    d.view.setUint32(24 + 8, 3, true);
    expect(checkRequestRecord(d.view, 0, idsLength, ids)).not.toBe(0);
  });
});
