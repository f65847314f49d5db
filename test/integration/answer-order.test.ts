/**
 * Answer order across a reload is kept per connection: old-epoch requests still computing on some
 * connections no longer hold the new-epoch answers of the others.
 */
import type { Answer, ServerHandle } from './harness';
import { postJson, startServer, WsClient } from './harness';

let server: ServerHandle;
/** The hold's time bound for this server (1 s in production), short so the bound is seen to act. */
const HOLD_MS = 200;

beforeAll(async () => {
  server = await startServer({
    models: ['bench', 'digits'],
    args: ['--workers', '1', '--model', 'digits'],
    env: { STREAMINFER_TEST_HOLD_MS: String(HOLD_MS) },
  });
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 13) / 13);
const BACKLOG_PER_CONNECTION = 800;
/** Just under the per-client in-flight cap (1000); two of them stay under the low-priority queue bound (2048). */
const LONG_BACKLOG_PER_CONNECTION = 950;

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
  await admitted(slow);
  const fast = await WsClient.connect(server.wsUrl);
  const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '1' });
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
  expect(oldAnswers.filter(({ answer }) => answer.type !== undefined || answer.epoch! >= epoch)).toEqual([]);
  // Before: the new answer was held until the node's last old-epoch answer was out.
  expect(answeredAt).toBeLessThan(lastOld);
  // Nothing was held at all: the old backlog was on other connections.
  expect(await metric('streaminfer_answers_held_total')).toBe(0);
  for (const client of [...slow, fast]) client.close();
}, 60000);

test('on the connection with the old backlog, a new-epoch answer is held only up to the time bound', async () => {
  const client = await WsClient.connect(server.wsUrl);
  const other = await WsClient.connect(server.wsUrl);
  const arrivals: Array<{ at: number; answer: Answer }> = [];
  const record = (answer: Answer): void => {
    arrivals.push({ at: performance.now(), answer });
  };
  // The same connection queues a long low-priority backlog (another one lengthens it).
  const backlog = [client, other].flatMap((socket, c) =>
    Array.from({ length: LONG_BACKLOG_PER_CONNECTION }, (_, i) =>
      socket
        .request(
          { id: c * 100000 + i, model: 'bench', input: FEATURES, priority: 'low', deadline_ms: 120000 },
          120000,
        )
        .then((answer) => {
          if (socket === client) record(answer);
        }),
    ),
  );
  await admitted([client, other]);
  const releasesBefore = await metric('streaminfer_answer_hold_releases_total{reason="time"}');
  const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '2' });
  expect(reload.status).toBe(200);
  const epoch = reload.body.epoch as number;
  expect(arrivals.length).toBeLessThan(LONG_BACKLOG_PER_CONNECTION);
  const sentAt = performance.now();
  const fresh = await client.request({ id: 'new', model: 'bench', input: FEATURES });
  const answeredAt = performance.now();
  expect(fresh).toMatchObject({ id: 'new', epoch });
  await Promise.all(backlog);
  const lastOld = Math.max(...arrivals.map((entry) => entry.at));
  const lateOld = arrivals.filter((entry) => entry.at > answeredAt).length;
  console.log(
    `answer order: new-epoch answer behind its own connection's old backlog after ${(answeredAt - sentAt).toFixed(0)} ms ` +
      `(hold bound ${HOLD_MS} ms); ${lateOld} old answers came after it, the last ${(lastOld - answeredAt).toFixed(0)} ms later`,
  );
  // Held (the order guarantee) but not until the backlog was out: the time bound released it.
  expect(answeredAt - sentAt).toBeGreaterThanOrEqual(HOLD_MS - 20);
  expect(answeredAt).toBeLessThan(lastOld);
  expect(lateOld).toBeGreaterThan(0);
  expect(await metric('streaminfer_answers_held_total')).toBeGreaterThan(0);
  expect(await metric('streaminfer_answer_hold_releases_total{reason="time"}')).toBe(releasesBefore + 1);
  client.close();
  other.close();
}, 60000);

/**
 * Frames of one connection are admitted in order: once a quick request sent after the backlog is answered, the
 * whole backlog was routed — in the epoch before the reload that follows, not racing it.
 */
async function admitted(clients: WsClient[]): Promise<void> {
  await Promise.all(
    clients.map((client, c) =>
      // Normal priority on the backlog's own model: computed ahead of the low-priority backlog.
      client.request({ id: `marker-${c}`, model: 'bench', input: FEATURES }, 60000),
    ),
  );
}

async function metric(series: string): Promise<number> {
  const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((entry) => entry.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}
