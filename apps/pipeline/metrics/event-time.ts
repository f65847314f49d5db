import { Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** Event-time progress (the watermarks against the clock) and the keyed state it keeps. */
export class EventTimeMetrics extends MetricGroup {
  readonly watermarkLag = new Gauge({
    name: 'streaminfer_stream_watermark_lag_seconds',
    help: 'Now − the event-time watermark (includes the configured out-of-orderness bound)',
    registers: this.registers,
  });
  readonly watermarkAhead = new Gauge({
    name: 'streaminfer_stream_watermark_ahead_seconds',
    help: 'The highest partition watermark − now: negative normally; above 0, events from the future were accepted',
    registers: this.registers,
  });
  readonly stateKeys = new Gauge({
    name: 'streaminfer_stream_state_keys',
    help: 'Deliveries held in keyed state',
    registers: this.registers,
  });
  readonly stateBytes = new Gauge({
    name: 'streaminfer_stream_state_bytes',
    help: 'Estimated bytes of keyed state (windows, histories, dedupe ids)',
    registers: this.registers,
  });
}
