import { parsePrometheusText } from '../../libs/metrics';
import { StatusError } from './errors';
import {
  CLEAR_SCREEN,
  formatDuration,
  formatMs,
  formatRate,
  frameText,
  isControlCode,
  renderFrame,
} from './status-frame';
import { type HealthAnswer, readHealth, snapshotJson, summarize } from './status-view';

const NOW = Date.parse('2026-12-01T00:30:00.000Z');

const HEALTH: HealthAnswer = {
  status: 'ok',
  uptime_s: 3725,
  default_model: 'echo',
  device: 'cpu',
  epoch: 4,
  nodes: [
    { node: 0, pid: 4242, state: 'ready', workers: 2, workers_ready: 2, inflight: 5, ws_connections: 3 },
    { node: 1, state: 'unreachable' },
  ],
  models: [
    {
      name: 'digits',
      default_version: '2',
      aliases: { previous_stable: '1', candidate: '3', stable: '2' },
      canary_percent: 10,
      shadow: true,
      versions: [{ version: '2', execution_provider: 'cpu' }],
    },
    { name: 'echo', default_version: '1', versions: [{ version: '1', execution_provider: 'cpu' }] },
    { name: 'upper', default_version: '1', aliases: { stable: '1' }, versions: [] },
    { name: 'bench', default_version: '1', aliases: { stable: '1' }, versions: [] },
  ],
};

const echoBuckets = (fast: number, mid: number, slow: number): string =>
  [
    `streaminfer_request_duration_seconds_bucket{model="echo",version="1",le="0.001"} ${fast}`,
    `streaminfer_request_duration_seconds_bucket{model="echo",version="1",le="0.01"} ${mid}`,
    `streaminfer_request_duration_seconds_bucket{model="echo",version="1",le="0.1"} ${slow}`,
    `streaminfer_request_duration_seconds_bucket{model="echo",version="1",le="+Inf"} ${slow}`,
  ].join('\n');

const BEFORE = parsePrometheusText(
  [
    'streaminfer_requests_total{model="echo",version="1",protocol="ws",code="ok"} 100',
    'streaminfer_requests_total{model="echo",version="1",protocol="ws",code="overloaded"} 2',
    'streaminfer_requests_total{model="digits",version="2",protocol="http",code="ok"} 500',
    echoBuckets(50, 100, 102),
    'streaminfer_shed_total{model="echo",version="1",reason="model_queue_full"} 2',
    'streaminfer_shadow_comparisons_total{model="digits",agree="true"} 10',
    'streaminfer_shadow_comparisons_total{model="digits",agree="false"} 0',
    'streaminfer_node_process_cpu_seconds_total{node="0"} 10',
    'streaminfer_node_process_cpu_seconds_total{node="1"} 20',
  ].join('\n'),
);

// Two seconds later: echo answered 200 more ok and 4 overloaded; digits' node restarted (its counter went
// 500 -> 3); bench's first answer took longer than the last bucket bound; upper got nothing.
const AFTER = parsePrometheusText(
  [
    'streaminfer_requests_total{model="echo",version="1",protocol="ws",code="ok"} 300',
    'streaminfer_requests_total{model="echo",version="1",protocol="ws",code="overloaded"} 6',
    'streaminfer_requests_total{model="digits",version="2",protocol="http",code="ok"} 3',
    'streaminfer_requests_total{model="bench",version="1",protocol="http",code="ok"} 1',
    'streaminfer_request_duration_seconds_bucket{model="bench",version="1",le="10"} 0',
    'streaminfer_request_duration_seconds_bucket{model="bench",version="1",le="+Inf"} 1',
    echoBuckets(150, 300, 306),
    'streaminfer_routed_requests_total{model="digits",version="2",route="stable"} 2',
    'streaminfer_routed_requests_total{model="digits",version="3",route="canary"} 1',
    'streaminfer_shed_total{model="echo",version="1",reason="model_queue_full"} 6',
    'streaminfer_shadow_comparisons_total{model="digits",agree="true"} 28',
    'streaminfer_shadow_comparisons_total{model="digits",agree="false"} 2',
    'streaminfer_inflight_requests{model="echo",version="1"} 4',
    'streaminfer_queue_depth{model="echo",version="1"} 1',
    'streaminfer_ws_connections 3',
    'streaminfer_reloads_total{result="failed",strategy="atomic"} 1',
    'streaminfer_reloads_total{result="committed",strategy="atomic"} 4',
    'streaminfer_node_process_cpu_seconds_total{node="0"} 10.5',
    'streaminfer_node_process_cpu_seconds_total{node="1"} 20.2',
    'streaminfer_node_process_resident_memory_bytes{node="0"} 209715200',
    'streaminfer_node_nodejs_eventloop_lag_p99_seconds{node="0"} 0.0123',
    'streaminfer_node_restarts_total{node="0"} 0',
    'streaminfer_node_restarts_total{node="1"} 1',
    'streaminfer_supervisor_nodejs_eventloop_lag_p99_seconds 0.0021',
  ].join('\n'),
);

const RELOAD = {
  id: 4,
  result: 'committed',
  strategy: 'atomic',
  epoch_before: 3,
  epoch: 4,
  duration_ms: 250,
  started_at: new Date(NOW - 65000).toISOString(),
};

const inputs = {
  url: 'http://127.0.0.1:8000',
  health: HEALTH,
  lastReload: RELOAD,
  before: BEFORE,
  after: AFTER,
  windowS: 2,
  now: NOW,
};

describe('status summary', () => {
  const snapshot = summarize(inputs);

  it('turns counter deltas into rates, a reset counting from zero', () => {
    expect(snapshot.requestsPerS).toBe((200 + 4 + 3 + 1) / 2);
    expect(snapshot.codesPerS).toEqual({ ok: 102, overloaded: 2 });
    const digits = snapshot.models.find((m) => m.name === 'digits')!;
    expect(digits.requestsPerS).toBe(1.5);
    expect(snapshot.shedByReasonPerS).toEqual({ model_queue_full: 2 });
    expect(snapshot.shedSinceStart).toBe(6);
  });

  it('takes latency quantiles from the buckets observed in the window only', () => {
    const echo = snapshot.models.find((m) => m.name === 'echo')!;
    // 204 answers in the window: 100 under 1 ms, 100 in (1, 10] ms, 4 in (10, 100] ms.
    expect(echo.p50?.ms).toBeCloseTo(1 + 9 * (2 / 100));
    expect(echo.p99?.ms).toBeCloseTo(10 + 90 * (1.96 / 4));
    const bench = snapshot.models.find((m) => m.name === 'bench')!;
    expect(bench.p50).toEqual({ ms: 10000, above: true });
  });

  it('leaves what had no traffic or no series at zero and unknown', () => {
    const upper = snapshot.models.find((m) => m.name === 'upper')!;
    expect(upper).toMatchObject({ requestsPerS: 0, codesPerS: {}, shedPerS: 0, inflight: 0, queued: 0 });
    expect(upper.p50).toBeUndefined();
    expect(snapshot.models.find((m) => m.name === 'digits')!.p99).toBeUndefined();
    expect(snapshot.nodes[1]).toEqual({ node: 1, state: 'unreachable', restarts: 1 });
  });

  it('reads rollouts: canary share observed, shadow agreement in the window', () => {
    const digits = snapshot.models.find((m) => m.name === 'digits')!;
    expect(digits.canaryObservedPercent).toBeCloseTo(100 / 3);
    expect(digits.shadowAgree).toEqual({ percent: 90, compared: 20, since: 'window' });
  });
});

describe('status frame', () => {
  it('draws the whole screen', () => {
    expect(renderFrame(summarize(inputs))).toEqual([
      'streaminfer http://127.0.0.1:8000 00:30:00 UTC: ok, epoch 4, up 1h02m, device cpu',
      'requests over the last 2.0 s: 104/s (ok 102, overloaded 2.0)',
      'shed: 2.0/s (model_queue_full 2.0), 6 since start; WebSocket connections: 3',
      'last reload #4: committed (atomic), epoch 3 -> 4 in 250 ms, 1m04s ago; 1 failed since start',
      '',
      'NODE  STATE        PID      WORKERS  IN FLIGHT  WS    LAG p99   CPU    RSS       RESTARTS',
      '0     ready        4242     2/2      5          3     12 ms     25%    200 MiB   0',
      '1     unreachable  -        -        -          -     -         -      -         1',
      'supervisor event-loop lag p99 2.1 ms',
      '',
      'MODEL         ALIASES                     REQ/S    ERR/S   SHED/S  P50       P99       INFL   QUEUE',
      'digits        stable=2 candidate=3 prev=1 1.5      0       0       -         -         0      0',
      '    canary 10% (33.3% observed); shadow on, agree 90.0% of 20 in the window',
      'echo *        stable=1                    102      2.0     2.0     1.2 ms    54 ms     4      1',
      '    errors/s: overloaded 2.0',
      'upper         stable=1                    0        0       0       -         -         0      0',
      'bench         stable=1                    0.50     0       0       >10.00 s  >10.00 s  0      0',
      '',
      '* default model. Rates, P50/P99 (request latency) and CPU: over the window; the rest: now.',
    ]);
  });

  it('draws zero traffic, no reload and a server still starting', () => {
    const lines = renderFrame(
      summarize({
        ...inputs,
        health: { ...HEALTH, status: 'starting' },
        lastReload: { id: 0 },
        before: AFTER,
        windowS: 1,
      }),
    );
    expect(lines.slice(0, 4)).toEqual([
      'streaminfer http://127.0.0.1:8000 00:30:00 UTC: starting, NOT READY, epoch 4, up 1h02m, device cpu',
      'requests over the last 1.0 s: 0/s',
      'shed: 0/s, 6 since start; WebSocket connections: 3',
      'no reload since start; 1 failed since start',
    ]);
    expect(lines).toContain(
      'echo *        stable=1                    0        0       0       -         -         4      1',
    );
  });

  it('keeps every line within 100 columns, a failed reload with a long reason included', () => {
    const lines = renderFrame(
      summarize({
        ...inputs,
        lastReload: { ...RELOAD, result: 'failed', error: `node 1 failed to prepare: ${'x'.repeat(200)}` },
      }),
    );
    expect(lines[3]).toMatch(
      /^last reload #4: FAILED \(atomic\), epoch 3 -> 4 in 250 ms, 1m04s ago.*\.\.\.$/,
    );
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
  });

  it('shows a model on another provider than the device asked for, and shadow with nothing compared', () => {
    const health: HealthAnswer = {
      ...HEALTH,
      device: 'cuda',
      models: [{ ...HEALTH.models[0]!, canary_percent: 0 }],
    };
    const lines = renderFrame(summarize({ ...inputs, health, before: [], after: [] }));
    expect(lines).toContain('    shadow on, nothing compared yet; runs on cpu');
  });
});

describe('formatting and frames', () => {
  it('formats rates, durations and latencies compactly', () => {
    expect([0, 0.25, 2, 99.94, 1234.4].map(formatRate)).toEqual(['0', '0.25', '2.0', '99.9', '1234']);
    expect([0.42, 4.25, 42, 1250].map(formatMs)).toEqual(['0.42 ms', '4.3 ms', '42 ms', '1.25 s']);
    expect([5, 65, 3725, 90000].map(formatDuration)).toEqual(['5s', '1m05s', '1h02m', '1d01h']);
  });

  it('clears the screen before a frame on a terminal, and separates frames elsewhere', () => {
    expect(frameText(['a', 'b'], true)).toBe(`${CLEAR_SCREEN}a\nb\n`);
    expect(CLEAR_SCREEN).toBe('\u001b[H\u001b[2J');
    expect(frameText(['a', 'b'], false)).toBe('a\nb\n\n');
  });

  it('writes --json with snake_case keys, leaving codes and aliases as they are', () => {
    const json = snapshotJson(summarize(inputs)) as {
      default_model: string;
      shed_by_reason_per_s: Record<string, number>;
      nodes: Array<Record<string, unknown>>;
      models: Array<Record<string, unknown>>;
    };
    expect(json).toMatchObject({ status: 'ok', default_model: 'echo', epoch: 4, window_s: 2 });
    expect(json.shed_by_reason_per_s).toEqual({ model_queue_full: 2 });
    expect(json.nodes[0]).toMatchObject({ workers: 2, workers_ready: 2, lag_p99_ms: 12.3, cpu_percent: 25 });
    expect(json.models[0]).toMatchObject({
      name: 'digits',
      aliases: { stable: '2', candidate: '3', previous_stable: '1' },
      canary_observed_percent: 100 / 3,
    });
  });

  it('refuses an answer that is not a health report with a typed error', () => {
    expect(() => readHealth({ status: 'ok' })).toThrow(StatusError);
    expect(() => readHealth('<html>')).toThrow(/not a health report/);
    expect(readHealth(HEALTH)).toBe(HEALTH);
  });
});

test('renderFrame prints control characters from the server visibly', () => {
  const hostile = {
    ...inputs,
    health: {
      ...HEALTH,
      device: '\x1b]0;x\x07',
      models: [{ ...HEALTH.models[0]!, aliases: { stable: '2\x9b1m', candidate: '3\x1b[31m' } }],
    },
  };
  const lines = renderFrame(summarize(hostile));
  for (const line of lines) expect([...line].filter((c) => isControlCode(c.charCodeAt(0)))).toEqual([]);
  expect(lines[0]).toContain('device \\x1b]0;x\\x07');
  expect(lines.join('\n')).toContain('stable=2\\x9b1m candidate=3\\x1b[31m');
});
