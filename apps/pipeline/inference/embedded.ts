/**
 * The `embedded` inference mode: the pipeline runs the model in its own process through a headless node
 * (apps/node/embedded) — the server's worker pool, rings and micro-batcher — so predictions of many keys in
 * flight at once are batched together. An `overloaded` (or `rate_limited`, `client_queue_full`) answer is
 * retried here with capped exponential backoff and jitter; anything else, or retries exhausted, rejects with
 * the protocol's ProtocolError and the pipeline naks the event.
 */
import type { Logger } from 'pino';
import type { ErrorCode } from '../../../libs/protocol';
import { ProtocolError } from '../../../libs/protocol';
import type { BatchStats } from '../../node/embedded';
import { EmbeddedNode } from '../../node/embedded';
import { PipelineIoError } from '../errors';
import type { InferenceBackend, ModelPin } from './inference';

export interface EmbeddedRetryOptions {
  /** Tries of one prediction, the first included. Default 20. */
  maxAttempts?: number;
  /** Backoff before the first retry; it doubles each time. Default 5 ms. */
  baseDelayMs?: number;
  /** Backoff cap, also the cap on an answer's Retry-After. Default 1000 ms. */
  maxDelayMs?: number;
}

export interface EmbeddedBackendOptions {
  /** The model repository, as the server reads it. */
  modelsDir: string;
  /** Worker threads of the pool. Default 1. */
  workers?: number;
  /** `cpu` (default), `auto`, `cuda:N` or `webgpu:N`. */
  device?: string;
  /** ONNX Runtime intra-op threads per session. Default: (cores − 1) / workers, at least 1. */
  intraOpThreads?: number;
  logger?: Logger;
  /** Loaded before the backend is returned (a pin that cannot be loaded fails the start). */
  pins?: ModelPin[];
  /** Predictions admitted at once; more wait in the retry loop. Default 4096. */
  maxInflight?: number;
  /** Queue bound per loaded version (the server's --max-model-queue). Default 4096. */
  maxModelQueue?: number;
  /** One prediction's deadline. Default 30000 ms. */
  requestTimeoutMs?: number;
  retry?: EmbeddedRetryOptions;
  /** close(): how long admitted predictions may still finish before they are rejected `unavailable`. Default 5000 ms. */
  closeDrainMs?: number;
}

/** The embedded backend, with what it can tell beyond the interface (for the pipeline's metrics and tests). */
export interface EmbeddedBackend extends InferenceBackend {
  readonly mode: 'embedded';
  /** Batches the workers ran for a pinned version so far (undefined: not loaded). */
  batchStats(pin: ModelPin): BatchStats | undefined;
  /** Predictions tried again after an overloaded answer, since start. */
  readonly retries: number;
  /** Unloads a version no epoch pins any more, once its admitted predictions are answered. */
  release(pin: ModelPin): Promise<void>;
}

/** Answers that mean "not now": the prediction is tried again after a backoff. */
const RETRYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'overloaded',
  'rate_limited',
  'client_queue_full',
]);

interface ResolvedRetry {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

class EmbeddedInference implements EmbeddedBackend {
  readonly mode = 'embedded' as const;
  private calls = 0;
  private retried = 0;
  private closing: Promise<void> | undefined;
  /** Wakes predictions sleeping in a backoff, so close() does not wait for their timers. */
  private readonly sleepers = new Set<() => void>();

  constructor(
    private readonly node: EmbeddedNode,
    private readonly retry: ResolvedRetry,
    private readonly closeDrainMs: number,
  ) {}

  get inflight(): number {
    return this.calls;
  }

  get retries(): number {
    return this.retried;
  }

  prepare(pin: ModelPin): Promise<void> {
    if (this.closing) return Promise.reject(closedError());
    return this.node.prepare(pin.model, pin.version);
  }

  release(pin: ModelPin): Promise<void> {
    if (this.closing) return Promise.reject(closedError());
    return this.node.release(pin.model, pin.version);
  }

  batchStats(pin: ModelPin): BatchStats | undefined {
    return this.node.batchStats(pin.model, pin.version);
  }

  async predict(pin: ModelPin, row: Float32Array): Promise<number> {
    this.calls++;
    try {
      for (let attempt = 1; ; attempt++) {
        if (this.closing) throw closedError();
        try {
          const output = await this.node.infer(pin.model, pin.version, row);
          if (output.length === 0)
            throw new ProtocolError(
              'model_error',
              `${pin.model} version ${pin.version} answered an empty output`,
            );
          return output[0]!;
        } catch (error) {
          if (!(error instanceof ProtocolError) || !RETRYABLE.has(error.code)) throw error;
          if (attempt >= this.retry.maxAttempts)
            throw new ProtocolError(
              error.code,
              `${error.message} (gave up after ${attempt} tries)`,
              error.retryAfterMs,
            );
          this.retried++;
          await this.sleep(this.backoff(attempt, error.retryAfterMs));
        }
      }
    } finally {
      this.calls--;
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const wake of [...this.sleepers]) wake();
      await this.node.close(this.closeDrainMs);
    })();
    return this.closing;
  }

  /** Capped exponential backoff with jitter (half to full), never shorter than a Retry-After under the cap. */
  private backoff(attempt: number, retryAfterMs: number | undefined): number {
    const { baseDelayMs, maxDelayMs } = this.retry;
    const exponential = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(attempt - 1, 30));
    const jittered = exponential * (0.5 + Math.random() / 2);
    return Math.min(maxDelayMs, Math.max(jittered, retryAfterMs ?? 0));
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.sleepers.add(wake);
    });
  }
}

function closedError(): ProtocolError {
  return new ProtocolError('unavailable', 'the embedded inference backend is closed');
}

/**
 * Starts the worker pool and loads `pins`. Options are checked before anything starts: a PipelineIoError
 * `invalid_options`. A pin that cannot be loaded rejects with its ProtocolError (`unknown_model`,
 * `unknown_version`, `reload_failed`) and stops what was started.
 */
export async function createEmbeddedBackend(options: EmbeddedBackendOptions): Promise<EmbeddedBackend> {
  const checked = checkOptions(options);
  const node = startNode({
    modelsDir: options.modelsDir,
    ...(options.workers !== undefined ? { workers: options.workers } : {}),
    ...(options.device !== undefined ? { device: options.device } : {}),
    ...(options.intraOpThreads !== undefined ? { intraOpThreads: options.intraOpThreads } : {}),
    ...(options.logger !== undefined ? { logger: options.logger } : {}),
    ...(options.maxInflight !== undefined ? { maxInflight: options.maxInflight } : {}),
    ...(options.maxModelQueue !== undefined ? { maxModelQueue: options.maxModelQueue } : {}),
    ...(options.requestTimeoutMs !== undefined ? { requestTimeoutMs: options.requestTimeoutMs } : {}),
  });
  const backend = new EmbeddedInference(node, checked.retry, checked.closeDrainMs);
  try {
    for (const pin of options.pins ?? []) await backend.prepare(pin);
  } catch (error) {
    await node.close();
    throw error;
  }
  return backend;
}

/** The headless node; its own option checks (models directory, workers, device, limits) are the ones used. */
function startNode(options: Parameters<typeof EmbeddedNode.start>[0]): EmbeddedNode {
  try {
    return EmbeddedNode.start(options);
  } catch (error) {
    if (error instanceof ProtocolError && error.code === 'bad_request')
      throw new PipelineIoError('invalid_options', error.message);
    throw error;
  }
}

/** What only the backend reads: pins, retries, the close drain (the node checks the rest when it starts). */
function checkOptions(options: EmbeddedBackendOptions): { retry: ResolvedRetry; closeDrainMs: number } {
  const invalid = (message: string): never => {
    throw new PipelineIoError('invalid_options', `embedded inference: ${message}`);
  };
  if (typeof options !== 'object' || options === null) invalid('options must be an object');
  const integer = (
    name: string,
    value: number | undefined,
    fallback: number,
    min: number,
    max: number,
  ): number => {
    if (value === undefined) return fallback;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
      invalid(`${name} must be an integer from ${min} to ${max} (got ${String(value)})`);
    return value;
  };
  for (const pin of options.pins ?? []) {
    if (
      typeof pin?.model !== 'string' ||
      pin.model === '' ||
      typeof pin.version !== 'string' ||
      pin.version === ''
    )
      invalid(`a pin needs a model and a version (got ${JSON.stringify(pin)})`);
  }
  const retry = options.retry ?? {};
  const maxAttempts = integer('retry.maxAttempts', retry.maxAttempts, 20, 1, 1000);
  const baseDelayMs = integer('retry.baseDelayMs', retry.baseDelayMs, 5, 1, 60_000);
  const maxDelayMs = integer('retry.maxDelayMs', retry.maxDelayMs, 1000, baseDelayMs, 600_000);
  const closeDrainMs = integer('closeDrainMs', options.closeDrainMs, 5000, 0, 600_000);
  return { retry: { maxAttempts, baseDelayMs, maxDelayMs }, closeDrainMs };
}
