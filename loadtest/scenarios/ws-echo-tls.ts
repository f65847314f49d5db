/**
 * ws-echo-tls: what TLS costs on the data path. The ws-echo load (one request in flight per connection,
 * the `echo` model) against four sides, interleaved within each round so they share the machine's state:
 * bare uWS echo plain, bare uWS echo over TLS (SSLApp), StreamInfer plain, StreamInfer over TLS
 * (`--tls-cert/--tls-key`, wss). Reports served/bare for each transport and TLS/plain for each server.
 * Certificates come from a private CA made for the run (openssl, EC P-256); the load generators trust it
 * through NODE_EXTRA_CA_CERTS, the way the CLI and tools do.
 */
import { CertKit } from '../../scripts/tls-kit';
import { medianOf, ratio, runAgainst, standardNotes, throughputAndP99Charts } from '../harness/scenario-kit';
import type { TlsFiles } from '../harness/server-process';
import type { LoadSpec, Ratio, RunRecord, Scenario } from '../harness/types';

const SIDES = ['bare-plain', 'bare-tls', 'served-plain', 'served-tls'] as const;
type Side = (typeof SIDES)[number];

const LABELS: Record<Side, string> = {
  'bare-plain': 'bare uWS ws',
  'bare-tls': 'bare uWS wss',
  'served-plain': 'StreamInfer ws',
  'served-tls': 'StreamInfer wss',
};

function ratiosOf(runs: readonly RunRecord[]): Ratio[] {
  const tput = (r: RunRecord): number | undefined => r.load?.throughputRps;
  const p50 = (r: RunRecord): number | undefined => r.load?.latencyMs.p50;
  const p99 = (r: RunRecord): number | undefined => r.load?.latencyMs.p99;
  const of = (a: Side, b: Side, pick: (r: RunRecord) => number | undefined) =>
    ratio(medianOf(runs, a, pick), medianOf(runs, b, pick));
  const higher = 'medians over rounds; higher is better, 1.0 = as fast as the reference';
  const lower = 'medians over rounds; lower is better';
  return [
    {
      name: 'throughput served/bare (plain ws)',
      value: of('served-plain', 'bare-plain', tput),
      note: higher,
    },
    { name: 'throughput served/bare (TLS wss)', value: of('served-tls', 'bare-tls', tput), note: higher },
    {
      name: 'throughput TLS/plain (StreamInfer)',
      value: of('served-tls', 'served-plain', tput),
      note: higher,
    },
    { name: 'throughput TLS/plain (bare uWS)', value: of('bare-tls', 'bare-plain', tput), note: higher },
    {
      name: 'p50 latency TLS/plain (StreamInfer)',
      value: of('served-tls', 'served-plain', p50),
      note: lower,
    },
    {
      name: 'p99 latency TLS/plain (StreamInfer)',
      value: of('served-tls', 'served-plain', p99),
      note: lower,
    },
  ];
}

export const wsEchoTls: Scenario = {
  name: 'ws-echo-tls',
  description:
    'The ws-echo load over plain ws and over TLS (wss), interleaved each round: bare uWS echo (App, SSLApp) ' +
    'and StreamInfer (`serve --nodes 1 --workers 1`, with and without `--tls-cert/--tls-key`). ' +
    'Reports served/bare per transport and TLS/plain per server.',
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
    const kit = new CertKit();
    const previousCa = process.env.NODE_EXTRA_CA_CERTS;
    const runs: RunRecord[] = [];
    try {
      const ca = kit.ca('bench-ca');
      const leaf = kit.issue('bench-server', ca);
      const tls: TlsFiles = { cert: leaf.cert, key: leaf.key, ca: ca.cert };
      // Read by each load generator process at its start (they are forked from here).
      process.env.NODE_EXTRA_CA_CERTS = ca.cert;
      const broken = new Set<Side>();
      for (let round = 1; round <= ctx.rounds; round++) {
        const suffix = ctx.rounds > 1 ? ` #${round}` : '';
        // Rotate the order each round, so no side always runs first (or last) on a warming machine.
        const order = SIDES.map((_, i) => SIDES[(i + round - 1) % SIDES.length]!);
        for (const side of order) {
          if (broken.has(side)) continue;
          const secure = side.endsWith('tls');
          const start = side.startsWith('bare')
            ? () => ctx.startBareEcho(secure ? { label: LABELS[side], tls } : { label: LABELS[side] })
            : () =>
                ctx.startStreamInfer({
                  label: LABELS[side],
                  nodes: 1,
                  workers: 1,
                  // The per-client rate limit (100 req/s by default) would cap every connection.
                  env: { STREAMINFER_RATE_LIMIT_RPS: '0' },
                  ...(secure ? { tls } : {}),
                });
          const run = await runAgainst(ctx, `${LABELS[side]}${suffix}`, side, start, load);
          runs.push(run);
          if (run.error && !run.load) broken.add(side);
        }
      }
    } finally {
      if (previousCa === undefined) delete process.env.NODE_EXTRA_CA_CERTS;
      else process.env.NODE_EXTRA_CA_CERTS = previousCa;
      kit.cleanup();
    }
    return {
      params: {
        connections: load.connections,
        requestsPerConnection: load.requestsPerConnection,
        inFlightPerConnection: 1,
        warmupPerConnection: load.warmupPerConnection,
        rounds: ctx.rounds,
        server: 'serve --nodes 1 --workers 1 [--tls-cert --tls-key]',
        certificate: 'EC P-256, private CA',
      },
      runs,
      ratios: ratiosOf(runs),
      charts: throughputAndP99Charts('ws-echo-tls', 'ws-echo over ws and wss', runs),
      notes: [
        ...standardNotes(runs, ctx.cores),
        'Sides interleaved within each round (order rotated per round); every connection does one TLS handshake before its warm-up, so the figures are the steady-state cost of encryption, not of handshakes.',
      ],
    };
  },
};
