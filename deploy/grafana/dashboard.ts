/**
 * The StreamInfer Grafana dashboard, typed against @grafana/schema so `tsc` checks its shape;
 * `npm run dashboard` writes it to deploy/grafana/streaminfer.json (import that file in Grafana). Heavy
 * queries read the recording rules of deploy/streaminfer-recording.yml, so Prometheus must load that file.
 * test/integration/prometheus.test.ts runs every query here against a live Prometheus scraping a server.
 */
import type { Dashboard, Panel } from '@grafana/schema';

// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, resolved by Grafana
const DATASOURCE = { type: 'prometheus', uid: '${datasource}' };
/** Every series of the chosen hosts (`.+` when "All"). */
const SEL = 'instance=~"$instance"';

interface Query {
  expr: string;
  legend: string;
  /** Histogram buckets for a heatmap panel. */
  heatmap?: boolean;
}

interface PanelSpec {
  title: string;
  description: string;
  type: 'timeseries' | 'heatmap' | 'stat';
  unit: string;
  queries: Query[];
  /** Width in grid columns (of 24); panels flow left to right, then down. */
  width: number;
}

const PANELS: PanelSpec[] = [
  {
    title: 'Ready and node restarts',
    description: 'Whether every node serves (1), and node restarts over the last hour (a crash loop climbs).',
    type: 'stat',
    unit: 'short',
    width: 6,
    queries: [
      { expr: `min(streaminfer_ready{${SEL}})`, legend: 'ready' },
      { expr: `sum(streaminfer_node_ready{${SEL}})`, legend: 'nodes ready' },
      { expr: `sum(increase(streaminfer_node_restarts_total{${SEL}}[1h]))`, legend: 'restarts (1h)' },
    ],
  },
  {
    title: 'Request rate by model and code',
    description: 'Answers per second, by model and result code (ok and every error code).',
    type: 'timeseries',
    unit: 'reqps',
    width: 9,
    queries: [
      {
        expr: `sum by (model, code) (model_code:streaminfer_requests:rate5m{${SEL}})`,
        legend: '{{model}} {{code}}',
      },
    ],
  },
  {
    title: 'Errors by code',
    description:
      'Failed answers per second by code (sheds included: they answer with their code), and the error ratio.',
    type: 'timeseries',
    unit: 'reqps',
    width: 9,
    queries: [
      {
        expr: `sum by (code) (model_code:streaminfer_requests:rate5m{${SEL}, code!="ok"})`,
        legend: '{{code}}',
      },
      { expr: `max(instance:streaminfer_request_errors:ratio_rate5m{${SEL}})`, legend: 'error ratio' },
    ],
  },
  {
    title: 'Latency p50 / p95 / p99 by model',
    description: 'Admission to answer sent, from the request-duration histogram.',
    type: 'timeseries',
    unit: 's',
    width: 12,
    queries: [
      {
        expr: `max by (model, quantile) (model:streaminfer_request_duration_seconds:quantile_rate5m{${SEL}})`,
        legend: '{{model}} p{{quantile}}',
      },
    ],
  },
  {
    title: 'Queue vs compute time (p95)',
    description: 'Where a request spends its time: waiting in its ring for a batch, or in the model run.',
    type: 'timeseries',
    unit: 's',
    width: 12,
    queries: [
      {
        expr: `max by (model) (model:streaminfer_queue_duration_seconds:p95_rate5m{${SEL}})`,
        legend: '{{model}} queue',
      },
      {
        expr: `max by (model) (model:streaminfer_compute_duration_seconds:p95_rate5m{${SEL}})`,
        legend: '{{model}} compute',
      },
    ],
  },
  {
    title: 'Batch size distribution',
    description: 'Model runs per second by items per run (batching at work: mass at 1 means no batching).',
    type: 'heatmap',
    unit: 'short',
    width: 8,
    queries: [
      {
        expr: `sum by (le) (model_le:streaminfer_batch_size_bucket:rate5m{${SEL}})`,
        legend: '{{le}}',
        heatmap: true,
      },
    ],
  },
  {
    title: 'Shed by reason',
    description:
      'Requests refused or dropped to protect the server, per second by reason; and the shed ratio.',
    type: 'timeseries',
    unit: 'reqps',
    width: 8,
    queries: [
      { expr: `sum by (reason) (reason:streaminfer_shed:rate5m{${SEL}})`, legend: '{{reason}}' },
      { expr: `max(instance:streaminfer_shed:ratio_rate5m{${SEL}})`, legend: 'shed ratio' },
    ],
  },
  {
    title: 'In-flight and queue depth',
    description: 'Requests admitted and not yet answered, and requests waiting for a worker, by model.',
    type: 'timeseries',
    unit: 'short',
    width: 8,
    queries: [
      { expr: `sum by (model) (streaminfer_inflight_requests{${SEL}})`, legend: '{{model}} in flight' },
      { expr: `sum by (model) (streaminfer_queue_depth{${SEL}})`, legend: '{{model}} queued' },
    ],
  },
  {
    title: 'Event-loop lag per node (p99)',
    description: 'Each gateway node and the supervisor; over 100 ms for 5 minutes alerts.',
    type: 'timeseries',
    unit: 's',
    width: 8,
    queries: [
      {
        expr: `max by (node) (streaminfer_node_nodejs_eventloop_lag_p99_seconds{${SEL}})`,
        legend: 'node {{node}}',
      },
      {
        expr: `max(streaminfer_supervisor_nodejs_eventloop_lag_p99_seconds{${SEL}})`,
        legend: 'supervisor',
      },
    ],
  },
  {
    title: 'CPU per process',
    description:
      'CPU seconds per second (1 = one core), each node (with its worker threads) and the supervisor.',
    type: 'timeseries',
    unit: 'percentunit',
    width: 8,
    queries: [
      {
        expr: `sum by (node) (rate(streaminfer_node_process_cpu_seconds_total{${SEL}}[$__rate_interval]))`,
        legend: 'node {{node}}',
      },
      {
        expr: `sum(rate(streaminfer_supervisor_process_cpu_seconds_total{${SEL}}[$__rate_interval]))`,
        legend: 'supervisor',
      },
    ],
  },
  {
    title: 'Resident memory per process',
    description: 'RSS of each node (models and rings included) and of the supervisor.',
    type: 'timeseries',
    unit: 'bytes',
    width: 8,
    queries: [
      {
        expr: `sum by (node) (streaminfer_node_process_resident_memory_bytes{${SEL}})`,
        legend: 'node {{node}}',
      },
      {
        expr: `sum(streaminfer_supervisor_process_resident_memory_bytes{${SEL}})`,
        legend: 'supervisor',
      },
    ],
  },
  {
    title: 'Epoch and reloads',
    description: 'The model-table epoch served (steps at each committed reload), and reloads by result.',
    type: 'timeseries',
    unit: 'short',
    width: 12,
    queries: [
      { expr: `max(streaminfer_model_epoch{${SEL}})`, legend: 'epoch' },
      {
        expr: `sum by (result) (increase(streaminfer_reloads_total{${SEL}}[$__rate_interval]))`,
        legend: 'reloads {{result}}',
      },
    ],
  },
  {
    title: 'Canary share and shadow agreement',
    description:
      'Share of requests the canary route sent to the candidate (and the configured fraction), and the share of shadow copies that agreed with stable.',
    type: 'timeseries',
    unit: 'percentunit',
    width: 12,
    queries: [
      {
        expr: `max by (model) (model:streaminfer_canary_requests:ratio_rate5m{${SEL}})`,
        legend: '{{model}} canary share',
      },
      {
        expr: `max by (model) (streaminfer_canary_fraction{${SEL}}) > 0`,
        legend: '{{model}} canary configured',
      },
      {
        expr: `1 - max by (model) (model:streaminfer_shadow_disagreement:ratio_rate5m{${SEL}})`,
        legend: '{{model}} shadow agreement',
      },
    ],
  },
];

const PANEL_HEIGHT = 8;

function panel(spec: PanelSpec, id: number, x: number, y: number): Panel {
  return {
    id,
    type: spec.type,
    title: spec.title,
    description: spec.description,
    datasource: DATASOURCE,
    gridPos: { x, y, w: spec.width, h: PANEL_HEIGHT },
    fieldConfig: { defaults: { unit: spec.unit }, overrides: [] },
    options:
      spec.type === 'heatmap'
        ? { calculate: false, yAxis: { unit: 'short' }, cellGap: 1 }
        : { legend: { displayMode: 'table', placement: 'bottom', calcs: ['lastNotNull', 'max'] } },
    targets: spec.queries.map((query, index) => ({
      refId: String.fromCharCode(65 + index),
      datasource: DATASOURCE,
      expr: query.expr,
      legendFormat: query.legend,
      ...(query.heatmap ? { format: 'heatmap' } : {}),
    })),
  };
}

/** Lays the panels out left to right, wrapping to a new row when one does not fit in 24 columns. */
function layout(specs: PanelSpec[]): Panel[] {
  let x = 0;
  let y = 0;
  return specs.map((spec, index) => {
    if (x + spec.width > 24) {
      x = 0;
      y += PANEL_HEIGHT;
    }
    const built = panel(spec, index + 1, x, y);
    x += spec.width;
    return built;
  });
}

export const dashboard = {
  uid: 'streaminfer',
  title: 'StreamInfer',
  description: 'Requests, latency, batching, shedding, nodes, reloads and the canary/shadow registry.',
  tags: ['streaminfer'],
  schemaVersion: 39,
  version: 1,
  editable: true,
  graphTooltip: 1,
  refresh: '30s',
  time: { from: 'now-1h', to: 'now' },
  timezone: 'browser',
  templating: {
    list: [
      {
        name: 'datasource',
        label: 'Data source',
        type: 'datasource',
        query: 'prometheus',
      },
      {
        name: 'instance',
        label: 'Host',
        type: 'query',
        datasource: DATASOURCE,
        query: 'label_values(up{job="streaminfer"}, instance)',
        refresh: 2,
        includeAll: true,
        multi: true,
        allValue: '.+',
      },
    ],
  },
  annotations: { list: [] },
  panels: layout(PANELS),
} satisfies Dashboard;

/** Every query of every panel, for the live check against Prometheus. */
export function dashboardQueries(): { panel: string; refId: string; expr: string }[] {
  return dashboard.panels.flatMap((p) =>
    (p.targets ?? []).map((target) => ({
      panel: p.title ?? '',
      refId: String(target.refId),
      expr: String(target.expr),
    })),
  );
}

/** The file `npm run dashboard` writes (and the test compares with the committed one). */
export function dashboardJson(): string {
  return `${JSON.stringify(dashboard, null, 2)}\n`;
}
