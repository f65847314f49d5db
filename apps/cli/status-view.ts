/**
 * `streaminfer status`, the pure part: what /health, the last reload and two /metrics scrapes say, summed up
 * (rates and latency quantiles are what happened between the scrapes), and that summary drawn as one screen
 * of at most 100 columns. No I/O and no clock of its own: the caller passes the scrapes, the window and `now`.
 */
import {
  findSamples,
  histogramQuantileEstimate,
  type LabelFilter,
  type MetricSample,
  sampleDeltas,
  sumSamples,
} from '../../libs/metrics';
import { StatusError } from './errors';

export const FRAME_WIDTH = 100;

export interface HealthAnswer {
  status: string;
  uptime_s?: number;
  default_model: string;
  device: string;
  epoch?: number;
  nodes: Array<{
    node: number;
    state: string;
    pid?: number;
    workers?: number;
    workers_ready?: number;
    inflight?: number;
    ws_connections?: number;
  }>;
  models: Array<{
    name: string;
    default_version: string;
    aliases?: Record<string, string>;
    canary_percent?: number;
    shadow?: boolean;
    versions: Array<{ version: string; execution_provider: string; fallback_reason?: string }>;
  }>;
}

/** GET /api/reload: `{ id: 0 }` before the first reload. */
export interface ReloadAnswer {
  id?: number;
  result?: string;
  strategy?: string;
  epoch?: number;
  epoch_before?: number;
  duration_ms?: number;
  started_at?: string;
  error?: string;
}

/** Checks the shape of a /health body before anything reads it. */
export function readHealth(body: unknown): HealthAnswer {
  const health = body as Partial<HealthAnswer> | null;
  if (
    typeof health !== 'object' ||
    health === null ||
    typeof health.status !== 'string' ||
    !Array.isArray(health.nodes) ||
    !Array.isArray(health.models)
  )
    throw new StatusError('bad_answer', `/health answered something that is not a health report`);
  return health as HealthAnswer;
}

export interface StatusInputs {
  url: string;
  health: HealthAnswer;
  lastReload: ReloadAnswer;
  before: readonly MetricSample[];
  after: readonly MetricSample[];
  /** Seconds between the two scrapes. */
  windowS: number;
  /** Wall clock (ms since the epoch) when the second scrape came back. */
  now: number;
}

export interface NodeStatus {
  node: number;
  state: string;
  pid?: number;
  workers?: number;
  workersReady?: number;
  inflight?: number;
  wsConnections?: number;
  lagP99Ms?: number;
  cpuPercent?: number;
  rssBytes?: number;
  restarts?: number;
}

/** Latency quantile in ms; `above` when it lies past the last finite bucket bound (then `ms` is that bound). */
export interface Quantile {
  ms: number;
  above?: true;
}

export interface ModelStatus {
  name: string;
  isDefault: boolean;
  aliases: Record<string, string>;
  provider: string;
  canaryPercent: number;
  /** Share of unpinned requests the candidate got in the window, when there were any. */
  canaryObservedPercent?: number;
  shadow: boolean;
  /** Shadow top-1/tolerance agreement: in the window, or since start when the window compared none. */
  shadowAgree?: { percent: number; compared: number; since: 'window' | 'start' };
  requestsPerS: number;
  /** Answers per second by result code (only codes seen in the window). */
  codesPerS: Record<string, number>;
  shedPerS: number;
  p50?: Quantile;
  p99?: Quantile;
  inflight: number;
  queued: number;
}

export interface StatusSnapshot {
  url: string;
  time: string;
  windowS: number;
  status: string;
  epoch: number;
  defaultModel: string;
  device: string;
  uptimeS?: number;
  lastReload?: {
    id: number;
    result: string;
    strategy: string;
    epochBefore: number;
    epoch: number;
    durationMs: number;
    ageS?: number;
    error?: string;
  };
  reloadsFailed: number;
  nodes: NodeStatus[];
  supervisorLagP99Ms?: number;
  models: ModelStatus[];
  requestsPerS: number;
  codesPerS: Record<string, number>;
  shedPerS: number;
  shedByReasonPerS: Record<string, number>;
  shedSinceStart: number;
  wsConnections: number;
}

const COUNTERS = new Set([
  'streaminfer_requests_total',
  'streaminfer_shed_total',
  'streaminfer_routed_requests_total',
  'streaminfer_shadow_comparisons_total',
  'streaminfer_request_duration_seconds_bucket',
  'streaminfer_node_process_cpu_seconds_total',
]);

/** Sums per value of `label` (rates when `perS` is the window). */
function byLabel(samples: readonly MetricSample[], name: string, label: string, filter?: LabelFilter) {
  const out: Record<string, number> = {};
  for (const sample of findSamples(samples, name, filter)) {
    const key = sample.labels[label];
    if (key !== undefined) out[key] = (out[key] ?? 0) + sample.value;
  }
  return out;
}

function perSecond(totals: Record<string, number>, windowS: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(totals)) if (value > 0) out[key] = value / windowS;
  return out;
}

/** A latency quantile in ms from `*_seconds` buckets. */
function latency(samples: readonly MetricSample[], q: number, filter: LabelFilter): Quantile | undefined {
  const estimate = histogramQuantileEstimate(samples, 'streaminfer_request_duration_seconds', q, filter);
  if (!estimate) return undefined;
  return estimate.aboveLastBound ? { ms: estimate.value * 1000, above: true } : { ms: estimate.value * 1000 };
}

function nodeGauge(samples: readonly MetricSample[], name: string, node: number): number | undefined {
  return findSamples(samples, name, { node: String(node) })[0]?.value;
}

/** Everything the frame shows, computed from the answers and the two scrapes. */
export function summarize(inputs: StatusInputs): StatusSnapshot {
  const { health, after, windowS } = inputs;
  const deltas = sampleDeltas(inputs.before, after, (name) => COUNTERS.has(name));
  const models = health.models.map((model): ModelStatus => {
    const filter = { model: model.name };
    const codes = byLabel(deltas, 'streaminfer_requests_total', 'code', filter);
    const requests = Object.values(codes).reduce((a, b) => a + b, 0);
    const routed = byLabel(deltas, 'streaminfer_routed_requests_total', 'route', filter);
    const unpinned = (routed.stable ?? 0) + (routed.canary ?? 0);
    const status: ModelStatus = {
      name: model.name,
      isDefault: model.name === health.default_model,
      aliases: model.aliases ?? { stable: model.default_version },
      provider: model.versions[0]?.execution_provider ?? '-',
      canaryPercent: model.canary_percent ?? 0,
      shadow: model.shadow ?? false,
      requestsPerS: requests / windowS,
      codesPerS: perSecond(codes, windowS),
      shedPerS: sumSamples(deltas, 'streaminfer_shed_total', filter) / windowS,
      inflight: sumSamples(after, 'streaminfer_inflight_requests', filter),
      queued: sumSamples(after, 'streaminfer_queue_depth', filter),
    };
    if (unpinned > 0 && status.canaryPercent > 0)
      status.canaryObservedPercent = (100 * (routed.canary ?? 0)) / unpinned;
    if (status.shadow) {
      const windowAgree = byLabel(deltas, 'streaminfer_shadow_comparisons_total', 'agree', filter);
      const startAgree = byLabel(after, 'streaminfer_shadow_comparisons_total', 'agree', filter);
      const inWindow = (windowAgree.true ?? 0) + (windowAgree.false ?? 0);
      const [agree, since] = inWindow > 0 ? [windowAgree, 'window' as const] : [startAgree, 'start' as const];
      const compared = (agree.true ?? 0) + (agree.false ?? 0);
      if (compared > 0)
        status.shadowAgree = { percent: (100 * (agree.true ?? 0)) / compared, compared, since };
    }
    const p50 = latency(deltas, 0.5, filter);
    const p99 = latency(deltas, 0.99, filter);
    if (p50) status.p50 = p50;
    if (p99) status.p99 = p99;
    return status;
  });
  const nodes = health.nodes.map((node): NodeStatus => {
    const out: NodeStatus = { node: node.node, state: node.state };
    if (node.pid !== undefined) out.pid = node.pid;
    if (node.workers !== undefined) {
      out.workers = node.workers;
      out.workersReady = node.workers_ready ?? 0;
    }
    if (node.inflight !== undefined) out.inflight = node.inflight;
    if (node.ws_connections !== undefined) out.wsConnections = node.ws_connections;
    const lag = nodeGauge(after, 'streaminfer_node_nodejs_eventloop_lag_p99_seconds', node.node);
    if (lag !== undefined && node.pid !== undefined) out.lagP99Ms = lag * 1000;
    const cpu = nodeGauge(deltas, 'streaminfer_node_process_cpu_seconds_total', node.node);
    if (cpu !== undefined && node.pid !== undefined) out.cpuPercent = (100 * cpu) / windowS;
    const rss = nodeGauge(after, 'streaminfer_node_process_resident_memory_bytes', node.node);
    if (rss !== undefined && node.pid !== undefined) out.rssBytes = rss;
    const restarts = nodeGauge(after, 'streaminfer_node_restarts_total', node.node);
    if (restarts !== undefined) out.restarts = restarts;
    return out;
  });
  const codes = byLabel(deltas, 'streaminfer_requests_total', 'code');
  const shed = byLabel(deltas, 'streaminfer_shed_total', 'reason');
  const snapshot: StatusSnapshot = {
    url: inputs.url,
    time: new Date(inputs.now).toISOString(),
    windowS,
    status: health.status,
    epoch: health.epoch ?? sumSamples(after, 'streaminfer_model_epoch'),
    defaultModel: health.default_model,
    device: health.device,
    reloadsFailed: sumSamples(after, 'streaminfer_reloads_total', { result: 'failed' }),
    nodes,
    models,
    requestsPerS: Object.values(codes).reduce((a, b) => a + b, 0) / windowS,
    codesPerS: perSecond(codes, windowS),
    shedPerS: Object.values(shed).reduce((a, b) => a + b, 0) / windowS,
    shedByReasonPerS: perSecond(shed, windowS),
    shedSinceStart: sumSamples(after, 'streaminfer_shed_total'),
    wsConnections: sumSamples(after, 'streaminfer_ws_connections'),
  };
  if (health.uptime_s !== undefined) snapshot.uptimeS = health.uptime_s;
  const supervisorLag = findSamples(after, 'streaminfer_supervisor_nodejs_eventloop_lag_p99_seconds')[0];
  if (supervisorLag) snapshot.supervisorLagP99Ms = supervisorLag.value * 1000;
  const reload = inputs.lastReload;
  if (reload.id && reload.result) {
    snapshot.lastReload = {
      id: reload.id,
      result: reload.result,
      strategy: reload.strategy ?? '?',
      epochBefore: reload.epoch_before ?? 0,
      epoch: reload.epoch ?? 0,
      durationMs: reload.duration_ms ?? 0,
    };
    const started = reload.started_at ? Date.parse(reload.started_at) : Number.NaN;
    if (Number.isFinite(started))
      snapshot.lastReload.ageS = Math.max(0, (inputs.now - started - (reload.duration_ms ?? 0)) / 1000);
    if (reload.error) snapshot.lastReload.error = reload.error;
  }
  return snapshot;
}

/** `--json`: the summary with the admin API's snake_case keys (default_model, requests_per_s, ...). */
export function snapshotJson(snapshot: StatusSnapshot): Record<string, unknown> {
  const snake = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(snake);
    if (typeof value !== 'object' || value === null) return value;
    return Object.fromEntries(
      Object.entries(value).map(([key, inner]) => [
        key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase(),
        snake(inner),
      ]),
    );
  };
  return snake(snapshot) as Record<string, unknown>;
}
