/**
 * The differential fuzzer's test models and its reference decoder (fuzz-differential.test.ts).
 *
 * Models: one Identity model per dtype the server accepts, `fz_<dtype>`, with three optional inputs of that
 * dtype (`fixed` [4], `var` [-1], `scalar` []) each echoed to `<input>_out`; built at run time into a temporary
 * model repository, greedy batching (16 items, 2 ms) so concurrent clients share batches and rings.
 *
 * Reference: what a request means if it is valid, written from the protocol's specification (binary.ts,
 * request.ts, kserve.ts headers, docs/operations/security.md and the validation rules there), not from the server's code:
 * a tensor's dtype (binary `dtype`, v2 `datatype`) is the model's when the request gives none, its bytes are
 * exactly what that dtype and its dims need (strings: u32-prefixed UTF-8, every prefix inside the frame, no NUL),
 * floats are finite, JSON int64 beyond ±2^53 comes as a decimal string. Where the specification leaves a choice
 * (bytes after the last tensor, a v2 input named twice) the reference accepts, since a 4xx is always a fair
 * answer: an identity model answers exactly the decoded input, or a typed 4xx; a request the reference calls
 * invalid must be refused with a typed 4xx.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { DType, RequestId, TensorSpec } from '../../libs/protocol';
import { bytesPerElement, ERROR_CODES, httpStatusOf } from '../../libs/protocol';
import { type ModelConfig, serializeConfig } from '../../scripts/models/config';
import { encodeModel, model, node } from '../../scripts/models/onnx-builder';
import { valueInfo } from '../../scripts/models/types';

/**
 * A marker per dtype: victims fill their tensors with it, and no attacker value ever holds it, so finding it in
 * an attacker's answer means another client's bytes leaked. A Record over DType: a dtype added to the server
 * fails to compile here until the fuzzer covers it. Bytes are little-endian element bytes (empty for bool:
 * 0/1 cannot be told apart; bool victims are checked by their exact answers alone).
 */
const MARKER_BYTES: Record<DType, readonly number[]> = {
  float32: [0xfe, 0xca, 0x1d, 0x4b],
  float64: [0xd1, 0xa5, 0xe0, 0x7c, 0x9b, 0xf3, 0x21, 0x41],
  int32: [0xed, 0xb1, 0x5e, 0x2a],
  int64: [0x0d, 0xf0, 0xad, 0x8b, 0xe7, 0xc3, 0x1a, 0x00],
  uint8: [0xc4, 0x4e, 0xa7, 0x1b],
  bool: [],
  string: [...new TextEncoder().encode('CANARY-')],
};
export const FUZZ_DTYPES = Object.keys(MARKER_BYTES) as DType[];
/** The uint8 marker's first byte: attacker uint8 data never holds it. */
export const UINT8_MARK_LEAD = 0xc4;
/** Victim strings start with this; attacker strings are lowercase, so never hold it. */
export const STRING_CANARY = 'CANARY-';
/** …and are padded with it: a leaked piece of a victim string holds one of the two. Attackers never send '~'. */
export const STRING_PAD = '~';
const STRING_PAD_MARKER = [...new TextEncoder().encode(STRING_PAD.repeat(2))];

export type Value = number | bigint | boolean | string;

/** A marker element as a value of its dtype (uint8: the i-th byte of the 4-byte pattern). */
export function markerValue(dtype: DType, i = 0): Value {
  const bytes = Uint8Array.from(MARKER_BYTES[dtype]);
  const view = new DataView(bytes.buffer);
  switch (dtype) {
    case 'float32':
      return view.getFloat32(0, true);
    case 'float64':
      return view.getFloat64(0, true);
    case 'int32':
      return view.getInt32(0, true);
    case 'int64':
      return view.getBigInt64(0, true);
    case 'uint8':
      return bytes[i % 4]!;
    case 'bool':
      return i % 2 === 0;
    case 'string':
      return STRING_CANARY;
  }
}

export const INPUTS = [
  { name: 'fixed', shape: [4] },
  { name: 'var', shape: [-1] },
  { name: 'scalar', shape: [] },
] as const;
export type InputIndex = 0 | 1 | 2;

export const modelName = (dtype: DType): string => `fz_${dtype}`;
export const MAX_BATCH = 16;
export const BATCH_DELAY_MS = 2;

/** Writes the models into a fresh temporary repository and returns its path. */
export function buildModels(): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-fuzz-models-'));
  for (const dtype of FUZZ_DTYPES) {
    const name = modelName(dtype);
    const inputs: TensorSpec[] = INPUTS.map((input) => ({
      name: input.name,
      dtype,
      shape: [...input.shape],
      optional: true,
    }));
    const outputs: TensorSpec[] = INPUTS.map((input) => ({
      name: `${input.name}_out`,
      dtype,
      shape: [...input.shape],
      from: input.name,
    }));
    const config: ModelConfig = {
      name,
      description: `fuzz test model: Identity on ${dtype} inputs of fixed, variable and scalar shape`,
      inputs,
      outputs,
      batching: { policy: 'greedy', max_batch_size: MAX_BATCH, max_queue_delay_ms: BATCH_DELAY_MS },
      default_version: '1',
    };
    const bytes = encodeModel(
      model({
        graph: {
          name,
          inputs: inputs.map((spec) => valueInfo(spec)),
          outputs: outputs.map((spec) => valueInfo(spec)),
          nodes: INPUTS.map((input) => node('Identity', [input.name], [`${input.name}_out`])),
        },
      }),
    );
    mkdirSync(path.join(root, name, '1'), { recursive: true });
    writeFileSync(path.join(root, name, 'config.json'), serializeConfig(config));
    writeFileSync(path.join(root, name, '1', 'model.onnx'), bytes);
  }
  return root;
}

/** A decoded input: its values and its canonical bytes (strings: u32 length · UTF-8, one after another). */
export interface Tensor {
  input: InputIndex;
  dtype: DType;
  dims: number[];
  values: Value[];
}

export interface Valid {
  valid: true;
  model: string;
  dtype: DType;
  id: RequestId;
  /** Supplied inputs in signature order. */
  tensors: Tensor[];
  /** A short deadline was asked for: `deadline_exceeded` is a fair answer too. */
  mayExpire: boolean;
}
export interface Invalid {
  valid: false;
  why: string;
  /** The id the refusal can carry (null when none could be read). */
  id: RequestId;
}
export type Verdict = Valid | Invalid;

export interface ReferenceOptions {
  defaultModel: string;
  maxElements: number;
}

const FLOAT32_MAX = 3.4028234663852886e38;
const INT64_TEXT = /^-?(0|[1-9][0-9]*)$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
/** Below this deadline a request may expire under load: `deadline_exceeded` is then a fair answer. */
const SHORT_DEADLINE_MS = 10_000;
const MAX_RANK = 8;
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
const lossyUtf8 = new TextDecoder();

class Refusal extends Error {
  constructor(
    readonly why: string,
    readonly id: RequestId = null,
  ) {
    super(why);
  }
}
const refuse = (why: string, id: RequestId = null): never => {
  throw new Refusal(why, id);
};

/** What a string means on the wire: its UTF-8 bytes (a lone surrogate is U+FFFD, as TextEncoder writes it). */
export function wireString(text: string): string {
  return lossyUtf8.decode(utf8.encode(text));
}

function modelDtype(name: string): DType | undefined {
  return FUZZ_DTYPES.find((dtype) => modelName(dtype) === name);
}

interface Envelope {
  id: RequestId;
  dtype: DType;
  model: string;
  mayExpire: boolean;
}

function readId(raw: unknown): RequestId {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === 'number' && Number.isFinite(raw)) return raw;
  if (typeof raw === 'string' && raw.length <= 256) return raw;
  return refuse('id is neither a finite number nor a short string');
}

function nameField(
  body: Record<string, unknown>,
  field: 'model' | 'version',
  id: RequestId,
): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (field === 'version' && typeof value === 'number' && Number.isInteger(value)) return String(value);
  if (typeof value !== 'string' || value.length === 0 || value.length > 256) refuse(`bad ${field}`, id);
  return value as string;
}

/** The envelope of our JSON request or a binary header: id, model (routed), version, deadline, priority. */
function readEnvelope(body: Record<string, unknown>, options: ReferenceOptions): Envelope {
  const id = readId(body.id);
  const model = nameField(body, 'model', id) ?? options.defaultModel;
  const version = nameField(body, 'version', id);
  let mayExpire = false;
  if (body.deadline_ms !== undefined) {
    const value = body.deadline_ms;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) refuse('bad deadline_ms', id);
    mayExpire = (value as number) < SHORT_DEADLINE_MS;
  }
  if (body.priority !== undefined && !['low', 'normal', 'high'].includes(body.priority as string))
    refuse('bad priority', id);
  if (
    body.routing_key !== undefined &&
    (typeof body.routing_key !== 'string' || body.routing_key.length > 256)
  )
    refuse('bad routing_key', id);
  const dtype = modelDtype(model);
  if (dtype === undefined) refuse(`unknown model ${model}`, id);
  if (version !== undefined && version !== '1') refuse(`unknown version ${version}`, id);
  return { id, dtype: dtype!, model, mayExpire };
}

function checkNumber(value: unknown, dtype: DType, id: RequestId): Value {
  switch (dtype) {
    case 'string':
      if (typeof value !== 'string') refuse('string input holds a non-string', id);
      if ((value as string).includes('\u0000')) refuse('string holds NUL', id);
      return wireString(value as string);
    case 'bool':
      if (typeof value !== 'boolean') refuse('bool input holds a non-boolean', id);
      return value as boolean;
    default:
      break;
  }
  // Beyond ±2^53 a JSON int64 comes as its decimal string, written as JSON writes integers (docs/operations/security.md).
  if (dtype === 'int64' && typeof value === 'string') {
    if (!INT64_TEXT.test(value) || BigInt(value) < INT64_MIN || BigInt(value) > INT64_MAX)
      refuse('not an int64 decimal string', id);
    return BigInt(value);
  }
  if (typeof value !== 'number' || !Number.isFinite(value)) refuse(`${dtype} input holds a non-number`, id);
  const x = value as number;
  switch (dtype) {
    case 'float32':
      if (Math.abs(x) > FLOAT32_MAX) refuse('outside float32 range', id);
      return Math.fround(x);
    case 'float64':
      return x;
    case 'int32':
      if (!Number.isInteger(x) || x < -(2 ** 31) || x >= 2 ** 31) refuse('not an int32', id);
      return x === 0 ? 0 : x;
    case 'int64':
      if (!Number.isSafeInteger(x)) refuse('not a safe int64', id);
      return BigInt(x);
    default:
      if (!Number.isInteger(x) || x < 0 || x > 255) refuse('not a uint8', id);
      return x === 0 ? 0 : x;
  }
}

/** A nested JSON value of exactly the spec's rank (rectangular), flattened and checked element by element. */
function readNested(
  value: unknown,
  input: InputIndex,
  dtype: DType,
  id: RequestId,
  options: ReferenceOptions,
): Tensor {
  const shape = INPUTS[input].shape as readonly number[];
  const dims: number[] = [];
  let cursor = value;
  for (let axis = 0; axis < shape.length; axis++) {
    if (!Array.isArray(cursor)) refuse('shallower than its shape', id);
    const row = cursor as unknown[];
    if (shape[axis] !== -1 && row.length !== shape[axis]) refuse('fixed dim differs', id);
    dims.push(row.length);
    cursor = row[0];
  }
  const elements = dims.reduce((product, dim) => product * dim, 1);
  if (elements > options.maxElements) refuse('too many elements', id);
  const values: Value[] = [];
  const visit = (nodeValue: unknown, depth: number): void => {
    if (depth === shape.length) {
      if (Array.isArray(nodeValue)) refuse('deeper than its shape', id);
      values.push(checkNumber(nodeValue, dtype, id));
      return;
    }
    if (!Array.isArray(nodeValue) || nodeValue.length !== dims[depth]) refuse('ragged', id);
    for (const item of nodeValue as unknown[]) visit(item, depth + 1);
  };
  visit(value, 0);
  return { input, dtype, dims, values };
}

function inputIndex(name: string): InputIndex | undefined {
  const index = INPUTS.findIndex((input) => input.name === name);
  return index < 0 ? undefined : (index as InputIndex);
}

function verdictOf(run: () => Valid): Verdict {
  try {
    return run();
  } catch (error) {
    if (error instanceof Refusal) return { valid: false, why: error.why, id: error.id };
    throw error;
  }
}

function asObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/** Our JSON request (a WebSocket text frame): `input` (→ the first input), `inputs` by name, `text`. */
export function referenceJson(text: string, options: ReferenceOptions): Verdict {
  return verdictOf(() => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return refuse('malformed JSON');
    }
    const body = asObject(parsed) ?? refuse('not an object');
    const envelope = readEnvelope(body, options);
    const id = envelope.id;
    const values: unknown[] = [undefined, undefined, undefined];
    if (body.inputs !== undefined) {
      const inputs = asObject(body.inputs) ?? refuse('inputs is not an object', id);
      for (const name of Object.keys(inputs)) {
        const index = inputIndex(name) ?? refuse(`unknown input ${name}`, id);
        values[index] = inputs[name];
      }
    }
    let shorthand: string | undefined;
    if (body.text !== undefined) {
      if (typeof body.text !== 'string') refuse('text is not a string', id);
      shorthand = body.text as string;
    }
    if (body.input === undefined && body.inputs === undefined && shorthand === undefined)
      refuse('no input, inputs or text', id);
    // Every input is optional and of one dtype: `input` and `text` both name the first one.
    if (body.input !== undefined) {
      if (values[0] !== undefined) refuse('input given twice', id);
      values[0] = body.input;
    }
    if (shorthand !== undefined) {
      if (envelope.dtype !== 'string') refuse('text for a numeric model', id);
      if (values[0] !== undefined) refuse('input given twice', id);
      values[0] = shorthand;
    }
    const tensors: Tensor[] = [];
    values.forEach((value, index) => {
      if (value !== undefined)
        tensors.push(readNested(value, index as InputIndex, envelope.dtype, id, options));
    });
    if (tensors.length === 0) refuse('no input of this model', id);
    return {
      valid: true,
      model: envelope.model,
      dtype: envelope.dtype,
      id,
      tensors,
      mayExpire: envelope.mayExpire,
    };
  });
}

const V2_DATATYPES: Record<string, DType> = {
  FP32: 'float32',
  FP64: 'float64',
  INT32: 'int32',
  INT64: 'int64',
  UINT8: 'uint8',
  BOOL: 'bool',
  BYTES: 'string',
};
export const V2_DATATYPE: Record<DType, string> = Object.fromEntries(
  Object.entries(V2_DATATYPES).map(([name, dtype]) => [dtype, name]),
) as Record<DType, string>;

/** Without recursion: a body may nest 100,000 deep. */
function flatten(value: unknown, into: unknown[]): void {
  const stack: Array<{ items: unknown[]; at: number }> = [];
  if (!Array.isArray(value)) {
    into.push(value);
    return;
  }
  stack.push({ items: value, at: 0 });
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.at === top.items.length) {
      stack.pop();
      continue;
    }
    const item = top.items[top.at++];
    if (Array.isArray(item)) stack.push({ items: item, at: 0 });
    else into.push(item);
  }
}

/** An Open Inference Protocol body for `model` (and `version`) from the path. */
export function referenceV2(
  text: string,
  model: string,
  version: string | undefined,
  options: ReferenceOptions,
): Verdict {
  return verdictOf(() => {
    const dtype = modelDtype(model) ?? refuse(`unknown model ${model}`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return refuse('malformed JSON');
    }
    const body = asObject(parsed) ?? refuse('not an object');
    if (body.id !== undefined && typeof body.id !== 'string') refuse('id is not a string');
    const id = (body.id as string | undefined) ?? null;
    if (version !== undefined && version !== '1') refuse(`unknown version ${version}`, id);
    if (!Array.isArray(body.inputs) || body.inputs.length === 0)
      refuse('inputs is not a non-empty array', id);
    // A name given twice: the last one counts (the body is read as an object by name).
    const byInput: Array<Tensor | undefined> = [undefined, undefined, undefined];
    for (const raw of body.inputs as unknown[]) {
      if (typeof raw !== 'object' || raw === null) refuse('input is not an object', id);
      const tensor = raw as Record<string, unknown>;
      if (typeof tensor.name !== 'string') refuse('input has no name', id);
      const index = inputIndex(tensor.name as string) ?? refuse('unknown input', id);
      // Left out, the datatype is the model input's (as a binary frame's dtype).
      if (
        tensor.datatype !== undefined &&
        (typeof tensor.datatype !== 'string' ||
          !Object.hasOwn(V2_DATATYPES, tensor.datatype) ||
          V2_DATATYPES[tensor.datatype] !== dtype)
      )
        refuse('datatype is not the model input dtype', id);
      const shape = tensor.shape;
      if (!Array.isArray(shape) || !shape.every((dim) => Number.isInteger(dim) && dim >= 0))
        refuse('bad shape', id);
      let dims = shape as number[];
      const spec = INPUTS[index].shape as readonly number[];
      if (dims.length === spec.length + 1) {
        if (dims[0] !== 1) refuse('batch dim is not 1', id);
        dims = dims.slice(1);
      }
      if (dims.length !== spec.length) refuse('rank differs', id);
      if (spec.some((dim, axis) => dim !== -1 && dim !== dims[axis])) refuse('fixed dim differs', id);
      if (!Array.isArray(tensor.data)) refuse('data is not an array', id);
      const elements = dims.reduce((product, dim) => product * dim, 1);
      if (elements > options.maxElements) refuse('too many elements', id);
      const flat: unknown[] = [];
      flatten(tensor.data, flat);
      if (flat.length !== elements) refuse('data length differs from shape', id);
      byInput[index] = {
        input: index,
        dtype,
        dims,
        values: flat.map((value) => checkNumber(value, dtype, id)),
      };
    }
    const tensors = byInput.filter((tensor): tensor is Tensor => tensor !== undefined);
    return { valid: true, model, dtype, id, tensors, mayExpire: false };
  });
}

const align8 = (n: number): number => (n + 7) & ~7;

function readElements(
  frame: Uint8Array,
  view: DataView,
  at: number,
  elements: number,
  dtype: DType,
  id: RequestId,
): { values: Value[]; length: number } {
  const values: Value[] = [];
  if (dtype === 'string') {
    let cursor = at;
    for (let i = 0; i < elements; i++) {
      if (cursor + 4 > frame.length) refuse('string prefix past the frame', id);
      const length = view.getUint32(cursor, true);
      if (cursor + 4 + length > frame.length) refuse('string bytes past the frame', id);
      let text: string;
      try {
        text = strictUtf8.decode(frame.subarray(cursor + 4, cursor + 4 + length));
      } catch {
        return refuse('invalid UTF-8', id);
      }
      if (text.includes('\u0000')) refuse('string holds NUL', id);
      values.push(text);
      cursor += 4 + length;
    }
    return { values, length: cursor - at };
  }
  const size = bytesPerElement(dtype);
  const length = elements * size;
  if (at + length > frame.length) refuse('tensor bytes past the frame', id);
  for (let i = 0; i < elements; i++) {
    const p = at + i * size;
    switch (dtype) {
      case 'float32': {
        const x = view.getFloat32(p, true);
        if (!Number.isFinite(x)) refuse('non-finite float', id);
        values.push(x);
        break;
      }
      case 'float64': {
        const x = view.getFloat64(p, true);
        if (!Number.isFinite(x)) refuse('non-finite float', id);
        values.push(x);
        break;
      }
      case 'int32':
        values.push(view.getInt32(p, true));
        break;
      case 'int64':
        values.push(view.getBigInt64(p, true));
        break;
      case 'uint8':
        values.push(frame[p]!);
        break;
      default:
        // bool: any non-zero byte is true
        values.push(frame[p]! !== 0);
    }
  }
  return { values, length };
}

/** A binary tensor frame (frame layout in libs/protocol/binary.ts). */
export function referenceBinary(frame: Uint8Array, options: ReferenceOptions): Verdict {
  return verdictOf(() => {
    if (frame.length < 4 || frame[0] !== 0x53 || frame[1] !== 1) refuse('not a tensor frame');
    const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    const headerLength = view.getUint16(2, true);
    if (4 + headerLength > frame.length) refuse('header past the frame');
    let parsed: unknown;
    try {
      parsed = JSON.parse(lossyUtf8.decode(frame.subarray(4, 4 + headerLength)));
    } catch {
      return refuse('header is not JSON');
    }
    const header = asObject(parsed) ?? refuse('header is not an object');
    const envelope = readEnvelope(header, options);
    const id = envelope.id;
    if (!Array.isArray(header.inputs) || header.inputs.length === 0) refuse('no inputs', id);
    let at = align8(4 + headerLength);
    const byInput: Array<Tensor | undefined> = [undefined, undefined, undefined];
    for (const entry of header.inputs as unknown[]) {
      if (typeof entry !== 'object' || entry === null) refuse('input entry is not an object', id);
      const spec = entry as Record<string, unknown>;
      if (typeof spec.name !== 'string') refuse('input entry has no name', id);
      if (
        !Array.isArray(spec.dims) ||
        spec.dims.length > MAX_RANK - 1 ||
        !spec.dims.every((dim) => Number.isInteger(dim) && dim >= 0)
      )
        refuse('bad dims', id);
      if (spec.dtype !== undefined && !FUZZ_DTYPES.includes(spec.dtype as DType)) refuse('unknown dtype', id);
      const index = inputIndex(spec.name as string) ?? refuse('unknown input', id);
      if (byInput[index] !== undefined) refuse('input given twice', id);
      const dtype = (spec.dtype as DType | undefined) ?? envelope.dtype;
      if (dtype !== envelope.dtype) refuse('dtype is not the model input dtype', id);
      const dims = spec.dims as number[];
      const shape = INPUTS[index].shape as readonly number[];
      if (dims.length !== shape.length || shape.some((dim, axis) => dim !== -1 && dim !== dims[axis]))
        refuse('dims do not fit the shape', id);
      const elements = dims.reduce((product, dim) => product * dim, 1);
      if (elements > options.maxElements) refuse('too many elements', id);
      const { values, length } = readElements(frame, view, at, elements, dtype, id);
      byInput[index] = { input: index, dtype, dims, values };
      at += align8(length);
    }
    const tensors = byInput.filter((tensor): tensor is Tensor => tensor !== undefined);
    return {
      valid: true,
      model: envelope.model,
      dtype: envelope.dtype,
      id,
      tensors,
      mayExpire: envelope.mayExpire,
    };
  });
}

/** Canonical little-endian bytes of a tensor's values (strings: u32 length · UTF-8 each). */
export function tensorBytes(dtype: DType, values: readonly Value[]): Uint8Array {
  if (dtype === 'string') {
    const parts = values.map((value) => utf8.encode(value as string));
    const out = new Uint8Array(parts.reduce((sum, part) => sum + 4 + part.length, 0));
    const view = new DataView(out.buffer);
    let at = 0;
    for (const part of parts) {
      view.setUint32(at, part.length, true);
      out.set(part, at + 4);
      at += 4 + part.length;
    }
    return out;
  }
  const size = bytesPerElement(dtype);
  const out = new Uint8Array(values.length * size);
  const view = new DataView(out.buffer);
  values.forEach((value, i) => {
    const at = i * size;
    switch (dtype) {
      case 'float32':
        view.setFloat32(at, value as number, true);
        break;
      case 'float64':
        view.setFloat64(at, value as number, true);
        break;
      case 'int32':
        view.setInt32(at, value as number, true);
        break;
      case 'int64':
        view.setBigInt64(at, value as bigint, true);
        break;
      case 'uint8':
        out[at] = value as number;
        break;
      default:
        out[at] = value ? 1 : 0;
    }
  });
  return out;
}

/** Whether `pattern` occurs in `bytes`. */
export function contains(bytes: Uint8Array, pattern: readonly number[]): boolean {
  if (pattern.length === 0) return false;
  const first = pattern[0]!;
  outer: for (
    let i = bytes.indexOf(first);
    i >= 0 && i + pattern.length <= bytes.length;
    i = bytes.indexOf(first, i + 1)
  ) {
    for (let k = 1; k < pattern.length; k++) if (bytes[i + k] !== pattern[k]) continue outer;
    return true;
  }
  return false;
}

/** The markers found in `bytes` (the dtypes whose marker occurs). */
export function markersIn(bytes: Uint8Array): DType[] {
  return FUZZ_DTYPES.filter(
    (dtype) =>
      contains(bytes, MARKER_BYTES[dtype]) || (dtype === 'string' && contains(bytes, STRING_PAD_MARKER)),
  );
}

/** Every error code whose HTTP status is a 4xx: a typed refusal. */
export const REFUSAL_CODES: ReadonlySet<string> = new Set(
  ERROR_CODES.filter((code) => httpStatusOf(code) >= 400 && httpStatusOf(code) < 500),
);
export const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);
