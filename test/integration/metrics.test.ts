import { spawnSync } from 'node:child_process';
import { lintExposition } from '../../libs/metrics';
import type { Answer, ServerHandle } from './harness';
import { digitsCanaryAndShadow, postJson, sleep, startServer, WsClient } from './harness';

const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 17) / 4);
const PIXELS = Array.from({ length: 64 }, (_, i) => (i * 5) % 17);

/** The value of one series, or undefined when the text has no such series. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((entry) => entry.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function promtoolOnPath(): boolean {
  return spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;
}

describe('/metrics on --nodes 2: Prometheus naming rules, and every node visible', () => {
  let server: ServerHandle;
  let text = '';
  beforeAll(async () => {
    server = await startServer({
      models: ['bench', 'digits', 'upper'],
      args: ['--nodes', '2', '--model', 'upper'],
      env: { STREAMINFER_MAX_QUEUE_SIZE: '4', STREAMINFER_BATCH_SIZE: '4' },
    });
    // Traffic of every kind first, so the families have samples: answers, errors, sheds, a reload.
    const clients = await Promise.all(Array.from({ length: 4 }, () => WsClient.connect(server.wsUrl)));
    const answers: Answer[] = [];
    for (const [c, client] of clients.entries()) {
      answers.push(
        await client.request({ id: 'ok', model: 'upper', text: `client ${c}` }),
        await client.request({ id: 'digits', model: 'digits', version: '1', input: PIXELS }),
        await client.request({ id: 'unknown', model: 'nope', input: [1] }),
        await client.request({ id: 'shape', model: 'digits', input: [1, 2] }),
        // Eight at once over a cap of four in flight: the rest are shed with client_queue_full.
        ...(await Promise.all(
          Array.from({ length: 8 }, (_, i) => client.request({ id: i, model: 'bench', input: FEATURES })),
        )),
      );
    }
    for (const client of clients) client.close();
    expect(answers.filter((answer) => answer.code === 'client_queue_full').length).toBeGreaterThan(0);
    expect((await postJson(`${server.url}/predict`, { model: 'upper', text: 'http' })).status).toBe(200);
    expect((await postJson(`${server.url}/predict`, '{not json')).status).toBe(400);
    const kserve = await postJson(`${server.url}/v2/models/upper/infer`, {
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['kserve'] }],
    });
    expect(kserve.status).toBe(200);
    // Registry traffic: a candidate on a canary share, compared in shadow.
    expect(await digitsCanaryAndShadow(server.adminUrl)).toEqual([200, 200, 200, 200]);
    const registryClient = await WsClient.connect(server.wsUrl);
    // One at a time: this server caps a client at 4 in flight, and a shed request is never mirrored.
    for (let i = 0; i < 20; i++) await registryClient.request({ id: i, model: 'digits', input: PIXELS });
    registryClient.close();
    // Shadow copies run at the lowest priority and are compared after the client's answer went out: wait
    // (bounded) until the comparisons are counted, so the scrape below is not taken before them.
    const shadowCounted =
      /^streaminfer_shadow_comparisons_total\{model="digits",agree="(true|false)"\} [1-9]/m;
    for (const until = Date.now() + 10000; Date.now() < until; await sleep(50))
      if (shadowCounted.test(await (await fetch(`${server.adminUrl}/metrics`)).text())) break;
    // The first scrape starts prom-client's setImmediate lag probe; the second reports it.
    await (await fetch(`${server.adminUrl}/metrics`)).text();
    text = await (await fetch(`${server.adminUrl}/metrics`)).text();
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('the exposition passes the metric lint (the rules promtool applies), on every host', () => {
    const families = text.split('\n').filter((line) => line.startsWith('# TYPE ')).length;
    const series = text.split('\n').filter((line) => line !== '' && !line.startsWith('#')).length;
    console.log(
      `/metrics: ${families} families, ${series} series, lint problems: ${lintExposition(text).length}`,
    );
    expect(families).toBeGreaterThan(40);
    expect(lintExposition(text)).toEqual([]);
    // Every kind of traffic above left its mark.
    expect(text).toMatch(/^streaminfer_requests_total\{[^}]*code="unknown_model"\} [1-9]/m);
    expect(text).toMatch(/^streaminfer_shed_total\{[^}]*reason="client_queue_full"\} [1-9]/m);
    expect(text).toMatch(/^streaminfer_reloads_total\{result="committed",strategy="atomic"\} [1-9]/m);
    expect(text).toMatch(/^streaminfer_routed_requests_total\{[^}]*route="canary"\} [1-9]/m);
    expect(text).toMatch(
      /^streaminfer_shadow_comparisons_total\{model="digits",agree="(true|false)"\} [1-9]/m,
    );
  });

  test('`promtool check metrics` accepts it (when promtool is installed)', () => {
    if (!promtoolOnPath()) {
      console.log('promtool is not on PATH: the metric lint above is the check on this host');
      return;
    }
    const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    console.log(
      `promtool check metrics: exit ${result.status}, output ${JSON.stringify(result.stdout + result.stderr)}`,
    );
    expect(result.stdout + result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  test.each(['0', '1'])('node %s exports its own CPU, memory, heap and event-loop lag', (node) => {
    const labels = `node="${node}"`;
    expect(sample(text, 'streaminfer_node_process_resident_memory_bytes', labels)).toBeGreaterThan(0);
    expect(sample(text, 'streaminfer_node_process_cpu_seconds_total', labels)).toBeGreaterThan(0);
    expect(sample(text, 'streaminfer_node_nodejs_heap_size_used_bytes', labels)).toBeGreaterThan(0);
    expect(sample(text, 'streaminfer_node_process_start_time_seconds', labels)).toBeGreaterThan(0);
    const lag = sample(text, 'streaminfer_node_nodejs_eventloop_lag_seconds', labels);
    expect(lag).toBeGreaterThanOrEqual(0);
    expect(sample(text, 'streaminfer_node_nodejs_eventloop_lag_p99_seconds', labels)).toBeGreaterThan(0);
    console.log(
      `node ${node}: rss ${sample(text, 'streaminfer_node_process_resident_memory_bytes', labels)} bytes, ` +
        `event-loop lag ${lag} s`,
    );
  });

  test('no node beyond the two, and the supervisor keeps its own series without a node label', () => {
    expect(text).not.toMatch(/node="2"/);
    expect(text).toMatch(/^streaminfer_supervisor_process_resident_memory_bytes [1-9]/m);
    expect(text).toMatch(/^streaminfer_supervisor_nodejs_eventloop_lag_p99_seconds [0-9]/m);
  });
});
