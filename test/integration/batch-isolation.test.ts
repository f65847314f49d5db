/**
 * Batch isolation on the real server: one connection's requests that the model fails at run time (an id out
 * of range for the `lookup` model's Gather) share batches with other connections' requests, and fail nobody
 * but themselves; a client whose requests keep failing the model is counted and throttled (`rate_limited`).
 */
import { parsePrometheusText, sumSamples } from '../../libs/metrics';
import { type Answer, type ServerHandle, startServer, WsClient } from './harness';
import { expectedVectors, LOOKUP_ROWS, lookupRepository, POISON_ID } from './lookup-model';

const WAVES = 8;
const VICTIMS_PER_WAVE = 30;
const VICTIM_CONNECTIONS = 4;
const RATE_LIMIT_RPS = 100;

/** Seeded (mulberry32): the same ids and interleaving on every run. */
function rng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function metric(server: ServerHandle, name: string): Promise<number> {
  const text = await (await fetch(`${server.adminUrl}/metrics`)).text();
  return sumSamples(parsePrometheusText(text), name, { model: 'lookup' });
}

describe('batch isolation: a request the model fails fails nobody else', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    // Batches of up to 16 that wait 20 ms to fill: each wave's requests share batches.
    const { dir } = lookupRepository({ policy: 'fixed', max_batch_size: 16, max_queue_delay_ms: 20 });
    server = await startServer({
      modelsDir: dir,
      args: ['--workers', '1', '--model', 'lookup'],
      env: { STREAMINFER_RATE_LIMIT_RPS: String(RATE_LIMIT_RPS) },
    });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('240 victims batched with poison requests get exact answers; each poison gets model_error', async () => {
    const victims = await Promise.all(
      Array.from({ length: VICTIM_CONNECTIONS }, () => WsClient.connect(server.wsUrl)),
    );
    const poison = await WsClient.connect(server.wsUrl);
    const random = rng(24);
    const victimIds = (): number[] =>
      Array.from({ length: 4 }, () => Math.floor(random() * 2 * LOOKUP_ROWS) - LOOKUP_ROWS);
    const wrong: string[] = [];
    const poisonAnswers: Answer[] = [];
    let sent = 0;
    for (let wave = 0; wave < WAVES; wave++) {
      const poisonAt = Math.floor(random() * VICTIMS_PER_WAVE);
      const pending: Promise<void>[] = [];
      for (let i = 0; i < VICTIMS_PER_WAVE; i++) {
        if (i === poisonAt)
          pending.push(
            poison
              .request({ id: `p${wave}`, model: 'lookup', input: [1, POISON_ID, 2, 3] })
              .then((answer) => void poisonAnswers.push(answer)),
          );
        const ids = victimIds();
        const id = sent++;
        pending.push(
          victims[id % VICTIM_CONNECTIONS]!.request({ id, model: 'lookup', input: ids }).then((answer) => {
            const got = Array.isArray(answer.result) ? (answer.result as number[][]).flat() : answer;
            if (JSON.stringify(got) !== JSON.stringify(expectedVectors(ids)))
              wrong.push(`${id} [${ids}]: ${JSON.stringify(answer).slice(0, 300)}`);
          }),
        );
      }
      await Promise.all(pending);
    }
    expect(sent).toBe(240);
    expect({ wrong: wrong.length, first: wrong.slice(0, 3) }).toEqual({ wrong: 0, first: [] });
    expect(poisonAnswers).toHaveLength(WAVES);
    for (const answer of poisonAnswers) {
      expect(answer.code).toBe('model_error');
      expect(answer.message).toMatch(/indices element out of data bounds, idx=1000/);
    }
    // Each poison request sat in a batch with victims: that batch was bisected (a batch of 2 or more costs at
    // least 2 extra runs), and every poison answer was charged to its client.
    expect(await metric(server, 'streaminfer_batch_isolation_runs_total')).toBeGreaterThanOrEqual(2 * WAVES);
    expect(await metric(server, 'streaminfer_client_model_errors_total')).toBe(WAVES);
    for (const client of [...victims, poison]) client.close();
  });

  test('a client that sends only poison requests is counted and ends up rate_limited', async () => {
    const before = await metric(server, 'streaminfer_client_model_errors_total');
    const flood = await WsClient.connect(server.wsUrl);
    const victim = await WsClient.connect(server.wsUrl);
    // One request at a time: without a penalty every one is admitted (each takes 1 token, the refill outpaces
    // it), so a refusal within MAX_TRIES is the penalty's doing.
    const MAX_TRIES = 300;
    const started = Date.now();
    let failed = 0;
    let refused: Answer | undefined;
    for (let i = 0; i < MAX_TRIES && refused === undefined; i++) {
      const answer = await flood.request({ id: i, model: 'lookup', input: [POISON_ID, 0, 0, 0] });
      if (answer.code === 'rate_limited') refused = answer;
      else {
        expect(answer.code).toBe('model_error');
        failed++;
      }
    }
    const seconds = (Date.now() - started) / 1000;
    expect(refused).toMatchObject({ type: 'error', code: 'rate_limited' });
    expect(refused!.retry_after_ms).toBeGreaterThan(0);
    // Each failure costs 1 + 9 tokens: the 100-token burst and what refilled meanwhile buy a tenth as many.
    expect(failed).toBeGreaterThanOrEqual(RATE_LIMIT_RPS / 10);
    expect(failed).toBeLessThanOrEqual((RATE_LIMIT_RPS + RATE_LIMIT_RPS * seconds) / 10 + 1);
    expect((await metric(server, 'streaminfer_client_model_errors_total')) - before).toBe(failed);
    // The throttle is the flooder's alone.
    const answer = await victim.request({ id: 'v', model: 'lookup', input: [7, 6, -8, 0] });
    expect((answer.result as number[][]).flat()).toEqual(expectedVectors([7, 6, -8, 0]));
    flood.close();
    victim.close();
  });
});
