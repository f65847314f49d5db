/** What a partition is given by its instance, and what it reports back to it. */
import type { Logger } from 'pino';
import type { PipelineConfig } from './config';
import type { NatsHandle } from './connection';
import type { InferenceBackend, ModelPin } from './inference/inference';
import type { StreamLayout } from './io/layout';
import type { JetStreamSink } from './io/sink';
import type { PipelineMetrics } from './metrics';

/** Instance-wide counters (/api/pipeline), summed over the partitions it works. */
export interface PipelineCounts {
  /** Messages received, redeliveries included. */
  received: number;
  redelivered: number;
  predictions: number;
  revisions: number;
  alerts: number;
  invalid: number;
  duplicates: number;
  late: number;
  dead_letters: number;
}

export function emptyCounts(): PipelineCounts {
  return {
    received: 0,
    redelivered: 0,
    predictions: 0,
    revisions: 0,
    alerts: 0,
    invalid: 0,
    duplicates: 0,
    late: 0,
    dead_letters: 0,
  };
}

/** What every partition of an instance shares. */
export interface PartitionContext {
  config: PipelineConfig;
  layout: StreamLayout;
  nats: NatsHandle;
  /**
   * Checkpoints' own connection: megabytes of state must not queue behind the pipeline's thousands of
   * in-flight publishes and acks on the shared one (there, at 2,000 events/s, a 3 MB put timed out).
   */
  checkpointNats: NatsHandle;
  sink: JetStreamSink;
  backend: InferenceBackend;
  metrics: PipelineMetrics;
  logger: Logger;
  clock: () => number;
  counts: PipelineCounts;
  /** The instance's epoch: a partition without a checkpoint starts on it; a restored one catches up to it. */
  current(): { pin: ModelPin; epoch: number };
  /** Paused by the operator: a barrier must not resume what the operator paused. */
  operatorPaused(): boolean;
  /**
   * This instance holds the partition's lease under the acquisition `token` names, renewed within its TTL:
   * the fence for effects and checkpoints. Per acquisition: a partition of an earlier one fails it even once
   * the partition is held again.
   */
  holds(partition: number, token: number): boolean;
}
