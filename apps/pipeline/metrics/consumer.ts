import { Counter, Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** The input consumers: what the broker holds for them, what is fetched and not done, what goes back. */
export class ConsumerMetrics extends MetricGroup {
  readonly naks = new Counter({
    name: 'streaminfer_stream_naks_total',
    help: 'Messages handed back to the broker for redelivery (effects not stored)',
    registers: this.registers,
  });
  readonly pending = new Gauge({
    name: 'streaminfer_stream_consumer_pending_messages',
    help: 'Consumer lag: messages in the input stream not yet delivered to the pipeline (num_pending)',
    registers: this.registers,
  });
  readonly ackPending = new Gauge({
    name: 'streaminfer_stream_consumer_ack_pending_messages',
    help: 'Messages delivered and not yet acked (bounded by max_ack_pending)',
    registers: this.registers,
  });
  readonly oldestUnprocessedAge = new Gauge({
    name: 'streaminfer_stream_oldest_unprocessed_age_seconds',
    help: 'Age (now − broker store time) of the oldest input message not processed yet (at the broker, or fetched and not published); 0 when none',
    registers: this.registers,
  });
  readonly unprocessed = new Gauge({
    name: 'streaminfer_stream_unprocessed_messages',
    help: 'Input messages not processed yet: pending at the broker, and fetched but not published (the lag slo.lagMessages bounds)',
    registers: this.registers,
  });
  readonly inflight = new Gauge({
    name: 'streaminfer_stream_inflight_messages',
    help: 'Messages between receipt and ack',
    registers: this.registers,
  });
}
