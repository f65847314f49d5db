/**
 * Typed errors of the pipeline. PipelineIoError is the JetStream I/O layer's: a stable code, so callers branch
 * on it, never on message text.
 */
export type PipelineIoErrorCode =
  | 'invalid_options'
  | 'nats_unreachable'
  /** NATS answered no: bad or expired credentials, a TLS mismatch, no JetStream permission. Not retried. */
  | 'nats_refused'
  | 'stream_mismatch'
  | 'stream_provision_failed'
  | 'consumer_provision_failed'
  | 'publish_failed'
  /** An effect larger than the connection's max_payload that cannot be cut to fit: no attempt can succeed. */
  | 'payload_too_large'
  /** The consumer handed out deliveries that never arrived (a dropped connection): reopen in stream order. */
  | 'delivery_gap'
  /** A partition's lease is gone: its checkpoint must not become the restore point. */
  | 'lease_lost'
  /**
   * A partition's checkpoint (pointer or object) does not read: bad JSON, another format version, a field
   * missing or of the wrong type, an object named but gone. The partition stays failed until an operator
   * recovers it (POST /api/partitions/<k>/recover); retrying cannot help.
   */
  | 'checkpoint_invalid';

export class PipelineIoError extends Error {
  readonly code: PipelineIoErrorCode;

  constructor(code: PipelineIoErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'PipelineIoError';
    this.code = code;
  }
}

/** An option refused before any I/O (libs/config requirePositiveInt and the like), so a bad config fails at start. */
export function invalidOptions(message: string): PipelineIoError {
  return new PipelineIoError('invalid_options', message);
}

export function requireName(name: string, value: string): string {
  // JetStream stream and consumer names may not contain subject tokens' special characters.
  if (typeof value !== 'string' || !/^[A-Za-z0-9_-]+$/.test(value)) {
    throw new PipelineIoError(
      'invalid_options',
      `${name} must be a non-empty name of [A-Za-z0-9_-] (got ${value})`,
    );
  }
  return value;
}

/**
 * The pipeline process's exit status when a setting was refused at start — NATS refused its credentials or
 * TLS, the backend does not serve the pinned model or version, an option is invalid: a restart fails the
 * same way, so the supervisor stops (exit 2, like a bad config file) instead of restarting.
 */
export const EXIT_SETTING_REFUSED = 2;
/** NATS refused the settings: one case of EXIT_SETTING_REFUSED. */
export const EXIT_NATS_REFUSED = EXIT_SETTING_REFUSED;

/** pipeline.json refused at start (exit 2): `path` names the key. */
export class PipelineConfigError extends Error {
  readonly code = 'pipeline_config' as const;
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
    this.name = 'PipelineConfigError';
  }
}

/** The backend could not answer: the message is retried, never dead-lettered. */
export class RetryableError extends Error {
  readonly retryable = true;
}

/** A recovery the pipeline refuses: no such partition (404), or not a failed one of this instance (409). */
export class RecoverRefused extends Error {
  constructor(
    readonly status: 404 | 409,
    readonly code: 'not_found' | 'conflict',
    message: string,
  ) {
    super(message);
    this.name = 'RecoverRefused';
  }
}
