import type { Answer } from './harness';
import { postJson, runCliToExit, sleep, startServer, WsClient } from './harness';

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check()) return;
    await sleep(100);
  }
  throw new Error('condition not met in time');
}

describe('start-up validation', () => {
  test('an invalid setting stops the start with a message naming it', async () => {
    const result = await runCliToExit(['serve', '--port', '0'], { STREAMINFER_BATCH_SIZE: 'abc' });
    expect(result.code).not.toBe(0);
    expect(result.out).toContain('STREAMINFER_BATCH_SIZE');
  });

  test('an invalid flag value names the flag', async () => {
    const result = await runCliToExit(['serve', '--port', '70000']);
    expect(result.code).not.toBe(0);
    expect(result.out.toLowerCase()).toContain('port');
  });

  test('refuses to run on the pure-JS uWebSockets.js fallback', async () => {
    const result = await runCliToExit(['serve', '--port', '0'], { UWS_USE_FALLBACK: '1' });
    expect(result.code).not.toBe(0);
    expect(result.out).toContain('fallback');
  });

  test('an unknown default model fails the start clearly', async () => {
    const result = await runCliToExit(['serve', '--port', '0', '--model', 'nope']);
    expect(result.code).not.toBe(0);
    expect(result.out).toContain('nope');
  });
});

describe('SIGTERM drains', () => {
  test('every admitted request is answered, then the server exits 0', async () => {
    const server = await startServer({ models: ['echo', 'upper'], args: ['--workers', '1'] });
    const clients = await Promise.all(Array.from({ length: 10 }, () => WsClient.connect(server.wsUrl)));
    const perClient = 300;
    const answers: Array<Promise<Answer>> = [];
    clients.forEach((client, c) => {
      for (let i = 0; i < perClient; i++)
        answers.push(client.request({ id: i, model: 'upper', text: `drain ${c} ${i}` }, 30000));
    });
    await Promise.race(answers);
    server.child.kill('SIGTERM');
    const settled = await Promise.allSettled(answers);
    const ok = settled.filter((s) => s.status === 'fulfilled' && s.value.type !== 'error').length;
    const refused = settled.filter((s) => s.status === 'fulfilled' && s.value.code === 'unavailable').length;
    const other = settled.filter(
      (s) => s.status === 'fulfilled' && s.value.type === 'error' && s.value.code !== 'unavailable',
    ).length;
    const unanswered = settled.filter((s) => s.status === 'rejected').length;
    expect(other).toBe(0);
    expect(unanswered).toBe(0);
    expect(ok).toBeGreaterThan(0);
    expect(ok + refused).toBe(clients.length * perClient);
    const exit = await server.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(server.logs()).toContain('"abandoned":0');
    expect(server.logs()).not.toMatch(/Aborted|core dumped/);
  });
});

describe('failures', () => {
  test('a killed worker: its requests are answered, a replacement takes over', async () => {
    const server = await startServer({ models: ['echo', 'upper'], args: ['--workers', '2'] });
    const client = await WsClient.connect(server.wsUrl);
    let stop = false;
    let ok = 0;
    const errors: string[] = [];
    const loop = (async () => {
      let id = 0;
      while (!stop) {
        const batch = Array.from({ length: 20 }, () =>
          client.request({ id: id++, model: 'upper', text: 'k' }),
        );
        for (const answer of await Promise.all(batch)) {
          if (answer.type === 'error') errors.push(answer.code!);
          else ok++;
        }
      }
    })();
    await sleep(200);
    const crash = await postJson(`${server.adminUrl}/api/debug/crash-worker`, { node: 0, worker: 0 });
    expect(crash.status).toBe(200);
    await sleep(1500);
    stop = true;
    await loop;
    expect(ok).toBeGreaterThan(0);
    // The hook kills the worker inside a batch: the node answers each request it held with a typed error (the
    // count it logs), never loses one, and no other request fails.
    const deadWorkerLog = /"failed":(\d+),"msg":"answered the requests of a dead worker"/;
    await waitFor(async () => deadWorkerLog.test(server.logs()), 5000);
    const failed = Number(deadWorkerLog.exec(server.logs())![1]);
    expect(failed).toBeGreaterThan(0);
    expect(errors).toHaveLength(failed);
    expect(errors.every((code) => code === 'internal')).toBe(true);
    console.log(`killed worker: ${failed} held requests answered internal, ${ok} answered ok`);
    await waitFor(async () => {
      const health = (await (await fetch(`${server.url}/health`)).json()) as { ready: boolean };
      return health.ready;
    }, 15000);
    expect(await client.request({ id: 'after', model: 'upper', text: 'back' })).toMatchObject({
      result: 'BACK',
    });
    expect(server.logs()).toContain('worker died');
    client.close();
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });
});
