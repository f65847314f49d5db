/** A scrape storm does not multiply into a storm of node requests: concurrent scrapes share fan-outs. */
import type { ServerHandle } from './harness';
import { startServer } from './harness';

const STORM = 50;

function fanOuts(metrics: string, what: string): number {
  const line = metrics
    .split('\n')
    .find((l) => l.startsWith(`streaminfer_control_fanouts_total{what="${what}"}`));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('scrape storm on a 2-node server', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['echo'], args: ['--nodes', '2'] });
  });
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test(`${STORM} concurrent /metrics and ${STORM} /health: every answer full, the nodes asked a few times`, async () => {
    const before = await (await fetch(`${server.adminUrl}/metrics`)).text();
    const started = Date.now();
    const [metrics, health] = await Promise.all([
      Promise.all(
        Array.from({ length: STORM }, async () => {
          const response = await fetch(`${server.adminUrl}/metrics`);
          return { status: response.status, text: await response.text() };
        }),
      ),
      Promise.all(
        Array.from({ length: STORM }, async () => {
          const response = await fetch(`${server.url}/health`);
          return {
            status: response.status,
            body: (await response.json()) as {
              ready: boolean;
              nodes: Array<{ state: string; pid?: number }>;
            },
          };
        }),
      ),
    ]);
    const stormMs = Date.now() - started;
    const after = await (await fetch(`${server.adminUrl}/metrics`)).text();

    for (const answer of metrics) {
      expect(answer.status).toBe(200);
      // Node metrics (model info from each node) and the supervisor's own, merged.
      expect(answer.text).toContain('streaminfer_model_info{');
      expect(answer.text).toContain('streaminfer_control_fanouts_total{what="metrics"}');
      expect(answer.text).toContain('streaminfer_supervisor_process_cpu_seconds_total');
    }
    for (const answer of health) {
      expect(answer.status).toBe(200);
      expect(answer.body.ready).toBe(true);
      expect(answer.body.nodes.map((node) => node.state)).toEqual(['ready', 'ready']);
      expect(answer.body.nodes.every((node) => typeof node.pid === 'number')).toBe(true);
    }
    // The last scrape's own fan-out is counted in `after` too.
    const metricsFanOuts = fanOuts(after, 'metrics') - fanOuts(before, 'metrics') - 1;
    const healthFanOuts = fanOuts(after, 'health') - fanOuts(before, 'health');
    console.log(
      `scrape storm: ${STORM} /metrics -> ${metricsFanOuts} fan-outs, ${STORM} /health -> ${healthFanOuts} fan-outs ` +
        `(each fan-out asks both nodes once), ${stormMs} ms`,
    );
    expect(metricsFanOuts).toBeGreaterThanOrEqual(1);
    expect(healthFanOuts).toBeGreaterThanOrEqual(1);
    // Bounded by time, not by callers: one fan-out per 50 ms at most, plus the one in flight.
    const bound = Math.ceil(stormMs / 50) + 2;
    expect(metricsFanOuts).toBeLessThanOrEqual(Math.min(bound, STORM / 5));
    expect(healthFanOuts).toBeLessThanOrEqual(Math.min(bound, STORM / 5));
  });
});
