export { PrometheusTextError } from './errors';
export type { MetricJson, NodeGauges, SlotDescription } from './export';
export { aggregateToText, metricJson, nodeMetricsJson, PROMETHEUS_CONTENT_TYPE } from './export';
export { lintExposition } from './lint';
export { labelledProcessJson, registerProcessMetrics } from './process';
export type { HistogramSums, LabelFilter, MetricSample, QuantileEstimate } from './prom-text';
export {
  findSamples,
  histogramMean,
  histogramMeanDelta,
  histogramQuantile,
  histogramQuantileEstimate,
  histogramTotals,
  matches,
  parsePrometheusText,
  sampleDeltas,
  seriesKey,
  sumSamples,
} from './prom-text';
export type {
  HistogramTotals,
  PolicyField,
  ProtocolName,
  ShedReason,
  SlotTotals,
  TenantSlotTotals,
} from './shared-metrics';
export {
  DURATION_BUCKETS,
  MAX_SLOTS,
  MAX_TENANT_INDEX,
  MetricsShard,
  metricsBufferFor,
  readPolicyState,
  readSlotTotals,
  readTenantTotals,
  resetSlot,
  SHED_REASONS,
} from './shared-metrics';
