import { Histogram, Summary } from 'prom-client';
import { MetricGroup } from './group';

/** Freshness buckets: 10 ms … 10 min (a drained backlog is minutes old). */
const FRESHNESS_BUCKETS = [
  0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120, 300, 600,
];
const INFERENCE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** Freshness (prediction PubAck − event_time, the figure that matters) and inference time. */
export class LatencyMetrics extends MetricGroup {
  readonly freshness = new Histogram({
    name: 'streaminfer_stream_freshness_seconds',
    help: "Prediction published (PubAck) − its event's event_time, for each event's first prediction",
    buckets: FRESHNESS_BUCKETS,
    registers: this.registers,
  });
  readonly freshnessRecent = new Summary({
    name: 'streaminfer_stream_freshness_recent_seconds',
    help: 'Freshness quantiles over the last minute (the same observations as the histogram)',
    percentiles: [0.5, 0.95, 0.99],
    maxAgeSeconds: 60,
    ageBuckets: 6,
    registers: this.registers,
  });
  /** The same observations over the last 10 s, for /health's `stale` (not exported: the summary above is). */
  private readonly freshnessNow = new Summary({
    name: 'streaminfer_stream_freshness_now_seconds',
    help: 'Freshness quantiles over the last 10 s',
    percentiles: [0.95],
    maxAgeSeconds: 10,
    ageBuckets: 5,
    registers: [],
  });
  readonly inference = new Histogram({
    name: 'streaminfer_stream_inference_duration_seconds',
    help: 'One prediction, from the call to the backend to its answer (queueing and batching included)',
    labelNames: ['mode'],
    buckets: INFERENCE_BUCKETS,
    registers: this.registers,
  });

  observeFreshness(seconds: number): void {
    this.freshness.observe(seconds);
    this.freshnessRecent.observe(seconds);
    this.freshnessNow.observe(seconds);
  }

  /** Freshness p95 (seconds) of the last 10 s; NaN when nothing was published. */
  async freshnessNowP95(): Promise<number> {
    const data = await this.freshnessNow.get();
    return data.values.find((v) => v.labels.quantile === 0.95)?.value ?? Number.NaN;
  }

  /** Current freshness quantiles (seconds) of the last minute, for /health and the bench. */
  async freshnessQuantiles(): Promise<{ p50: number; p95: number; p99: number; count: number }> {
    const data = await this.freshnessRecent.get();
    const at = (q: number) => data.values.find((v) => v.labels.quantile === q)?.value ?? Number.NaN;
    const count = data.values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
    return { p50: at(0.5), p95: at(0.95), p99: at(0.99), count };
  }
}
