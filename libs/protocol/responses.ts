import type { ErrorCode } from './errors';
import type { RequestId } from './request';

/** JSON answers sent to clients. Built by string concatenation: the shape is fixed and this runs per response. */
export function encodeResult(
  id: RequestId,
  model: string,
  version: string,
  epoch: number,
  result: unknown,
  latencyMs: number,
): string {
  return (
    '{"id":' +
    JSON.stringify(id) +
    ',"model":' +
    JSON.stringify(model) +
    ',"version":' +
    JSON.stringify(version) +
    ',"epoch":' +
    epoch +
    ',"result":' +
    JSON.stringify(result) +
    ',"latency_ms":' +
    Math.round(latencyMs * 1000) / 1000 +
    '}'
  );
}

export function encodeError(id: RequestId, code: ErrorCode, message: string, retryAfterMs?: number): string {
  const retry = retryAfterMs === undefined ? '' : ',"retry_after_ms":' + Math.max(0, Math.ceil(retryAfterMs));
  return (
    '{"id":' +
    JSON.stringify(id) +
    ',"type":"error","code":"' +
    code +
    '","message":' +
    JSON.stringify(message) +
    retry +
    '}'
  );
}

export function encodeWarning(code: string, message: string): string {
  return '{"type":"warning","code":"' + code + '","message":' + JSON.stringify(message) + '}';
}
