/** The bare echo server's reply logic, kept free of uWS so it can be unit-tested. */

interface EchoRequest {
  id?: unknown;
  model?: unknown;
  input?: unknown;
  text?: unknown;
}

/**
 * Answer one request frame the way the real server shapes its answers:
 * `{"id","model","version":"1","result":<input or text>,"latency_ms":0}`, or a typed
 * `bad_request` error.
 */
export function echoAnswer(frame: string): string {
  let req: EchoRequest;
  try {
    req = JSON.parse(frame) as EchoRequest;
  } catch {
    return JSON.stringify({ id: null, type: 'error', code: 'bad_request', message: 'invalid JSON' });
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) {
    return JSON.stringify({
      id: null,
      type: 'error',
      code: 'bad_request',
      message: 'request must be an object',
    });
  }
  const id = req.id ?? null;
  const result = req.input !== undefined ? req.input : req.text;
  if (result === undefined) {
    return JSON.stringify({ id, type: 'error', code: 'bad_request', message: 'missing "input"' });
  }
  return JSON.stringify({
    id,
    model: typeof req.model === 'string' ? req.model : 'echo',
    version: '1',
    result,
    latency_ms: 0,
  });
}
