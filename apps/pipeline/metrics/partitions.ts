import { Counter, Gauge } from 'prom-client';
import { MetricGroup } from './group';

/** Key partitions and their leases: which this instance works, how they move, their lag and key skew. */
export class PartitionMetrics extends MetricGroup {
  readonly owned = new Gauge({
    name: 'streaminfer_stream_partition_owned',
    help: '1 for each partition this instance holds the lease of and works',
    labelNames: ['partition'],
    registers: this.registers,
  });
  readonly failed = new Gauge({
    name: 'streaminfer_stream_partition_failed',
    help: '1 for each partition whose lease this instance holds but cannot work (its checkpoint does not read)',
    labelNames: ['partition'],
    registers: this.registers,
  });
  readonly ownedCount = new Gauge({
    name: 'streaminfer_stream_partitions_owned',
    help: 'Partitions this instance works (of the pipeline total, streaminfer_stream_partitions)',
    registers: this.registers,
  });
  readonly total = new Gauge({
    name: 'streaminfer_stream_partitions',
    help: 'Key partitions of the pipeline (config partitions)',
    registers: this.registers,
  });
  readonly liveInstances = new Gauge({
    name: 'streaminfer_stream_live_instances',
    help: 'Instances of this pipeline heartbeating in the lease bucket, as this one sees them',
    registers: this.registers,
  });
  readonly events = new Counter({
    name: 'streaminfer_stream_partition_events_total',
    help: 'Input messages per partition, as worked here (key skew: compare partitions)',
    labelNames: ['partition'],
    registers: this.registers,
  });
  readonly pending = new Gauge({
    name: 'streaminfer_stream_partition_pending_messages',
    help: "Messages of the partition not yet delivered to its consumer (the partition's lag)",
    labelNames: ['partition'],
    registers: this.registers,
  });
  readonly busiestKey = new Gauge({
    name: 'streaminfer_stream_busiest_key_events',
    help: "Events of the partition's busiest delivery over the last full minute (one series per partition)",
    labelNames: ['partition', 'key'],
    registers: this.registers,
  });
  readonly moves = new Counter({
    name: 'streaminfer_stream_partition_moves_total',
    help: 'Partitions this instance took or gave up, by direction and reason',
    labelNames: ['direction', 'reason'],
    registers: this.registers,
  });
}
