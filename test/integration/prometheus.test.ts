/**
 * A real Prometheus (Debian's 2.42, run as a plain process on a free port with a temporary data dir) scrapes a
 * real two-node server with deploy/prometheus.yml (ports and intervals substituted) and loads the alert and
 * recording rules. The test drives traffic of every kind (WS and HTTP, answers, errors, sheds, a reload, a
 * canary and a shadow), then asks Prometheus's HTTP API what it saw, and runs every query of the Grafana
 * dashboard (deploy/grafana/dashboard.ts, read from the module so they cannot drift) against it.
 * Needs `prometheus` on PATH (.ci/run installs it); without it the suite is skipped, saying so.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { dashboardQueries } from '../../deploy/grafana/dashboard';
import type { Answer, ServerHandle } from './harness';
import { digitsCanaryAndShadow, postJson, REPO_ROOT, sleep, startServer, WsClient } from './harness';

const DEPLOY = path.join(REPO_ROOT, 'deploy');
const FEATURES = Array.from({ length: 256 }, (_, i) => (i % 17) / 4);
const PIXELS = Array.from({ length: 64 }, (_, i) => (i * 5) % 17);
/** What a dashboard's `$__rate_interval` becomes here: the whole test fits in it. */
const RATE_INTERVAL = '1m';
const hasPrometheus = spawnSync('prometheus', ['--version'], { stdio: 'ignore' }).status === 0;

interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** deploy/prometheus.yml with this test's targets and 1 s intervals; each substitution must apply. */
function prometheusConfig(adminPort: number, closedPort: number): string {
  let text = readFileSync(path.join(DEPLOY, 'prometheus.yml'), 'utf8');
  const substitute = (from: RegExp, to: string): void => {
    expect(text).toMatch(from);
    text = text.replace(from, to);
  };
  substitute(/localhost:8001/g, `127.0.0.1:${adminPort}`);
  // Nothing listens there: the pipeline job stays down, as it would on a host without `streaminfer pipeline`.
  substitute(/localhost:9470/g, `127.0.0.1:${closedPort}`);
  substitute(/scrape_interval: 15s/g, 'scrape_interval: 1s');
  substitute(/evaluation_interval: 15s/g, 'evaluation_interval: 1s');
  return text;
}

async function query(base: string, expr: string): Promise<Sample[]> {
  const response = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = (await response.json()) as {
    status: string;
    error?: string;
    data?: { resultType: string; result: Sample[] };
  };
  if (body.status !== 'success') throw new Error(`query ${expr}: ${body.error}`);
  return body.data!.result;
}

/** Polls until `accept` holds for the query's result (scrapes and rule evaluations are 1 s apart). */
async function queryUntil(
  base: string,
  expr: string,
  accept: (samples: Sample[]) => boolean,
  timeoutMs = 10000,
): Promise<Sample[]> {
  let samples: Sample[] = [];
  for (const until = Date.now() + timeoutMs; Date.now() < until; await sleep(250)) {
    samples = await query(base, expr);
    if (accept(samples)) return samples;
  }
  return samples;
}

const finite = (samples: Sample[]): Sample[] => samples.filter((s) => Number.isFinite(Number(s.value[1])));
const show = (samples: Sample[]): string =>
  samples
    .map((s) => {
      const { __name__: name = '', ...labels } = s.metric;
      const text = Object.entries(labels)
        .map(([k, v]) => `${k}="${v}"`)
        .join(',');
      return `${name}{${text}} ${s.value[1]}`;
    })
    .join('\n');

(hasPrometheus ? describe : describe.skip)('a real Prometheus scraping the server', () => {
  let server: ServerHandle;
  let prometheus: ChildProcess;
  let prometheusExited: Promise<unknown>;
  let prometheusLog = '';
  let dir = '';
  let base = '';
  const seen: string[] = [];

  /** One round: WS answers, errors and sheds (8 at once over a cap of 4), HTTP answers and errors, digits. */
  async function traffic(round: number): Promise<Answer[]> {
    const client = await WsClient.connect(server.wsUrl);
    const answers: Answer[] = [
      await client.request({ id: 'ok', model: 'upper', text: `round ${round}` }),
      await client.request({ id: 'unknown', model: 'nope', input: [1] }),
      await client.request({ id: 'shape', model: 'digits', input: [1, 2] }),
      ...(await Promise.all(
        Array.from({ length: 8 }, (_, i) => client.request({ id: i, model: 'bench', input: FEATURES })),
      )),
    ];
    // One at a time: the cap is 4 in flight, and a shed request is never mirrored to the shadow.
    for (let i = 0; i < 10; i++)
      answers.push(await client.request({ id: `d${i}`, model: 'digits', input: PIXELS }));
    client.close();
    expect((await postJson(`${server.url}/predict`, { model: 'upper', text: 'http' })).status).toBe(200);
    expect((await postJson(`${server.url}/predict`, '{not json')).status).toBe(400);
    return answers;
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-prometheus-'));
    const [webPort, closedPort] = [await freePort(), await freePort()];
    server = await startServer({
      models: ['bench', 'digits', 'upper'],
      args: ['--nodes', '2', '--model', 'upper'],
      // A restarted node loads for 3 s (test hook): the last test sees the host up but not ready.
      env: {
        STREAMINFER_MAX_QUEUE_SIZE: '4',
        STREAMINFER_BATCH_SIZE: '4',
        STREAMINFER_TEST_RESTART_LOAD_DELAY_MS: '3000',
      },
    });
    writeFileSync(path.join(dir, 'prometheus.yml'), prometheusConfig(server.adminPort, closedPort));
    for (const rules of ['streaminfer-alerts.yml', 'streaminfer-recording.yml'])
      copyFileSync(path.join(DEPLOY, rules), path.join(dir, rules));
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${path.join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${webPort}`,
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    prometheus.stdout!.on('data', (chunk: Buffer) => (prometheusLog += chunk.toString()));
    prometheus.stderr!.on('data', (chunk: Buffer) => (prometheusLog += chunk.toString()));
    prometheusExited = new Promise((resolve) => prometheus.once('exit', resolve));
    base = `http://127.0.0.1:${webPort}`;
    for (const until = Date.now() + 20000; Date.now() < until; await sleep(100)) {
      if (prometheus.exitCode !== null) throw new Error(`prometheus exited at start:\n${prometheusLog}`);
      const ready = await fetch(`${base}/-/ready`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ready) break;
    }
    // Ready, and the server scraped once: every later counter step is an increase Prometheus sees.
    const up = await queryUntil(base, 'up{job="streaminfer"} == 1', (s) => s.length === 1, 15000).catch(
      (error: Error) => {
        throw new Error(`${error.message}; prometheus log:\n${prometheusLog}`);
      },
    );
    expect(up).toHaveLength(1);

    const first = await traffic(1);
    expect(first.filter((a) => a.code === 'client_queue_full').length).toBeGreaterThan(0);
    // A candidate on a 50% canary, compared in shadow: the registry panels need both.
    expect(await digitsCanaryAndShadow(server.adminUrl)).toEqual([200, 200, 200, 200]);
    await sleep(1100);
    await traffic(2);
    await sleep(1100);
    await traffic(3);
    // Shadow copies are compared after the answer went out; two more scrapes and rule evaluations follow.
    await sleep(2500);
  }, 60000);

  afterAll(async () => {
    if (prometheus && prometheus.exitCode === null) {
      prometheus.kill('SIGTERM');
      const timer = setTimeout(() => prometheus.kill('SIGKILL'), 10000);
      await prometheusExited;
      clearTimeout(timer);
    }
    if (server) expect(await server.stop()).toEqual({ code: 0, signal: null });
    if (dir) rmSync(dir, { recursive: true, force: true });
    console.log(`what Prometheus saw:\n${seen.join('\n')}`);
  }, 60000);

  async function see(
    expr: string,
    accept: (s: Sample[]) => boolean = (s) => s.length > 0,
  ): Promise<Sample[]> {
    const samples = await queryUntil(base, expr, accept);
    seen.push(`# ${expr}\n${show(samples)}`);
    return samples;
  }

  test('up == 1, and the host reports every node ready', async () => {
    const instance = `127.0.0.1:${server.adminPort}`;
    expect((await see('up{job="streaminfer"}')).map((s) => [s.metric.instance, s.value[1]])).toEqual([
      [instance, '1'],
    ]);
    expect((await see('streaminfer_ready')).map((s) => s.value[1])).toEqual(['1']);
    const nodes = await see('streaminfer_node_ready');
    expect(nodes.map((s) => [s.metric.node, s.value[1]]).sort()).toEqual([
      ['0', '1'],
      ['1', '1'],
    ]);
    // The pipeline job has no process here: Prometheus records it down.
    expect((await see('up{job="streaminfer-stream"}')).map((s) => s.value[1])).toEqual(['0']);
  });

  test('request rate by model and code, over both protocols', async () => {
    const rate = await see(
      `sum by (model, code) (rate(streaminfer_requests_total{job="streaminfer"}[${RATE_INTERVAL}])) > 0`,
      (s) => s.length >= 5,
    );
    // An empty label (model="" for an unknown model) is no label to Prometheus.
    const pairs = rate.map((s) => `${s.metric.model ?? ''}/${s.metric.code}`);
    for (const pair of ['upper/ok', 'digits/ok', 'bench/ok', 'bench/client_queue_full', '/unknown_model'])
      expect(pairs).toContain(pair);
    const protocols = await see(
      `sum by (protocol) (increase(streaminfer_requests_total[${RATE_INTERVAL}])) > 0`,
      (s) => s.length >= 2,
    );
    expect(protocols.map((s) => s.metric.protocol).sort()).toEqual(['http', 'ws']);
    // Raw series keep every label the server sets, plus the scrape's.
    const raw = await see('streaminfer_requests_total{model="upper",protocol="ws",code="ok"}');
    expect(Object.keys(raw[0]!.metric).sort()).toEqual(
      ['__name__', 'code', 'instance', 'job', 'model', 'protocol', 'version'].sort(),
    );
  });

  test('batch size histogram: buckets by le, and a median batch', async () => {
    const buckets = await see('streaminfer_batch_size_bucket{model="bench"}', (s) => s.length >= 12);
    expect(buckets.map((s) => s.metric.le)).toContain('+Inf');
    expect(buckets.length).toBe(12);
    const median = await see(
      `histogram_quantile(0.5, sum by (model, le) (rate(streaminfer_batch_size_bucket[${RATE_INTERVAL}])))`,
      (s) => finite(s).length > 0,
    );
    expect(finite(median).length).toBeGreaterThan(0);
  });

  test('sheds by reason', async () => {
    const shed = await see('streaminfer_shed_total');
    expect(shed.map((s) => [s.metric.model, s.metric.reason])).toContainEqual(['bench', 'client_queue_full']);
    expect(Number(shed.find((s) => s.metric.reason === 'client_queue_full')!.value[1])).toBeGreaterThan(0);
  });

  test('epoch: Prometheus saw it step with the reload and the registry changes', async () => {
    const epoch = await see('streaminfer_model_epoch');
    expect(Number(epoch[0]!.value[1])).toBeGreaterThanOrEqual(4);
    const steps = await see(`changes(streaminfer_model_epoch[${RATE_INTERVAL}])`);
    expect(Number(steps[0]!.value[1])).toBeGreaterThanOrEqual(1);
    const reloads = await see('streaminfer_reloads_total{result="committed"} > 0');
    expect(reloads.map((s) => s.metric.strategy)).toContain('atomic');
  });

  test('event-loop lag per node, and the supervisor', async () => {
    const lag = await see('streaminfer_node_nodejs_eventloop_lag_p99_seconds', (s) => s.length === 2);
    expect(lag.map((s) => s.metric.node).sort()).toEqual(['0', '1']);
    for (const sample of lag) expect(Number(sample.value[1])).toBeGreaterThan(0);
    expect(await see('streaminfer_supervisor_nodejs_eventloop_lag_p99_seconds')).toHaveLength(1);
  });

  test('every alert and recording rule loaded and evaluates without error', async () => {
    const response = await fetch(`${base}/api/v1/rules`);
    const body = (await response.json()) as {
      data: { groups: { name: string; rules: { name: string; health: string; lastError?: string }[] }[] };
    };
    const rules = body.data.groups.flatMap((g) => g.rules);
    expect(body.data.groups.map((g) => g.name).sort()).toEqual([
      'streaminfer',
      'streaminfer-recording',
      'streaminfer-stream',
    ]);
    expect(rules.length).toBeGreaterThanOrEqual(35);
    expect(rules.filter((r) => r.health !== 'ok')).toEqual([]);
    // Nothing on this healthy host pages: the only firing or pending alert is the absent pipeline.
    const alerts = await query(base, 'ALERTS{alertname!~"StreamPipeline.*"}');
    seen.push(`# ALERTS (server)\n${show(alerts)}`);
    expect(alerts.filter((a) => a.metric.severity === 'page')).toEqual([]);
  });

  test('every dashboard query returns data', async () => {
    const queries = dashboardQueries();
    expect(queries.length).toBeGreaterThanOrEqual(20);
    const empty: string[] = [];
    for (const q of queries) {
      const expr = q.expr.replaceAll('$__rate_interval', RATE_INTERVAL).replaceAll('$instance', '.+');
      expect(expr).not.toContain('$');
      const samples = await queryUntil(base, expr, (s) => finite(s).length > 0);
      seen.push(`# [${q.panel} ${q.refId}] ${expr}\n${show(samples)}`);
      if (finite(samples).length === 0) empty.push(`${q.panel} ${q.refId}: ${expr}`);
    }
    expect(empty).toEqual([]);
  }, 60000);

  // Last: it disturbs the host. A killed node is restarted by the supervisor; while it loads, /metrics still
  // answers through node 0, so Prometheus sees up == 1 with streaminfer_ready == 0 and the alert goes pending.
  test('a killed node: restart counted, up but not ready, the alert pending, then ready again', async () => {
    process.kill(server.nodePids[1]!, 'SIGKILL');
    const notReady = await see(
      'streaminfer_ready == 0 and on (instance) up{job="streaminfer"} == 1',
      (s) => s.length === 1,
    );
    expect(notReady).toHaveLength(1);
    const restarts = await see('streaminfer_node_restarts_total', (s) =>
      s.some((x) => x.metric.node === '1' && x.value[1] === '1'),
    );
    expect(restarts.map((s) => [s.metric.node, s.value[1]]).sort()).toEqual([
      ['0', '0'],
      ['1', '1'],
    ]);
    const pending = await see('ALERTS{alertname="StreamInferUpButNotReady"}', (s) => s.length === 1);
    expect(pending.map((s) => s.metric.alertstate)).toEqual(['pending']);
    expect((await see('streaminfer_ready == 1', (s) => s.length === 1)).map((s) => s.value[1])).toEqual([
      '1',
    ]);
    // The restart is an increase to Prometheus (the series started at 0), as the crash-loop alert needs.
    const increase = await see(
      `increase(streaminfer_node_restarts_total{node="1"}[${RATE_INTERVAL}])`,
      (s) => s.length === 1 && Number(s[0]!.value[1]) > 0,
    );
    expect(Number(increase[0]!.value[1])).toBeGreaterThan(0);
  }, 30000);
});

if (!hasPrometheus)
  test('a real Prometheus scraping the server (skipped)', () => {
    console.log(
      'prometheus is not on PATH (Debian: apt-get install prometheus): the live scrape test is skipped',
    );
  });
