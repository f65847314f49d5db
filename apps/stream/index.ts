/** The stream pipeline: JetStream I/O (connection, layout, source, sink, side outputs, runner), config, metrics, the delivery pipeline. */

export {
  DEFAULT_PIPELINE_CONFIG,
  type PipelineConfig,
  PipelineConfigError,
  resolvePipelineConfig,
} from './config';
export {
  connectNats,
  DEFAULT_NATS_URL,
  type NatsConnection,
  type NatsHandle,
  type NatsOptions,
} from './connection';
export { createEmbeddedBackend, type EmbeddedBackend, type EmbeddedBackendOptions } from './embedded';
export { StreamIoError, type StreamIoErrorCode } from './errors';
export { createExternalBackend, type ExternalBackend, type ExternalBackendOptions } from './external';
export { ExternalInferenceError, type ExternalInferenceErrorCode } from './external-errors';
export type { InferenceBackend, InferenceMode, ModelPin } from './inference';
export {
  brokerPlacesEvents,
  checkInputStream,
  inputStreamSpec,
  partitionsOfSubjects,
  placementTransform,
  subjectsOverlap,
} from './input-stream';
export {
  DEFAULT_DUPLICATE_WINDOW_MS,
  eventSubject,
  fnv1a32,
  keySubject,
  type LayoutOptions,
  layoutStreams,
  partitionFilter,
  partitionOfKey,
  type StreamLayout,
  type StreamSpec,
  type SubjectLayout,
  streamLayout,
} from './layout';
export { DEFAULT_MAX_STALL_MS, LeaseKeeper, type LeaseKeeperOptions } from './lease-keeper';
export {
  balancedTarget,
  checkLeaseOptions,
  type HeartbeatValue,
  type LeaseChange,
  type LeaseHandlers,
  type LeaseOptions,
  type LeaseValue,
  PartitionLeases,
  preferenceOrder,
  type ReleaseReason,
  serverFacts,
} from './leases';
export { PipelineMetrics } from './metrics';
export { type PartitionStatus, PartitionWorker, type PipelineCounts } from './partition';
export {
  DeliveryPipeline,
  type EpochRecord,
  type PipelineStatus,
  type ReloadOutcome,
  RetryableError,
} from './pipeline';
export { type ProvisionResult, provisionStreams } from './provision';
export {
  type Processor,
  type RunnerOptions,
  type RunnerStats,
  type RunningPipeline,
  runPipeline,
} from './runner';
export {
  type DeadLetter,
  deadLetterEffect,
  type LateRecord,
  lateEffect,
  publishDeadLetter,
} from './side-outputs';
export {
  type Effect,
  JetStreamSink,
  type Published,
  publishThenAck,
  type SinkOptions,
  type SinkStats,
} from './sink';
export {
  hashPartitioner,
  JetStreamSource,
  type PartitionFn,
  SINGLE_PARTITION,
  type SourceLag,
  type SourceMessage,
  type SourceOptions,
} from './source';
