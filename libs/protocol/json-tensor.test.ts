import { ProtocolError, RequestError } from './errors';
import { bindScanned, ScannedTensor, scanJsonInput, scannedNumbers } from './json-tensor';
import type { InferenceRequest } from './request';
import { bindRequest, decodeJsonRequest, decodeRequest } from './request';
import type { ModelSignature } from './signature';
import { parseSignature } from './signature';
import { requestRecordBytes, writeRequestRecord } from './wire';

const limits = { maxElements: 1000 };

function model(inputs: unknown[]): ModelSignature {
  return parseSignature({ inputs, outputs: [{ name: 'out', dtype: 'float32', shape: [-1] }] }, 'test');
}

function single(dtype: string, shape: number[]): ModelSignature {
  return model([{ name: 'x', dtype, shape }]);
}

/** The doubles the scanner reads from `literals`. */
function scanDoubles(literals: string): number[] {
  const text = `{"input":[${literals}]}`;
  const scanned = scanJsonInput(text);
  if (!scanned) throw new Error(`not scanned: ${text.slice(0, 200)}`);
  return Array.from(scannedNumbers(scanned) ?? []);
}

describe('json-tensor scanner', () => {
  test('reads every JSON number form to the double JSON.parse gives', () => {
    const literals = [
      '0',
      '-0',
      '0.0',
      '-0.0',
      '0e0',
      '-0E-0',
      '1',
      '-1',
      '12345',
      '0.5',
      '-0.125',
      '0.1',
      '0.2',
      '0.30000000000000004',
      '1e2',
      '1E2',
      '1e+2',
      '1e-2',
      '2.5E-3',
      '123456789012345',
      '1234567890123456',
      '9007199254740993',
      '123456789012345678901234567890',
      '1.7976931348623157e308',
      '2.2250738585072014e-308',
      '5e-324',
      '1e-45',
      '1.401298464324817e-45',
      '3.4028234663852886e38',
      '1e22',
      '1e23',
      '1e-22',
      '1e-23',
      '0.000001',
      '100000000000000000000000',
      '1.00000000000000000000001',
      '0.0000000000000000000000000001',
      '1e400',
      '-1e400',
      '1e-400',
      '1e00000000000000000000000000002',
    ];
    const got = scanDoubles(literals.join(','));
    const want = JSON.parse(`[${literals.join(',')}]`) as number[];
    for (let i = 0; i < literals.length; i++) {
      expect([literals[i], Object.is(got[i], want[i])]).toEqual([literals[i], true]);
    }
  });

  test('matches JSON.parse on 5000 random literals, bit for bit', () => {
    let seed = 12345;
    // mulberry32
    const rand = (n: number): number => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
    };
    const digits = (n: number): string => Array.from({ length: n }, () => String(rand(10))).join('');
    const literals: string[] = [];
    for (let i = 0; i < 5000; i++) {
      const int = rand(4) === 0 ? '0' : String(1 + rand(9)) + digits(rand(20));
      const frac = rand(2) ? `.${digits(1 + rand(20))}` : '';
      const exp = rand(3) === 0 ? `${rand(2) ? 'e' : 'E'}${['', '+', '-'][rand(3)]}${rand(330)}` : '';
      literals.push(`${rand(2) ? '-' : ''}${int}${frac}${exp}`);
    }
    const got = scanDoubles(literals.join(','));
    const want = JSON.parse(`[${literals.join(',')}]`) as number[];
    const differing = literals.filter((_, i) => !Object.is(got[i], want[i]));
    expect(differing).toEqual([]);
  });

  test('converts to float32 as setFloat32 does (subnormals, rounding, -0)', () => {
    const text = '{"input":[1e-45,7e-46,1e-46,-0,0.1,16777217,3.4028234e38,-1.17549435e-38]}';
    const request = decodeJsonRequest(text);
    expect(request.input).toBeInstanceOf(ScannedTensor);
    const bound = bindRequest(request, single('float32', [-1]), limits);
    const got = new Float32Array(bound.inputs[0]!.raw!.slice().buffer);
    const want = Float32Array.from(JSON.parse(text).input as number[]);
    expect(Array.from(got).map((v) => (Object.is(v, -0) ? '-0' : v))).toEqual(
      Array.from(want).map((v) => (Object.is(v, -0) ? '-0' : v)),
    );
    expect(got[0]).toBe(Math.fround(1e-45));
    expect(got[2]).toBe(0);
  });

  test('follows whitespace and nesting, and measures dims', () => {
    const text = ' \n{ "id" : 3 ,\t"input" :\r\n [ [ 1 , 2 , 3 ] ,\n[4,5,6] ] , "model":"m" } \n';
    const scanned = scanJsonInput(text);
    expect(scanned?.dims).toEqual([2, 3]);
    expect(scanned?.count).toBe(6);
    const deep = scanJsonInput('{"input":[[[[1],[2]]],[[[3],[4]]]]}');
    expect(deep?.dims).toEqual([2, 1, 2, 1]);
  });

  test.each([
    ['a string', '{"input":[1,"2"]}'],
    ['null', '{"input":[1,null]}'],
    ['a boolean', '{"input":[true]}'],
    ['NaN', '{"input":[NaN]}'],
    ['Infinity', '{"input":[1,Infinity]}'],
    ['ragged rows', '{"input":[[1,2],[3]]}'],
    ['mixed depth', '{"input":[1,[2]]}'],
    ['deeper later', '{"input":[[1],[[2]]]}'],
    ['an empty array', '{"input":[]}'],
    ['an empty row', '{"input":[[],[]]}'],
    ['a trailing comma', '{"input":[1,2,]}'],
    ['a leading zero', '{"input":[01]}'],
    ['a bare dot', '{"input":[1.]}'],
    ['a leading dot', '{"input":[.5]}'],
    ['a plus sign', '{"input":[+1]}'],
    ['an empty exponent', '{"input":[1e]}'],
    ['hex', '{"input":[0x10]}'],
    ['a missing comma', '{"input":[1 2]}'],
    ['an unclosed array', '{"input":[1,2'],
    ['too deep', '{"input":[[[[[[[[1]]]]]]]]}'],
    ['an escaped key', '{"\\u0069nput":[1]}'],
    ['a duplicate key', '{"input":[1],"input":[2]}'],
    ['text after the array', '{"input":[1].5}'],
    ['no object', '[1,2]'],
  ])('gives up on %s', (_, text) => {
    expect(scanJsonInput(text)).toBeUndefined();
  });

  test('reads texts longer than its scratch bytes, and gives non-ASCII texts to the general path', () => {
    const long = Array.from({ length: 3000 }, (_, i) => (i * 0.37 - 500).toFixed(3));
    const scanned = scanJsonInput(`{"input":[${long.join(',')}]}`);
    expect(Array.from(scannedNumbers(scanned!) ?? [])).toEqual(long.map(Number));
    expect(scanJsonInput('{"id":"\u00e9","input":[1]}')).toBeUndefined();
    expect(decodeJsonRequest('{"id":"\u00e9","input":[1]}').input).toEqual([1]);
  });

  test('a scan is readable only until the next one', () => {
    const first = scanJsonInput('{"input":[1,2]}')!;
    scanJsonInput('{"input":[3,4]}');
    expect(bindScanned(first, { name: 'x', dtype: 'float32', shape: [2] }, 0, limits)).toBeUndefined();
    const request = decodeJsonRequest('{"input":[1,2]}');
    decodeJsonRequest('{"input":[3,4]}');
    // The general path binds the stale one from its text.
    const bound = bindRequest(request, single('float32', [2]), limits);
    expect(bound.inputs[0]!.raw).toBeUndefined();
    expect(bound.inputs[0]!.value).toEqual([1, 2]);
  });
});

// ---- differential: the scanner path against the general path, same bodies, same outcome ----

const SIGNATURES: Record<string, ModelSignature> = {
  f32x3: single('float32', [3]),
  f32dyn: single('float32', [-1]),
  f32x2x3: single('float32', [2, 3]),
  f64x3: single('float64', [3]),
  i32x3: single('int32', [3]),
  u8x3: single('uint8', [3]),
  i64x3: single('int64', [3]),
  boolx3: single('bool', [3]),
  strdyn: single('string', [-1]),
  scalar: single('float32', []),
  echo: model([
    { name: 'input', dtype: 'float32', shape: [-1], optional: true },
    { name: 'text', dtype: 'string', shape: [], optional: true },
  ]),
  two: model([
    { name: 'a', dtype: 'float32', shape: [3] },
    { name: 'b', dtype: 'int32', shape: [3] },
  ]),
};

const FAST = new Set(['f32x3', 'f32dyn', 'f32x2x3', 'f64x3', 'i32x3', 'u8x3', 'echo']);

const VALUES = [
  '[1,2,3]',
  '[1.5,-0,2e3]',
  '[ 1 , 2 ,\n3 ]',
  '[0.1,0.2,0.30000000000000004]',
  '[1E2,1e+2,1e-2]',
  '[-0.0,0e0,-0E-0]',
  '[1e-45,5e-324,1e-46]',
  '[3.4028234663852886e38,-3.4028234663852886e38,0]',
  '[3.4028235e38,1,2]',
  '[3.5e38,1,2]',
  '[1e39,1,2]',
  '[1e400,2,3]',
  '[-1e400,2,3]',
  '[1.7976931348623157e308,0,1]',
  '[2147483647,-2147483648,0]',
  '[2147483648,0,1]',
  '[-2147483649,0,1]',
  '[1.5,2,3]',
  '[255,0,1]',
  '[256,0,1]',
  '[-1,0,1]',
  '[9007199254740991,1,2]',
  '[9007199254740993,1,2]',
  '[123456789012345678901234567890,1,2]',
  '[1,2]',
  '[1,2,3,4]',
  '[[1,2,3],[4,5,6]]',
  '[[1,2,3],[4,5]]',
  '[[1,2],[3,4],[5,6]]',
  '[[1],[2],[3]]',
  '[[[1,2,3]]]',
  '[1,[2],3]',
  '[[1,2,3],4]',
  '[1,"2",3]',
  '["a","b","c"]',
  '[1,null,3]',
  '[null,null,null]',
  '[true,false,true]',
  '[1,{},3]',
  '[1,[],3]',
  '[]',
  '[[]]',
  '[[],[]]',
  '[1,NaN,3]',
  '[1,Infinity,3]',
  '[1,-Infinity,3]',
  '[01,2,3]',
  '[1.,2,3]',
  '[.5,2,3]',
  '[1e,2,3]',
  '[+1,2,3]',
  '[-,2,3]',
  '[1,2,3,]',
  '[,1,2,3]',
  '[1 2 3]',
  '[1,2,3',
  '[1,2,3]]',
  '[[[[[[[[1]]]]]]]]',
  '"text"',
  '3',
  'null',
  '{}',
  '{"a":[1,2,3]}',
];

const TEMPLATES = [
  (v: string) => `{"id":7,"model":"m","input":${v}}`,
  (v: string) => `{"input":${v}}`,
  (v: string) => ` \n{ "input" : ${v} , "id" : "a" } `,
  (v: string) => `{"id":1,"input":${v},"input":[9,9,9]}`,
  (v: string) => `{"id":1,"input":[9,9,9],"input":${v}}`,
  (v: string) => `{"\\u0069nput":${v},"id":2}`,
  (v: string) => `{"id":3,"input":${v},"priority":"urgent"}`,
  (v: string) => `{"id":4,"input":${v},"priority":"high","deadline_ms":250,"routing_key":"k","version":2}`,
  (v: string) => `{"id":5,"input":${v},"deadline_ms":-1}`,
  (v: string) => `{"id":{},"input":${v}}`,
  (v: string) => `{"id":6,"input":${v},"inputs":{"b":[1,2,3]}}`,
  (v: string) => `{"id":6,"inputs":{"a":${v}},"input":${v}}`,
  (v: string) => `{"id":8,"nested":{"input":[1],"x":"]}"},"input":${v}}`,
  (v: string) => `{"id":"x\\"input\\":[1]","input":${v}}`,
  (v: string) => `{"input":${v}}garbage`,
  (v: string) => `{"input":${v},}`,
  (v: string) => `[{"input":${v}}]`,
  (v: string) => `{"id":9 "input":${v}}`,
  (v: string) => `{"id":10,"input":${v},"text":"hi"}`,
  (v: string) => `{"id":11,"input":${v}}.5`,
  (v: string) => `{"id":12,"input":${v}.5}`,
  (v: string) => `{"id":13,"input":${v},"model":""}`,
  (v: string) => `{"id":14,"input":${v},"extra":[1,{"a":"\\\\"}],"flag":true,"n":null}`,
  (v: string) => `{"id":"\u00e9t\u00e9","input":${v}}`,
  (v: string) => `{"input":${v},"k":"\u{1f600}"}`,
  (v: string) => `{"id":"a\u0000b","input":${v}}`,
  (v: string) => `{"input":${v},"id":"abc\\`,
  (v: string) => `{"input":${v},"id":"abc\\"`,
];

type Outcome =
  | { error: string; message: string; id: unknown }
  | { envelope: unknown; mask: number; record: string };

const ring = new Uint8Array(1 << 16);
const ringView = new DataView(ring.buffer);
const header = { requestId: 9, slot: 2, priority: 'normal' as const, enqueuedAt: 1, deadlineAt: 2 };

function outcome(
  decode: (text: string) => InferenceRequest,
  text: string,
  signature: ModelSignature,
): Outcome {
  try {
    const request = decode(text);
    const bound = bindRequest(request, signature, limits);
    const length = requestRecordBytes(bound);
    ring.fill(0xee, 0, length + 8);
    writeRequestRecord(ringView, ring, 0, header, bound);
    const { input: _input, inputs: _inputs, ...envelope } = request;
    return {
      envelope,
      mask: bound.inputMask,
      record: Buffer.from(ring.subarray(0, length + 8)).toString('hex'),
    };
  } catch (error) {
    if (!(error instanceof ProtocolError)) throw error;
    return {
      error: error.code,
      message: error.message,
      id: error instanceof RequestError ? error.requestId : 'no id',
    };
  }
}

describe('json-tensor differential: scanner path vs general path', () => {
  const bodies = TEMPLATES.flatMap((template) => VALUES.map(template));

  test('has hundreds of bodies, and the scanner takes many of them', () => {
    expect(bodies.length).toBeGreaterThan(1000);
    const scanned = bodies.filter((body) => scanJsonInput(body) !== undefined).length;
    expect(scanned).toBeGreaterThan(200);
  });

  test.each(Object.keys(SIGNATURES))('same outcome for every body, signature %s', (name) => {
    const signature = SIGNATURES[name]!;
    let fast = 0;
    for (const body of bodies) {
      const general = outcome(decodeRequest, body, signature);
      const scanner = outcome(decodeJsonRequest, body, signature);
      expect({ body, outcome: scanner }).toEqual({ body, outcome: general });
      if ('record' in scanner) {
        const bound = bindRequest(decodeJsonRequest(body), signature, limits);
        if (bound.inputs.some((input) => input.raw !== undefined)) fast++;
      }
    }
    // int64, bool, string, scalar and two-input models always take the general path
    if (FAST.has(name)) expect(fast).toBeGreaterThan(0);
    else expect(fast).toBe(0);
  });
});
