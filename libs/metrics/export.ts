import type { MetricObjectWithValues, MetricValue, MetricValueWithName } from 'prom-client';
import { AggregatorRegistry, Registry } from 'prom-client';
import type { HistogramTotals, PolicyField } from './shared-metrics';
import { readPolicyState, readSlotTotals, readTenantTotals } from './shared-metrics';

export type MetricJson = MetricObjectWithValues<MetricValue<string> | MetricValueWithName<string>>;

export interface SlotDescription {
  slot: number;
  model: string;
  version: string;
  /** Requests waiting in this slot's ring right now. */
  queueDepth: number;
  executionProvider: string;
  alias: string;
}

export interface NodeGauges {
  wsConnections: number;
  epoch: number;
}

type Labels = Record<string, string | number>;

/**
 * Batch policy gauges, in base units (the lanes write ms): the mean over a version's lanes, and over the nodes
 * by the supervisor ('average').
 */
const POLICY_GAUGES: ReadonlyArray<{ field: PolicyField; scale: number; name: string; help: string }> = [
  {
    field: 'costInterceptMs',
    scale: 1e-3,
    name: 'streaminfer_batch_cost_intercept_seconds',
    help: 'Adaptive batching: learned fixed cost a of one model run, in cost(n) = a + b·n.',
  },
  {
    field: 'costPerItemMs',
    scale: 1e-3,
    name: 'streaminfer_batch_cost_per_item_seconds',
    help: 'Adaptive batching: learned marginal cost b of one item, in cost(n) = a + b·n.',
  },
  {
    field: 'arrivalRatePerSecond',
    scale: 1,
    name: 'streaminfer_batch_arrival_rate',
    help: 'Adaptive batching: estimated arrival rate (items per second).',
  },
  {
    field: 'targetBatchSize',
    scale: 1,
    name: 'streaminfer_batch_target_size',
    help: 'Batch size the batch policy is aiming for.',
  },
  {
    field: 'waitMs',
    scale: 1e-3,
    name: 'streaminfer_batch_wait_seconds',
    help: 'Wait the batch policy planned at its latest decision (0 after a dispatch or when idle).',
  },
];

/**
 * Converts one node's shared counters into prom-client's JSON form (what `getMetricsAsJSON()` returns) so the
 * supervisor can merge every node with AggregatorRegistry.aggregate(): counters and histograms sum, gauges sum.
 */
export function nodeMetricsJson(
  buffer: SharedArrayBuffer,
  slots: SlotDescription[],
  gauges: NodeGauges,
  /**
   * The node's tenant names by tenant index (index 0, anonymous, has none): their request and shed series
   * carry `tenant`; anonymous ones carry no tenant label (`tenant=""` to Prometheus).
   */
  tenants: ReadonlyArray<string | undefined> = [],
): MetricJson[] {
  const requests: MetricValue<string>[] = [];
  const requestDuration: MetricValueWithName<string>[] = [];
  const queueDuration: MetricValueWithName<string>[] = [];
  const computeDuration: MetricValueWithName<string>[] = [];
  const batchSize: MetricValueWithName<string>[] = [];
  const queueDepth: MetricValue<string>[] = [];
  const inflight: MetricValue<string>[] = [];
  const shed: MetricValue<string>[] = [];
  const modelInfo: MetricValue<string>[] = [];
  const batches: MetricValue<string>[] = [];
  const isolationRuns: MetricValue<string>[] = [];
  const clientModelErrors: MetricValue<string>[] = [];
  const routed: MetricValue<string>[] = [];
  const invalidRecords: MetricValue<string>[] = [];
  const judged: MetricValue<string>[] = [];
  const judgedDuration: MetricValueWithName<string>[] = [];
  const policy = POLICY_GAUGES.map(() => [] as MetricValue<string>[]);
  for (const slot of slots) {
    const totals = readSlotTotals(buffer, slot.slot);
    const base = { model: slot.model, version: slot.version };
    for (const entry of totals.requests) {
      requests.push({ value: entry.value, labels: { ...base, protocol: entry.protocol, code: entry.code } });
    }
    pushHistogram(requestDuration, 'streaminfer_request_duration_seconds', base, totals.requestDuration);
    pushHistogram(queueDuration, 'streaminfer_queue_duration_seconds', base, totals.queueDuration);
    pushHistogram(computeDuration, 'streaminfer_compute_duration_seconds', base, totals.computeDuration);
    pushHistogram(batchSize, 'streaminfer_batch_size', base, totals.batchSize);
    for (const entry of totals.shed)
      shed.push({ value: entry.value, labels: { ...base, reason: entry.reason } });
    tenants.forEach((tenant, index) => {
      if (tenant === undefined || index === 0) return;
      const own = readTenantTotals(buffer, slot.slot, index);
      for (const entry of own.requests)
        requests.push({
          value: entry.value,
          labels: { ...base, tenant, protocol: entry.protocol, code: entry.code },
        });
      for (const entry of own.shed)
        shed.push({ value: entry.value, labels: { ...base, tenant, reason: entry.reason } });
    });
    for (const entry of totals.routes)
      routed.push({ value: entry.value, labels: { ...base, route: entry.route } });
    if (slot.version !== '' && totals.judged.duration.count > 0) {
      judged.push(
        { value: totals.judged.ok, labels: { ...base, result: 'ok' } },
        { value: totals.judged.errors, labels: { ...base, result: 'error' } },
      );
      pushHistogram(
        judgedDuration,
        'streaminfer_rollout_judged_duration_seconds',
        base,
        totals.judged.duration,
      );
    }
    if (slot.version !== '') {
      queueDepth.push({ value: slot.queueDepth, labels: base });
      inflight.push({ value: totals.inflight, labels: base });
      batches.push({ value: totals.batches, labels: base });
      isolationRuns.push({ value: totals.isolationRuns, labels: base });
      clientModelErrors.push({ value: totals.clientModelErrors, labels: base });
      invalidRecords.push({ value: totals.invalidRecords, labels: base });
      modelInfo.push({
        value: 1,
        labels: { ...base, alias: slot.alias, execution_provider: slot.executionProvider },
      });
      const state = readPolicyState(buffer, slot.slot);
      POLICY_GAUGES.forEach((gauge, index) => {
        const value = state?.[gauge.field];
        if (value !== undefined) policy[index]!.push({ value: value * gauge.scale, labels: base });
      });
    }
  }
  return [
    metricJson(
      'streaminfer_requests_total',
      'Requests answered, by model, version, tenant (--api-keys; none for anonymous traffic), protocol and result code.',
      'counter',
      requests,
    ),
    metricJson(
      'streaminfer_request_duration_seconds',
      'Time from admission to the answer being sent.',
      'histogram',
      requestDuration,
    ),
    metricJson(
      'streaminfer_queue_duration_seconds',
      'Time a request waited in its ring before its batch ran.',
      'histogram',
      queueDuration,
    ),
    metricJson(
      'streaminfer_compute_duration_seconds',
      'Model run time of the batch that computed a request.',
      'histogram',
      computeDuration,
    ),
    metricJson('streaminfer_batch_size', 'Items per model run.', 'histogram', batchSize),
    metricJson('streaminfer_batches_total', 'Model runs.', 'counter', batches),
    metricJson(
      'streaminfer_batch_isolation_runs_total',
      'Extra model runs of the halves of a batch whose run failed, to find the items that fail alone.',
      'counter',
      isolationRuns,
    ),
    metricJson(
      'streaminfer_client_model_errors_total',
      'model_error answers charged to the client that sent the request (each costs it modelErrorPenalty tokens).',
      'counter',
      clientModelErrors,
    ),
    metricJson(
      'streaminfer_routed_requests_total',
      'Admitted requests by the route that chose their version: stable, canary (to the candidate), pinned (version named).',
      'counter',
      routed,
    ),
    metricJson(
      'streaminfer_worker_invalid_records_total',
      "Request records a worker refused before copying them (byte lengths or dims not the model's): each answered internal alone. Always 0 unless a decoder is wrong.",
      'counter',
      invalidRecords,
    ),
    metricJson(
      'streaminfer_rollout_judged_requests_total',
      "Answers a rollout check counts, by result (ok, error): requests the router assigned (stable or canary route, never pinned), less client and load faults and deadlines below the model's service time.",
      'counter',
      judged,
    ),
    metricJson(
      'streaminfer_rollout_judged_duration_seconds',
      'Time from admission to the answer, of the answers a rollout check counts.',
      'histogram',
      judgedDuration,
    ),
    metricJson('streaminfer_queue_depth', 'Requests waiting for a worker.', 'gauge', queueDepth),
    metricJson('streaminfer_inflight_requests', 'Requests admitted and not yet answered.', 'gauge', inflight),
    metricJson(
      'streaminfer_shed_total',
      'Requests refused or dropped to protect the server, by tenant (--api-keys; none for anonymous traffic) and reason.',
      'counter',
      shed,
    ),
    metricJson(
      'streaminfer_model_info',
      'Loaded model versions and the execution provider each runs on.',
      'gauge',
      modelInfo,
      'max',
    ),
    metricJson('streaminfer_ws_connections', 'Open WebSocket connections.', 'gauge', [
      { value: gauges.wsConnections, labels: {} },
    ]),
    metricJson(
      'streaminfer_model_epoch',
      'Model table epoch served.',
      'gauge',
      [{ value: gauges.epoch, labels: {} }],
      'max',
    ),
    ...POLICY_GAUGES.map((gauge, index) =>
      metricJson(gauge.name, gauge.help, 'gauge', policy[index]!, 'average'),
    ),
  ];
}

export function metricJson(
  name: string,
  help: string,
  type: 'counter' | 'gauge' | 'histogram',
  values: Array<MetricValue<string> | MetricValueWithName<string>>,
  aggregator: 'sum' | 'max' | 'average' = 'sum',
): MetricJson {
  return { name, help, type: type as unknown as MetricJson['type'], values, aggregator } as MetricJson;
}

function pushHistogram(
  target: MetricValueWithName<string>[],
  name: string,
  labels: Labels,
  totals: HistogramTotals,
): void {
  for (const bucket of totals.buckets) {
    target.push({
      metricName: `${name}_bucket`,
      value: bucket.count,
      labels: { ...labels, le: Number.isFinite(bucket.le) ? bucket.le : '+Inf' },
    });
  }
  target.push({ metricName: `${name}_sum`, value: totals.sum, labels });
  target.push({ metricName: `${name}_count`, value: totals.count, labels });
}

/** Merges per-process metric JSON (nodes + supervisor) into Prometheus text for the whole host. */
export async function aggregateToText(perProcess: MetricJson[][]): Promise<string> {
  const registry = AggregatorRegistry.aggregate(
    perProcess as Parameters<typeof AggregatorRegistry.aggregate>[0],
  );
  return registry.metrics();
}

export const PROMETHEUS_CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE;
