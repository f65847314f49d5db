import type { ErrorCode, RequestId } from './errors';

/** JSON answers sent to clients. Built by string concatenation: the shape is fixed and this runs per response. */
export function encodeResult(
  id: RequestId,
  model: string,
  version: string,
  epoch: number,
  result: unknown,
  latencyMs: number,
): string {
  return encodeResultWithHead(id, encodeResultHead(model, version, epoch), result, latencyMs);
}

/**
 * The part of an answer that only depends on the model version and the epoch
 * (`,"model":…,"version":…,"epoch":…,"result":`): the gateway builds it once per version and epoch.
 */
export function encodeResultHead(model: string, version: string, epoch: number): string {
  return (
    ',"model":' +
    JSON.stringify(model) +
    ',"version":' +
    JSON.stringify(version) +
    ',"epoch":' +
    epoch +
    ',"result":'
  );
}

/** An answer from its cached head (`encodeResultHead`). */
export function encodeResultWithHead(
  id: RequestId,
  head: string,
  result: unknown,
  latencyMs: number,
): string {
  return (
    '{"id":' +
    (typeof id === 'number' ? String(id) : JSON.stringify(id)) +
    head +
    JSON.stringify(result) +
    ',"latency_ms":' +
    formatMilliseconds(latencyMs) +
    '}'
  );
}

/**
 * `Math.round(ms * 1000) / 1000` as JSON text, from integers: the same digits without a
 * double-to-shortest-decimal conversion per answer.
 */
export function formatMilliseconds(ms: number): string {
  const micros = Math.round(ms * 1000);
  if (!Number.isSafeInteger(micros) || micros < 0) return String(micros / 1000);
  const whole = Math.floor(micros / 1000);
  const fraction = micros - whole * 1000;
  if (fraction === 0) return String(whole);
  if (fraction % 100 === 0) return whole + '.' + fraction / 100;
  if (fraction % 10 === 0) return whole + (fraction < 100 ? '.0' : '.') + fraction / 10;
  return whole + (fraction < 10 ? '.00' : fraction < 100 ? '.0' : '.') + fraction;
}

/**
 * An error answer. `suppressed` (WebSocket, id-less errors only): how many identical errors on this connection
 * were not answered since the previous answer of this code (they were coalesced into this one).
 */
export function encodeError(
  id: RequestId,
  code: ErrorCode,
  message: string,
  retryAfterMs?: number,
  suppressed?: number,
): string {
  const retry = retryAfterMs === undefined ? '' : ',"retry_after_ms":' + Math.max(0, Math.ceil(retryAfterMs));
  const repeats = suppressed ? ',"suppressed":' + suppressed : '';
  return (
    '{"id":' +
    JSON.stringify(id) +
    ',"type":"error","code":"' +
    code +
    '","message":' +
    JSON.stringify(message) +
    retry +
    repeats +
    '}'
  );
}

export function encodeWarning(code: string, message: string): string {
  return '{"type":"warning","code":"' + code + '","message":' + JSON.stringify(message) + '}';
}
