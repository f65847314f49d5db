/** The fleet's NATS JetStream I/O (docs/operations/fleet.md; on libs/jetstream): registry, heartbeats, lease, steps, artifacts. */
export type { ArtifactDigest, LocalVerdict } from './artifacts';
export {
  type ArtifactTrust,
  configObject,
  digestHex,
  fileSha256,
  ModelArtifacts,
  modelObject,
  pullCacheDir,
  versionConfigObject,
} from './artifacts';
export type { FleetConnectionOptions } from './connection';
export { connectFleet, FleetConnection } from './connection';
export type { CoordinatorLeaseOptions, LeaseAcquire, LeaseHolder } from './coordinator-lease';
export { CoordinatorLease, DEFAULT_LEASE_TTL_MS } from './coordinator-lease';
export type { FleetErrorCode } from './errors';
export { ArtifactRefusedError, FleetError } from './errors';
export type { HostBoardOptions } from './host-board';
export { DEFAULT_HEARTBEAT_TTL_MS, HostBoard, SILENCE_POLL_MS } from './host-board';
export type {
  HostStep,
  HostStepAnswer,
  HostStepClient,
  HostStepRequest,
  HostStepServer,
  TablePlanLike,
} from './host-steps';
export {
  HOST_STEPS,
  hostStepClient,
  isNoResponders,
  parseHostStepRequest,
  serveHostSteps,
} from './host-steps';
export type { FleetNames, FleetRecord, FleetTable, HostBeat, HostModelBeat, RegistryEntry } from './records';
export {
  fleetNames,
  isHostId,
  LEASE_KEY,
  parseFleetRecord,
  parseFleetTable,
  parseHostBeat,
  REGISTRY_KEY,
  REGISTRY_RECORD_FORMAT,
  requireFleetName,
  requireHostId,
} from './records';
export type { RegistryWatch } from './registry-store';
export { RegistryStore } from './registry-store';
export { RolloutRecords } from './rollout-records';
