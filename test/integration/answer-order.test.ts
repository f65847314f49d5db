/**
 * Answer order across a reload is kept per connection: old-epoch requests still computing on some
 * connections no longer hold the new-epoch answers of the others.
 */
import type { Answer, ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({ models: ['bench', 'digits'], args: ['--workers', '1', '--model', 'digits'] });
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 13) / 13);
const BACKLOG_PER_CONNECTION = 800;

test("one connection's old-epoch backlog does not delay another connection's new-epoch answer", async () => {
  // Two connections queue a long low-priority backlog on the slow model (old epoch).
  const slow = await Promise.all([WsClient.connect(server.wsUrl), WsClient.connect(server.wsUrl)]);
  const oldAnswers: Array<{ at: number; answer: Answer }> = [];
  const backlog = slow.flatMap((client, c) =>
    Array.from({ length: BACKLOG_PER_CONNECTION }, (_, i) =>
      client
        .request(
          { id: c * 100000 + i, model: 'bench', input: FEATURES, priority: 'low', deadline_ms: 120000 },
          120000,
        )
        .then((answer) => {
          oldAnswers.push({ at: performance.now(), answer });
        }),
    ),
  );
  const fast = await WsClient.connect(server.wsUrl);
  const reload = await postJson(`${server.url}/api/reload`, { model: 'digits', version: '1' });
  expect(reload.status).toBe(200);
  const epoch = reload.body.epoch as number;
  // The backlog must still be computing for the test to mean anything.
  expect(oldAnswers.length).toBeLessThan(slow.length * BACKLOG_PER_CONNECTION);
  const sentAt = performance.now();
  // Same model, normal priority: computed ahead of the low-priority backlog, in the new epoch.
  const answer = await fast.request({ id: 1, model: 'bench', input: FEATURES });
  const answeredAt = performance.now();
  expect(answer).toMatchObject({ id: 1, epoch, model: 'bench' });
  const digits = await fast.request({ id: 2, model: 'digits', input: Array(64).fill(3) });
  expect(digits).toMatchObject({ id: 2, epoch, version: '1' });
  await Promise.all(backlog);
  const lastOld = Math.max(...oldAnswers.map((entry) => entry.at));
  console.log(
    `answer order: new-epoch answer on another connection after ${(answeredAt - sentAt).toFixed(1)} ms; ` +
      `old-epoch backlog (${oldAnswers.length} answers) finished ${(lastOld - answeredAt).toFixed(0)} ms later`,
  );
  expect(oldAnswers.every(({ answer }) => answer.type === undefined && answer.epoch! < epoch)).toBe(true);
  // Before: the new answer was held until the node's last old-epoch answer was out.
  expect(answeredAt).toBeLessThan(lastOld);
  for (const client of [...slow, fast]) client.close();
}, 60000);
