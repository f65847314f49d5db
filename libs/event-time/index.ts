export {
  createEventTimeEngine,
  END_OF_INPUT,
  type EngineSnapshotHead,
  type EventTimeEngine,
} from './engine';
export { EngineEventError, EngineOptionError, EngineSnapshotError } from './errors';
export { MinHeap } from './heap';
export { MAX_WINDOWS_PER_EVENT, validateEngineOptions } from './options';
/** Snapshot field readers, shared with the snapshots of workloads built on the engine. */
export {
  arr,
  bad,
  int,
  isRecord,
  num,
  packDeltas,
  packStrings,
  str,
  unpackDeltas,
  unpackStrings,
} from './pack';
export {
  checkSnapshot,
  type EngineSnapshot,
  type EventColumns,
  type KeySnapshot,
  SNAPSHOT_VERSION,
  type WindowStateSnapshot,
} from './snapshot';
export type {
  AcceptedOutput,
  DuplicateOutput,
  EngineCounters,
  EngineOutput,
  EngineStats,
  EventTimeEngineOptions,
  ExpiredOutput,
  LateOutput,
  LatestSpec,
  ResultOutput,
  StreamEvent,
  WindowRef,
  WindowSpec,
} from './types';
export type { PartitionState } from './watermark';
export { windowStartsFor } from './windows';
