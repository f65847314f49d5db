/**
 * Hot-path metrics in a SharedArrayBuffer. Each writing thread (a node's gateway thread, each worker thread)
 * owns one shard and is its only writer, so an update is a plain store into a Float64Array: no lock, no
 * message, no allocation, and integer counts stay exact up to 2^53. Readers sum the shards at scrape time.
 */
import { ERROR_CODES } from '../protocol';

export const MAX_SLOTS = 64;
export const DURATION_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
] as const;
export const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] as const;
/** By the node's peer kinds (apps/node/request.ts PROTOCOL_*): `embedded` = in-process calls. */
export const PROTOCOLS = ['ws', 'http', 'embedded'] as const;
export type ProtocolName = (typeof PROTOCOLS)[number];
export const SHED_REASONS = [
  'rate_limited',
  'client_queue_full',
  'model_queue_full',
  'deadline',
  'slow_consumer',
  'ring_full',
  'shutting_down',
  'fenced',
  // A WebSocket closed (1008) for protocol errors, or for sending on past its rate limit; an upgrade refused
  // at the node's or an address's connection cap.
  'protocol_violation',
  'rate_limit_violation',
  'connection_cap',
  'connection_cap_ip',
  // Tenants (--api-keys): past the tenant's rate over the host, an upgrade past its connection cap.
  'tenant_rate_limited',
  'tenant_connection_cap',
] as const;
export type ShedReason = (typeof SHED_REASONS)[number];
/** How a request reached its version (registry routing). */
export const ROUTE_NAMES = ['stable', 'canary', 'pinned'] as const;

/** Index 0 = ok; then one per error code. */
const CODE_COUNT = ERROR_CODES.length + 1;
const HISTOGRAM_WIDTH = DURATION_BUCKETS.length + 1 + 2; // buckets, +Inf, sum, count
const BATCH_HISTOGRAM_WIDTH = BATCH_SIZE_BUCKETS.length + 1 + 2;

const REQUESTS = 0;
const REQUEST_DURATION = REQUESTS + PROTOCOLS.length * CODE_COUNT;
const QUEUE_DURATION = REQUEST_DURATION + HISTOGRAM_WIDTH;
const COMPUTE_DURATION = QUEUE_DURATION + HISTOGRAM_WIDTH;
const BATCH_SIZE = COMPUTE_DURATION + HISTOGRAM_WIDTH;
const INFLIGHT = BATCH_SIZE + BATCH_HISTOGRAM_WIDTH;
const SHED = INFLIGHT + 1;
const BATCHES = SHED + SHED_REASONS.length;
const ROUTES = BATCHES + 1;
/** Model runs of a failed batch's halves (batch isolation), by the worker. */
const ISOLATION_RUNS = ROUTES + ROUTE_NAMES.length;
/** `model_error` answers charged to their client, by the node. */
const CLIENT_MODEL_ERRORS = ISOLATION_RUNS + 1;
/** Request records a worker's check refused (answered `internal`, never computed): a decoder bug's trace. */
const INVALID_RECORDS = CLIENT_MODEL_ERRORS + 1;
/**
 * What the rollout checks judge (libs/rollout judge.ts): answers to requests the router assigned, less client and
 * load faults — ok count, error count, then their request-duration histogram.
 */
const JUDGED = INVALID_RECORDS + 1;
const JUDGED_DURATION = JUDGED + 2;
/** Batch policy state (gauges, written by each worker's lane): a flag that the lane wrote, then the values. */
const POLICY = JUDGED_DURATION + HISTOGRAM_WIDTH;
const POLICY_FIELDS = [
  'costInterceptMs',
  'costPerItemMs',
  'arrivalRatePerSecond',
  'targetBatchSize',
  'waitMs',
] as const;
const SLOT_WIDTH = POLICY + 1 + POLICY_FIELDS.length;
const SHARD_WIDTH = MAX_SLOTS * SLOT_WIDTH;
/**
 * Named tenants (`--api-keys`) a node can count: indexes 1..MAX_TENANT_INDEX (0 is anonymous traffic, counted
 * in the shards' own cells). Their request and shed counters sit in one block after the shards, written only by
 * the gateway thread (shard 0), the only writer of request and shed counts that knows a request's tenant.
 */
export const MAX_TENANT_INDEX = 64;
const TENANT_REQUESTS = 0;
const TENANT_SHED = TENANT_REQUESTS + PROTOCOLS.length * CODE_COUNT;
const TENANT_WIDTH = TENANT_SHED + SHED_REASONS.length;
const TENANT_SLOT_WIDTH = MAX_TENANT_INDEX * TENANT_WIDTH;
const TENANT_BLOCK = MAX_SLOTS * TENANT_SLOT_WIDTH;

function shardCount(cells: number): number {
  return (cells - TENANT_BLOCK) / SHARD_WIDTH;
}

/** Where one tenant's cells of one slot start in the tenant block. */
function tenantBase(slot: number, tenant: number): number {
  return slot * TENANT_SLOT_WIDTH + (tenant - 1) * TENANT_WIDTH;
}

export class MetricsShard {
  private readonly cells: Float64Array;
  /** The tenant block: shard 0's (the gateway's) alone; other shards never count by tenant. */
  private readonly tenantCells: Float64Array;

  constructor(buffer: SharedArrayBuffer, shardIndex: number) {
    const shards = shardCount(buffer.byteLength / 8);
    if (!Number.isInteger(shardIndex) || shardIndex < 0 || shardIndex >= shards) {
      throw new RangeError(`metrics shard ${shardIndex} out of range (0..${shards - 1})`);
    }
    this.cells = new Float64Array(buffer, shardIndex * SHARD_WIDTH * 8, SHARD_WIDTH);
    this.tenantCells =
      shardIndex === 0
        ? new Float64Array(buffer, shards * SHARD_WIDTH * 8, TENANT_BLOCK)
        : new Float64Array(0);
  }

  /**
   * codeIndex: 0 for success, else the protocol's error code index (1-based). tenant: 0 for anonymous
   * traffic, else the node's index of the request's tenant (gateway shard only).
   */
  recordRequest(
    slot: number,
    protocol: number,
    codeIndex: number,
    durationSeconds: number,
    tenant = 0,
  ): void {
    const base = slot * SLOT_WIDTH;
    if (tenant === 0) this.cells[base + REQUESTS + protocol * CODE_COUNT + codeIndex]!++;
    else this.tenantCells[tenantBase(slot, tenant) + TENANT_REQUESTS + protocol * CODE_COUNT + codeIndex]!++;
    observe(this.cells, base + REQUEST_DURATION, DURATION_BUCKETS, durationSeconds);
  }

  recordQueueAndCompute(slot: number, queueSeconds: number, computeSeconds: number): void {
    const base = slot * SLOT_WIDTH;
    observe(this.cells, base + QUEUE_DURATION, DURATION_BUCKETS, queueSeconds);
    observe(this.cells, base + COMPUTE_DURATION, DURATION_BUCKETS, computeSeconds);
  }

  recordBatch(slot: number, size: number): void {
    const base = slot * SLOT_WIDTH;
    observe(this.cells, base + BATCH_SIZE, BATCH_SIZE_BUCKETS, size);
    this.cells[base + BATCHES]!++;
  }

  /** One model run of part of a batch whose full run failed (bisecting it to find the items that fail). */
  recordIsolationRun(slot: number): void {
    this.cells[slot * SLOT_WIDTH + ISOLATION_RUNS]!++;
  }

  /** One `model_error` answer charged to the client that sent the request. */
  recordClientModelError(slot: number): void {
    this.cells[slot * SLOT_WIDTH + CLIENT_MODEL_ERRORS]!++;
  }

  addInflight(slot: number, delta: number): void {
    this.cells[slot * SLOT_WIDTH + INFLIGHT]! += delta;
  }

  recordRoute(slot: number, route: number): void {
    this.cells[slot * SLOT_WIDTH + ROUTES + route]!++;
  }

  recordInvalidRecord(slot: number): void {
    this.cells[slot * SLOT_WIDTH + INVALID_RECORDS]!++;
  }

  /** An answer the rollout checks count (see libs/rollout judge.ts): the version's error or not. */
  recordJudged(slot: number, error: boolean, durationSeconds: number): void {
    const base = slot * SLOT_WIDTH;
    this.cells[base + JUDGED + (error ? 1 : 0)]!++;
    observe(this.cells, base + JUDGED_DURATION, DURATION_BUCKETS, durationSeconds);
  }

  /** tenant: as in recordRequest. */
  recordShed(slot: number, reason: number, tenant = 0): void {
    if (tenant === 0) this.cells[slot * SLOT_WIDTH + SHED + reason]!++;
    else this.tenantCells[tenantBase(slot, tenant) + TENANT_SHED + reason]!++;
  }

  /** Zeroes a tenant index before the node gives it to another tenant (the gateway is its only writer). */
  resetTenant(tenant: number): void {
    for (let slot = 0; slot < MAX_SLOTS; slot++) {
      const base = tenantBase(slot, tenant);
      this.tenantCells.fill(0, base, base + TENANT_WIDTH);
    }
  }

  /** The lane's batch policy state now; `a` and `b` NaN when the policy has no cost model. */
  recordPolicy(
    slot: number,
    costInterceptMs: number,
    costPerItemMs: number,
    arrivalRatePerSecond: number,
    targetBatchSize: number,
    waitMs: number,
  ): void {
    const at = slot * SLOT_WIDTH + POLICY;
    const cells = this.cells;
    cells[at] = 1;
    cells[at + 1] = costInterceptMs;
    cells[at + 2] = costPerItemMs;
    cells[at + 3] = arrivalRatePerSecond;
    cells[at + 4] = targetBatchSize;
    cells[at + 5] = waitMs;
  }

  /** The lane is gone (unloaded): its state no longer counts in the mean. */
  clearPolicy(slot: number): void {
    const at = slot * SLOT_WIDTH + POLICY;
    this.cells.fill(0, at, at + 1 + POLICY_FIELDS.length);
  }
}

export type PolicyField = (typeof POLICY_FIELDS)[number];

/**
 * The batch policy state of one slot: each field's mean over the worker shards that wrote one (lanes of one
 * version see the same arrivals and cores, so they agree closely); a field no lane has (NaN, e.g. greedy's cost
 * model) is absent; undefined when no lane wrote yet.
 */
export function readPolicyState(
  buffer: SharedArrayBuffer,
  slot: number,
): Partial<Record<PolicyField, number>> | undefined {
  const cells = new Float64Array(buffer);
  const shards = shardCount(cells.length);
  const result: Partial<Record<PolicyField, number>> = {};
  let lanes = 0;
  POLICY_FIELDS.forEach((field, index) => {
    let total = 0;
    let count = 0;
    for (let shard = 0; shard < shards; shard++) {
      const at = shard * SHARD_WIDTH + slot * SLOT_WIDTH + POLICY;
      if (cells[at] !== 1) continue;
      if (index === 0) lanes++;
      const value = cells[at + 1 + index]!;
      if (Number.isFinite(value)) {
        total += value;
        count++;
      }
    }
    if (count > 0) result[field] = total / count;
  });
  return lanes > 0 ? result : undefined;
}

function observe(cells: Float64Array, at: number, bounds: readonly number[], value: number): void {
  let bucket = 0;
  while (bucket < bounds.length && value > bounds[bucket]!) bucket++;
  cells[at + bucket]!++;
  cells[at + bounds.length + 1]! += value;
  cells[at + bounds.length + 2]!++;
}

export function metricsBufferFor(shards: number): SharedArrayBuffer {
  return new SharedArrayBuffer((shards * SHARD_WIDTH + TENANT_BLOCK) * 8);
}

/** Sums every shard of one slot into plain numbers, at scrape time. */
export interface SlotTotals {
  requests: { protocol: ProtocolName; code: string; value: number }[];
  requestDuration: HistogramTotals;
  queueDuration: HistogramTotals;
  computeDuration: HistogramTotals;
  batchSize: HistogramTotals;
  inflight: number;
  shed: { reason: ShedReason; value: number }[];
  batches: number;
  isolationRuns: number;
  clientModelErrors: number;
  routes: { route: (typeof ROUTE_NAMES)[number]; value: number }[];
  invalidRecords: number;
  /** Answers the rollout checks count: ok and errors, and their request durations. */
  judged: { ok: number; errors: number; duration: HistogramTotals };
}

export interface HistogramTotals {
  /** Cumulative counts per upper bound, ending with +Inf. */
  buckets: { le: number; count: number }[];
  sum: number;
  count: number;
}

export function readSlotTotals(buffer: SharedArrayBuffer, slot: number): SlotTotals {
  const cells = new Float64Array(buffer);
  const shards = shardCount(cells.length);
  const sum = (offset: number): number => {
    let total = 0;
    for (let shard = 0; shard < shards; shard++)
      total += cells[shard * SHARD_WIDTH + slot * SLOT_WIDTH + offset]!;
    return total;
  };
  const requests: SlotTotals['requests'] = [];
  PROTOCOLS.forEach((protocol, protocolIndex) => {
    for (let code = 0; code < CODE_COUNT; code++) {
      const value = sum(REQUESTS + protocolIndex * CODE_COUNT + code);
      if (value > 0) requests.push({ protocol, code: code === 0 ? 'ok' : ERROR_CODES[code - 1]!, value });
    }
  });
  const histogram = (offset: number, bounds: readonly number[]): HistogramTotals => {
    const buckets: HistogramTotals['buckets'] = [];
    let cumulative = 0;
    for (let i = 0; i <= bounds.length; i++) {
      cumulative += sum(offset + i);
      buckets.push({ le: i < bounds.length ? bounds[i]! : Number.POSITIVE_INFINITY, count: cumulative });
    }
    return { buckets, sum: sum(offset + bounds.length + 1), count: sum(offset + bounds.length + 2) };
  };
  return {
    requests,
    requestDuration: histogram(REQUEST_DURATION, DURATION_BUCKETS),
    queueDuration: histogram(QUEUE_DURATION, DURATION_BUCKETS),
    computeDuration: histogram(COMPUTE_DURATION, DURATION_BUCKETS),
    batchSize: histogram(BATCH_SIZE, BATCH_SIZE_BUCKETS),
    inflight: sum(INFLIGHT),
    shed: SHED_REASONS.map((reason, index) => ({ reason, value: sum(SHED + index) })).filter(
      (entry) => entry.value > 0,
    ),
    batches: sum(BATCHES),
    isolationRuns: sum(ISOLATION_RUNS),
    clientModelErrors: sum(CLIENT_MODEL_ERRORS),
    routes: ROUTE_NAMES.map((route, index) => ({ route, value: sum(ROUTES + index) })).filter(
      (entry) => entry.value > 0,
    ),
    invalidRecords: sum(INVALID_RECORDS),
    judged: {
      ok: sum(JUDGED),
      errors: sum(JUDGED + 1),
      duration: histogram(JUDGED_DURATION, DURATION_BUCKETS),
    },
  };
}

/** Zeroes one slot in every shard, before the slot is reused for another model version (no writer holds it). */
export function resetSlot(buffer: SharedArrayBuffer, slot: number): void {
  const cells = new Float64Array(buffer);
  const shards = shardCount(cells.length);
  for (let shard = 0; shard < shards; shard++) {
    const base = shard * SHARD_WIDTH + slot * SLOT_WIDTH;
    cells.fill(0, base, base + SLOT_WIDTH);
  }
  const tenants = shards * SHARD_WIDTH + slot * TENANT_SLOT_WIDTH;
  cells.fill(0, tenants, tenants + TENANT_SLOT_WIDTH);
}

/** One tenant's request and shed counts of one slot (non-zero ones), at scrape time. */
export interface TenantSlotTotals {
  requests: { protocol: ProtocolName; code: string; value: number }[];
  shed: { reason: ShedReason; value: number }[];
}

export function readTenantTotals(buffer: SharedArrayBuffer, slot: number, tenant: number): TenantSlotTotals {
  const cells = new Float64Array(buffer);
  const base = shardCount(cells.length) * SHARD_WIDTH + tenantBase(slot, tenant);
  const requests: TenantSlotTotals['requests'] = [];
  PROTOCOLS.forEach((protocol, protocolIndex) => {
    for (let code = 0; code < CODE_COUNT; code++) {
      const value = cells[base + TENANT_REQUESTS + protocolIndex * CODE_COUNT + code]!;
      if (value > 0) requests.push({ protocol, code: code === 0 ? 'ok' : ERROR_CODES[code - 1]!, value });
    }
  });
  const shed: TenantSlotTotals['shed'] = [];
  SHED_REASONS.forEach((reason, index) => {
    const value = cells[base + TENANT_SHED + index]!;
    if (value > 0) shed.push({ reason, value });
  });
  return { requests, shed };
}
