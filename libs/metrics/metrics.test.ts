import {
  aggregateToText,
  lintExposition,
  MetricsShard,
  metricsBufferFor,
  nodeMetricsJson,
  SHED_REASONS,
} from './index';
import { readSlotTotals } from './shared-metrics';

describe('shared metrics shards', () => {
  test('shards written by different threads sum at read time', () => {
    const buffer = metricsBufferFor(3);
    const gateway = new MetricsShard(buffer, 0);
    const worker = new MetricsShard(buffer, 1);
    const other = new MetricsShard(buffer, 2);
    gateway.recordRequest(1, 0, 0, 0.003);
    gateway.recordRequest(1, 1, 0, 0.2);
    gateway.recordRequest(1, 0, 1, 0.0001);
    worker.recordBatch(1, 16);
    other.recordBatch(1, 3);
    gateway.addInflight(1, 2);
    const totals = readSlotTotals(buffer, 1);
    expect(totals.requests).toEqual([
      { protocol: 'ws', code: 'ok', value: 1 },
      { protocol: 'ws', code: 'bad_request', value: 1 },
      { protocol: 'http', code: 'ok', value: 1 },
    ]);
    expect(totals.requestDuration.count).toBe(3);
    expect(totals.requestDuration.sum).toBeCloseTo(0.2031, 6);
    // cumulative: 0.0001 ≤ 0.0005; 0.003 ≤ 0.005; 0.2 ≤ 0.25
    const le = (bound: number) => totals.requestDuration.buckets.find((b) => b.le === bound)!.count;
    expect(le(0.0005)).toBe(1);
    expect(le(0.005)).toBe(2);
    expect(le(0.25)).toBe(3);
    expect(totals.batchSize.count).toBe(2);
    expect(totals.batchSize.sum).toBe(19);
    expect(totals.batches).toBe(2);
    expect(totals.inflight).toBe(2);
    expect(readSlotTotals(buffer, 2).requests).toEqual([]);
  });

  test('records a worker refused are counted by model and version, summed over nodes', async () => {
    const nodeA = metricsBufferFor(2);
    const nodeB = metricsBufferFor(1);
    new MetricsShard(nodeA, 1).recordInvalidRecord(3);
    new MetricsShard(nodeA, 0).recordInvalidRecord(3);
    new MetricsShard(nodeB, 0).recordInvalidRecord(3);
    expect(readSlotTotals(nodeA, 3).invalidRecords).toBe(2);
    const slots = [
      { slot: 3, model: 'ids', version: '1', queueDepth: 0, executionProvider: 'cpu', alias: 'stable' },
    ];
    const text = await aggregateToText([
      nodeMetricsJson(nodeA, slots, { wsConnections: 0, epoch: 0 }),
      nodeMetricsJson(nodeB, slots, { wsConnections: 0, epoch: 0 }),
    ]);
    expect(text).toContain('# TYPE streaminfer_worker_invalid_records_total counter');
    expect(text).toContain('streaminfer_worker_invalid_records_total{model="ids",version="1"} 3');
  });

  test('rejects a shard index outside the buffer', () => {
    expect(() => new MetricsShard(metricsBufferFor(1), 1)).toThrow(RangeError);
  });

  test('tenants: request and shed counts by tenant, merged by name over nodes whose indexes differ', async () => {
    const nodeA = metricsBufferFor(2);
    const nodeB = metricsBufferFor(2);
    const gatewayA = new MetricsShard(nodeA, 0);
    const gatewayB = new MetricsShard(nodeB, 0);
    gatewayA.recordRequest(1, 0, 0, 0.01, 1); // alpha is index 1 on node A…
    gatewayB.recordRequest(1, 0, 0, 0.01, 2); // …and 2 on node B
    gatewayB.recordRequest(1, 0, 0, 0.01); // anonymous
    const shedTenant = SHED_REASONS.indexOf('tenant_rate_limited');
    gatewayA.recordShed(0, shedTenant, 1);
    const slots = [
      { slot: 0, model: '', version: '', queueDepth: 0, executionProvider: '', alias: '' },
      { slot: 1, model: 'echo', version: '1', queueDepth: 0, executionProvider: 'cpu', alias: 'stable' },
    ];
    const text = await aggregateToText([
      nodeMetricsJson(nodeA, slots, { wsConnections: 0, epoch: 0 }, [undefined, 'alpha']),
      nodeMetricsJson(nodeB, slots, { wsConnections: 0, epoch: 0 }, [undefined, 'beta', 'alpha']),
    ]);
    expect(text).toContain(
      'streaminfer_requests_total{model="echo",version="1",tenant="alpha",protocol="ws",code="ok"} 2',
    );
    expect(text).toContain('streaminfer_requests_total{model="echo",version="1",protocol="ws",code="ok"} 1');
    expect(text).toContain(
      'streaminfer_shed_total{model="",version="",tenant="alpha",reason="tenant_rate_limited"} 1',
    );
    expect(text).not.toContain('tenant="beta"');
    // The duration histogram counts every tenant's requests, and a worker shard has no tenant block.
    expect(readSlotTotals(nodeB, 1).requestDuration.count).toBe(2);
    expect(lintExposition(text)).toEqual([]);
    gatewayA.resetTenant(1);
    const reset = nodeMetricsJson(nodeA, slots, { wsConnections: 0, epoch: 0 }, [undefined, 'gamma']);
    expect(JSON.stringify(reset)).not.toContain('gamma');
  });

  test('two nodes aggregate into one Prometheus text: counters and histograms sum', async () => {
    const nodeA = metricsBufferFor(1);
    const nodeB = metricsBufferFor(1);
    new MetricsShard(nodeA, 0).recordRequest(1, 0, 0, 0.01);
    new MetricsShard(nodeB, 0).recordRequest(1, 0, 0, 0.02);
    new MetricsShard(nodeB, 0).recordRequest(1, 0, 0, 0.02);
    const slots = [
      { slot: 1, model: 'echo', version: '1', queueDepth: 2, executionProvider: 'cpu', alias: 'stable' },
    ];
    const text = await aggregateToText([
      nodeMetricsJson(nodeA, slots, { wsConnections: 1, epoch: 0 }),
      nodeMetricsJson(nodeB, slots, { wsConnections: 2, epoch: 0 }),
    ]);
    expect(text).toContain('streaminfer_requests_total{model="echo",version="1",protocol="ws",code="ok"} 3');
    expect(text).toContain('streaminfer_request_duration_seconds_count{model="echo",version="1"} 3');
    expect(text).toContain(
      'streaminfer_request_duration_seconds_bucket{model="echo",version="1",le="0.025"} 3',
    );
    expect(text).toContain('streaminfer_queue_depth{model="echo",version="1"} 4');
    expect(text).toContain('streaminfer_ws_connections 3');
    expect(text).toContain(
      'streaminfer_model_info{model="echo",version="1",alias="stable",execution_provider="cpu"} 1',
    );
  });

  test('batch policy gauges: the mean over the lanes that wrote, averaged over nodes', async () => {
    const nodeA = metricsBufferFor(4);
    const nodeB = metricsBufferFor(2);
    new MetricsShard(nodeA, 1).recordPolicy(1, 4, 0.25, 200, 8, 2);
    new MetricsShard(nodeA, 2).recordPolicy(1, 6, 0.75, 400, 16, 0);
    const gone = new MetricsShard(nodeA, 3);
    gone.recordPolicy(1, 100, 100, 100, 100, 100);
    gone.clearPolicy(1); // an unloaded lane no longer counts
    new MetricsShard(nodeB, 1).recordPolicy(1, 7, 1.5, 500, 4, 1);
    // greedy has no cost model: those fields are NaN and absent; no lane wrote for slot 2
    new MetricsShard(nodeA, 1).recordPolicy(3, Number.NaN, Number.NaN, Number.NaN, 16, 0);
    const slots = [1, 2, 3].map((slot) => ({
      slot,
      model: `m${slot}`,
      version: '1',
      queueDepth: 0,
      executionProvider: 'cpu',
      alias: 'stable',
    }));
    const text = await aggregateToText([
      nodeMetricsJson(nodeA, slots, { wsConnections: 0, epoch: 0 }),
      nodeMetricsJson(nodeB, slots.slice(0, 1), { wsConnections: 0, epoch: 0 }),
    ]);
    // node A: mean of its two lanes (5, 0.5, 300, 12, 1); node B: one lane; the host: the nodes' average;
    // times in seconds
    expect(text).toContain('streaminfer_batch_cost_intercept_seconds{model="m1",version="1"} 0.006');
    expect(text).toContain('streaminfer_batch_cost_per_item_seconds{model="m1",version="1"} 0.001');
    expect(text).toContain('streaminfer_batch_arrival_rate{model="m1",version="1"} 400');
    expect(text).toContain('streaminfer_batch_target_size{model="m1",version="1"} 8');
    expect(text).toContain('streaminfer_batch_wait_seconds{model="m1",version="1"} 0.001');
    expect(text).toContain('streaminfer_batch_target_size{model="m3",version="1"} 16');
    expect(text).not.toContain('streaminfer_batch_cost_intercept_seconds{model="m3"');
    expect(text).not.toMatch(
      /streaminfer_batch_(cost_\w+|arrival_rate|target_size|wait_seconds)\{model="m2"/,
    );
    expect(lintExposition(text)).toEqual([]);
    expect(text).not.toContain('NaN');
  });
});
