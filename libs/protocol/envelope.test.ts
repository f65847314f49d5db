import { decodeBinaryRequest, decodeRequest, encodeBinaryFrame, RequestError } from './index';

/** What a decoder made of a request's envelope: its fields, or the error it answered with. */
function outcome(
  decode: () => {
    id: unknown;
    model?: unknown;
    version?: unknown;
    deadlineMs?: unknown;
    priority?: unknown;
    routingKey?: unknown;
  },
): unknown {
  try {
    const r = decode();
    return {
      id: r.id,
      model: r.model,
      version: r.version,
      deadlineMs: r.deadlineMs,
      priority: r.priority,
      routingKey: r.routingKey,
    };
  } catch (e) {
    if (!(e instanceof RequestError)) throw e;
    return { code: e.code, message: e.message, requestId: e.requestId };
  }
}

function asJson(envelope: Record<string, unknown>): unknown {
  return outcome(() => decodeRequest(JSON.stringify({ ...envelope, input: [1, 2] }), { model: 'fallback' }));
}

function asBinary(envelope: Record<string, unknown>): unknown {
  const frame = encodeBinaryFrame({ ...envelope, inputs: [{ name: 'x', dims: [2] }] }, [
    { bytes: new Uint8Array(new Float32Array([1, 2]).buffer) },
  ]);
  const buffer = frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
  return outcome(() => decodeBinaryRequest(buffer, { model: 'fallback' }));
}

const CASES: [string, Record<string, unknown>][] = [
  [
    'every field valid',
    { id: 7, model: 'm', version: '2', deadline_ms: 50, priority: 'high', routing_key: 'k' },
  ],
  ['no field at all (defaults)', {}],
  ['string id, integer version', { id: 'a', version: 3 }],
  ['id an object', { id: { x: 1 }, model: 'm' }],
  ['id too long', { id: 'x'.repeat(257) }],
  ['deadline zero', { id: 'a', deadline_ms: 0 }],
  ['model empty', { id: 1, model: '' }],
  ['model too long', { id: 1, model: 'm'.repeat(257) }],
  ['version a float', { id: 1, version: 1.5 }],
  ['deadline negative', { id: 1, deadline_ms: -5 }],
  ['deadline a string', { id: 1, deadline_ms: '5' }],
  ['priority unknown', { id: 1, priority: 'urgent' }],
  ['routing key a number', { id: 1, routing_key: 5 }],
  ['routing key too long', { id: 1, routing_key: 'r'.repeat(257) }],
  ['null model and version', { id: 1, model: null, version: null }],
];

describe('request envelope: the JSON and binary decoders agree', () => {
  it.each(CASES)('%s', (_name, envelope) => {
    expect(asBinary(envelope)).toEqual(asJson(envelope));
  });

  it('refuses the same values with the id attached once it is readable', () => {
    expect(asJson({ id: 9, priority: 'urgent' })).toEqual({
      code: 'bad_request',
      message: '"priority" must be one of low, normal, high',
      requestId: 9,
    });
    expect(asBinary({ id: { x: 1 } })).toMatchObject({ code: 'bad_request', requestId: null });
  });
});
