/**
 * One model's backlog does not hold another model on the same worker: a batch region freed by a model with a
 * long backlog goes to another model with work waiting first.
 */
import type { ServerHandle } from './harness';
import { startServer, WsClient } from './harness';

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({ models: ['bench', 'digits'], args: ['--workers', '1', '--model', 'digits'] });
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 13) / 13);
/** Under the per-client in-flight cap (1000). */
const BACKLOG = 960;

test.each(['low', 'normal'])(
  "a %s-priority backlog of one model does not hold another model's request on another connection",
  async (priority) => {
    const [busy, other] = await Promise.all([WsClient.connect(server.wsUrl), WsClient.connect(server.wsUrl)]);
    let answered = 0;
    const backlog = Array.from({ length: BACKLOG }, (_, i) =>
      busy.request({ id: i, model: 'bench', input: FEATURES, priority }, 60000).then((answer) => {
        expect(answer.type).toBeUndefined();
        answered++;
      }),
    );
    // Let the backlog reach the worker first.
    await busy.request({ id: 'marker', model: 'bench', input: FEATURES, priority: 'high' }, 60000);
    const before = answered;
    // The test means something only while most of the backlog is still to be computed.
    expect(BACKLOG - before).toBeGreaterThan(BACKLOG / 2);
    const sentAt = performance.now();
    const answer = await other.request({ id: 'digits', model: 'digits', input: Array(64).fill(3) }, 60000);
    const waitedMs = performance.now() - sentAt;
    const ahead = answered - before;
    await Promise.all(backlog);
    console.log(
      `fairness (${priority}): digits answered after ${waitedMs.toFixed(0)} ms; ${ahead} of the ${BACKLOG - before} bench requests still queued were answered before it`,
    );
    expect(answer).toMatchObject({ id: 'digits', model: 'digits' });
    // Before: the digits request waited for the whole bench backlog (every queued request answered ahead of it).
    expect(ahead).toBeLessThan((BACKLOG - before) / 2);
    busy.close();
    other.close();
  },
  60000,
);
