import { Counter } from 'prom-client';
import { MetricGroup } from './group';

/** Input events as the partitions judge them: received, invalid, duplicate, late, not ready. */
export class EventMetrics extends MetricGroup {
  readonly received = new Counter({
    name: 'streaminfer_stream_events_total',
    help: 'Events received, by type (gps, status, traffic; invalid for payloads that failed validation)',
    labelNames: ['type'],
    registers: this.registers,
  });
  readonly invalid = new Counter({
    name: 'streaminfer_stream_invalid_events_total',
    help: 'Events dead-lettered as invalid, by the field that failed',
    labelNames: ['field'],
    registers: this.registers,
  });
  readonly duplicates = new Counter({
    name: 'streaminfer_stream_duplicate_events_total',
    help: 'Events whose event_id was already processed (redeliveries, duplicates past the broker window)',
    registers: this.registers,
  });
  readonly late = new Counter({
    name: 'streaminfer_stream_late_events_total',
    help: 'Events beyond allowed lateness, sent to the late side output',
    registers: this.registers,
  });
  readonly behindWatermark = new Counter({
    name: 'streaminfer_stream_behind_watermark_events_total',
    help: 'Events accepted behind the watermark (inside allowed lateness)',
    registers: this.registers,
  });
  readonly notReady = new Counter({
    name: 'streaminfer_stream_not_ready_events_total',
    help: 'Accepted events with no prediction at their time yet (no first status or no GPS point before them)',
    labelNames: ['missing'],
    registers: this.registers,
  });
}
