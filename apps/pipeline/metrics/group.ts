import type { Registry } from 'prom-client';

/** One job's metrics, registered in the pipeline's registry (a base class: its field runs before theirs). */
export abstract class MetricGroup {
  protected readonly registers: Registry[];

  constructor(registry: Registry) {
    this.registers = [registry];
  }
}
