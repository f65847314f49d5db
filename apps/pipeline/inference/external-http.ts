/**
 * The external backend's HTTP side: a pin checked, and GETs of the server's v2 readiness and metadata
 * (retried while it is unreachable or draining, typed otherwise) that prepare() makes before a pin is used.
 */
import type { ErrorCode } from '../../../libs/protocol';
import { ExternalInferenceError } from './errors';
import type { Settings } from './external-options';
import { backoffDelay } from './external-wire';
import type { ModelPin } from './inference';

/** What a GET needs of the backend: its settings, its waiting and jitter, and whether it was closed. */
export interface HttpSide {
  readonly settings: Settings;
  sleep(ms: number): Promise<void>;
  random(): number;
  closed(): boolean;
}

/** A pin names a model and an explicit version (never an alias): the answer must come from exactly it. */
export function checkPin(pin: ModelPin): void {
  if (
    typeof pin !== 'object' ||
    pin === null ||
    typeof pin.model !== 'string' ||
    pin.model.length === 0 ||
    typeof pin.version !== 'string' ||
    pin.version.length === 0
  ) {
    throw new ExternalInferenceError(
      'invalid_options',
      'a pin needs a non-empty model and an explicit version',
    );
  }
}

/** GET on the server's HTTP side; retried while unreachable or draining, typed otherwise. */
export async function httpGet(side: HttpSide, path: string, pin: ModelPin): Promise<unknown> {
  let lastError: Error | undefined;
  for (let attempt = 1; attempt <= side.settings.maxAttempts; attempt++) {
    if (side.closed()) throw new ExternalInferenceError('closed', 'the external backend is closed');
    let status: number;
    let body: Record<string, unknown> = {};
    try {
      const response = await fetch(`${side.settings.httpBase}${path}`, {
        signal: AbortSignal.timeout(side.settings.requestTimeoutMs),
      });
      status = response.status;
      const text = await response.text();
      try {
        const parsed = JSON.parse(text) as unknown;
        if (typeof parsed === 'object' && parsed !== null) body = parsed as Record<string, unknown>;
      } catch {
        // Not JSON: the status alone decides.
      }
    } catch (error) {
      lastError = error as Error;
      await side.sleep(backoffDelay(attempt, side.settings.backoff, side.random));
      continue;
    }
    if (status === 200) return body;
    const code = serverCodeOf(body);
    if (status === 404 && (code === 'unknown_model' || code === 'unknown_version')) {
      throw new ExternalInferenceError(
        'not_served',
        `the server at ${side.settings.httpBase} does not serve ${pin.model} version ${pin.version}: ${String(body.error ?? code)}`,
        { serverCode: code },
      );
    }
    if (code === 'unavailable' || status === 503 || status === 429) {
      lastError = new Error(`${path}: HTTP ${status} ${code ?? ''}`);
      await side.sleep(backoffDelay(attempt, side.settings.backoff, side.random));
      continue;
    }
    throw new ExternalInferenceError(
      'rejected',
      `${path} answered HTTP ${status}${code ? ` ${code}` : ''}`,
      code ? { serverCode: code } : undefined,
    );
  }
  throw new ExternalInferenceError(
    'unreachable',
    `the server at ${side.settings.httpBase} did not answer ${path}: ${lastError?.message}`,
    { cause: lastError },
  );
}

/** The stable code an HTTP error body carries (`{"error": "...", "code": "..."}`). */
function serverCodeOf(body: Record<string, unknown>): ErrorCode | undefined {
  return typeof body.code === 'string' ? (body.code as ErrorCode) : undefined;
}
