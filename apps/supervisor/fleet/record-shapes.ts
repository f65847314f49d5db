/**
 * The shapes of the fleet's shared records (registry record, host heartbeat): types and format numbers only,
 * so errors.ts can name a registry entry without importing the validation in records.ts.
 */
import type { TablePlan } from '../../../libs/registry';

/**
 * The registry record's format this build writes: 2 added `members`. Format 1 (no members) is still read: see
 * FleetRecord.members. (Rollout records have their own: libs/rollout ROLLOUT_RECORD_FORMAT.)
 */
export const REGISTRY_RECORD_FORMAT = 2;
/** The registry record formats this build reads. */
export const READ_FORMATS: readonly number[] = [1, 2];

/** The shared part of a table: per-host settings (TablePlan.settings) are never written to the fleet. */
export type FleetTable = Pick<TablePlan, 'models' | 'defaultModel'>;

/** KV `registry`: the fleet's committed table. The fleet epoch only grows. */
export interface FleetRecord {
  format: 1 | typeof REGISTRY_RECORD_FORMAT;
  /** Every host serves `table` at this epoch. */
  epoch: number;
  /**
   * The fleet's members, sorted host ids: a fleet change needs PREPARE from each member that heartbeats, and a
   * heartbeat of a host not in here is ignored. Joined and left by CAS on this record (fleet-membership.ts).
   * Absent only in a format-1 record read back (written before membership): the first host of this build to
   * join writes it.
   */
  members?: string[];
  table: FleetTable;
  /** The fleet reload that committed it. */
  reloadId: string;
  /** "canary digits 10", "promote digits", "join" … */
  reason: string;
  /** How hosts reach it: atomic (all at COMMIT) or rolling (one by one, from the coordinator). */
  strategy: 'atomic' | 'rolling';
  /** Host id. */
  committedBy: string;
  committedAt: string;
}

export interface HostModelBeat {
  name: string;
  stable: string;
  candidate?: string;
  canaryPercent: number;
  shadow: boolean;
}

/** KV heartbeat `<hostId>`. */
export interface HostBeat {
  host: string;
  /** The host's data/admin URL, e.g. http://10.77.0.11:8000. */
  address: string;
  epoch: number;
  ready: boolean;
  fenced: boolean;
  fenceReason?: string;
  defaultModel: string;
  models: HostModelBeat[];
  nodes: number;
  nodesReady: number;
  requestsPerSecond: number;
  startedAt: string;
  beatAt: string;
}

/** The registry record as it is now, with the revision a CAS write must name. */
export interface RegistryEntry {
  record: FleetRecord;
  revision: number;
}
