import type { ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;
const MAX_PAYLOAD = 65536;

beforeAll(async () => {
  server = await startServer({
    models: ['echo', 'upper'],
    args: ['--max-payload-bytes', String(MAX_PAYLOAD)],
  });
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

describe('every bad input gets a typed error on that request only', () => {
  const cases: Array<[string, string, string]> = [
    ['malformed JSON', '{"id": 1, "model": ', 'bad_request'],
    ['a JSON array', '[1, 2, 3]', 'bad_request'],
    ['a JSON string', '"hello"', 'bad_request'],
    ['no input at all', '{"id": 2, "model": "echo"}', 'bad_request'],
    ['unknown model', '{"id": 3, "model": "nope", "input": [1]}', 'unknown_model'],
    ['unknown version', '{"id": 4, "model": "echo", "version": "9", "input": [1]}', 'unknown_version'],
    ['wrong rank', '{"id": 5, "model": "echo", "input": [[1, 2], [3, 4]]}', 'shape_mismatch'],
    ['ragged', '{"id": 6, "model": "echo", "input": [1, [2]]}', 'shape_mismatch'],
    ['scalar for a vector', '{"id": 7, "model": "echo", "input": 5}', 'shape_mismatch'],
    ['strings for floats', '{"id": 8, "model": "echo", "inputs": {"input": ["a", "b"]}}', 'type_mismatch'],
    ['null element', '{"id": 9, "model": "echo", "input": [1, null]}', 'type_mismatch'],
    ['number for text', '{"id": 10, "model": "upper", "input": 42}', 'type_mismatch'],
    ['text to a float-only input', '{"id": 11, "model": "upper", "inputs": {"text": [1]}}', 'shape_mismatch'],
    ['non-finite number', '{"id": 12, "model": "echo", "input": [1, 1e400]}', 'bad_request'],
    ['float32 overflow', '{"id": 13, "model": "echo", "input": [1e39]}', 'bad_request'],
    ['unknown input name', '{"id": 14, "model": "echo", "inputs": {"pixels": [1]}}', 'bad_request'],
    ['bad priority', '{"id": 15, "model": "echo", "input": [1], "priority": "urgent"}', 'bad_request'],
    ['bad deadline', '{"id": 16, "model": "echo", "input": [1], "deadline_ms": -5}', 'bad_request'],
    ['bad id type', '{"id": {"x": 1}, "model": "echo", "input": [1]}', 'bad_request'],
    ['model is not a string', '{"id": 17, "model": 5, "input": [1]}', 'bad_request'],
  ];

  test.each(cases)('WebSocket: %s → %s', async (_name, frame, code) => {
    const client = await WsClient.connect(server.wsUrl);
    const answer = await client.sendRaw(frame);
    expect(answer).toMatchObject({ type: 'error', code });
    expect(typeof answer.message).toBe('string');
    const parsed = (() => {
      try {
        return JSON.parse(frame) as { id?: unknown };
      } catch {
        return {};
      }
    })();
    if (typeof parsed.id === 'number') expect(answer.id).toBe(parsed.id);
    // The same connection keeps working.
    expect(await client.request({ id: 'after', model: 'upper', text: 'still ok' })).toMatchObject({
      result: 'STILL OK',
    });
    client.close();
  });

  test.each(cases)('HTTP /predict: %s → %s', async (_name, body, code) => {
    const response = await postJson(`${server.url}/predict`, body);
    expect(response.body).toMatchObject({ type: 'error', code });
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(response.status).toBeLessThan(500);
  });

  test('binary garbage frame → bad_request, connection survives', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const answer = await client.sendRaw(Buffer.from([0xde, 0xad, 0xbe, 0xef, 0, 1, 2]), true);
    expect(answer).toMatchObject({ type: 'error', code: 'bad_request' });
    expect(await client.request({ id: 1, model: 'echo', input: [1] })).toMatchObject({ result: [1] });
    client.close();
  });

  test('oversized frame → payload_too_large with the id, connection survives', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const big = JSON.stringify({
      id: 77,
      model: 'echo',
      input: Array.from({ length: 20000 }, () => 1.123456),
    });
    expect(big.length).toBeGreaterThan(MAX_PAYLOAD);
    const reply = await client.sendRaw(big);
    expect(reply).toMatchObject({ type: 'error', code: 'payload_too_large', id: 77 });
    expect(await client.request({ id: 2, model: 'echo', input: [2] })).toMatchObject({ result: [2] });
    client.close();
  });

  test('oversized HTTP body → 413 payload_too_large', async () => {
    const big = JSON.stringify({
      id: 1,
      model: 'echo',
      input: Array.from({ length: 20000 }, () => 1.123456),
    });
    const response = await postJson(`${server.url}/predict`, big);
    expect(response.status).toBe(413);
    expect(response.body).toMatchObject({ code: 'payload_too_large' });
  });

  test('wrong method on /predict → 405', async () => {
    const response = await fetch(`${server.url}/predict`);
    expect(response.status).toBe(405);
    expect(await response.json()).toMatchObject({ code: 'method_not_allowed' });
  });

  test('a client sending garbage never disturbs another client streaming at the same time', async () => {
    const good = await WsClient.connect(server.wsUrl);
    const bad = await WsClient.connect(server.wsUrl);
    const goodAnswers = Array.from({ length: 200 }, (_, i) =>
      good.request({ id: i, model: 'upper', text: `req ${i}` }),
    );
    for (let i = 0; i < 100; i++) {
      bad.socket.send(i % 2 ? '{"broken' : Buffer.from([i, 255, 0]), { binary: i % 2 === 0 });
      bad.socket.send(JSON.stringify({ id: i, model: 'echo', input: [[1], [2, 3]] }));
    }
    const answers = await Promise.all(goodAnswers);
    answers.forEach((answer, i) => expect(answer).toMatchObject({ id: i, result: `REQ ${i}` }));
    good.close();
    bad.close();
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
  });
});
