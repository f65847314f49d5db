/**
 * Typed errors of the external inference backend: a stable code, so the pipeline branches on it (nak and
 * redeliver, or stop the epoch), never on message text. `serverCode` is the server's own stable
 * code (libs/protocol ERROR_CODES) when the server answered one.
 */
import type { ErrorCode } from '../../../libs/protocol';

export type ExternalInferenceErrorCode =
  /** The options were refused before any I/O. */
  | 'invalid_options'
  /** No connection to the server could be opened, or prepare() could not reach it. */
  | 'unreachable'
  /** prepare(): the server does not serve this model version (`serverCode` unknown_model / unknown_version). */
  | 'not_served'
  /** The server refused the request for good (bad input, unknown model or version): retrying cannot help. */
  | 'rejected'
  /** Every attempt was shed, timed out or lost with its connection; `cause` is the last failure. */
  | 'retries_exhausted'
  /** The server's answer could not be read as a number. */
  | 'bad_answer'
  /** The backend was closed before the call was answered. */
  | 'closed';

export class ExternalInferenceError extends Error {
  readonly code: ExternalInferenceErrorCode;
  readonly serverCode: ErrorCode | undefined;

  constructor(
    code: ExternalInferenceErrorCode,
    message: string,
    options?: ErrorOptions & { serverCode?: ErrorCode },
  ) {
    super(message, options);
    this.name = 'ExternalInferenceError';
    this.code = code;
    this.serverCode = options?.serverCode;
  }
}
