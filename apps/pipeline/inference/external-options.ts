/** The `external` inference mode's options, checked before any I/O so a bad config fails at start. */
import type { Logger } from 'pino';
import { ExternalInferenceError } from './errors';
import type { BackoffOptions } from './external-wire';
import { httpBaseOf } from './external-wire';

export interface ExternalBackendOptions {
  /** The server's WebSocket endpoint, e.g. `ws://127.0.0.1:8000/ws`. */
  url: string;
  /** Connections in the pool (default 2). */
  connections?: number;
  /** Calls in flight in all, retries and re-sends included (default 64). */
  maxInflight?: number;
  /**
   * Calls in flight on one connection (default ceil(maxInflight / connections)). Keep it at or under the
   * server's per-client cap (`STREAMINFER_MAX_QUEUE_SIZE`); an answer `client_queue_full` is retried.
   */
  maxInflightPerConnection?: number;
  /** One attempt's time limit, also sent as the request's `deadline_ms` (default 10,000). */
  requestTimeoutMs?: number;
  /** Retry and reconnect delays (default 25 ms doubling to 2 s). */
  backoff?: BackoffOptions;
  /** Attempts per call before it rejects `retries_exhausted` (default 10); a lost connection counts one. */
  maxAttempts?: number;
  /**
   * Request encoding (default `json`). `binary` sends the row's float32 bytes in a tensor frame (for pins
   * prepared first, whose model has one float32 input). For delay-risk's 5 features JSON measured faster
   * end to end against a 1-node server (67k vs 53k predicts/s), so it is the default.
   */
  frames?: 'json' | 'binary';
  logger?: Pick<Logger, 'warn' | 'info' | 'debug'>;
  /** Injectable for tests: time (ms, monotonic), waiting (backoff, reconnect, pauses), the jitter source. */
  clock?: () => number;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

/** The options resolved: defaults applied, every bound checked. */
export interface Settings {
  url: URL;
  httpBase: string;
  connections: number;
  maxInflight: number;
  perConnection: number;
  requestTimeoutMs: number;
  backoff: BackoffOptions;
  maxAttempts: number;
  frames: 'json' | 'binary';
}

const DEFAULTS = {
  connections: 2,
  maxInflight: 64,
  requestTimeoutMs: 10_000,
  backoff: { baseMs: 25, maxMs: 2_000 },
  maxAttempts: 10,
} as const;

function fail(message: string): never {
  throw new ExternalInferenceError('invalid_options', message);
}

function positiveInt(name: string, value: number | undefined, fallback: number): number {
  const resolved = value ?? fallback;
  if (!Number.isInteger(resolved) || resolved < 1) fail(`${name} must be an integer >= 1 (got ${resolved})`);
  return resolved;
}

/** Options are checked before any I/O so a bad config fails at start, not on the first event. */
export function resolveExternalOptions(options: ExternalBackendOptions): Settings {
  if (typeof options !== 'object' || options === null) fail('options must be an object');
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    fail(`url must be a ws:// or wss:// URL (got ${String(options.url)})`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    fail(`url must be a ws:// or wss:// URL (got ${options.url})`);
  const connections = positiveInt('connections', options.connections, DEFAULTS.connections);
  const maxInflight = positiveInt('maxInflight', options.maxInflight, DEFAULTS.maxInflight);
  const perConnection = positiveInt(
    'maxInflightPerConnection',
    options.maxInflightPerConnection,
    Math.ceil(maxInflight / connections),
  );
  const requestTimeoutMs = positiveInt(
    'requestTimeoutMs',
    options.requestTimeoutMs,
    DEFAULTS.requestTimeoutMs,
  );
  const maxAttempts = positiveInt('maxAttempts', options.maxAttempts, DEFAULTS.maxAttempts);
  const frames = options.frames ?? 'json';
  if (frames !== 'json' && frames !== 'binary')
    fail(`frames must be "json" or "binary" (got ${String(frames)})`);
  const backoff = options.backoff ?? DEFAULTS.backoff;
  if (
    typeof backoff !== 'object' ||
    backoff === null ||
    !Number.isFinite(backoff.baseMs) ||
    !Number.isFinite(backoff.maxMs) ||
    backoff.baseMs < 0 ||
    backoff.maxMs < backoff.baseMs
  ) {
    fail(`backoff must be {baseMs >= 0, maxMs >= baseMs} (got ${JSON.stringify(backoff)})`);
  }
  return {
    url,
    httpBase: httpBaseOf(url),
    connections,
    maxInflight,
    perConnection,
    requestTimeoutMs,
    backoff: { baseMs: backoff.baseMs, maxMs: backoff.maxMs },
    maxAttempts,
    frames,
  };
}
