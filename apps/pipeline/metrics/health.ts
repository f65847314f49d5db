import { Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** /health's verdicts as gauges, set each second from the status. */
export class HealthMetrics extends MetricGroup {
  readonly up = new Gauge({
    name: 'streaminfer_stream_up',
    help: "1 while the pipeline is consuming (/health's consuming: connected, every partition worked, none failed)",
    registers: this.registers,
  });
  readonly stale = new Gauge({
    name: 'streaminfer_stream_stale',
    help: "1 while /health's stale is true: running but past slo.freshnessP95Ms or slo.lagMessages",
    registers: this.registers,
  });
}
