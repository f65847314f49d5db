import { Registry } from 'prom-client';
import {
  aggregateToText,
  labelledProcessJson,
  lintExposition,
  metricJson,
  registerProcessMetrics,
} from './index';

const family = (name: string, type: string, help: string, samples: string): string =>
  `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${samples}\n`;

describe('lintExposition (the promtool rules an exporter can break)', () => {
  test('a clean exposition has no problems', () => {
    const text =
      family('app_requests_total', 'counter', 'Requests.', 'app_requests_total{code="ok",route="a b}"} 3') +
      family('app_queue_depth', 'gauge', 'Waiting.', 'app_queue_depth 0') +
      family(
        'app_duration_seconds',
        'histogram',
        'Time.',
        'app_duration_seconds_bucket{le="0.1"} 1\napp_duration_seconds_bucket{le="+Inf"} 2\n' +
          'app_duration_seconds_sum 0.3\napp_duration_seconds_count 2',
      ) +
      family(
        'app_lag_seconds',
        'summary',
        'Lag.',
        'app_lag_seconds{quantile="0.5"} NaN\napp_lag_seconds_sum 0\napp_lag_seconds_count 0',
      );
    expect(lintExposition(text)).toEqual([]);
  });

  test('the old gauge named ..._total is refused', () => {
    const text = family(
      'streaminfer_supervisor_nodejs_active_handles_total',
      'gauge',
      'Total number of active handles.',
      'streaminfer_supervisor_nodejs_active_handles_total 7',
    );
    expect(lintExposition(text)).toEqual([
      'streaminfer_supervisor_nodejs_active_handles_total non-counter metrics should not have "_total" suffix',
    ]);
  });

  test.each([
    [
      'a counter without _total',
      family('app_requests', 'counter', 'R.', 'app_requests 1'),
      /should have "_total" suffix/,
    ],
    [
      'a gauge ending in _count',
      family('app_items_count', 'gauge', 'I.', 'app_items_count 1'),
      /"_count" suffix/,
    ],
    ['a gauge ending in _sum', family('app_bytes_sum', 'gauge', 'B.', 'app_bytes_sum 1'), /"_sum" suffix/],
    ['a gauge ending in _bucket', family('app_bucket', 'gauge', 'B.', 'app_bucket 1'), /"_bucket" suffix/],
    [
      'milliseconds',
      family('app_latency_milliseconds', 'gauge', 'L.', 'app_latency_milliseconds 1'),
      /base unit "seconds" instead of "milliseconds"/,
    ],
    ['kilobytes', family('app_size_kilobytes', 'gauge', 'S.', 'app_size_kilobytes 1'), /base unit "bytes"/],
    [
      'minutes',
      family('app_uptime_minutes', 'gauge', 'U.', 'app_uptime_minutes 1'),
      /base unit "seconds" instead of "minutes"/,
    ],
    ['an abbreviated unit', family('app_latency_ms', 'gauge', 'L.', 'app_latency_ms 1'), /abbreviated units/],
    ['no HELP', '# TYPE app_up gauge\napp_up 1\n', /app_up no help text/],
    ['empty HELP', '# HELP app_up \n# TYPE app_up gauge\napp_up 1\n', /app_up no help text/],
    ['no TYPE', '# HELP app_up Up.\napp_up 1\n', /app_up no TYPE line/],
    [
      'a duplicate family',
      family('app_up', 'gauge', 'Up.', 'app_up 1') + family('app_up', 'gauge', 'Up.', ''),
      /duplicate TYPE/,
    ],
    [
      'a duplicate series',
      family('app_up', 'gauge', 'Up.', 'app_up{a="1"} 1\napp_up{a="1"} 2'),
      /duplicate series/,
    ],
    [
      'a label starting with __',
      family('app_up', 'gauge', 'Up.', 'app_up{__name="x"} 1'),
      /invalid label name "__name"/,
    ],
    [
      'a label with a dash',
      family('app_up', 'gauge', 'Up.', 'app_up{my-label="x"} 1'),
      /invalid label name "my-label"/,
    ],
    ['a camelCase label', family('app_up', 'gauge', 'Up.', 'app_up{nodeIndex="0"} 1'), /snake_case/],
    ['a camelCase name', family('app_upTime_seconds', 'gauge', 'Up.', 'app_upTime_seconds 1'), /snake_case/],
    ['a colon in the name', family('app:up', 'gauge', 'Up.', 'app:up 1'), /":"/],
    ['le on a gauge', family('app_up', 'gauge', 'Up.', 'app_up{le="1"} 1'), /should not have "le" label/],
    [
      'quantile on a gauge',
      family('app_up', 'gauge', 'Up.', 'app_up{quantile="1"} 1'),
      /should not have "quantile" label/,
    ],
    [
      'a bucket without le',
      family('app_d_seconds', 'histogram', 'D.', 'app_d_seconds_bucket 1'),
      /without "le"/,
    ],
    [
      'the type in the name',
      family('app_up_gauge', 'gauge', 'Up.', 'app_up_gauge 1'),
      /should not include type 'gauge'/,
    ],
    ['a malformed value', family('app_up', 'gauge', 'Up.', 'app_up one'), /malformed value/],
    ['malformed labels', family('app_up', 'gauge', 'Up.', 'app_up{a=1} 1'), /malformed labels/],
    ['an unknown type', '# HELP app_up Up.\n# TYPE app_up meter\napp_up 1\n', /unknown type "meter"/],
  ])('finds %s', (_, text, problem) => {
    const problems = lintExposition(text);
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.join('\n')).toMatch(problem);
  });

  test("this process's metrics, registered as nodes and the supervisor do, pass", async () => {
    const supervisor = new Registry();
    registerProcessMetrics(supervisor, 'test_supervisor_');
    const node = new Registry();
    registerProcessMetrics(node, 'test_node_', { node: '0' });
    const text = await aggregateToText([
      await labelledProcessJson(node),
      (await supervisor.getMetricsAsJSON()) as never,
      [metricJson('test_requests_total', 'Requests.', 'counter', [{ value: 1, labels: { code: 'ok' } }])],
    ]);
    expect(text).not.toContain('_active_handles_total');
    expect(text).toMatch(/^test_node_process_resident_memory_bytes\{node="0"\} [1-9]/m);
    // prom-client omits the start time when merging processes; a node's own series keeps it.
    expect(text).toMatch(/^test_node_process_start_time_seconds\{node="0"\} [1-9]/m);
    expect(lintExposition(text)).toEqual([]);
  });
});
