import { Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** The processing epoch and the model version it pins. */
export class EpochMetrics extends MetricGroup {
  readonly current = new Gauge({
    name: 'streaminfer_stream_epoch',
    help: 'Current processing epoch',
    registers: this.registers,
  });
  readonly pinned = new Gauge({
    name: 'streaminfer_stream_pinned_model_info',
    help: 'The model version the current epoch pins (value 1)',
    labelNames: ['model', 'version'],
    registers: this.registers,
  });

  setPin(model: string, version: string, epoch: number): void {
    this.pinned.reset();
    this.pinned.set({ model, version }, 1);
    this.current.set(epoch);
  }
}
