/**
 * What this node reports: health (its model table and load) and metrics (the shared shards plus the
 * gateway's own counters), and the Open Inference Protocol's model metadata and readiness.
 */
import type { MetricJson, SlotDescription } from '../../libs/metrics';
import { metricJson, nodeMetricsJson } from '../../libs/metrics';
import { encodeV2Error, modelUnavailable, v2ModelMetadata } from '../../libs/protocol';
import type { HoldRelease } from './epoch-order';
import type { ModelStatus, NodeHealth } from './ipc';
import type { ServedModel, Slot } from './models';
import { queueDepth } from './models';
import type { ShadowStats } from './shadow';
import type { TransportGuard } from './transport-guard';

const UNROUTED_SLOT = 0;

/** Live figures the status reads from the parts of the request path that keep them. */
export interface LiveCounters {
  inflight(): number;
  wsConnections(): number;
  /** Tenant names by metrics index (`--api-keys`); index 0 (anonymous) has none. */
  tenantNames(): ReadonlyArray<string | undefined>;
  admission: { inflightWarnings: number };
  transport: {
    slowConsumerWarnings: number;
    slowConsumerCloses: number;
  };
  order: { answersHeld: number; holdReleases: Record<HoldRelease, number> };
  shadow: Map<string, ShadowStats>;
  guard: TransportGuard;
}

export class NodeStatus {
  constructor(
    private readonly table: {
      readonly models: Map<string, ServedModel>;
      readonly slots: ReadonlyArray<Slot | undefined>;
      readonly epoch: number;
      readonly defaultModel: string;
      unavailableReason(model: string, version?: string): string | undefined;
    },
    private readonly live: LiveCounters,
  ) {}

  /** Open Inference Protocol metadata (or readiness) of a model, answered from this node's table. */
  v2Model(
    name: string,
    version: string | undefined,
    ready: boolean,
    draining: boolean,
  ): { status: number; body: string } {
    const model = this.table.models.get(name);
    const loaded = model !== undefined && (version === undefined || model.versions.has(version));
    const missing = `no model "${name}"${version ? ` version "${version}"` : ''} loaded`;
    // In this host's repository but it did not load: 503 model_unavailable with why, never a 404 that hides it.
    const reason = loaded ? undefined : this.table.unavailableReason(name, version);
    if (reason !== undefined && !draining) {
      const error = modelUnavailable(name, model ? version : undefined, reason);
      const body = ready
        ? JSON.stringify({ name, ready: false, error: error.message, code: error.code })
        : encodeV2Error(error.code, error.message);
      return { status: error.httpStatus, body };
    }
    if (ready) {
      if (loaded && !draining) return { status: 200, body: JSON.stringify({ name, ready: true }) };
      // Not ready: the same shape, plus the typed error every 4xx carries.
      const code = draining ? 'unavailable' : model ? 'unknown_version' : 'unknown_model';
      const error = draining ? 'server is shutting down' : missing;
      return { status: 404, body: JSON.stringify({ name, ready: false, error, code }) };
    }
    if (!model || !loaded)
      return { status: 404, body: encodeV2Error(model ? 'unknown_version' : 'unknown_model', missing) };
    const versions = version === undefined ? [...model.versions.keys()] : [version];
    return { status: 200, body: JSON.stringify(v2ModelMetadata(name, versions, model.entry.signature)) };
  }

  modelStatus(): ModelStatus[] {
    return [...this.table.models.values()].map(
      ({ entry, versions, stable, candidate, previousStable, canaryFraction, shadow }) => {
        const status: ModelStatus = {
          name: entry.name,
          description: entry.description,
          defaultVersion: stable,
          aliases: {
            stable,
            ...(candidate ? { candidate } : {}),
            ...(previousStable ? { previous_stable: previousStable } : {}),
          },
          canaryPercent: Math.round(canaryFraction * 10000) / 100,
          shadow,
          inputs: entry.signature.inputs,
          outputs: entry.signature.outputs,
          versions: [...versions.values()].map((slot) => {
            const version = {
              version: slot.version,
              slot: slot.index,
              executionProvider: slot.executionProvider,
              loadedWorkers: slot.loadedWorkers,
            };
            return slot.fallbackReason ? { ...version, fallbackReason: slot.fallbackReason } : version;
          }),
        };
        if (entry.signature.labels) status.labels = entry.signature.labels;
        return status;
      },
    );
  }

  health(nodeIndex: number, state: NodeHealth['state'], workers: number, workersReady: number): NodeHealth {
    return {
      nodeIndex,
      pid: process.pid,
      state,
      workers,
      workersReady,
      defaultModel: this.table.defaultModel,
      models: this.modelStatus(),
      inflight: this.live.inflight(),
      wsConnections: this.live.wsConnections(),
      epoch: this.table.epoch,
    };
  }

  metricsJson(buffer: SharedArrayBuffer): MetricJson[] {
    const slots: SlotDescription[] = [
      { slot: UNROUTED_SLOT, model: '', version: '', queueDepth: 0, executionProvider: '', alias: '' },
    ];
    for (const slot of this.table.slots) {
      if (!slot) continue;
      slots.push({
        slot: slot.index,
        model: slot.model.name,
        version: slot.version,
        queueDepth: queueDepth(slot),
        executionProvider: slot.executionProvider,
        alias: this.table.models.get(slot.model.name)?.stable === slot.version ? 'stable' : '',
      });
    }
    const metrics = nodeMetricsJson(
      buffer,
      slots,
      { wsConnections: this.live.wsConnections(), epoch: this.table.epoch },
      this.live.tenantNames(),
    );
    metrics.push(
      metricJson(
        'streaminfer_client_warnings_total',
        'Warnings sent to clients: consumer_falling_behind (in flight past 80% of the cap), slow_consumer (unread answers).',
        'counter',
        [
          { value: this.live.admission.inflightWarnings, labels: { code: 'consumer_falling_behind' } },
          { value: this.live.transport.slowConsumerWarnings, labels: { code: 'slow_consumer' } },
        ],
      ),
      metricJson(
        'streaminfer_shadow_comparisons_total',
        'Shadow mode: candidate answers compared with the stable answer by dtype (top-1 for classifiers, exact for integers and strings, relative 1e-4 for floats; NaN never agrees).',
        'counter',
        [...this.live.shadow].flatMap(([model, stats]) => [
          { value: stats.agree, labels: { model, agree: 'true' } },
          { value: stats.disagree, labels: { model, agree: 'false' } },
        ]),
      ),
      metricJson(
        'streaminfer_shadow_candidate_errors_total',
        'Mirrored copies the candidate failed with a fault of its own (model_error, internal) while stable answered; also counted in streaminfer_shadow_skipped_total.',
        'counter',
        [...this.live.shadow].map(([model, stats]) => ({ value: stats.candidateErrors, labels: { model } })),
      ),
      metricJson(
        'streaminfer_shadow_skipped_total',
        'Shadow copies not compared: shed under load (they go first) or failed.',
        'counter',
        [...this.live.shadow].map(([model, stats]) => ({ value: stats.skipped, labels: { model } })),
      ),
      metricJson(
        'streaminfer_model_alias',
        'Registry aliases: which version stable, candidate and previous_stable point at.',
        'gauge',
        [...this.table.models.values()].flatMap((model) =>
          (
            [
              ['stable', model.stable],
              ['candidate', model.candidate],
              ['previous_stable', model.previousStable],
            ] as const
          )
            .filter(([, version]) => version !== undefined)
            .map(([alias, version]) => ({
              value: 1,
              labels: { model: model.entry.name, alias, version: version! },
            })),
        ),
        'max',
      ),
      metricJson(
        'streaminfer_canary_fraction',
        'Share of unpinned requests routed to the candidate.',
        'gauge',
        [...this.table.models.values()].map((model) => ({
          value: model.canaryFraction,
          labels: { model: model.entry.name },
        })),
        'max',
      ),
      metricJson(
        'streaminfer_answers_held_total',
        'Answers of a new model-table epoch held on their WebSocket connection until its older-epoch answers were out.',
        'counter',
        [{ value: this.live.order.answersHeld, labels: {} }],
      ),
      metricJson(
        'streaminfer_answer_hold_releases_total',
        'Held answers delivered early because a bound ran out (time or bytes): older answers on that connection come after them.',
        'counter',
        [
          { value: this.live.order.holdReleases.time, labels: { reason: 'time' } },
          { value: this.live.order.holdReleases.bytes, labels: { reason: 'bytes' } },
        ],
      ),
      this.live.guard.metric(),
      metricJson(
        'streaminfer_slow_consumer_closes_total',
        'WebSocket clients closed with 1013 because their unread answers passed the limit.',
        'counter',
        [{ value: this.live.transport.slowConsumerCloses, labels: {} }],
      ),
    );
    return metrics;
  }
}
