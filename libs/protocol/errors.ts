/**
 * The stable set of error codes a client can see. Codes never change meaning; new ones may be added.
 * Each maps to one HTTP status so both protocols agree.
 */
export const ERROR_CODES = [
  'bad_request',
  'unknown_model',
  'unknown_version',
  'shape_mismatch',
  'type_mismatch',
  'payload_too_large',
  'rate_limited',
  'overloaded',
  'deadline_exceeded',
  'unavailable',
  'unauthorized',
  'not_found',
  'method_not_allowed',
  'model_error',
  'internal',
  'client_queue_full',
  'reload_in_progress',
  'reload_failed',
  // Fleet: a registry write lost its compare-and-set, or NATS cannot be reached for it; a host in
  // doubt about a fleet reload's outcome refuses traffic until it has caught up.
  'conflict',
  'cluster_unavailable',
  'fenced',
  // A tensor's declared dtype (binary frame `dtype`, Open Inference Protocol `datatype`) is not the model
  // input's. `type_mismatch` stays what it was: JSON element values of the wrong kind.
  'dtype_mismatch',
  // Admin API: a page's cross-origin or DNS-rebound call, a mutating call that is not JSON.
  'forbidden',
  'unsupported_media_type',
  // Registry state (STREAMINFER_STATE_DIR) that cannot be saved: a change is refused rather than committed and
  // then lost at the next restart. `storage_full`: no room on the device (ENOSPC, EDQUOT); `persist_failed`:
  // any other write error (read-only, I/O error).
  'storage_full',
  'persist_failed',
  // Fleet: the fleet's registry record cannot be read (garbage, a shape this build does not read);
  // not the caller's fault. A repository reload (POST /api/reload {}) rewrites it by CAS.
  'invalid_record',
  // The model (or the version asked for) is in this host's repository but did not load (a corrupt file): not
  // `unknown_model`, which would hide it.
  'model_unavailable',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

const HTTP_STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  unknown_model: 404,
  unknown_version: 404,
  shape_mismatch: 400,
  type_mismatch: 400,
  payload_too_large: 413,
  rate_limited: 429,
  overloaded: 429,
  deadline_exceeded: 504,
  unavailable: 503,
  unauthorized: 401,
  not_found: 404,
  method_not_allowed: 405,
  model_error: 500,
  internal: 500,
  client_queue_full: 429,
  reload_in_progress: 409,
  reload_failed: 500,
  conflict: 409,
  cluster_unavailable: 503,
  fenced: 503,
  dtype_mismatch: 400,
  forbidden: 403,
  unsupported_media_type: 415,
  storage_full: 507,
  persist_failed: 500,
  invalid_record: 503,
  model_unavailable: 503,
};

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  409: '409 Conflict',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
  507: '507 Insufficient Storage',
};

export function httpStatusOf(code: ErrorCode): number {
  return HTTP_STATUS[code];
}

/** uWS wants the full status line ("404 Not Found"). */
export function httpStatusLine(status: number): string {
  return STATUS_TEXT[status] ?? String(status);
}

const CODE_INDEX = new Map<string, number>(ERROR_CODES.map((code, index) => [code, index]));

/** Wire index of a code (1-based; 0 means "ok" in response records). */
export function errorCodeIndex(code: ErrorCode): number {
  return (CODE_INDEX.get(code) ?? ERROR_CODES.indexOf('internal')) + 1;
}

export function errorCodeFromIndex(index: number): ErrorCode {
  return ERROR_CODES[index - 1] ?? 'internal';
}

/** A request-scoped failure: answered to that request only, never fatal to the connection or process. */
export class ProtocolError extends Error {
  readonly code: ErrorCode;
  readonly retryAfterMs: number | undefined;

  constructor(code: ErrorCode, message: string, retryAfterMs?: number) {
    // A typed error is an answer to a client, not a bug: no stack. Capturing one cost ~4.5 µs, paid for
    // every shed request under overload.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = stackTraceLimit;
    this.name = 'ProtocolError';
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }

  get httpStatus(): number {
    return HTTP_STATUS[this.code];
  }
}

/** A model or version of this host's repository that did not load: `model_unavailable`, with why. */
export function modelUnavailable(name: string, version: string | undefined, reason: string): ProtocolError {
  const what = version === undefined ? `model "${name}"` : `model "${name}" version "${version}"`;
  return new ProtocolError(
    'model_unavailable',
    `${what} is unavailable on this host: it did not load (${reason})`,
  );
}

/** The one `unknown_model` answer: the name asked for and the models there are (the gateway's, the host's). */
export function unknownModel(name: string, available: Iterable<string>): ProtocolError {
  return new ProtocolError(
    'unknown_model',
    `unknown model "${name}"; available: ${[...available].join(', ')}`,
  );
}

/** A request's `id` as the client sent it (JSON allows a number, a string or null). */
export type RequestId = number | string | null;

/** Thrown for a request whose id is known, so the error answer can still be matched by the client. */
export class RequestError extends ProtocolError {
  readonly requestId: RequestId;
  constructor(requestId: RequestId, cause: ProtocolError) {
    super(cause.code, cause.message, cause.retryAfterMs);
    this.requestId = requestId;
  }
}
