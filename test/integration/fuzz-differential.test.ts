/**
 * Byte-level differential fuzzer: valid requests for identity models of every dtype, in fixed,
 * variable and scalar shapes, mutated at the byte and field level and sent as binary WebSocket frames, JSON
 * WebSocket frames and `/v2` HTTP bodies, while victims on other connections send canary-filled requests to
 * the same models so they share batches and rings with the attacker. Seeded; the seed and the figures print.
 *
 * Required: every attacker frame answered (bounded wait) with a typed 4xx or with exactly what the reference
 * decoder (differential-kit.ts) says the frame means — the identity models echo it, bit for bit (a frame the
 * reference calls invalid must get a 4xx); every victim answer exact; no canary byte in any attacker answer;
 * no node restart.
 */
import WebSocket from 'ws';
import type { DType, RequestId } from '../../libs/protocol';
import { decodeBinaryResponse, encodeBinaryFrame, httpStatusOf } from '../../libs/protocol';
import type { InputIndex, ReferenceOptions, Tensor, Value, Verdict } from './differential-kit';
import {
  BATCH_DELAY_MS,
  buildModels,
  FUZZ_DTYPES,
  INPUTS,
  KNOWN_CODES,
  MAX_BATCH,
  markersIn,
  markerValue,
  modelName,
  REFUSAL_CODES,
  referenceBinary,
  referenceJson,
  referenceV2,
  STRING_CANARY,
  STRING_PAD,
  tensorBytes,
  UINT8_MARK_LEAD,
  V2_DATATYPE,
  wireString,
} from './differential-kit';
import { ODD_VALUE_TEXTS, ODD_VALUES, RAW_TOKENS, Random } from './fuzz-kit';
import type { ServerHandle } from './harness';
import { startServer } from './harness';

const SEED = 0x5eed_d1ff;
const MAX_PAYLOAD = 65536;
/** Small rings (4 × the payload limit): records wrap often, next to other clients' older ones. */
const RING_BYTES = 4 * MAX_PAYLOAD;
const DEFAULT_MODEL = modelName('float32');
const REFERENCE: ReferenceOptions = { defaultModel: DEFAULT_MODEL, maxElements: MAX_PAYLOAD / 4 };
const WS_ATTACKERS = 2;
const WS_FRAMES_PER_ATTACKER = 4000;
const HTTP_ATTACKERS = 2;
const HTTP_BODIES_PER_ATTACKER = 500;
/** Frames an attacker connection keeps unanswered. */
const WINDOW = 24;
const VICTIM_WINDOW = 4;
const HTTP_VICTIMS = 2;
/** No answer for this long on a connection with frames in flight: the server is wedged. */
const STALL_MS = 15_000;

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({
    modelsDir: buildModels(),
    args: ['--workers', '1', '--max-payload-bytes', String(MAX_PAYLOAD)],
    env: {
      STREAMINFER_MODEL_NAME: DEFAULT_MODEL,
      STREAMINFER_RING_BYTES: String(RING_BYTES),
      // One answer per frame is checked: coalescing errors and closing a connection past N protocol errors a
      // second (the admission limits, tested by their own suites) are turned off here.
      STREAMINFER_MAX_PROTOCOL_ERRORS_PER_SECOND: '0',
      STREAMINFER_ERROR_COALESCE_MS: '0',
    },
  });
}, 60_000);

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

// ---- values ----

const scratch = new DataView(new ArrayBuffer(8));
const MARKS = new Map(FUZZ_DTYPES.map((dtype) => [dtype, markerValue(dtype)]));
const isMark = (dtype: DType, value: Value): boolean => MARKS.get(dtype) === value;
const LETTERS = 'abcdefghijklmnopqrstuvwxyz0123456789 ';
const WIDE = ['é', '日', '😀'];

function attackerString(random: Random): string {
  const length = random.pick([0, 1, 3, 8, 20, 60]);
  let text = '';
  for (let i = 0; i < length; i++) {
    const r = random.below(LETTERS.length + WIDE.length);
    text += r < LETTERS.length ? LETTERS[r] : WIDE[r - LETTERS.length];
  }
  return text;
}

/** A value no victim sends (never a marker); `json`: one JSON can carry (int64 within ±2^53). */
function attackerValue(random: Random, dtype: DType, json: boolean): Value {
  for (;;) {
    const value = drawValue(random, dtype, json);
    if (!isMark(dtype, value)) return value;
  }
}

function drawValue(random: Random, dtype: DType, json: boolean): Value {
  const bits = (): number => random.below(2 ** 32);
  switch (dtype) {
    case 'float32': {
      const r = random.below(5);
      if (r === 0) return random.int(-100, 100);
      if (r === 1)
        return Math.fround(random.pick([-0, 0, 1.4e-45, -3.4028234663852886e38, 0.1, 1e-40, 65504]));
      for (;;) {
        scratch.setUint32(0, bits(), true);
        const x = scratch.getFloat32(0, true);
        if (Number.isFinite(x)) return x;
      }
    }
    case 'float64': {
      const r = random.below(5);
      if (r === 0) return random.int(-1000, 1000) / 8;
      if (r === 1) return random.pick([-0, 5e-324, 1.7976931348623157e308, 0.1, -(2 ** 53)]);
      for (;;) {
        scratch.setUint32(0, bits(), true);
        scratch.setUint32(4, bits(), true);
        const x = scratch.getFloat64(0, true);
        if (Number.isFinite(x)) return x;
      }
    }
    case 'int32':
      return random.below(2) === 0 ? random.int(-50, 50) : bits() | 0;
    case 'int64':
      // JSON carries int64 beyond ±2^53 as decimal strings (valueText).
      if (random.below(json ? 4 : 2) !== 0)
        return BigInt(random.int(-(2 ** 20), 2 ** 20) * random.pick([1, 2 ** 32, 8191]));
      scratch.setUint32(0, bits(), true);
      scratch.setUint32(4, bits(), true);
      return scratch.getBigInt64(0, true);
    case 'uint8': {
      const x = random.below(256);
      return x === UINT8_MARK_LEAD ? x + 1 : x;
    }
    case 'bool':
      return random.below(2) === 1;
    case 'string':
      return attackerString(random);
  }
}

/** Random bytes with no uint8 marker lead byte (so no marker can come from the attacker's own data). */
function attackerBytes(random: Random, length: number): Uint8Array {
  const out = random.bytes(length);
  for (let i = 0; i < out.length; i++) if (out[i] === UINT8_MARK_LEAD) out[i] = UINT8_MARK_LEAD + 1;
  return out;
}

/** Victim values: markers (even elements) and values unique to this request (odd elements). */
function victimValues(dtype: DType, input: InputIndex, count: number, victim: number, tag: number): Value[] {
  return Array.from({ length: count }, (_, i): Value => {
    if (dtype === 'string')
      return `${STRING_CANARY}${victim}-${tag}-${input}${i}-${STRING_PAD.repeat(8 + ((tag * 7 + i * 13) % 90))}`;
    if (dtype === 'bool') return ((tag >> (i + input)) & 1) === 1;
    if (dtype === 'uint8') return count > 1 && i < 4 ? (markerValue('uint8', i) as number) : (tag + i) & 0xff;
    const marker = count === 1 ? tag % 2 === 0 : i % 2 === 0;
    if (marker) return markerValue(dtype);
    const unique = tag * 3 + input + i / 8;
    if (dtype === 'int64') return BigInt(Math.floor(unique)) + 2n ** 40n;
    if (dtype === 'int32') return Math.floor(unique);
    return dtype === 'float32' ? Math.fround(unique) : unique;
  });
}

// ---- plans: a valid request's model and tensors ----

interface Plan {
  dtype: DType;
  tensors: Tensor[];
}

/** Supplied inputs: alone or all three, as victims send them (batches need the same inputs and dims). */
const MASKS: InputIndex[][] = [[0], [1], [2], [0, 1, 2], [0], [1], [2], [0, 1, 2], [0, 1], [1, 2]];
const VAR_LENGTHS = [1, 3, 1, 3, 0, 6];

function dimsOf(input: InputIndex, varLength: number): number[] {
  return input === 0 ? [4] : input === 1 ? [varLength] : [];
}

function plan(random: Random, values: (dtype: DType, input: InputIndex, count: number) => Value[]): Plan {
  const dtype = random.pick(FUZZ_DTYPES);
  const mask = random.pick(MASKS);
  const varLength = random.pick(VAR_LENGTHS);
  return {
    dtype,
    tensors: mask.map((input) => {
      const dims = dimsOf(input, varLength);
      return {
        input,
        dtype,
        dims,
        values: values(
          dtype,
          input,
          dims.reduce((a, b) => a * b, 1),
        ),
      };
    }),
  };
}

const attackerPlan = (random: Random, json: boolean): Plan =>
  plan(random, (dtype, _input, count) =>
    Array.from({ length: count }, () => attackerValue(random, dtype, json)),
  );

const victimPlan = (random: Random, victim: number, tag: number): Plan =>
  plan(random, (dtype, input, count) => victimValues(dtype, input, count, victim, tag));

// ---- encodings ----

function valueText(dtype: DType, value: Value): string {
  if (dtype === 'string') return JSON.stringify(value);
  if (typeof value === 'number' && Object.is(value, -0)) return '-0';
  if (typeof value === 'bigint' && (value > MAX_SAFE || value < -MAX_SAFE)) return `"${value}"`;
  return String(value);
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function tensorText(tensor: Tensor): string {
  const texts = tensor.values.map((value) => valueText(tensor.dtype, value));
  return tensor.dims.length === 0 ? texts[0]! : `[${texts.join(',')}]`;
}

interface BinaryParts {
  header: Record<string, unknown>;
  entries: Array<Record<string, unknown>>;
  sections: Uint8Array[];
}

function binaryParts(id: RequestId, p: Plan): BinaryParts {
  const entries = p.tensors.map((t) => ({ name: INPUTS[t.input].name, dtype: t.dtype, dims: [...t.dims] }));
  return {
    header: { id, model: modelName(p.dtype), inputs: entries },
    entries,
    sections: p.tensors.map((t) => tensorBytes(t.dtype, t.values)),
  };
}

const encodeParts = (parts: BinaryParts): Uint8Array =>
  encodeBinaryFrame(
    parts.header,
    parts.sections.map((bytes) => ({ bytes })),
  );

function jsonFields(id: RequestId, p: Plan): Array<[string, string]> {
  const inputs = p.tensors.map((t) => `"${INPUTS[t.input].name}":${tensorText(t)}`).join(',');
  return [
    ['id', JSON.stringify(id)],
    ['model', JSON.stringify(modelName(p.dtype))],
    ['inputs', `{${inputs}}`],
  ];
}

const objectText = (fields: Array<[string, string]>): string =>
  `{${fields.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;

function v2Text(id: string | undefined, entries: Array<Record<string, string>>): string {
  const inputs = entries.map(
    (entry) =>
      `{${Object.entries(entry)
        .map(([k, v]) => `"${k}":${v}`)
        .join(',')}}`,
  );
  return `{${id === undefined ? '' : `"id":${JSON.stringify(id)},`}"inputs":[${inputs.join(',')}]}`;
}

function v2Entries(p: Plan, random: Random): Array<Record<string, string>> {
  return p.tensors.map((t) => ({
    name: JSON.stringify(INPUTS[t.input].name),
    datatype: JSON.stringify(V2_DATATYPE[t.dtype]),
    shape: JSON.stringify(random.below(2) === 0 ? [1, ...t.dims] : t.dims),
    data: `[${t.values.map((value) => valueText(t.dtype, value)).join(',')}]`,
  }));
}

// ---- mutations ----

const lossy = new TextDecoder();
const encoder = new TextEncoder();
const OTHER_DTYPE_TEXTS = ['float16', 'int8', 'int16', 'uint16', 'complex64', 'FP32', 'Float32', ''];
const BIG_DIMS = [2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53, 1e9, 65536, 16385, 1e308];
const EDGE_TEXTS: Record<DType, string[]> = {
  float32: [
    '3.5e38',
    '3.4028235677973366e38',
    '3.4028234663852886e38',
    '1e-46',
    '-0',
    '1e999',
    'true',
    '"1"',
  ],
  float64: ['1e308', '5e-324', '-0', '1e999', '-1e999', 'null', '"0"'],
  int32: ['2147483648', '-2147483649', '2147483647', '-2147483648', '1.5', '-0', '1e3', 'false'],
  int64: [
    '9007199254740993',
    '9007199254740991',
    '-9007199254740991',
    '1e16',
    '0.5',
    '"1"',
    '18446744073709551615',
    '"9007199254740993"',
    '"-9223372036854775808"',
    '"9223372036854775808"',
    '"01"',
    '"1e3"',
    '" 1"',
    '"-0"',
  ],
  uint8: ['256', '-1', '255', '0', '0.5', '1e2', '-0', '"a"'],
  bool: ['0', '1', '"true"', 'true', 'false', 'null'],
  string: ['1', 'null', '"\\u0000"', '"a\\u0000b"', '"\\ud800"', '"\\udfff\\ud800"', '"ok"', 'true', '["x"]'],
};

function flip(random: Random, bytes: Uint8Array, from = 0): Uint8Array {
  const out = Uint8Array.from(bytes);
  const flips = 1 + random.below(4);
  for (let i = 0; i < flips && out.length > from; i++)
    out[from + random.below(out.length - from)] = random.below(256);
  return out;
}

const BINARY_KINDS = [
  'valid',
  'dtype-omit',
  'dtype-omit-f32',
  'dtype-omit-f32',
  'dtype-change',
  'dims-rank',
  'dims-fixed',
  'dims-zero',
  'dims-huge',
  'bytes-cut',
  'bytes-short',
  'bytes-extend',
  'bytes-trailing',
  'str-prefix',
  'str-prefix',
  'str-bad',
  'header-length',
  'header-field',
  'id-odd',
  'flip-data',
  'flip',
  'dup-input',
  'unknown-input',
] as const;

/** A u32 length to lie with: too long, past the tensor, past the frame, huge. */
function lyingLength(random: Random, honest: number): number {
  return random.pick([
    honest + 1,
    honest + 4,
    Math.max(0, honest - 1),
    0,
    64,
    1000,
    30000,
    65536,
    0xfffffff0,
    0xffffffff,
  ]);
}

function mutateBinary(random: Random, parts: BinaryParts, p: Plan): { frame: Uint8Array; kind: string } {
  let kind: string = random.pick(BINARY_KINDS);
  const which = random.below(parts.entries.length);
  const entry = parts.entries[which]!;
  const dims = entry.dims as number[];
  const elements = dims.reduce((a, b) => a * b, 1);
  if ((kind === 'str-prefix' || kind === 'str-bad') && p.dtype !== 'string') kind = 'bytes-short';
  switch (kind) {
    case 'dtype-omit':
      delete entry.dtype;
      break;
    case 'dtype-omit-f32': {
      // The bytes a float32 of these dims would need (as the old decoder sized a tensor with no dtype); a
      // string tensor's words are then u32 lengths that lie.
      delete entry.dtype;
      const section = attackerBytes(random, elements * 4);
      if (p.dtype === 'string') {
        const view = new DataView(section.buffer);
        for (let i = 0; i < elements; i++)
          view.setUint32(4 * i, random.pick([8, 100, 1000, 8000, 30000, 60000]), true);
      }
      parts.sections[which] = section;
      break;
    }
    case 'dtype-change': {
      const other = random.pick([...FUZZ_DTYPES.filter((d) => d !== p.dtype), ...OTHER_DTYPE_TEXTS]);
      entry.dtype = random.below(6) === 0 ? random.pick(ODD_VALUES) : other;
      const size = { float32: 4, float64: 8, int32: 4, int64: 8, uint8: 1, bool: 1 }[other as string];
      if (size !== undefined && random.below(2) === 0)
        parts.sections[which] = attackerBytes(random, elements * size);
      break;
    }
    case 'dims-rank':
      entry.dims = random.pick([
        [...dims, 1],
        [1, ...dims],
        dims.slice(1),
        [...dims, 0],
        [2, 2],
        [1, 1, 1, 1, 1, 1, 1, 1],
      ]);
      break;
    case 'dims-fixed': {
      const next = random.pick([[3], [5], [0], [8], [2], [1]]);
      entry.dims = next;
      if (random.below(2) === 0 && p.dtype !== 'string') {
        const size = tensorBytes(p.dtype, [attackerValue(random, p.dtype, false)]).length;
        parts.sections[which] = attackerBytes(random, next[0]! * size);
      }
      break;
    }
    case 'dims-zero':
      entry.dims = random.pick([[0], [0, 0], [0, 2 ** 31], [2 ** 31, 0], [4, 0], [0, 4]]);
      if (random.below(2) === 0) parts.sections[which] = new Uint8Array(0);
      break;
    case 'dims-huge':
      entry.dims = random.pick([
        [random.pick(BIG_DIMS)],
        [random.pick(BIG_DIMS), random.pick(BIG_DIMS)],
        [2 ** 16, 2 ** 16],
      ]);
      break;
    case 'bytes-short': {
      const section = parts.sections[which]!;
      parts.sections[which] = section.subarray(0, section.length === 0 ? 0 : random.below(section.length));
      break;
    }
    case 'bytes-extend': {
      const section = parts.sections[which]!;
      const grown = new Uint8Array(section.length + 1 + random.below(16));
      grown.set(section);
      grown.set(attackerBytes(random, grown.length - section.length), section.length);
      parts.sections[which] = grown;
      break;
    }
    case 'str-prefix': {
      // One string's u32 length lies; its bytes stay where they are.
      const section = Uint8Array.from(parts.sections[which]!);
      if (section.length >= 4) {
        const view = new DataView(section.buffer);
        const target = random.below(elements);
        let at = 0;
        for (let i = 0; i < target; i++) at += 4 + view.getUint32(at, true);
        view.setUint32(at, lyingLength(random, view.getUint32(at, true)), true);
      }
      parts.sections[which] = section;
      break;
    }
    case 'str-bad': {
      // A NUL, invalid UTF-8 (a bare continuation byte, an overlong NUL, a UTF-16 surrogate) in one string.
      const bad = random.pick([[0], [0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x80], [0x61, 0x00, 0x62]]);
      const strings = p.tensors[which]!.values.map((value) => encoder.encode(value as string));
      if (strings.length === 0) strings.push(new Uint8Array(0));
      const target = random.below(strings.length);
      const text = strings[target]!;
      const at = random.below(text.length + 1);
      strings[target] = Uint8Array.from([...text.subarray(0, at), ...bad, ...text.subarray(at)]);
      const out = new Uint8Array(strings.reduce((sum, s) => sum + 4 + s.length, 0));
      const view = new DataView(out.buffer);
      let cursor = 0;
      for (const s of strings) {
        view.setUint32(cursor, s.length, true);
        out.set(s, cursor + 4);
        cursor += 4 + s.length;
      }
      parts.sections[which] = out;
      break;
    }
    case 'header-field': {
      const field = random.pick([
        'id',
        'model',
        'version',
        'priority',
        'deadline_ms',
        'routing_key',
        'inputs',
        'name',
        'dims',
        'dtype',
        'entry',
      ]);
      const odd = random.pick(ODD_VALUES);
      if (field === 'name' || field === 'dims' || field === 'dtype') entry[field] = odd;
      else if (field === 'entry') (parts.header.inputs as unknown[])[which] = odd;
      else if (field === 'version') parts.header.version = random.pick([odd, '1', 1, '2', 1.0]);
      else if (field === 'deadline_ms') parts.header.deadline_ms = random.pick([odd, 0.001, 1, 60000]);
      else parts.header[field] = odd;
      break;
    }
    case 'id-odd':
      parts.header.id = random.pick(ODD_VALUES);
      break;
    case 'dup-input':
      parts.entries.push({ ...entry });
      parts.sections.push(parts.sections[which]!);
      break;
    case 'unknown-input':
      entry.name = random.pick([
        'text',
        'input',
        'Fixed',
        'fixed ',
        '',
        'fixed_out',
        '__proto__',
        'constructor',
      ]);
      break;
    default:
      break;
  }
  let frame = encodeParts(parts);
  const dataStart = (4 + new DataView(frame.buffer).getUint16(2, true) + 7) & ~7;
  switch (kind) {
    case 'bytes-cut':
      frame = frame.subarray(0, 4 + random.below(frame.length - 4));
      break;
    case 'bytes-trailing': {
      const grown = new Uint8Array(frame.length + 1 + random.below(40));
      grown.set(frame);
      grown.set(attackerBytes(random, grown.length - frame.length), frame.length);
      frame = grown;
      break;
    }
    case 'header-length': {
      frame = Uint8Array.from(frame);
      const honest = new DataView(frame.buffer).getUint16(2, true);
      new DataView(frame.buffer).setUint16(
        2,
        random.pick([0, 1, honest - 1, honest + 1, honest + 8, frame.length, 65535]) & 0xffff,
        true,
      );
      break;
    }
    case 'flip-data':
      frame = flip(random, frame, Math.min(dataStart, frame.length - 1));
      break;
    case 'flip':
      frame = flip(random, frame);
      break;
    default:
      break;
  }
  return { frame, kind };
}

const JSON_KINDS = [
  'json-valid',
  'json-shorthand',
  'json-twice',
  'json-value',
  'json-value',
  'json-shape',
  'json-shape',
  'json-field',
  'json-id',
  'json-nul',
  'json-token',
  'json-flip',
  'json-cut',
  'json-deep',
] as const;

function mutateJson(random: Random, id: RequestId, p: Plan): { text: string; kind: string } {
  let kind: string = random.pick(JSON_KINDS);
  const fields = jsonFields(id, p);
  const which = random.below(p.tensors.length);
  const tensor = p.tensors[which]!;
  const name = INPUTS[tensor.input].name;
  const others = p.tensors.filter((_, i) => i !== which);
  const inputsOf = (tensors: Tensor[], extra = ''): string =>
    `{${[...tensors.map((t) => `"${INPUTS[t.input].name}":${tensorText(t)}`), ...(extra ? [extra] : [])].join(',')}}`;
  const replaceValue = (text: string): void => {
    fields[2] = ['inputs', inputsOf(others, `"${name}":${text}`)];
  };
  if (kind === 'json-nul' && p.dtype !== 'string') kind = 'json-value';
  switch (kind) {
    case 'json-shorthand':
      // "input" (→ the first input) or "text" (a string model's first input) for the first tensor.
      if (tensor.input === 0 || random.below(4) === 0) {
        fields[2] = ['inputs', inputsOf(others)];
        if (others.length === 0) fields.pop();
        fields.push([
          p.dtype === 'string' && tensor.dims.length === 0 && random.below(2) === 0 ? 'text' : 'input',
          tensorText(tensor),
        ]);
      } else fields.push(['text', JSON.stringify(attackerString(random))]);
      break;
    case 'json-twice':
      fields.push([random.pick(['input', 'text']), tensorText(tensor)]);
      break;
    case 'json-value': {
      const texts = tensor.values.map((value) => valueText(tensor.dtype, value));
      const odd = random.below(2) === 0 ? random.pick(EDGE_TEXTS[p.dtype]) : random.pick(ODD_VALUE_TEXTS);
      if (texts.length === 0 || tensor.dims.length === 0) replaceValue(odd);
      else {
        texts[random.below(texts.length)] = odd;
        replaceValue(`[${texts.join(',')}]`);
      }
      break;
    }
    case 'json-shape': {
      const text = tensorText(tensor);
      const inner = tensor.values.map((value) => valueText(tensor.dtype, value));
      replaceValue(
        random.pick([
          `[${text}]`,
          `[[${inner.join(',')}],${inner[0] ?? '0'}]`,
          `[${inner.slice(1).join(',')}]`,
          `[${[...inner, inner[0] ?? '0'].join(',')}]`,
          '[]',
          '[[]]',
          inner[0] ?? '0',
          `[${inner.map((t) => `[${t}]`).join(',')}]`,
          `[${inner.join(',')},]`,
        ]),
      );
      break;
    }
    case 'json-field': {
      const action = random.below(4);
      const field = random.pick([
        'id',
        'model',
        'version',
        'priority',
        'deadline_ms',
        'routing_key',
        'inputs',
        'text',
        'input',
      ]);
      const odd = random.pick([...ODD_VALUE_TEXTS, '"1"', '1', '"2"', '0.001', '"high"', '60000']);
      const at = fields.findIndex(([key]) => key === field);
      if (action === 0 && at >= 0) fields.splice(at, 1);
      else if (action === 1 || at < 0) fields.push([field, odd]);
      else fields[at] = [field, odd];
      break;
    }
    case 'json-id':
      fields[0] = ['id', random.pick(ODD_VALUE_TEXTS)];
      break;
    case 'json-nul': {
      const strings = tensor.values.map((value) => JSON.stringify(value));
      const target = random.below(strings.length);
      strings[target] = JSON.stringify(`${tensor.values[target] as string}\u0000x`);
      replaceValue(tensor.dims.length === 0 ? strings[0]! : `[${strings.join(',')}]`);
      break;
    }
    case 'json-deep':
      replaceValue(`${'['.repeat(3000)}1${']'.repeat(3000)}`);
      break;
    default:
      break;
  }
  let text = objectText(fields);
  switch (kind) {
    case 'json-token': {
      const at = random.below(text.length);
      text = text.slice(0, at) + random.pick(RAW_TOKENS) + text.slice(at);
      break;
    }
    case 'json-flip':
      text = lossy.decode(flip(random, encoder.encode(text)));
      break;
    case 'json-cut':
      text = text.slice(0, random.below(text.length));
      break;
    default:
      break;
  }
  return { text, kind };
}

const V2_KINDS = [
  'v2-valid',
  'v2-datatype',
  'v2-shape',
  'v2-shape',
  'v2-data',
  'v2-data',
  'v2-id',
  'v2-name',
  'v2-nul',
  'v2-deep',
  'v2-flip',
  'v2-version',
] as const;

function mutateV2(random: Random, id: string, p: Plan): { path: string; body: string; kind: string } {
  let kind: string = random.pick(V2_KINDS);
  const entries = v2Entries(p, random);
  const which = random.below(entries.length);
  const entry = entries[which]!;
  const tensor = p.tensors[which]!;
  const data = tensor.values.map((value) => valueText(tensor.dtype, value));
  let bodyId: string | undefined = id;
  let version: string | undefined;
  if (kind === 'v2-nul' && p.dtype !== 'string') kind = 'v2-data';
  switch (kind) {
    case 'v2-datatype':
      if (random.below(4) === 0) delete entry.datatype;
      else
        entry.datatype = random.pick([
          ...Object.values(V2_DATATYPE).map((d) => JSON.stringify(d)),
          '"fp32"',
          '"FP16"',
          '"INT8"',
          '"__proto__"',
          '"toString"',
          ...ODD_VALUE_TEXTS.slice(0, 12),
        ]);
      break;
    case 'v2-shape':
      entry.shape = random.pick([
        JSON.stringify([2, ...tensor.dims]),
        JSON.stringify([...tensor.dims, 1]),
        JSON.stringify([1, 1, ...tensor.dims]),
        '[0]',
        '[1,0]',
        '[1,100000,0]',
        '[1,65536,0]',
        '[2147483648]',
        '[1,2147483648]',
        '[2147483648,0]',
        '[-1]',
        '[1.5]',
        '[4]',
        '[1,4]',
        '[]',
        '[1]',
        random.pick(ODD_VALUE_TEXTS),
      ]);
      break;
    case 'v2-data':
      entry.data = random.pick([
        `[${data.slice(1).join(',')}]`,
        `[${[...data, data[0] ?? '0'].join(',')}]`,
        `[[${data.join(',')}]]`,
        `[${data.map((t) => `[${t}]`).join(',')}]`,
        `[[],${data.join(',')}]`,
        `[${[...data.slice(1), random.pick(EDGE_TEXTS[p.dtype])].join(',')}]`,
        `[${[random.pick(ODD_VALUE_TEXTS), ...data.slice(1)].join(',')}]`,
        '{}',
        data[0] ?? '1',
        'null',
      ]);
      break;
    case 'v2-id':
      // The id goes in below as raw JSON text of any type.
      bodyId = undefined;
      break;
    case 'v2-name':
      if (random.below(2) === 0)
        entry.name = random.pick(['"text"', '"__proto__"', '"Fixed"', '""', '1', 'null']);
      else entries.push({ ...entry });
      break;
    case 'v2-nul': {
      const strings = tensor.values.map((value) => JSON.stringify(value));
      strings[random.below(strings.length)] = '"a\\u0000b"';
      entry.data = `[${strings.join(',')}]`;
      break;
    }
    case 'v2-deep':
      entry.data = `${'['.repeat(100_000)}${data[0] ?? '1'}${']'.repeat(100_000)}`;
      break;
    case 'v2-version':
      version = random.pick(['1', '2', '0', 'x', '01']);
      break;
    default:
      break;
  }
  let body = v2Text(bodyId, entries);
  if (kind === 'v2-id') body = `{"id":${random.pick(ODD_VALUE_TEXTS)},${body.slice(1)}`;
  if (kind === 'v2-flip') body = lossy.decode(flip(random, encoder.encode(body)));
  const model = modelName(p.dtype);
  const path =
    version === undefined ? `/v2/models/${model}/infer` : `/v2/models/${model}/versions/${version}/infer`;
  return { path, body, kind };
}

// ---- checking answers ----

/** What an identity model answers: `<input>_out` per supplied input, in signature order. */
function expectedOutputs(
  verdict: Verdict & { valid: true },
): Array<{ name: string; dtype: DType; dims: number[] }> {
  return verdict.tensors.map((t) => ({ name: `${INPUTS[t.input].name}_out`, dtype: t.dtype, dims: t.dims }));
}

function jsonScalar(dtype: DType, value: Value): unknown {
  if (dtype === 'int64') return value;
  if (typeof value === 'number' && value === 0) return 0;
  return value;
}

function tensorJson(t: Tensor): unknown {
  const values = t.values.map((value) => jsonScalar(t.dtype, value));
  return t.dims.length === 0 ? values[0] : values;
}

/** JSON numbers compared as the dtype reads them (float32 answers print shortest: compare as float32). */
function sameJson(actual: unknown, expected: unknown, dtype: DType): boolean {
  if (Array.isArray(expected)) {
    return (
      Array.isArray(actual) &&
      actual.length === expected.length &&
      expected.every((item, i) => sameJson(actual[i], item, dtype))
    );
  }
  if (typeof expected === 'number' && dtype === 'float32')
    return typeof actual === 'number' && Math.fround(actual) === expected;
  if (typeof expected === 'bigint')
    return (
      ((typeof actual === 'number' && Number.isSafeInteger(actual)) ||
        (typeof actual === 'string' && /^-?\d+$/.test(actual))) &&
      BigInt(actual) === expected
    );
  return actual === expected;
}

/**
 * A JSON answer. An int64 model's result prints each integer exactly, beyond ±2^53 too: such long integers
 * are read as their digits (JSON.parse would round them), so they compare exactly.
 */
function parseAnswer(text: string): Record<string, unknown> {
  const values = text.search(/"(result|outputs)":/);
  if (values < 0 || !/"model(_name)?":"fz_int64"/.test(text))
    return JSON.parse(text) as Record<string, unknown>;
  const exact = text.slice(values).replace(/([[,:])(-?\d{16,})(?=[,\]}])/g, '$1"$2"');
  return JSON.parse(text.slice(0, values) + exact) as Record<string, unknown>;
}

function sameValues(dtype: DType, actual: ArrayBufferView | string[], expected: readonly Value[]): boolean {
  if (dtype === 'string') {
    const strings = actual as string[];
    return strings.length === expected.length && strings.every((s, i) => s === expected[i]);
  }
  const view = actual as ArrayBufferView;
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  if (dtype === 'bool')
    return bytes.length === expected.length && expected.every((b, i) => (bytes[i] !== 0) === b);
  const want = tensorBytes(dtype, expected);
  return bytes.length === want.length && want.every((b, i) => bytes[i] === b);
}

type Outcome = { ok: true; outcome: string } | { ok: false; problem: string };

function refusal(code: unknown, verdict: Verdict, status?: number): Outcome {
  if (typeof code !== 'string' || !KNOWN_CODES.has(code))
    return { ok: false, problem: `unknown error code ${String(code)}` };
  if (status !== undefined && httpStatusOf(code as never) !== status)
    return { ok: false, problem: `code ${code} with HTTP status ${status}` };
  if (REFUSAL_CODES.has(code)) return { ok: true, outcome: code };
  if (code === 'deadline_exceeded' && verdict.valid && verdict.mayExpire) return { ok: true, outcome: code };
  return {
    ok: false,
    problem: `${code} (not a 4xx) for a request the reference calls ${verdict.valid ? 'valid' : `invalid (${verdict.why})`}`,
  };
}

function describeExpected(verdict: Verdict): string {
  if (!verdict.valid) return `invalid: ${verdict.why}`;
  return `echo ${JSON.stringify(verdict.tensors.map((t) => ({ i: t.input, dims: t.dims, v: t.values.map(String) })))}`;
}

function shownData(data: ArrayBufferView | string[]): string {
  if (Array.isArray(data)) return clip(JSON.stringify(data));
  return hex(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
}

function checkBinaryAnswer(data: Buffer, verdict: Verdict, sentBinary: boolean): Outcome {
  if (!verdict.valid)
    return {
      ok: false,
      problem: `a binary answer to a request the reference calls invalid (${verdict.why})`,
    };
  if (!sentBinary) return { ok: false, problem: 'a binary answer to a JSON request' };
  let answer: ReturnType<typeof decodeBinaryResponse>;
  try {
    answer = decodeBinaryResponse(data);
  } catch (error) {
    return { ok: false, problem: `unreadable binary answer: ${(error as Error).message}` };
  }
  const expected = expectedOutputs(verdict);
  const header = answer.header;
  if (header.id !== verdict.id || header.model !== verdict.model || header.version !== '1')
    return { ok: false, problem: `answer header ${JSON.stringify(header)}` };
  if (JSON.stringify(header.outputs) !== JSON.stringify(expected))
    return {
      ok: false,
      problem: `outputs ${JSON.stringify(header.outputs)}, expected ${JSON.stringify(expected)}`,
    };
  for (let i = 0; i < expected.length; i++) {
    if (!sameValues(verdict.dtype, answer.tensors[i]!.data, verdict.tensors[i]!.values))
      return {
        ok: false,
        problem: `output ${expected[i]!.name} differs: ${shownData(answer.tensors[i]!.data)}`,
      };
  }
  return { ok: true, outcome: 'echo' };
}

function checkJsonAnswer(answer: Record<string, unknown>, verdict: Verdict): Outcome {
  if (answer.type === 'error') return refusal(answer.code, verdict);
  if (!verdict.valid)
    return { ok: false, problem: `a result for a request the reference calls invalid (${verdict.why})` };
  if (answer.id !== verdict.id || answer.model !== verdict.model || answer.version !== '1')
    return { ok: false, problem: 'answer id, model or version differ' };
  const expected =
    verdict.tensors.length === 1
      ? tensorJson(verdict.tensors[0]!)
      : Object.fromEntries(verdict.tensors.map((t) => [`${INPUTS[t.input].name}_out`, tensorJson(t)]));
  const result = answer.result;
  const same =
    verdict.tensors.length === 1
      ? sameJson(result, expected, verdict.dtype)
      : typeof result === 'object' &&
        result !== null &&
        Object.keys(result).length === verdict.tensors.length &&
        Object.entries(expected as Record<string, unknown>).every(([key, value]) =>
          sameJson((result as Record<string, unknown>)[key], value, verdict.dtype),
        );
  return same ? { ok: true, outcome: 'echo' } : { ok: false, problem: 'result differs' };
}

function checkV2Answer(status: number, body: Record<string, unknown> | undefined, verdict: Verdict): Outcome {
  if (body === undefined) return { ok: false, problem: `HTTP ${status} without a JSON body` };
  if (status !== 200) {
    if (status < 400 || status >= 600) return { ok: false, problem: `HTTP ${status}` };
    return refusal(body.code, verdict, status);
  }
  if (!verdict.valid)
    return { ok: false, problem: `HTTP 200 for a request the reference calls invalid (${verdict.why})` };
  const outputs = body.outputs as Array<Record<string, unknown>> | undefined;
  if (body.model_name !== verdict.model || body.model_version !== '1' || (body.id ?? null) !== verdict.id)
    return { ok: false, problem: 'model_name, model_version or id differ' };
  const expected = expectedOutputs(verdict);
  if (!Array.isArray(outputs) || outputs.length !== expected.length)
    return { ok: false, problem: 'outputs differ' };
  for (let i = 0; i < expected.length; i++) {
    const output = outputs[i]!;
    const want = expected[i]!;
    if (
      output.name !== want.name ||
      output.datatype !== V2_DATATYPE[want.dtype] ||
      JSON.stringify(output.shape) !== JSON.stringify([1, ...want.dims]) ||
      !sameJson(
        output.data,
        verdict.tensors[i]!.values.map((value) => jsonScalar(want.dtype, value)),
        want.dtype,
      )
    )
      return { ok: false, problem: `output ${want.name} differs` };
  }
  return { ok: true, outcome: 'echo' };
}

/** Markers of other clients in an answer: its raw bytes, and the numbers of a JSON result in its model's dtype. */
function canariesIn(bytes: Uint8Array, json: Record<string, unknown> | undefined): DType[] {
  const found = new Set(markersIn(bytes));
  if (json) {
    const dtype = FUZZ_DTYPES.find((d) => modelName(d) === (json.model ?? json.model_name));
    const numbers: Array<number | bigint> = [];
    const collect = (value: unknown): void => {
      if (Array.isArray(value)) value.forEach(collect);
      else if (typeof value === 'number') numbers.push(value);
      else if (dtype === 'int64' && typeof value === 'string' && /^-?\d+$/.test(value))
        numbers.push(BigInt(value));
      else if (typeof value === 'object' && value !== null) Object.values(value).forEach(collect);
    };
    collect(json.result);
    if (Array.isArray(json.outputs))
      for (const output of json.outputs) collect((output as { data?: unknown }).data);
    if (dtype && dtype !== 'string' && dtype !== 'bool' && numbers.length > 0) {
      const values = numbers.map(
        (n): Value =>
          dtype === 'int64'
            ? typeof n === 'bigint'
              ? n
              : BigInt(Number.isSafeInteger(n) ? n : 0)
            : Number(n),
      );
      for (const marker of markersIn(tensorBytes(dtype, values))) found.add(marker);
    }
  }
  return [...found];
}

// ---- the run ----

interface Stats {
  framesByDtype: Map<string, number>;
  framesByKind: Map<string, number>;
  framesByTransport: Map<string, number>;
  outcomes: Map<string, number>;
  /** By category: how many, and the first one in full. */
  failures: Map<string, { count: number; example: string }>;
  failureCount: number;
  canaryHits: string[];
  victimSent: number;
  victimExact: number;
  victimWrong: string[];
}

const bump = (map: Map<string, number>, key: string): void => {
  map.set(key, (map.get(key) ?? 0) + 1);
};
const hex = (bytes: Uint8Array): string =>
  Buffer.from(bytes.subarray(0, 160)).toString('hex') + (bytes.length > 160 ? `…(${bytes.length} B)` : '');
const clip = (text: string): string => (text.length > 300 ? `${text.slice(0, 300)}…(${text.length})` : text);

/** A failure, counted by its category (its first line without the connection number and the detail). */
function fail(stats: Stats, message: string): void {
  stats.failureCount++;
  const category = message
    .split('\n')[0]!
    .replace(/^(http )?attacker \d+:? /, '')
    .replace(/: [0-9a-f]{16,}.*$/, '');
  const seen = stats.failures.get(category);
  if (seen) seen.count++;
  else stats.failures.set(category, { count: 1, example: message });
}

interface Sent {
  kind: string;
  verdict: Verdict;
  binary: boolean;
  shown: string;
}

/** One attacker WebSocket: mutated frames, `WINDOW` in flight, matched by id (a frame whose id is odd goes alone). */
function runWsAttacker(c: number, stats: Stats): Promise<void> {
  const random = new Random(SEED + 100 + c);
  return new Promise((resolve) => {
    const socket = new WebSocket(server.wsUrl, { maxPayload: 64 * 1024 * 1024 });
    const pending = new Map<string, Sent>();
    let solo: Sent | undefined;
    let queued: { data: string | Uint8Array; sent: Sent; key: string | undefined } | undefined;
    let sent = 0;
    let lastProgress = performance.now();
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      clearInterval(watchdog);
      socket.close();
      resolve();
    };
    const watchdog = setInterval(() => {
      if (performance.now() - lastProgress > STALL_MS) {
        const waiting = [...pending.values(), ...(solo ? [solo] : [])];
        fail(
          stats,
          `attacker ${c}: ${waiting.length} frames unanswered after ${STALL_MS} ms: ${waiting
            .slice(0, 3)
            .map((s) => `${s.kind} ${s.shown}`)
            .join(' | ')}`,
        );
        finish();
      }
    }, 1000);
    const next = (): { data: string | Uint8Array; sent: Sent; key: string | undefined } => {
      for (;;) {
        const seq = sent;
        const id: RequestId = seq % 2 === 0 ? `a${c}-${seq}` : (c + 1) * 1_000_000 + seq;
        const binary = random.below(5) < 3;
        const p = attackerPlan(random, !binary);
        let data: string | Uint8Array;
        let verdict: Verdict;
        let kind: string;
        if (binary) {
          const mutated = mutateBinary(random, binaryParts(id, p), p);
          data = mutated.frame;
          kind = mutated.kind;
          verdict = referenceBinary(mutated.frame, REFERENCE);
          if (markersIn(mutated.frame).length > 0) continue;
        } else {
          const mutated = mutateJson(random, id, p);
          data = mutated.text;
          kind = mutated.kind;
          verdict = referenceJson(mutated.text, REFERENCE);
          if (markersIn(encoder.encode(mutated.text)).length > 0) continue;
          if (
            verdict.valid &&
            verdict.tensors.some((t) => markersIn(tensorBytes(t.dtype, t.values)).length > 0)
          )
            continue;
        }
        sent++;
        bump(stats.framesByDtype, verdict.valid ? verdict.dtype : p.dtype);
        bump(stats.framesByKind, kind);
        bump(stats.framesByTransport, binary ? 'ws-binary' : 'ws-json');
        const shown = typeof data === 'string' ? `text ${clip(JSON.stringify(data))}` : `binary ${hex(data)}`;
        const key = verdict.id === id ? JSON.stringify(id) : undefined;
        return { data, sent: { kind, verdict, binary, shown }, key };
      }
    };
    const pump = (): void => {
      while (!finished) {
        if (solo) return;
        if (!queued) {
          if (sent >= WS_FRAMES_PER_ATTACKER) break;
          queued = next();
        }
        if (queued.key === undefined) {
          // Its answer cannot be told by id: it goes alone.
          if (pending.size > 0) return;
          solo = queued.sent;
        } else {
          if (pending.size >= WINDOW) return;
          pending.set(queued.key, queued.sent);
        }
        socket.send(queued.data, { binary: typeof queued.data !== 'string' });
        queued = undefined;
      }
      if (!finished && sent >= WS_FRAMES_PER_ATTACKER && !queued && pending.size === 0 && !solo) finish();
    };
    const settle = (
      sentFrame: Sent,
      outcome: Outcome,
      raw: Uint8Array,
      json: Record<string, unknown> | undefined,
    ): void => {
      if (outcome.ok) bump(stats.outcomes, outcome.outcome);
      else
        fail(
          stats,
          `attacker ${c} ${sentFrame.kind}: ${outcome.problem}\n    frame: ${sentFrame.shown}\n    reference: ${clip(describeExpected(sentFrame.verdict))}\n    answer: ${clip(json ? JSON.stringify(json) : hex(raw))}`,
        );
      const canaries = canariesIn(raw, json);
      if (canaries.length > 0)
        stats.canaryHits.push(
          `attacker ${c} ${sentFrame.kind}: ${canaries.join(',')} markers in the answer to ${sentFrame.shown}`,
        );
    };
    /** A throw in the fuzzer itself fails the run, never leaves the connection hanging. */
    const guarded =
      <A extends unknown[]>(handler: (...args: A) => void) =>
      (...args: A): void => {
        try {
          handler(...args);
        } catch (error) {
          fail(stats, `attacker ${c}: the fuzzer threw ${(error as Error).stack}`);
          finish();
        }
      };
    socket.on('open', guarded(pump));
    socket.on('error', (error) => {
      fail(stats, `attacker ${c}: socket error ${error.message}`);
      finish();
    });
    socket.on('close', (code, reason) => {
      if (!finished) {
        fail(
          stats,
          `attacker ${c}: closed by the server (${code} ${reason.toString()}) after ${sent} frames`,
        );
        finish();
      }
    });
    socket.on(
      'message',
      guarded((data: Buffer, isBinary: boolean) => {
        lastProgress = performance.now();
        let json: Record<string, unknown> | undefined;
        let id: unknown;
        if (isBinary) {
          try {
            id = decodeBinaryResponse(data).header.id;
          } catch {
            id = undefined;
          }
        } else {
          try {
            json = parseAnswer(data.toString());
          } catch {
            fail(stats, `attacker ${c}: answer is not JSON: ${clip(data.toString())}`);
            return;
          }
          if (json.type === 'warning') return;
          id = json.id;
        }
        let sentFrame: Sent | undefined;
        if (solo) {
          sentFrame = solo;
          solo = undefined;
        } else {
          const key = JSON.stringify(id ?? null);
          sentFrame = pending.get(key);
          pending.delete(key);
        }
        if (!sentFrame) {
          fail(
            stats,
            `attacker ${c}: an answer matching no frame in flight: ${clip(json ? JSON.stringify(json) : hex(data))}`,
          );
          return;
        }
        const outcome = isBinary
          ? checkBinaryAnswer(data, sentFrame.verdict, sentFrame.binary)
          : checkJsonAnswer(json!, sentFrame.verdict);
        settle(sentFrame, outcome, data, json);
        pump();
      }),
    );
  });
}

async function runHttpAttacker(c: number, stats: Stats): Promise<void> {
  const random = new Random(SEED + 200 + c);
  for (let i = 0; i < HTTP_BODIES_PER_ATTACKER; i++) {
    const p = attackerPlan(random, true);
    const id = `h${c}-${i}`;
    const { path, body, kind } = mutateV2(random, id, p);
    const version = /\/versions\/([^/]+)\//.exec(path)?.[1];
    const verdict = referenceV2(body, modelName(p.dtype), version, REFERENCE);
    if (markersIn(encoder.encode(body)).length > 0) continue;
    if (verdict.valid && verdict.tensors.some((t) => markersIn(tensorBytes(t.dtype, t.values)).length > 0))
      continue;
    bump(stats.framesByDtype, p.dtype);
    bump(stats.framesByKind, kind);
    bump(stats.framesByTransport, 'http-v2');
    let status: number;
    let text: string;
    try {
      const response = await fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(STALL_MS),
      });
      status = response.status;
      text = await response.text();
    } catch (error) {
      fail(
        stats,
        `http attacker ${c} ${kind}: no answer (${(error as Error).message}) to POST ${path} ${clip(body)}`,
      );
      continue;
    }
    let json: Record<string, unknown> | undefined;
    try {
      json = parseAnswer(text);
    } catch {
      json = undefined;
    }
    const outcome = checkV2Answer(status, json, verdict);
    if (outcome.ok) bump(stats.outcomes, outcome.outcome);
    else
      fail(
        stats,
        `http attacker ${c} ${kind}: ${outcome.problem}\n    POST ${path} ${clip(body)}\n    reference: ${clip(describeExpected(verdict))}\n    answer: ${status} ${clip(text)}`,
      );
    const canaries = canariesIn(encoder.encode(text), json);
    if (canaries.length > 0)
      stats.canaryHits.push(
        `http attacker ${c} ${kind}: ${canaries.join(',')} markers in the answer to ${clip(body)}`,
      );
  }
}

function victimVerdict(id: RequestId, p: Plan): Verdict {
  return {
    valid: true,
    model: modelName(p.dtype),
    dtype: p.dtype,
    id,
    tensors: p.tensors.map((t) => ({
      ...t,
      values: t.dtype === 'string' ? t.values.map((v) => wireString(v as string)) : t.values,
    })),
    mayExpire: false,
  };
}

/** A victim WebSocket (binary frames or JSON): canary requests, `VICTIM_WINDOW` in flight, until `done()`. */
function runWsVictim(v: number, binary: boolean, stats: Stats, done: () => boolean): Promise<void> {
  const random = new Random(SEED + 300 + v);
  return new Promise((resolve) => {
    const socket = new WebSocket(server.wsUrl, { maxPayload: 64 * 1024 * 1024 });
    const pending = new Map<string, { verdict: Verdict; shown: string }>();
    let seq = 0;
    let finished = false;
    let lastProgress = performance.now();
    const finish = (): void => {
      if (finished) return;
      finished = true;
      clearInterval(watchdog);
      socket.close();
      resolve();
    };
    const watchdog = setInterval(() => {
      if (performance.now() - lastProgress > STALL_MS) {
        stats.victimWrong.push(`victim ${v}: ${pending.size} requests unanswered after ${STALL_MS} ms`);
        finish();
      }
    }, 1000);
    const pump = (): void => {
      while (!finished && !done() && pending.size < VICTIM_WINDOW) {
        const tag = seq++;
        const id = `v${v}-${tag}`;
        const p = victimPlan(random, v, tag);
        const verdict = victimVerdict(id, p);
        const data = binary ? encodeParts(binaryParts(id, p)) : objectText(jsonFields(id, p));
        pending.set(JSON.stringify(id), {
          verdict,
          shown: typeof data === 'string' ? clip(data) : hex(data),
        });
        stats.victimSent++;
        socket.send(data, { binary });
      }
      if (!finished && done() && pending.size === 0) finish();
    };
    socket.on('open', pump);
    socket.on('error', (error) => {
      stats.victimWrong.push(`victim ${v}: socket error ${error.message}`);
      finish();
    });
    socket.on('close', (code) => {
      if (!finished) {
        stats.victimWrong.push(`victim ${v}: closed by the server (${code})`);
        finish();
      }
    });
    socket.on('message', (data: Buffer, isBinary) => {
      lastProgress = performance.now();
      let json: Record<string, unknown> | undefined;
      let id: unknown;
      if (isBinary) {
        try {
          id = decodeBinaryResponse(data).header.id;
        } catch {
          id = undefined;
        }
      } else {
        try {
          json = parseAnswer(data.toString());
        } catch {
          stats.victimWrong.push(`victim ${v}: answer is not JSON: ${clip(data.toString())}`);
          return;
        }
        if (json.type === 'warning') return;
        id = json.id;
      }
      const key = JSON.stringify(id ?? null);
      const request = pending.get(key);
      pending.delete(key);
      if (!request) {
        stats.victimWrong.push(
          `victim ${v}: an answer matching no request: ${clip(json ? JSON.stringify(json) : hex(data))}`,
        );
        return;
      }
      const outcome = isBinary
        ? checkBinaryAnswer(data, request.verdict, binary)
        : checkJsonAnswer(json!, request.verdict);
      if (outcome.ok && outcome.outcome === 'echo') stats.victimExact++;
      else
        stats.victimWrong.push(
          `victim ${v} ${binary ? 'binary' : 'json'}: ${outcome.ok ? outcome.outcome : outcome.problem}\n    request: ${request.shown}\n    answer: ${clip(json ? JSON.stringify(json) : hex(data))}`,
        );
      pump();
    });
  });
}

async function runHttpVictim(v: number, stats: Stats, done: () => boolean): Promise<void> {
  const random = new Random(SEED + 400 + v);
  for (let tag = 0; !done(); tag++) {
    const id = `w${v}-${tag}`;
    const p = victimPlan(random, v, tag);
    const verdict = victimVerdict(id, p);
    const body = v2Text(id, v2Entries(p, random));
    stats.victimSent++;
    try {
      const response = await fetch(`${server.url}/v2/models/${modelName(p.dtype)}/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(STALL_MS),
      });
      const text = await response.text();
      const outcome = checkV2Answer(response.status, parseAnswer(text), verdict);
      if (outcome.ok && outcome.outcome === 'echo') stats.victimExact++;
      else
        stats.victimWrong.push(
          `victim ${v} http: ${outcome.ok ? outcome.outcome : outcome.problem}\n    request: ${clip(body)}\n    answer: ${response.status} ${clip(text)}`,
        );
    } catch (error) {
      stats.victimWrong.push(`victim ${v} http: ${(error as Error).message}\n    request: ${clip(body)}`);
    }
  }
}

async function nodePids(): Promise<number[]> {
  const health = (await (await fetch(`${server.url}/health`)).json()) as { nodes: Array<{ pid: number }> };
  return health.nodes.map((n) => n.pid);
}

const table = (map: Map<string, number>): string =>
  [...map]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');

test('differential fuzz: every mutated request gets a typed 4xx or its exact echo; victims exact; no canary leaks; no restart', async () => {
  const pidsBefore = await nodePids();
  expect(pidsBefore).toEqual(server.nodePids);
  const stats: Stats = {
    framesByDtype: new Map(),
    framesByKind: new Map(),
    framesByTransport: new Map(),
    outcomes: new Map(),
    failures: new Map(),
    failureCount: 0,
    canaryHits: [],
    victimSent: 0,
    victimExact: 0,
    victimWrong: [],
  };
  const started = performance.now();
  let attackersDone = false;
  const done = (): boolean => attackersDone;
  const victims = [
    runWsVictim(0, true, stats, done),
    runWsVictim(1, false, stats, done),
    ...Array.from({ length: HTTP_VICTIMS }, (_, i) => runHttpVictim(2 + i, stats, done)),
  ];
  await Promise.all([
    ...Array.from({ length: WS_ATTACKERS }, (_, c) => runWsAttacker(c, stats)),
    ...Array.from({ length: HTTP_ATTACKERS }, (_, c) => runHttpAttacker(c, stats)),
  ]);
  attackersDone = true;
  await Promise.all(victims);
  const seconds = (performance.now() - started) / 1000;
  const pidsAfter = await nodePids();
  const restarts = pidsAfter.filter((pid, i) => pid !== pidsBefore[i]).length;
  const frames = [...stats.framesByDtype.values()].reduce((a, b) => a + b, 0);
  console.log(
    `fuzz-differential: seed 0x${SEED.toString(16)}; ${frames} attacker frames and ${stats.victimSent} victim requests in ${seconds.toFixed(1)} s ` +
      `(models fz_<dtype>: fixed [4], var [-1], scalar []; greedy batches of ${MAX_BATCH}, ${BATCH_DELAY_MS} ms)\n` +
      `  frames per dtype: ${table(stats.framesByDtype)}\n` +
      `  frames per transport: ${table(stats.framesByTransport)}\n` +
      `  frames per mutation: ${table(stats.framesByKind)}\n` +
      `  attacker answers: ${table(stats.outcomes)}; failures ${stats.failureCount}\n` +
      `  victims: ${stats.victimExact}/${stats.victimSent} exact, ${stats.victimWrong.length} wrong; canary hits in attacker answers ${stats.canaryHits.length}; ` +
      `node restarts ${restarts} (pids ${pidsBefore.join(',')} -> ${pidsAfter.join(',')})` +
      (stats.failures.size > 0
        ? `\n  failures by category (count, first example):\n  ${[...stats.failures]
            .sort((a, b) => b[1].count - a[1].count)
            .map(([category, { count, example }], i) =>
              i < 12 ? `[${count}] ${category}\n      ${example}` : `[${count}] ${category}`,
            )
            .join('\n  ')}`
        : '') +
      (stats.victimWrong.length > 0
        ? `\n  first wrong victim answers:\n  ${stats.victimWrong.slice(0, 8).join('\n  ')}`
        : '') +
      (stats.canaryHits.length > 0
        ? `\n  first canary hits:\n  ${stats.canaryHits.slice(0, 8).join('\n  ')}`
        : ''),
  );
  expect(stats.canaryHits.slice(0, 5)).toEqual([]);
  expect(stats.victimWrong.slice(0, 5)).toEqual([]);
  expect([...stats.failures.keys()]).toEqual([]);
  expect(restarts).toBe(0);
  expect(server.logs()).not.toMatch(/node exited|handler error/);
  // Every dtype and every transport was exercised, and both outcomes occurred.
  for (const dtype of FUZZ_DTYPES) expect(stats.framesByDtype.get(dtype) ?? 0).toBeGreaterThan(100);
  expect(stats.outcomes.get('echo') ?? 0).toBeGreaterThan(1000);
  expect(stats.victimExact).toBeGreaterThan(1000);
}, 120_000);
