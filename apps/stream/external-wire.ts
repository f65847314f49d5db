/**
 * The external backend's wire and retry rules, pure (no I/O): request frames, reading answers, which server
 * codes are worth another attempt, and the backoff delay. Kept apart from the connection pool so each rule
 * is tested on its own.
 */
import type { ErrorCode } from '../../libs/protocol';
import { decodeBinaryResponse, ERROR_CODES, encodeBinaryRequest } from '../../libs/protocol';
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

/**
 * One request frame. With a binding it is a binary tensor frame (the row's float32 bytes as they are, no
 * number formatting either side); without one, JSON `input` (the server gives it to the only input).
 */
export function encodePredict(
  id: number,
  pin: ModelPin,
  row: Float32Array,
  deadlineMs: number,
  binding: InputBinding | undefined,
): string | Uint8Array {
  if (binding) {
    return encodeBinaryRequest({ id, model: pin.model, version: pin.version, deadline_ms: deadlineMs }, [
      { name: binding.name, dtype: 'float32', dims: [row.length], data: row },
    ]);
  }
  return JSON.stringify({
    id,
    model: pin.model,
    version: pin.version,
    deadline_ms: deadlineMs,
    input: Array.from(row),
  });
}

export type WireAnswer =
  | { kind: 'result'; id: unknown; value: number | undefined; version: unknown }
  | { kind: 'error'; id: unknown; code: ErrorCode; message: string; retryAfterMs: number | undefined }
  | { kind: 'warning'; code: string; message: string }
  | { kind: 'garbage'; reason: string };

const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODES);

/** Reads one frame from the server; never throws (a frame we cannot read is `garbage`). */
export function readAnswer(data: Buffer, isBinary: boolean): WireAnswer {
  if (isBinary) {
    try {
      const decoded = decodeBinaryResponse(data);
      const first = decoded.tensors[0]?.data;
      let value: number | undefined;
      if (first !== undefined && !Array.isArray(first)) {
        const raw = (first as unknown as ArrayLike<number | bigint>)[0];
        value = typeof raw === 'bigint' ? Number(raw) : raw;
      }
      return { kind: 'result', id: decoded.header.id, value, version: decoded.header.version };
    } catch (error) {
      return { kind: 'garbage', reason: `unreadable binary answer: ${(error as Error).message}` };
    }
  }
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

/** The cluster's HTTP base (same host and port as its WebSocket endpoint), for readiness and metadata. */
export function httpBaseOf(url: URL): string {
  return `${url.protocol === 'wss:' ? 'https:' : 'http:'}//${url.host}`;
}
