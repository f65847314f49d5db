import { Counter, collectDefaultMetrics, type Registry } from 'prom-client';
import type { MetricJson } from './export';

/**
 * Registers this process's own metrics (CPU seconds, resident memory, heap, event-loop lag, GC, handles) as
 * prom-client collects them, under `prefix` and with constant `labels` (a node's `node="0"`). prom-client also
 * exports gauges named `…_total` (active handles, requests, resources), a suffix Prometheus reserves for
 * counters; they are dropped — the `type`-labelled families beside them carry the same numbers.
 */
export function registerProcessMetrics(
  registry: Registry,
  prefix: string,
  labels: Record<string, string> = {},
): void {
  collectDefaultMetrics({ register: registry, prefix, labels });
  for (const metric of registry.getMetricsAsArray()) {
    const name = (metric as unknown as { name: string }).name;
    if (name.startsWith(prefix) && name.endsWith('_total') && !(metric instanceof Counter))
      registry.removeSingleMetric(name);
  }
}

/**
 * A registry's families for the supervisor's AggregatorRegistry when every series carries its own `node`
 * label: series of different nodes never meet, so none may be averaged or omitted (prom-client omits the
 * start time when merging) — each keeps its value.
 */
export async function labelledProcessJson(registry: Registry): Promise<MetricJson[]> {
  const metrics = (await registry.getMetricsAsJSON()) as unknown as MetricJson[];
  return metrics.map((metric) => ({ ...metric, aggregator: 'first' }) as MetricJson);
}
