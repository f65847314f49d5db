import type { Answer, ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({ models: ['echo', 'upper'], args: ['--workers', '1'] });
});

afterAll(async () => {
  const result = await server.stop();
  expect(result).toEqual({ code: 0, signal: null });
});

describe('WebSocket /ws', () => {
  test('echo returns float tensors with model and version', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const answer = await client.request({ id: 1, model: 'echo', input: [1.5, -2, 3.25, 0] });
    expect(answer).toMatchObject({ id: 1, model: 'echo', version: '1', result: [1.5, -2, 3.25, 0] });
    expect(typeof answer.latency_ms).toBe('number');
    client.close();
  });

  test('text requests go to the default model (echo) and upper uppercases', async () => {
    const client = await WsClient.connect(server.wsUrl);
    expect(await client.request({ text: 'hello', id: 1 })).toMatchObject({
      id: 1,
      result: 'hello',
      model: 'echo',
      version: '1',
    });
    expect(await client.request({ id: 2, model: 'upper', text: 'Hello, World' })).toMatchObject({
      id: 2,
      result: 'HELLO, WORLD',
      model: 'upper',
      version: '1',
    });
    expect(await client.request({ id: 3, model: 'upper', input: '' })).toMatchObject({ id: 3, result: '' });
    expect(await client.request({ id: 'str-id', model: 'upper', text: 'ünïcode ok' })).toMatchObject({
      id: 'str-id',
      result: 'üNïCODE OK',
    });
    client.close();
  });

  test('many requests in flight on one connection are matched by id', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const requests: Array<Promise<Answer>> = [];
    for (let i = 0; i < 300; i++) {
      if (i % 3 === 0) requests.push(client.request({ id: i, model: 'upper', text: `item ${i} abc` }));
      else requests.push(client.request({ id: i, model: 'echo', input: [i, i + 0.5, -i] }));
    }
    const answers = await Promise.all(requests);
    answers.forEach((answer, i) => {
      expect(answer.id).toBe(i);
      if (i % 3 === 0) expect(answer.result).toBe(`ITEM ${i} ABC`);
      else expect(answer.result).toEqual([i, i + 0.5, -i]);
    });
    client.close();
  });

  test('variable-length float inputs are batched by shape and all answered correctly', async () => {
    const client = await WsClient.connect(server.wsUrl);
    const lengths = [1, 7, 3, 7, 0, 64, 3, 1];
    const answers = await Promise.all(
      lengths.map((length, id) =>
        client.request({ id, model: 'echo', input: Array.from({ length }, (_, k) => k * 0.25 + id) }),
      ),
    );
    answers.forEach((answer, id) =>
      expect(answer.result).toEqual(Array.from({ length: lengths[id]! }, (_, k) => k * 0.25 + id)),
    );
    client.close();
  });
});

describe('HTTP', () => {
  test('POST /predict answers one request', async () => {
    const response = await postJson(`${server.url}/predict`, { id: 9, model: 'upper', text: 'http path' });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ id: 9, model: 'upper', version: '1', result: 'HTTP PATH' });
  });

  test('concurrent /predict requests are batched internally', async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        postJson(`${server.url}/predict`, { id: i, model: 'echo', input: [i] }),
      ),
    );
    answers.forEach((response, i) => {
      expect(response.status).toBe(200);
      expect(response.body.result).toEqual([i]);
    });
  });

  test('GET /health names models, versions and the execution provider', async () => {
    const response = await fetch(`${server.url}/health`);
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      status: string;
      ready: boolean;
      default_model: string;
      models: Array<{ name: string; versions: Array<{ version: string; execution_provider: string }> }>;
      nodes: unknown[];
    };
    expect(body).toMatchObject({ status: 'ok', ready: true, default_model: 'echo' });
    expect(body.nodes).toHaveLength(1);
    const names = body.models.map((model) => model.name).sort();
    expect(names).toEqual(['echo', 'upper']);
    for (const model of body.models)
      expect(model.versions[0]).toMatchObject({ version: '1', execution_provider: 'cpu' });
  });

  test('GET /metrics exposes Prometheus text with the design names', async () => {
    const client = await WsClient.connect(server.wsUrl);
    await client.request({ id: 1, model: 'echo', input: [1] });
    client.close();
    const response = await fetch(`${server.adminUrl}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    const text = await response.text();
    for (const name of [
      'streaminfer_requests_total',
      'streaminfer_request_duration_seconds_bucket',
      'streaminfer_queue_duration_seconds_bucket',
      'streaminfer_compute_duration_seconds_bucket',
      'streaminfer_batch_size_bucket',
      'streaminfer_queue_depth',
      'streaminfer_model_info',
      'streaminfer_ws_connections',
      'streaminfer_supervisor_process_cpu_user_seconds_total',
    ]) {
      expect(text).toContain(name);
    }
    expect(text).toMatch(/streaminfer_model_info\{[^}]*model="echo"[^}]*execution_provider="cpu"[^}]*\} 1/);
    expect(text).toMatch(
      /streaminfer_requests_total\{[^}]*model="echo",version="1",protocol="ws",code="ok"\} \d+/,
    );
  });

  test('unknown paths answer 404 with a typed error', async () => {
    const response = await fetch(`${server.url}/nope`);
    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ type: 'error', code: 'not_found' });
  });
});
