import type { BindLimits, BoundInput, BoundRequest } from './bound';
import { ProtocolError, RequestError, type RequestId } from './errors';
import { bindScanned, ScannedTensor, scanJsonInput } from './json-tensor';
import type { DType, ModelSignature, TensorSpec } from './signature';
import { bytesPerElement, checkDims, MAX_RANK } from './signature';

export const PRIORITIES = ['low', 'normal', 'high'] as const;
export type Priority = (typeof PRIORITIES)[number];

/** A decoded request envelope, not yet bound to a model. */
export interface InferenceRequest {
  id: RequestId;
  model: string | undefined;
  version: string | undefined;
  /** Value for the model's single (or first required) input; a ScannedTensor from decodeJsonRequest. */
  input: unknown;
  /** Values by input name, for multi-input models. */
  inputs: Record<string, unknown> | undefined;
  /** Shorthand older clients send for text models. */
  text: string | undefined;
  deadlineMs: number | undefined;
  priority: Priority;
  /** Sticky canary routing: requests with the same key always land on the same side. */
  routingKey?: string;
}

const MAX_ID_LENGTH = 256;
const MAX_NAME_LENGTH = 256;

/**
 * The fields every request carries whatever its encoding (JSON text, binary frame header). Read by
 * `readEnvelope` alone, so the JSON and binary decoders accept and refuse exactly the same values.
 */
export type RequestEnvelope = Pick<
  InferenceRequest,
  'id' | 'model' | 'version' | 'deadlineMs' | 'priority' | 'routingKey'
>;

/** `text` as a JSON object; anything else is a RequestError without an id (none could be read). */
export function parseJsonObject(text: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new RequestError(null, new ProtocolError('bad_request', 'malformed JSON'));
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new RequestError(null, new ProtocolError('bad_request', 'request must be a JSON object'));
  }
  return parsed as Record<string, unknown>;
}

/**
 * Checks a request's envelope fields (id, model, version, deadline_ms, priority, routing_key) in a
 * decoded JSON object. Failures are RequestErrors carrying the id once it could be read.
 */
export function readEnvelope(body: Record<string, unknown>, defaults: { model?: string }): RequestEnvelope {
  const id = readId(body.id);
  try {
    return readEnvelopeFields(body, id, defaults);
  } catch (error) {
    if (error instanceof ProtocolError) throw new RequestError(id, error);
    throw error;
  }
}

/** Parses one JSON request (WS text frame or HTTP body). Every failure is a RequestError carrying the id if one was readable. */
export function decodeRequest(text: string, defaults: { model?: string } = {}): InferenceRequest {
  return decodeBody(parseJsonObject(text), defaults);
}

/** The scanned array's stand-in while JSON.parse reads the rest of the request. */
const INPUT_STAND_IN = '0';

/**
 * decodeRequest for the gateway: a top-level numeric `"input"` is scanned into a scratch buffer (json-tensor)
 * and JSON.parse reads only the rest; `input` is then a ScannedTensor, valid until the next decode. Accepts
 * and refuses exactly what decodeRequest does: whatever the scanner is unsure of goes through decodeRequest.
 */
export function decodeJsonRequest(text: string, defaults: { model?: string } = {}): InferenceRequest {
  const scanned = scanJsonInput(text);
  if (scanned === undefined) return decodeRequest(text, defaults);
  let body: unknown;
  try {
    body = JSON.parse(text.slice(0, scanned.start) + INPUT_STAND_IN + text.slice(scanned.end));
  } catch {
    return decodeRequest(text, defaults);
  }
  const record = body as Record<string, unknown>;
  if (typeof body !== 'object' || body === null || record.input !== 0) return decodeRequest(text, defaults);
  record.input = scanned;
  return decodeBody(record, defaults);
}

function decodeBody(body: Record<string, unknown>, defaults: { model?: string }): InferenceRequest {
  const envelope = readEnvelope(body, defaults);
  try {
    const { input, inputs, text } = readValues(body);
    const request: InferenceRequest = {
      id: envelope.id,
      model: envelope.model,
      version: envelope.version,
      input,
      inputs,
      text,
      deadlineMs: envelope.deadlineMs,
      priority: envelope.priority,
    };
    if (envelope.routingKey !== undefined) request.routingKey = envelope.routingKey;
    return request;
  } catch (error) {
    if (error instanceof ProtocolError) throw new RequestError(envelope.id, error);
    throw error;
  }
}

function readId(raw: unknown): RequestId {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === 'number' && Number.isFinite(raw)) return raw;
  if (typeof raw === 'string' && raw.length <= MAX_ID_LENGTH) return raw;
  throw new RequestError(
    null,
    new ProtocolError('bad_request', '"id" must be a finite number or a string of at most 256 characters'),
  );
}

function optionalName(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'number' && Number.isInteger(value) && field === 'version') return String(value);
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_NAME_LENGTH) {
    throw new ProtocolError('bad_request', `"${field}" must be a non-empty string`);
  }
  return value;
}

function readEnvelopeFields(
  body: Record<string, unknown>,
  id: RequestId,
  defaults: { model?: string },
): RequestEnvelope {
  const model = optionalName(body, 'model') ?? defaults.model;
  const version = optionalName(body, 'version');
  let deadlineMs: number | undefined;
  if (body.deadline_ms !== undefined) {
    const value = body.deadline_ms;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
      throw new ProtocolError('bad_request', '"deadline_ms" must be a positive number of milliseconds');
    }
    deadlineMs = value;
  }
  let priority: Priority = 'normal';
  if (body.priority !== undefined) {
    if (!(PRIORITIES as readonly unknown[]).includes(body.priority)) {
      throw new ProtocolError('bad_request', `"priority" must be one of ${PRIORITIES.join(', ')}`);
    }
    priority = body.priority as Priority;
  }
  const envelope: RequestEnvelope = { id, model, version, deadlineMs, priority };
  if (body.routing_key !== undefined) {
    if (typeof body.routing_key !== 'string' || body.routing_key.length > MAX_NAME_LENGTH) {
      throw new ProtocolError('bad_request', '"routing_key" must be a string of at most 256 characters');
    }
    envelope.routingKey = body.routing_key;
  }
  return envelope;
}

/** The JSON request's values: `input`, `inputs` or `text` (at least one). */
function readValues(body: Record<string, unknown>): Pick<InferenceRequest, 'input' | 'inputs' | 'text'> {
  let inputs: Record<string, unknown> | undefined;
  if (body.inputs !== undefined) {
    if (typeof body.inputs !== 'object' || body.inputs === null || Array.isArray(body.inputs)) {
      throw new ProtocolError('bad_request', '"inputs" must be an object mapping input names to values');
    }
    inputs = body.inputs as Record<string, unknown>;
  }
  let text: string | undefined;
  if (body.text !== undefined) {
    if (typeof body.text !== 'string') throw new ProtocolError('bad_request', '"text" must be a string');
    text = body.text;
  }
  if (body.input === undefined && inputs === undefined && text === undefined) {
    throw new ProtocolError('bad_request', 'request needs "input", "inputs" or "text"');
  }
  return { input: body.input, inputs, text };
}

const encoder = new TextEncoder();

/**
 * Checks the request's values against the model's signature (dtype, rank, fixed dims, finite numbers)
 * and measures them. Throws ProtocolError (shape_mismatch, type_mismatch, payload_too_large, bad_request).
 * int64 elements are safe-integer numbers or exact decimal strings (the whole int64 range); strings hold no NUL.
 */
export function bindRequest(
  request: InferenceRequest,
  signature: ModelSignature,
  limits: BindLimits,
): BoundRequest {
  const values = new Array<unknown>(signature.inputs.length);
  const specs = signature.inputs;
  if (request.inputs !== undefined) {
    for (const name of Object.keys(request.inputs)) {
      const index = specs.findIndex((spec) => spec.name === name);
      if (index < 0) {
        throw new ProtocolError(
          'bad_request',
          `unknown input "${name}"; this model takes ${specs.map((s) => s.name).join(', ')}`,
        );
      }
      values[index] = request.inputs[name];
    }
  }
  if (request.input !== undefined) {
    const index = primaryInputIndex(signature, request.input);
    if (values[index] !== undefined)
      throw new ProtocolError('bad_request', `input "${specs[index]!.name}" given twice`);
    values[index] = request.input;
  }
  if (request.text !== undefined) {
    const index = specs.findIndex((spec) => spec.dtype === 'string');
    if (index < 0) throw new ProtocolError('type_mismatch', 'this model takes no text input');
    if (values[index] !== undefined)
      throw new ProtocolError('bad_request', `input "${specs[index]!.name}" given twice`);
    values[index] = request.text;
  }
  const bound: BoundInput[] = [];
  let mask = 0;
  let total = 0;
  for (let index = 0; index < specs.length; index++) {
    const spec = specs[index]!;
    let value = values[index];
    if (value === undefined) {
      if (!spec.optional) throw new ProtocolError('bad_request', `missing input "${spec.name}"`);
      continue;
    }
    if (value instanceof ScannedTensor) {
      const fast = bindScanned(value, spec, index, limits);
      if (fast !== undefined) {
        bound.push(fast);
        mask |= 1 << index;
        total += inputHeaderBytes(fast.dims.length) + fast.byteLength;
        continue;
      }
      // Out of the fast path's reach: the general path answers it, as for any JSON request.
      value = value.materialize();
    }
    const dims = measureDims(value, spec);
    const elements = checkDims(spec, dims, limits.maxElements);
    const byteLength = measureBytes(value, spec, dims.length, elements);
    bound.push({ spec, index, dims, value, byteLength });
    mask |= 1 << index;
    total += inputHeaderBytes(dims.length) + byteLength;
  }
  if (bound.length === 0) throw new ProtocolError('bad_request', 'request supplies no input of this model');
  return { inputs: bound, inputMask: mask, byteLength: total };
}

/** `input` goes to the only required input, else to the first input whose kind (text or numbers) fits the value. */
function primaryInputIndex(signature: ModelSignature, value: unknown): number {
  const required = signature.inputs.filter((spec) => !spec.optional);
  if (required.length === 1) return signature.inputs.indexOf(required[0]!);
  if (required.length > 1) {
    throw new ProtocolError(
      'bad_request',
      `this model has several inputs; send "inputs": {${required.map((s) => `"${s.name}"`).join(', ')}}`,
    );
  }
  const wantsText = typeof value === 'string' || (Array.isArray(value) && typeof value[0] === 'string');
  const index = signature.inputs.findIndex((spec) => (spec.dtype === 'string') === wantsText);
  return Math.max(index, 0);
}

export function inputHeaderBytes(rank: number): number {
  return 8 + 4 * rank;
}

function measureDims(value: unknown, spec: TensorSpec): number[] {
  const dims: number[] = [];
  let cursor: unknown = value;
  for (let axis = 0; axis < spec.shape.length; axis++) {
    if (!Array.isArray(cursor)) {
      throw new ProtocolError(
        'shape_mismatch',
        `input "${spec.name}" expects shape [${spec.shape.join(', ')}], got ${describeShape(value)}`,
      );
    }
    const expected = spec.shape[axis]!;
    if (expected !== -1 && cursor.length !== expected) {
      throw new ProtocolError(
        'shape_mismatch',
        `input "${spec.name}" expects shape [${spec.shape.join(', ')}], got ${describeShape(value)}`,
      );
    }
    dims.push(cursor.length);
    cursor = cursor[0];
  }
  if (Array.isArray(cursor)) {
    throw new ProtocolError(
      'shape_mismatch',
      `input "${spec.name}" expects shape [${spec.shape.join(', ')}], got ${describeShape(value)}`,
    );
  }
  if (dims.length > MAX_RANK - 1)
    throw new ProtocolError('shape_mismatch', `input "${spec.name}" has too many dimensions`);
  return dims;
}

function describeShape(value: unknown): string {
  const dims: number[] = [];
  let cursor = value;
  while (Array.isArray(cursor) && dims.length < 16) {
    dims.push(cursor.length);
    cursor = cursor[0];
  }
  return `[${dims.join(', ')}]`;
}

/** Walks the nested value once, checking ragged rows and element types; returns the payload byte length. */
function measureBytes(value: unknown, spec: TensorSpec, rank: number, elements: number): number {
  let stringBytes = 0;
  let seen = 0;
  const visit = (node: unknown, depth: number, expectedLength: number): void => {
    if (depth === rank) {
      checkElement(node, spec.dtype, spec.name);
      if (spec.dtype === 'string') stringBytes += 4 + utf8Length(node as string);
      seen++;
      return;
    }
    if (!Array.isArray(node) || node.length !== expectedLength) {
      throw new ProtocolError(
        'shape_mismatch',
        `input "${spec.name}" is ragged: every row along an axis must have the same length`,
      );
    }
    const nextLength = Array.isArray(node[0]) ? (node[0] as unknown[]).length : 0;
    for (let i = 0; i < node.length; i++) visit(node[i], depth + 1, nextLength);
  };
  if (rank === 0) visit(value, 0, 0);
  else visit(value, 0, (value as unknown[]).length);
  if (seen !== elements) throw new ProtocolError('shape_mismatch', `input "${spec.name}" is ragged`);
  return spec.dtype === 'string' ? stringBytes : elements * bytesPerElement(spec.dtype);
}

const FLOAT32_MAX = 3.4028234663852886e38;

function checkElement(element: unknown, dtype: DType, name: string): void {
  if (Array.isArray(element))
    throw new ProtocolError('shape_mismatch', `input "${name}" is ragged: it nests deeper than its shape`);
  switch (dtype) {
    case 'string':
      if (typeof element !== 'string')
        throw new ProtocolError('type_mismatch', `input "${name}" expects strings`);
      // ONNX Runtime cuts a string at NUL: the model would see another text than the one sent.
      if (element.indexOf('\u0000') >= 0)
        throw new ProtocolError('bad_request', `input "${name}" holds a NUL character (U+0000)`);
      return;
    case 'bool':
      if (typeof element !== 'boolean')
        throw new ProtocolError('type_mismatch', `input "${name}" expects booleans`);
      return;
    case 'int64':
      // Beyond ±2^53 a JSON number is no longer exact: such values come as decimal strings.
      if (typeof element === 'string') {
        if (!isInt64Text(element))
          throw new ProtocolError(
            'type_mismatch',
            `input "${name}" expects int64 integers or their decimal strings`,
          );
        return;
      }
      break;
    default:
      break;
  }
  if (typeof element !== 'number') {
    throw new ProtocolError(
      'type_mismatch',
      `input "${name}" expects numbers (${dtype}), got ${element === null ? 'null' : typeof element}`,
    );
  }
  if (!Number.isFinite(element))
    throw new ProtocolError('bad_request', `input "${name}" contains a non-finite number`);
  switch (dtype) {
    case 'float32':
      if (Math.abs(element) > FLOAT32_MAX)
        throw new ProtocolError('bad_request', `input "${name}" has a value outside float32 range`);
      return;
    case 'int32':
      if (!Number.isInteger(element) || element < -2147483648 || element > 2147483647) {
        throw new ProtocolError('type_mismatch', `input "${name}" expects int32 integers`);
      }
      return;
    case 'int64':
      if (!Number.isSafeInteger(element))
        throw new ProtocolError('type_mismatch', `input "${name}" expects integers (safe int64 range)`);
      return;
    case 'uint8':
      if (!Number.isInteger(element) || element < 0 || element > 255) {
        throw new ProtocolError('type_mismatch', `input "${name}" expects uint8 integers 0..255`);
      }
      return;
    default:
      return;
  }
}

const INT64_TEXT = /^-?(0|[1-9][0-9]{0,18})$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A decimal integer in int64 range, written as JSON would (no sign but `-`, no leading zeros, no spaces). */
function isInt64Text(text: string): boolean {
  if (!INT64_TEXT.test(text)) return false;
  const value = BigInt(text);
  return value >= INT64_MIN && value <= INT64_MAX;
}

export function utf8Length(text: string): number {
  // Fast path: ASCII strings are their own length.
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

export { encoder as utf8Encoder };
