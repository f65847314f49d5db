/** The stream pipeline: JetStream I/O (connection, layout, source, sink, side outputs, runner), config, metrics, the delivery pipeline. */

export {
  DEFAULT_PIPELINE_CONFIG,
  type PipelineConfig,
  resolvePipelineConfig,
} from './config';
export {
  connectNats,
  DEFAULT_NATS_URL,
  type NatsHandle,
  type NatsOptions,
} from './connection';
export {
  PipelineConfigError,
  PipelineIoError,
  type PipelineIoErrorCode,
  RetryableError,
} from './errors';
export {
  createEmbeddedBackend,
  type EmbeddedBackend,
  type EmbeddedBackendOptions,
} from './inference/embedded';
export { ExternalInferenceError, type ExternalInferenceErrorCode } from './inference/errors';
export {
  createExternalBackend,
  type ExternalBackend,
  type ExternalBackendOptions,
} from './inference/external';
export type { InferenceBackend, InferenceMode, ModelPin } from './inference/inference';
export {
  brokerPlacesEvents,
  checkInputStream,
  inputStreamSpec,
  partitionsOfSubjects,
  placementTransform,
  subjectsOverlap,
} from './io/input-stream';
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
} from './io/layout';
export { type ProvisionResult, provisionStreams } from './io/provision';
export {
  type DeadLetter,
  deadLetterEffect,
  type LateRecord,
  lateEffect,
  publishDeadLetter,
} from './io/side-outputs';
export {
  type Effect,
  JetStreamSink,
  type Published,
  publishThenAck,
  type SinkOptions,
  type SinkStats,
} from './io/sink';
export {
  hashPartitioner,
  JetStreamSource,
  type PartitionFn,
  SINGLE_PARTITION,
  type SourceLag,
  type SourceMessage,
  type SourceOptions,
} from './io/source';
export { balancedTarget, preferenceOrder } from './leases/assignment';
export { DEFAULT_MAX_STALL_MS, LeaseKeeper, type LeaseKeeperOptions } from './leases/lease-keeper';
export type {
  HeartbeatValue,
  LeaseChange,
  LeaseHandlers,
  LeaseOptions,
  LeaseValue,
  ReleaseReason,
} from './leases/lease-types';
export { checkLeaseOptions, PartitionLeases } from './leases/leases';
export { PipelineMetrics } from './metrics';
export { Partition } from './partition';
export type { PipelineCounts } from './partition-context';
export type { PartitionStatus } from './partition-status';
export { DeliveryPipeline } from './pipeline';
export type { ReloadOutcome } from './pipeline-epochs';
export type { PipelineStatus } from './pipeline-status';
export {
  type Processor,
  type RunnerOptions,
  type RunnerStats,
  type RunningPipeline,
  runPipeline,
} from './runner';
