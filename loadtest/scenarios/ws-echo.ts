/**
 * ws-echo: the cost of the serving stack on the cheapest possible model. N WebSocket
 * connections × M requests, one in flight per connection, against (a) a bare uWS echo
 * server — no batching, no workers: the ceiling on this host — and (b) StreamInfer serving
 * the `echo` (Identity) model. Reports both side by side and served/bare ratios.
 */
import { histogramMeanDelta, scrapeMetrics } from '../harness/metrics';
import {
  type Collector,
  runAgainst,
  sideBySideRatios,
  standardNotes,
  throughputAndP99Charts,
} from '../harness/scenario-kit';
import type { LoadSpec, RunRecord, Scenario } from '../harness/types';

/** mean batch size of the echo model during the run, from the server's /metrics */
const batchSizeCollector: Collector = async (server) => {
  const url = `${server.adminUrl}/metrics`;
  const before = await scrapeMetrics(url);
  return async () => {
    const after = await scrapeMetrics(url);
    return { meanBatchSize: histogramMeanDelta(before, after, 'streaminfer_batch_size', { model: 'echo' }) };
  };
};

export const wsEcho: Scenario = {
  name: 'ws-echo',
  description:
    'WebSocket echo, one request in flight per connection: a bare uWebSockets.js echo server ' +
    '(no batching, no workers — the ceiling on this host) vs StreamInfer serving the `echo` model ' +
    '(`serve --nodes 1 --workers 1`). Body: `{"id","model":"echo","input":[8 floats]}`.',
  async run(ctx) {
    const size = ctx.sizes({ connections: 100, requests: 500 }, { connections: 50, requests: 100 });
    const load: LoadSpec = {
      connections: size.connections,
      requestsPerConnection: size.requests,
      inFlightPerConnection: 1,
      body: 'echo-floats',
      bodyOptions: { model: 'echo' },
      warmupPerConnection: ctx.quick ? 5 : 20,
      timeLimitMs: ctx.quick ? 30_000 : 120_000,
    };
    const runs: RunRecord[] = [];
    let servedBroken = false;
    for (let round = 1; round <= ctx.rounds; round++) {
      const suffix = ctx.rounds > 1 ? ` #${round}` : '';
      runs.push(await runAgainst(ctx, `bare uWS${suffix}`, 'bare-echo', () => ctx.startBareEcho(), load));
      if (servedBroken) continue;
      const served = await runAgainst(
        ctx,
        `StreamInfer${suffix}`,
        'streaminfer',
        // The per-client rate limit (100 req/s by default) would cap every connection: this measures the stack.
        () =>
          ctx.startStreamInfer({
            label: 'StreamInfer',
            nodes: 1,
            workers: 1,
            env: { STREAMINFER_RATE_LIMIT_RPS: '0' },
          }),
        load,
        batchSizeCollector,
      );
      runs.push(served);
      // a server that cannot start will not start next round either
      if (served.error && !served.load) servedBroken = true;
    }
    return {
      params: {
        connections: load.connections,
        requestsPerConnection: load.requestsPerConnection,
        inFlightPerConnection: 1,
        warmupPerConnection: load.warmupPerConnection,
        rounds: ctx.rounds,
        server: 'serve --nodes 1 --workers 1',
      },
      runs,
      ratios: sideBySideRatios(runs, 'streaminfer', 'bare-echo', 'served', 'bare'),
      charts: throughputAndP99Charts('ws-echo', 'ws-echo', runs),
      notes: standardNotes(runs, ctx.cores),
    };
  },
};
