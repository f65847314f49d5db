import { errorCodeFromIndex } from './errors';
import {
  bindRequest,
  decodeRequest,
  decodeResult,
  encodeError,
  encodeResult,
  encodeResultHead,
  encodeResultWithHead,
  errorCodeIndex,
  findInputSection,
  type ModelSignature,
  ProtocolError,
  parseSignature,
  RESPONSE_HEADER_BYTES,
  RequestError,
  readDeadlineAt,
  readEnqueuedAt,
  readErrorResponse,
  readInputMask,
  readRequestId,
  readRequestSlot,
  readStrings,
  requestRecordBytes,
  sameBatchShape,
  sectionDataOffset,
  sectionDim,
  utf8Length,
  writeErrorResponse,
  writeOutputSectionHeader,
  writeRequestRecord,
  writeResponseHeader,
} from './index';
import { formatMilliseconds } from './responses';

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
const digits: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'pixels', dtype: 'float32', shape: [64] }],
    outputs: [{ name: 'probabilities', dtype: 'float32', shape: [10] }],
    labels: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
  },
  'digits',
);
const limits = { maxElements: 1 << 20 };

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    if (error instanceof ProtocolError) return error.code;
    throw error;
  }
  return 'no error';
}

describe('decodeRequest', () => {
  test('reads id, model, version, input, priority, deadline', () => {
    const request = decodeRequest(
      '{"id":7,"model":"digits","version":2,"input":[1],"priority":"high","deadline_ms":25}',
    );
    expect(request).toMatchObject({
      id: 7,
      model: 'digits',
      version: '2',
      input: [1],
      priority: 'high',
      deadlineMs: 25,
    });
  });
  test('applies the default model and accepts the text shorthand', () => {
    expect(decodeRequest('{"text":"hi","id":1}', { model: 'echo' })).toMatchObject({
      model: 'echo',
      text: 'hi',
      priority: 'normal',
    });
  });
  test.each([
    ['{', 'bad_request'],
    ['null', 'bad_request'],
    ['[]', 'bad_request'],
    ['{"id":1}', 'bad_request'],
    ['{"id":1,"input":[1],"model":""}', 'bad_request'],
    ['{"id":1,"input":[1],"priority":"x"}', 'bad_request'],
    ['{"id":1,"input":[1],"deadline_ms":0}', 'bad_request'],
    ['{"id":1,"text":5}', 'bad_request'],
    ['{"id":1,"inputs":[1]}', 'bad_request'],
    ['{"id":[1],"input":[1]}', 'bad_request'],
  ])('%s → %s', (text, expected) => {
    expect(code(() => decodeRequest(text))).toBe(expected);
  });
  test('errors keep the id when it was readable', () => {
    try {
      decodeRequest('{"id":"abc","model":5,"input":[1]}');
      throw new Error('expected failure');
    } catch (error) {
      expect(error).toBeInstanceOf(RequestError);
      expect((error as RequestError).requestId).toBe('abc');
    }
  });
});

describe('bindRequest', () => {
  test('routes input to the float input and text to the string input of echo', () => {
    const floats = bindRequest(decodeRequest('{"input":[1,2,3]}'), echo, limits);
    expect(floats.inputMask).toBe(1);
    expect(floats.inputs[0]!.dims).toEqual([3]);
    const text = bindRequest(decodeRequest('{"text":"héllo"}'), echo, limits);
    expect(text.inputMask).toBe(2);
    expect(text.inputs[0]!.byteLength).toBe(4 + 6);
  });
  test.each([
    ['{"input":[1,2]}', 'shape_mismatch'],
    ['{"input":[[1,2]]}', 'shape_mismatch'],
    ['{"input":5}', 'shape_mismatch'],
  ])('digits %s → %s', (text, expected) => {
    expect(code(() => bindRequest(decodeRequest(text), digits, limits))).toBe(expected);
  });
  test('non-finite and out-of-range values are refused', () => {
    const pixels = Array.from({ length: 64 }, () => 1);
    pixels[3] = Number.POSITIVE_INFINITY;
    expect(code(() => bindRequest({ ...decodeRequest('{"input":[]}'), input: pixels }, digits, limits))).toBe(
      'bad_request',
    );
    pixels[3] = 1e39;
    expect(code(() => bindRequest({ ...decodeRequest('{"input":[]}'), input: pixels }, digits, limits))).toBe(
      'bad_request',
    );
    pixels[3] = 'x' as unknown as number;
    expect(code(() => bindRequest({ ...decodeRequest('{"input":[]}'), input: pixels }, digits, limits))).toBe(
      'type_mismatch',
    );
  });
  test('element limit gives payload_too_large', () => {
    expect(code(() => bindRequest(decodeRequest('{"input":[1,2,3,4,5]}'), echo, { maxElements: 4 }))).toBe(
      'payload_too_large',
    );
  });
  test('text for a model without string inputs is a type mismatch', () => {
    expect(code(() => bindRequest(decodeRequest('{"text":"x"}'), digits, limits))).toBe('type_mismatch');
  });
  test('unknown and duplicate inputs', () => {
    expect(code(() => bindRequest(decodeRequest('{"inputs":{"nope":[1]}}'), echo, limits))).toBe(
      'bad_request',
    );
    expect(code(() => bindRequest(decodeRequest('{"inputs":{"text":"a"},"text":"b"}'), echo, limits))).toBe(
      'bad_request',
    );
  });
});

describe('wire records', () => {
  test('request records round-trip header, dims and payload', () => {
    const bound = bindRequest(decodeRequest('{"input":[1.5,-2],"text":"ab"}'), echo, limits);
    const length = requestRecordBytes(bound);
    const bytes = new Uint8Array(length + 16);
    const view = new DataView(bytes.buffer);
    writeRequestRecord(
      view,
      bytes,
      8,
      { requestId: 42, slot: 3, priority: 'high', enqueuedAt: 1000.5, deadlineAt: 2000.25 },
      bound,
    );
    expect(readRequestId(view, 8)).toBe(42);
    expect(readRequestSlot(view, 8)).toBe(3);
    expect(readInputMask(view, 8)).toBe(3);
    expect(readEnqueuedAt(view, 8)).toBe(1000.5);
    expect(readDeadlineAt(view, 8)).toBe(2000.25);
    const floats = findInputSection(view, 8, length, 0);
    expect(sectionDim(view, floats, 0)).toBe(2);
    const data = sectionDataOffset(view, floats);
    expect([view.getFloat32(data, true), view.getFloat32(data + 4, true)]).toEqual([1.5, -2]);
    const strings: string[] = [];
    expect(readStrings(bytes, view, findInputSection(view, 8, length, 1), 1, strings)).toBe(true);
    expect(strings).toEqual(['ab']);
  });

  test('sameBatchShape compares masks and dims', () => {
    const make = (json: string): [DataView, number] => {
      const bound = bindRequest(decodeRequest(json), echo, limits);
      const bytes = new Uint8Array(requestRecordBytes(bound));
      const view = new DataView(bytes.buffer);
      writeRequestRecord(
        view,
        bytes,
        0,
        { requestId: 1, slot: 1, priority: 'normal', enqueuedAt: 0, deadlineAt: 0 },
        bound,
      );
      return [view, 0];
    };
    const joined = (a: string, b: string): boolean => {
      const [va] = make(a);
      const [vb] = make(b);
      const bytes = new Uint8Array(va.byteLength + vb.byteLength);
      bytes.set(new Uint8Array(va.buffer), 0);
      bytes.set(new Uint8Array(vb.buffer), va.byteLength);
      return sameBatchShape(new DataView(bytes.buffer), 0, va.byteLength);
    };
    expect(joined('{"input":[1,2]}', '{"input":[3,4]}')).toBe(true);
    expect(joined('{"input":[1,2]}', '{"input":[3]}')).toBe(false);
    expect(joined('{"input":[1]}', '{"text":"x"}')).toBe(false);
    expect(joined('{"text":"x"}', '{"text":"longer"}')).toBe(true);
  });

  test('responses decode into results; classifiers into label + probabilities', () => {
    const bytes = new Uint8Array(512);
    const view = new DataView(bytes.buffer);
    const header = {
      requestId: 5,
      slot: 2,
      queueMs: 1,
      computeMs: 2,
      batchSize: 4,
      workerIndex: 0,
    };
    writeResponseHeader(view, 0, header, 0, 1);
    let at = writeOutputSectionHeader(view, RESPONSE_HEADER_BYTES, 0, [10], 40);
    for (let i = 0; i < 10; i++) {
      view.setFloat32(at, i === 7 ? 0.5 : 0.05, true);
      at += 4;
    }
    const result = decodeResult(bytes, view, 0, digits) as { label: string; probabilities: number[] };
    expect(result.label).toBe('7');
    expect(result.probabilities).toHaveLength(10);
    writeErrorResponse(view, bytes, 100, header, 'model_error', 'boom ✓');
    expect(readErrorResponse(bytes, view, 100)).toEqual({ code: 'model_error', message: 'boom ✓' });
  });
});

describe('ProtocolError', () => {
  test('carries its code but no stack frames, and leaves Error.stackTraceLimit as it was', () => {
    const limit = Error.stackTraceLimit;
    const error = new ProtocolError('overloaded', 'queue full', 5);
    expect(error).toBeInstanceOf(Error);
    expect(error.code).toBe('overloaded');
    expect(error.retryAfterMs).toBe(5);
    expect(error.stack ?? '').not.toMatch(/\n\s+at /);
    expect(Error.stackTraceLimit).toBe(limit);
    // ordinary errors still get their stacks
    expect(new Error('bug').stack).toMatch(/\n\s+at /);
  });
});

describe('codes and encoders', () => {
  test('code indexes round-trip', () => {
    for (const name of ['bad_request', 'internal', 'deadline_exceeded'] as const)
      expect(errorCodeFromIndex(errorCodeIndex(name))).toBe(name);
  });
  test('latency_ms text is exactly Math.round(ms * 1000) / 1000 as JSON', () => {
    const samples = [
      0, 0.0004, 0.0005, 0.001, 0.01, 0.1, 0.12, 0.123, 1, 1.5, 1.05, 1.005, 1.0049, 2.99951, 10, 99.9999,
    ];
    let x = 0.37;
    for (let i = 0; i < 5000; i++) {
      x = (x * 9301 + 49297) % 233280;
      samples.push(x / 1000, x / 7, x * 13.37);
    }
    for (const ms of samples)
      expect(formatMilliseconds(ms)).toBe(JSON.stringify(Math.round(ms * 1000) / 1000));
    // outside the integer path it still gives the same JSON
    expect(formatMilliseconds(-1.5)).toBe(JSON.stringify(Math.round(-1.5 * 1000) / 1000));
  });
  test('an answer built from a cached head equals the one-shot encoder', () => {
    const head = encodeResultHead('m"x', '2', 7);
    for (const id of [1, 1.5, 'a"b', null] as const) {
      expect(encodeResultWithHead(id, head, [0.5, -1], 3.25)).toBe(
        encodeResult(id, 'm"x', '2', 7, [0.5, -1], 3.25),
      );
    }
    expect(JSON.parse(encodeResultWithHead(-0, head, 'ok', 0))).toEqual({
      id: 0,
      model: 'm"x',
      version: '2',
      epoch: 7,
      result: 'ok',
      latency_ms: 0,
    });
  });
  test('encoders produce valid JSON', () => {
    expect(JSON.parse(encodeResult(1, 'm', '2', 0, { a: [1] }, 1.23456))).toEqual({
      id: 1,
      model: 'm',
      version: '2',
      epoch: 0,
      result: { a: [1] },
      latency_ms: 1.235,
    });
    expect(JSON.parse(encodeError('x"y', 'rate_limited', 'slow "down"', 12.2))).toEqual({
      id: 'x"y',
      type: 'error',
      code: 'rate_limited',
      message: 'slow "down"',
      retry_after_ms: 13,
    });
  });
  test('utf8Length matches TextEncoder, including lone surrogates', () => {
    for (const text of ['', 'abc', 'héllo', '日本語', '😀x', '\ud800', 'a\udc00b']) {
      expect(utf8Length(text)).toBe(new TextEncoder().encode(text).length);
    }
  });
  test('parseSignature rejects malformed configs with the field named', () => {
    expect(() => parseSignature({ inputs: [], outputs: [] }, 'cfg')).toThrow(/cfg.inputs/);
    expect(() =>
      parseSignature(
        {
          inputs: [{ name: 'a', dtype: 'complex', shape: [] }],
          outputs: [{ name: 'b', dtype: 'float32', shape: [] }],
        },
        'cfg',
      ),
    ).toThrow(/dtype/);
    expect(() =>
      parseSignature(
        {
          inputs: [{ name: 'a', dtype: 'float32', shape: [0] }],
          outputs: [{ name: 'b', dtype: 'float32', shape: [] }],
        },
        'cfg',
      ),
    ).toThrow(/shape/);
  });
});
