/**
 * The fleet's shared records (design of issue 15), kept here until one module holds every fleet record.
 * Per-host node settings are never part of the fleet table: each host adds its own.
 */
import type { ModelPlan } from '../../libs/registry';

/** The model table every host of a fleet serves. */
export interface FleetTable {
  models: ModelPlan[];
  defaultModel: string;
}

/** KV `registry`: the fleet's committed table. The fleet epoch only grows. */
export interface FleetRecord {
  format: 1;
  /** Every host serves `table` at this epoch. */
  epoch: number;
  table: FleetTable;
  /** The fleet reload that committed it. */
  reloadId: string;
  /** "canary digits 10", "promote digits", "reload digits 2", "join" … */
  reason: string;
  /** How hosts reach it: atomic (all at COMMIT) or rolling (one by one, from the coordinator). */
  strategy: 'atomic' | 'rolling';
  /** Host id. */
  committedBy: string;
  /** ISO time. */
  committedAt: string;
}
