/**
 * The fleet's shared records (docs/operations/fleet.md; their shapes: record-shapes.ts) and the names of its NATS resources. Everything read back from
 * NATS goes through parse*: another build or a hand-edited key is a typed error, never a crash further on.
 */
import { isRepositoryName, type ModelPlan } from '../../../libs/registry';
import { FleetError } from './errors';
import type { FleetRecord, FleetTable, HostBeat, HostModelBeat } from './record-shapes';
import { READ_FORMATS } from './record-shapes';

export {
  type FleetRecord,
  type FleetTable,
  type HostBeat,
  type HostModelBeat,
  REGISTRY_RECORD_FORMAT,
  type RegistryEntry,
} from './record-shapes';

// They go into bucket names, KV keys and subject tokens.
const FLEET_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
const HOST_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export function requireFleetName(fleet: string): string {
  if (typeof fleet !== 'string' || !FLEET_PATTERN.test(fleet))
    throw new FleetError('invalid_options', `fleet must match ${FLEET_PATTERN.source} (got ${fleet})`);
  return fleet;
}

export function isHostId(hostId: unknown): hostId is string {
  return typeof hostId === 'string' && HOST_ID_PATTERN.test(hostId);
}

export function requireHostId(hostId: string): string {
  if (typeof hostId !== 'string' || !HOST_ID_PATTERN.test(hostId))
    throw new FleetError('invalid_options', `host id must match ${HOST_ID_PATTERN.source} (got ${hostId})`);
  return hostId;
}

export const REGISTRY_KEY = 'registry';
export const LEASE_KEY = 'coordinator';

export interface FleetNames {
  /** KV: key `registry` (history 5, CAS writes only). */
  registryBucket: string;
  /** KV: key `<hostId>`, max_age = heartbeat TTL. */
  hostsBucket: string;
  /** KV: key `coordinator`, max_age = lease TTL. */
  leaseBucket: string;
  /** Object Store: `<model>/config.json`, `<model>/<version>/model.onnx`. */
  modelsBucket: string;
  /** Request/reply subject of one host's barrier steps. */
  hostSubject(hostId: string): string;
}

export function fleetNames(fleet: string): FleetNames {
  requireFleetName(fleet);
  return {
    registryBucket: `streaminfer_fleet_${fleet}`,
    hostsBucket: `streaminfer_fleet_${fleet}_hosts`,
    leaseBucket: `streaminfer_fleet_${fleet}_lease`,
    modelsBucket: `streaminfer_models_${fleet}`,
    hostSubject: (hostId) => `streaminfer.fleet.${fleet}.host.${requireHostId(hostId)}`,
  };
}

// ---- validation ----

type Json = Record<string, unknown>;

function invalid(what: string, detail: string): never {
  throw new FleetError('invalid_record', `${what}: ${detail}`);
}

function object(what: string, value: unknown): Json {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) invalid(what, 'not an object');
  return value as Json;
}

function text(what: string, o: Json, key: string, optional = false): string | undefined {
  const v = o[key];
  if (v === undefined && optional) return undefined;
  if (typeof v !== 'string') invalid(what, `${key} must be a string`);
  return v;
}

function count(what: string, o: Json, key: string): number {
  const v = o[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    invalid(what, `${key} must be an integer >= 0`);
  return v;
}

function flag(what: string, o: Json, key: string, optional = false): boolean | undefined {
  const v = o[key];
  if (v === undefined && optional) return undefined;
  if (typeof v !== 'boolean') invalid(what, `${key} must be a boolean`);
  return v;
}

function percent(what: string, o: Json, key: string, optional = false): number | undefined {
  const v = o[key];
  if (v === undefined && optional) return undefined;
  if (typeof v !== 'number' || !(v >= 0 && v <= 100)) invalid(what, `${key} must be a number in 0..100`);
  return v;
}

function time(what: string, o: Json, key: string): string {
  const v = text(what, o, key) as string;
  if (Number.isNaN(Date.parse(v))) invalid(what, `${key} must be an ISO time`);
  return v;
}

function array(what: string, o: Json, key: string): unknown[] {
  const v = o[key];
  if (!Array.isArray(v)) invalid(what, `${key} must be an array`);
  return v;
}

function parseModelPlan(value: unknown, index: number, table: string): ModelPlan {
  const what = `${table}: models[${index}]`;
  const o = object(what, value);
  const versions = array(what, o, 'versions');
  if (!versions.every((v) => typeof v === 'string')) invalid(what, 'versions must be strings');
  const plan: ModelPlan = {
    name: text(what, o, 'name') as string,
    versions: versions as string[],
    stable: text(what, o, 'stable') as string,
  };
  // Names become paths and routes on every host: one that cannot be a repository name is not a record.
  if (!isRepositoryName(plan.name)) invalid(what, `name ${JSON.stringify(plan.name)} is not a model name`);
  for (const version of plan.versions)
    if (!isRepositoryName(version))
      invalid(what, `version ${JSON.stringify(version)} of ${plan.name} is not a version name`);
  if (!plan.versions.includes(plan.stable))
    invalid(what, `stable ${plan.stable} of ${plan.name} is not among its versions`);
  const candidate = text(what, o, 'candidate', true);
  if (candidate !== undefined && !plan.versions.includes(candidate))
    invalid(what, `candidate ${candidate} of ${plan.name} is not among its versions`);
  const previousStable = text(what, o, 'previousStable', true);
  const canaryPercent = percent(what, o, 'canaryPercent', true);
  const shadow = flag(what, o, 'shadow', true);
  if (candidate !== undefined) plan.candidate = candidate;
  if (previousStable !== undefined) plan.previousStable = previousStable;
  if (canaryPercent !== undefined) plan.canaryPercent = canaryPercent;
  if (shadow !== undefined) plan.shadow = shadow;
  return plan;
}

/** A checked copy of a table's shared part (models and default model; settings dropped). */
export function parseFleetTable(value: unknown, what = 'table'): FleetTable {
  const table = object(what, value);
  const models = array(what, table, 'models').map((m, i) => parseModelPlan(m, i, what));
  const defaultModel = text(what, table, 'defaultModel') as string;
  if (!models.some((model) => model.name === defaultModel))
    invalid(what, `default model ${defaultModel} is not among its models`);
  return { models, defaultModel };
}

/** A fresh, checked copy: unknown fields (e.g. a table's per-host settings) are dropped. */
export function parseFleetRecord(value: unknown): FleetRecord {
  const what = 'registry record';
  const o = object(what, value);
  if (typeof o.format !== 'number' || !READ_FORMATS.includes(o.format))
    invalid(what, `format ${String(o.format)} (this build reads ${READ_FORMATS.join(' and ')})`);
  const record: FleetRecord = {
    format: o.format as FleetRecord['format'],
    epoch: count(what, o, 'epoch'),
    table: parseFleetTable(o.table, `${what}: table`),
    reloadId: text(what, o, 'reloadId') as string,
    reason: text(what, o, 'reason') as string,
    strategy: o.strategy === 'rolling' ? 'rolling' : 'atomic',
    committedBy: text(what, o, 'committedBy') as string,
    committedAt: time(what, o, 'committedAt'),
  };
  if (o.format >= 2) record.members = parseMembers(what, o);
  return record;
}

/** Host ids, each once, sorted: the order every host lists them in. */
function parseMembers(what: string, o: Json): string[] {
  const members = array(what, o, 'members');
  for (const member of members)
    if (typeof member !== 'string' || !HOST_ID_PATTERN.test(member))
      invalid(what, `members: ${JSON.stringify(member)} is not a host id`);
  const sorted = [...new Set(members as string[])].sort();
  if (sorted.length !== members.length) invalid(what, 'members: a host is listed twice');
  return sorted;
}

export function parseHostBeat(value: unknown): HostBeat {
  const what = 'host heartbeat';
  const o = object(what, value);
  const host = text(what, o, 'host') as string;
  if (!HOST_ID_PATTERN.test(host)) invalid(what, `host ${host} is not a host id`);
  const models = array(what, o, 'models').map((m, i): HostModelBeat => {
    const mw = `${what}: models[${i}]`;
    const mo = object(mw, m);
    const model: HostModelBeat = {
      name: text(mw, mo, 'name') as string,
      stable: text(mw, mo, 'stable') as string,
      canaryPercent: percent(mw, mo, 'canaryPercent') as number,
      shadow: flag(mw, mo, 'shadow') as boolean,
    };
    const candidate = text(mw, mo, 'candidate', true);
    if (candidate !== undefined) model.candidate = candidate;
    return model;
  });
  const rps = o.requestsPerSecond;
  if (typeof rps !== 'number' || !(rps >= 0) || !Number.isFinite(rps))
    invalid(what, 'requestsPerSecond must be a finite number >= 0');
  const beat: HostBeat = {
    host,
    address: text(what, o, 'address') as string,
    epoch: count(what, o, 'epoch'),
    ready: flag(what, o, 'ready') as boolean,
    fenced: flag(what, o, 'fenced') as boolean,
    defaultModel: text(what, o, 'defaultModel') as string,
    models,
    nodes: count(what, o, 'nodes'),
    nodesReady: count(what, o, 'nodesReady'),
    requestsPerSecond: rps,
    startedAt: time(what, o, 'startedAt'),
    beatAt: time(what, o, 'beatAt'),
  };
  const fenceReason = text(what, o, 'fenceReason', true);
  if (fenceReason !== undefined) beat.fenceReason = fenceReason;
  return beat;
}

const decoder = new TextDecoder();

/** JSON bytes from NATS → parsed value; bad JSON is the same typed error as a bad shape. */
export function decodeJson(what: string, bytes: Uint8Array): unknown {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch (err) {
    throw new FleetError('invalid_record', `${what}: not JSON (${String(err)})`, { cause: err });
  }
}
