/**
 * The external backend's wire and retry rules, pure (no I/O): request frames, reading answers, which server
 * codes are worth another attempt, and the backoff delay. Kept apart from the connection pool so each rule
 * is tested on its own.
 */
import type { ErrorCode } from '../../../libs/protocol';
import { ERROR_CODES } from '../../../libs/protocol';
import type { ModelPin } from './inference';

/**
 * Server codes that say "not now" rather than "never": shed (overloaded, rate_limited, client_queue_full),
 * draining (unavailable), a reload barrier, a deadline passed in a queue, or an internal failure (a worker
 * that died mid-batch). Everything else (bad_request, unknown_model, shape_mismatch, …) is final.
 */
const RETRYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'overloaded',
  'rate_limited',
  'client_queue_full',
  'unavailable',
  'deadline_exceeded',
  'reload_in_progress',
  'internal',
]);

export function isRetryable(code: ErrorCode): boolean {
  return RETRYABLE.has(code);
}

export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
}

/**
 * Delay before attempt `attempt + 1` (attempt ≥ 1): exponential, capped, with "equal jitter" (half fixed,
 * half random) so callers shed together do not come back together. A server's `retry_after_ms` is a floor:
 * it knows when a token or a queue slot frees up.
 */
export function backoffDelay(
  attempt: number,
  backoff: BackoffOptions,
  random: () => number,
  retryAfterMs?: number,
): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const ceiling = Math.min(backoff.maxMs, backoff.baseMs * 2 ** exponent);
  const delay = ceiling / 2 + random() * (ceiling / 2);
  return Math.max(delay, retryAfterMs ?? 0);
}

/** How a pin's single input goes on the wire: binary tensor frames when prepare() learnt its name. */
export interface InputBinding {
  name: string;
}

const BINARY_MAGIC = 0x53;
const BINARY_VERSION = 1;
const PREFIX_BYTES = 4;

function align8(n: number): number {
  return (n + 7) & ~7;
}

/**
 * One request frame. With a binding it is a binary tensor frame (libs/protocol/binary.ts, byte for byte what
 * `encodeBinaryRequest` builds: the row's float32 bytes as they are, no number formatting either side);
 * without one, JSON `input` (the server gives it to the only input). Built here rather than with the
 * generic encoder, which costs ~6.5 µs a frame against ~1.5 µs for this one shape.
 */
export function encodePredict(
  id: number,
  pin: ModelPin,
  row: Float32Array,
  deadlineMs: number,
  binding: InputBinding | undefined,
): string | Buffer {
  const envelope = `,"model":${JSON.stringify(pin.model)},"version":${JSON.stringify(pin.version)},"deadline_ms":${deadlineMs}`;
  if (!binding) return `{"id":${id}${envelope},"input":[${Array.from(row).join(',')}]}`;
  const header = `{"id":${id}${envelope},"inputs":[{"name":${JSON.stringify(binding.name)},"dtype":"float32","dims":[${row.length}]}]}`;
  const headerBytes = Buffer.byteLength(header);
  const dataStart = align8(PREFIX_BYTES + headerBytes);
  const frame = Buffer.alloc(dataStart + align8(row.byteLength));
  frame[0] = BINARY_MAGIC;
  frame[1] = BINARY_VERSION;
  frame.writeUInt16LE(headerBytes, 2);
  frame.write(header, PREFIX_BYTES, 'utf8');
  frame.set(new Uint8Array(row.buffer, row.byteOffset, row.byteLength), dataStart);
  return frame;
}

/** A binary answer's id, version and first output's first value (undefined when it has none we can read). */
function readBinaryAnswer(data: Buffer): WireAnswer {
  if (data.length < PREFIX_BYTES || data[0] !== BINARY_MAGIC || data[1] !== BINARY_VERSION)
    return { kind: 'garbage', reason: 'binary answer without the tensor-frame prefix' };
  const headerBytes = data.readUInt16LE(2);
  if (PREFIX_BYTES + headerBytes > data.length)
    return { kind: 'garbage', reason: 'binary answer header runs past the frame' };
  let header: { id?: unknown; version?: unknown; outputs?: Array<{ dtype?: unknown }> };
  try {
    header = JSON.parse(data.toString('utf8', PREFIX_BYTES, PREFIX_BYTES + headerBytes));
  } catch {
    return { kind: 'garbage', reason: 'binary answer header is not JSON' };
  }
  if (typeof header !== 'object' || header === null)
    return { kind: 'garbage', reason: 'binary answer header is not an object' };
  const at = align8(PREFIX_BYTES + headerBytes);
  const dtype = Array.isArray(header.outputs) ? header.outputs[0]?.dtype : undefined;
  let value: number | undefined;
  const fits = (width: number): boolean => at + width <= data.length;
  if (dtype === 'float32' && fits(4)) value = data.readFloatLE(at);
  else if (dtype === 'float64' && fits(8)) value = data.readDoubleLE(at);
  else if (dtype === 'int32' && fits(4)) value = data.readInt32LE(at);
  else if (dtype === 'int64' && fits(8)) value = Number(data.readBigInt64LE(at));
  else if ((dtype === 'uint8' || dtype === 'bool') && fits(1)) value = data[at];
  return { kind: 'result', id: header.id, value, version: header.version };
}

export type WireAnswer =
  | { kind: 'result'; id: unknown; value: number | undefined; version: unknown }
  | { kind: 'error'; id: unknown; code: ErrorCode; message: string; retryAfterMs: number | undefined }
  | { kind: 'warning'; code: string; message: string }
  | { kind: 'garbage'; reason: string };

const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);

/** Reads one frame from the server; never throws (a frame we cannot read is `garbage`). */
export function readAnswer(data: Buffer, isBinary: boolean): WireAnswer {
  if (isBinary) return readBinaryAnswer(data);
  let body: unknown;
  try {
    body = JSON.parse(data.toString('utf8'));
  } catch {
    return { kind: 'garbage', reason: 'answer is not JSON' };
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return { kind: 'garbage', reason: 'answer is not a JSON object' };
  const answer = body as Record<string, unknown>;
  if (answer.type === 'warning')
    return { kind: 'warning', code: String(answer.code), message: String(answer.message) };
  if (answer.type === 'error') {
    const code = typeof answer.code === 'string' && KNOWN_CODES.has(answer.code) ? answer.code : 'internal';
    const retry = answer.retry_after_ms;
    return {
      kind: 'error',
      id: answer.id,
      code: code as ErrorCode,
      message: typeof answer.message === 'string' ? answer.message : '',
      retryAfterMs: typeof retry === 'number' && Number.isFinite(retry) && retry >= 0 ? retry : undefined,
    };
  }
  return { kind: 'result', id: answer.id, value: firstNumber(answer.result), version: answer.version };
}

/**
 * The first output's first value of a JSON `result`: a number, a (nested) array of them, or an object of
 * named outputs (the first one). Undefined when there is no number there.
 */
export function firstNumber(result: unknown): number | undefined {
  let cursor = result;
  for (let depth = 0; depth < 32; depth++) {
    if (typeof cursor === 'number') return cursor;
    if (Array.isArray(cursor)) cursor = cursor[0];
    else if (typeof cursor === 'object' && cursor !== null) cursor = Object.values(cursor)[0];
    else return undefined;
  }
  return undefined;
}

/** The server's HTTP base (same host and port as its WebSocket endpoint), for readiness and metadata. */
export function httpBaseOf(url: URL): string {
  return `${url.protocol === 'wss:' ? 'https:' : 'http:'}//${url.host}`;
}
