/**
 * Nothing a client sends can take a node down: malformed route parameters are 400 bad_request, and an
 * exception in any uWS handler is answered (500 internal, or 1011 on that one WebSocket), counted and
 * logged while the node keeps serving. The throwing handlers are test hooks (STREAMINFER_TEST_HOOKS=1).
 * Also: admin calls through a local reverse proxy are refused without a token.
 */
import WebSocket from 'ws';
import type { ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({ models: ['echo'] });
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

async function nodePids(): Promise<number[]> {
  const health = (await (await fetch(`${server.url}/health`)).json()) as { nodes: Array<{ pid: number }> };
  return health.nodes.map((node) => node.pid);
}

async function handlerErrors(route: string): Promise<number> {
  const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
  const escaped = route.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const match = new RegExp(`streaminfer_handler_errors_total\\{route="${escaped}"\\} (\\d+)`).exec(text);
  return match ? Number(match[1]) : 0;
}

async function echoWorks(client: WsClient, id: number): Promise<void> {
  expect(await client.request({ id, model: 'echo', input: [id, 2] })).toMatchObject({
    id,
    result: [id, 2],
  });
}

test('malformed percent-escapes in route parameters are 400 bad_request, and the node survives', async () => {
  const pids = await nodePids();
  const client = await WsClient.connect(server.wsUrl);
  await echoWorks(client, 1);
  const cases: Array<[string, string]> = [
    ['GET', '/v2/models/%/ready'],
    ['GET', '/v2/models/%E0%A4%A/ready'],
    ['GET', '/v2/models/%zz'],
    ['GET', '/v2/models/echo/versions/%/ready'],
    ['GET', '/v2/models/echo/versions/%E0%A4%A'],
    ['POST', '/v2/models/%E0%A4%A/infer'],
    ['POST', '/v2/models/%/versions/1/infer'],
    ['POST', '/v2/models/echo/versions/%ED%A0%80/infer'],
  ];
  for (const [method, path] of cases) {
    const response = await fetch(`${server.url}${path}`, {
      method,
      ...(method === 'POST' ? { body: '{"inputs":[]}' } : {}),
    });
    expect([method, path, response.status]).toEqual([method, path, 400]);
    expect(await response.json()).toMatchObject({ code: 'bad_request' });
  }
  await echoWorks(client, 2);
  client.close();
  expect(await nodePids()).toEqual(pids);
});

test('an exception in an HTTP handler or body callback answers 500 internal; the node keeps serving', async () => {
  const pids = await nodePids();
  const client = await WsClient.connect(server.wsUrl);
  await echoWorks(client, 1);
  const routeBefore = await handlerErrors('ANY /debug/throw');
  const bodyBefore = await handlerErrors('ANY /debug/throw body');
  const thrown = await fetch(`${server.url}/debug/throw`);
  expect(thrown.status).toBe(500);
  expect(await thrown.json()).toMatchObject({ type: 'error', code: 'internal' });
  const inBody = await fetch(`${server.url}/debug/throw`, { method: 'POST', body: 'x'.repeat(1000) });
  expect(inBody.status).toBe(500);
  expect(await inBody.json()).toMatchObject({ type: 'error', code: 'internal' });
  // The same connection that was open before is still served.
  await echoWorks(client, 2);
  expect(await handlerErrors('ANY /debug/throw')).toBe(routeBefore + 1);
  expect(await handlerErrors('ANY /debug/throw body')).toBe(bodyBefore + 1);
  expect(server.logs()).toMatch(/"route":"ANY \/debug\/throw".*handler error/);
  client.close();
  expect(await nodePids()).toEqual(pids);
});

test('an exception in a WebSocket message handler closes only that socket (1011)', async () => {
  const pids = await nodePids();
  const bystander = await WsClient.connect(server.wsUrl);
  await echoWorks(bystander, 1);
  const before = await handlerErrors('ws /debug/ws message');
  const victim = new WebSocket(server.wsUrl.replace(/\/ws$/, '/debug/ws'));
  await new Promise((resolve, reject) => {
    victim.once('open', resolve);
    victim.once('error', reject);
  });
  const closed = new Promise<number>((resolve) => victim.once('close', (code) => resolve(code)));
  victim.send('{"id":1}');
  expect(await closed).toBe(1011);
  await echoWorks(bystander, 2);
  expect(await handlerErrors('ws /debug/ws message')).toBe(before + 1);
  bystander.close();
  expect(await nodePids()).toEqual(pids);
});

test('an admin call carrying X-Forwarded-For or Forwarded is refused without a token (proxy ≠ loopback)', async () => {
  // The same call from loopback without proxy headers is served.
  expect((await fetch(`${server.adminUrl}/api/models`)).status).toBe(200);
  const proxied: Array<Record<string, string>> = [
    { 'x-forwarded-for': '203.0.113.7' },
    { forwarded: 'for=203.0.113.7;proto=https' },
  ];
  for (const header of proxied) {
    const listed = await fetch(`${server.adminUrl}/api/models`, { headers: header });
    expect(listed.status).toBe(401);
    const body = (await listed.json()) as { code: string; message: string };
    expect(body.code).toBe('unauthorized');
    expect(body.message).toMatch(/proxy/);
    const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'echo' }, header);
    expect(reload.status).toBe(401);
    expect(reload.body).toMatchObject({ code: 'unauthorized' });
  }
});
