import { Counter, Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** What the pipeline publishes: predictions, alerts, window results, dead letters, and the side-output spool. */
export class OutputMetrics extends MetricGroup {
  readonly predictions = new Counter({
    name: 'streaminfer_stream_predictions_total',
    help: 'Predictions published: kind="first" for an event\'s first, "revision" for corrections',
    labelNames: ['kind'],
    registers: this.registers,
  });
  readonly alerts = new Counter({
    name: 'streaminfer_stream_alerts_total',
    help: 'Delay alerts published (P(late) above the threshold)',
    registers: this.registers,
  });
  readonly windowResults = new Counter({
    name: 'streaminfer_stream_window_results_total',
    help: 'Event-time window firings (kind="first") and revisions by late events (kind="revision"), per window',
    labelNames: ['window', 'kind'],
    registers: this.registers,
  });
  readonly deadLetters = new Counter({
    name: 'streaminfer_stream_dead_letters_total',
    help: 'Dead letters published (counted at their PubAck), by reason (invalid, processor_error, max_deliver)',
    labelNames: ['reason'],
    registers: this.registers,
  });
  readonly deadLettersFailing = new Gauge({
    name: 'streaminfer_stream_dead_letters_failing',
    help: 'Dead letters and late records the broker refuses that no spool took (spool full or disabled): retried with backoff, their partition holds its position; > 0 is degraded',
    registers: this.registers,
  });
  readonly spoolRecords = new Gauge({
    name: 'streaminfer_stream_spool_records',
    help: 'Dead letters and late records the broker refused, kept in the local spool (their source acked) until it takes them',
    registers: this.registers,
  });
  readonly spoolBytes = new Gauge({
    name: 'streaminfer_stream_spool_bytes',
    help: 'Bytes of side outputs pending in the local spool (bounded by spool.maxBytes)',
    registers: this.registers,
  });
  readonly spoolFull = new Gauge({
    name: 'streaminfer_stream_spool_full',
    help: '1 while the side-output spool is full: side outputs the broker refuses then hold their partitions',
    registers: this.registers,
  });
  readonly spoolOldestAge = new Gauge({
    name: 'streaminfer_stream_spool_oldest_age_seconds',
    help: 'Age of the oldest side output waiting in the local spool (0: none)',
    registers: this.registers,
  });
  readonly truncatedSideOutputs = new Counter({
    name: 'streaminfer_stream_truncated_side_outputs_total',
    help: 'Dead letters and late records over the broker max_payload, published with the raw payload cut (length and SHA-256 kept)',
    registers: this.registers,
  });
  readonly sinkFailures = new Counter({
    name: 'streaminfer_stream_sink_publish_failures_total',
    help: 'Publish attempts that got no PubAck (retried under the same Msg-Id)',
    registers: this.registers,
  });
}
