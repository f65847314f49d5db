/**
 * How the pipeline gets a prediction: one interface, two modes. `embedded` runs the model in this process
 * through the server's own worker pool and micro-batcher (apps/node/embedded); `external` asks a
 * StreamInfer server over WebSocket (apps/pipeline/inference/external). The pipeline pins one model version per epoch and
 * names it on every call, so a backend never chooses a version itself.
 */

/** The version a processing epoch pins. */
export interface ModelPin {
  model: string;
  version: string;
}

export type InferenceMode = 'embedded' | 'external';

export interface InferenceBackend {
  readonly mode: InferenceMode;
  /**
   * Makes `pin` answerable (embedded: loads the version if it is not loaded; external: checks the server
   * serves it) before an epoch starts on it. Rejects with a typed error when it cannot.
   */
  prepare(pin: ModelPin): Promise<void>;
  /**
   * One input row (the model's input, e.g. delay-risk's 5 features) → the model's first output's first value
   * (delay-risk: P(late)). Calls are concurrent: the backend batches or bounds them. An overloaded or
   * rate-limited answer is retried with backoff inside the backend, never dropped; the promise rejects only
   * when the backend cannot answer at all (closed, model gone, retries exhausted), and the pipeline then
   * naks the event for redelivery.
   */
  predict(pin: ModelPin, row: Float32Array): Promise<number>;
  /** Calls in flight (a gauge for the pipeline's metrics). */
  readonly inflight: number;
  close(): Promise<void>;
}
