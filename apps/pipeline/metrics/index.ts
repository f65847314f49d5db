/**
 * The pipeline's Prometheus metrics (`streaminfer_stream_*`, same conventions as the server: seconds,
 * `_total` counters, bounded labels), one group per job. Freshness is the figure that matters: prediction
 * PubAck − event_time.
 */
import { Registry } from 'prom-client';
import { registerProcessMetrics } from '../../../libs/metrics';
import { CheckpointMetrics } from './checkpoints';
import { ConsumerMetrics } from './consumer';
import { EpochMetrics } from './epochs';
import { EventTimeMetrics } from './event-time';
import { EventMetrics } from './events';
import { HealthMetrics } from './health';
import { LatencyMetrics } from './latency';
import { OutputMetrics } from './outputs';
import { PartitionMetrics } from './partitions';

export type {
  CheckpointMetrics,
  ConsumerMetrics,
  EpochMetrics,
  EventMetrics,
  EventTimeMetrics,
  HealthMetrics,
  LatencyMetrics,
  OutputMetrics,
  PartitionMetrics,
};

export class PipelineMetrics {
  readonly registry = new Registry();
  readonly events = new EventMetrics(this.registry);
  readonly outputs = new OutputMetrics(this.registry);
  readonly consumer = new ConsumerMetrics(this.registry);
  readonly latency = new LatencyMetrics(this.registry);
  readonly health = new HealthMetrics(this.registry);
  readonly eventTime = new EventTimeMetrics(this.registry);
  readonly epochs = new EpochMetrics(this.registry);
  readonly checkpoints = new CheckpointMetrics(this.registry);
  readonly partitions = new PartitionMetrics(this.registry);

  constructor() {
    registerProcessMetrics(this.registry, 'streaminfer_stream_process_');
  }
}
