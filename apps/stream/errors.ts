/** Typed errors of the JetStream I/O layer: a stable code, so callers branch on it, never on message text. */
export type StreamIoErrorCode =
  | 'invalid_options'
  | 'nats_unreachable'
  /** NATS answered no: bad or expired credentials, a TLS mismatch, no JetStream permission. Not retried. */
  | 'nats_refused'
  | 'stream_mismatch'
  | 'stream_provision_failed'
  | 'consumer_provision_failed'
  | 'publish_failed'
  /** The consumer handed out deliveries that never arrived (a dropped connection): reopen in stream order. */
  | 'delivery_gap'
  /** A partition's lease is gone: its checkpoint must not become the restore point. */
  | 'lease_lost';

export class StreamIoError extends Error {
  readonly code: StreamIoErrorCode;

  constructor(code: StreamIoErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StreamIoError';
    this.code = code;
  }
}

/** Options are checked before any I/O so a bad config fails at start, not on the first message. */
export function requirePositiveInt(name: string, value: number, min = 1): number {
  if (!Number.isInteger(value) || value < min) {
    throw new StreamIoError('invalid_options', `${name} must be an integer >= ${min} (got ${value})`);
  }
  return value;
}

export function requireName(name: string, value: string): string {
  // JetStream stream and consumer names may not contain subject tokens' special characters.
  if (typeof value !== 'string' || !/^[A-Za-z0-9_-]+$/.test(value)) {
    throw new StreamIoError(
      'invalid_options',
      `${name} must be a non-empty name of [A-Za-z0-9_-] (got ${value})`,
    );
  }
  return value;
}

/** The pipeline process's exit status when NATS refused its settings (credentials, TLS): not restarted. */
export const EXIT_NATS_REFUSED = 2;
