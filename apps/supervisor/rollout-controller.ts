/**
 * Progressive delivery on one host: the loop around libs/rollout. Every plan interval it reads the host's own
 * counters (the nodes' metrics, as /metrics collects them), adds a sample to the model's sliding window,
 * evaluates, and makes the registry match the record (`desiredRouting`) through the supervisor's registry
 * change path — the epoch barrier, and under a fleet the fleet's barrier on every host. Rollback happens in
 * the evaluation that decides it, so the candidate stops receiving traffic within one interval (plus the
 * barrier's own time). A registry change that fails (another reload running) is tried again at the next
 * evaluation. Records persist after every evaluation; a restarted supervisor resumes each active rollout at
 * its step (its window starts again: the counters it reads restart with the nodes).
 */
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { MetricJson } from '../../libs/metrics';
import { DURATION_BUCKETS } from '../../libs/metrics';
import { ProtocolError } from '../../libs/protocol';
import type { TablePlan } from '../../libs/registry';
import {
  abortRollout,
  type CounterSample,
  desiredRouting,
  evaluateRollout,
  isActive,
  pauseRollout,
  RolloutError,
  type RolloutRecord,
  resumeRollout,
  rolloutView,
  SampleWindow,
  shareOf,
  startRollout,
  type Transition,
  type VersionCounters,
  validatePlan,
} from '../../libs/rollout';
import type { RolloutStore } from './rollout-store';

/**
 * Error codes that are the client's fault, left out of the error-rate check entirely (neither a request nor
 * an error): the candidate cannot cause them. Everything else that is not `ok` is the version's error.
 */
export const CLIENT_FAULT_CODES: ReadonlySet<string> = new Set([
  'bad_request',
  'unknown_model',
  'unknown_version',
  'shape_mismatch',
  'type_mismatch',
  'payload_too_large',
  'rate_limited',
  'client_queue_full',
  'unauthorized',
  'not_found',
  'method_not_allowed',
]);

const BOUNDS: readonly number[] = [...DURATION_BUCKETS, Number.POSITIVE_INFINITY];
const VERDICT_VALUE = { pass: 1, insufficient: 0, fail: -1 } as const;

/** A routing change the controller asks of the registry (one epoch). */
export type RolloutRouting =
  | { kind: 'canary'; candidate: string; canaryPercent: number; shadow: boolean }
  | { kind: 'promote'; candidate: string };

export interface RolloutHost {
  /** The table the host serves now. */
  table(): TablePlan;
  /** Every node's metrics (one entry per node that answered). */
  collectMetrics(): Promise<MetricJson[][]>;
  /** Whether the model's outputs carry labels (the disagreement check's default); ProtocolError when unknown. */
  isClassifier(model: string): boolean;
  /** Moves the registry (loads `candidate` when it is not the candidate yet). Throws on refusal or failure. */
  route(model: string, routing: RolloutRouting, reason: string): Promise<void>;
}

export interface RolloutControllerOptions {
  host: RolloutHost;
  store: RolloutStore;
  registry: Registry;
  logger: Logger;
  now?: () => number;
}

export type RolloutAction = 'start' | 'get' | 'pause' | 'resume' | 'abort';

export class RolloutController {
  private readonly records = new Map<string, RolloutRecord>();
  private readonly windows = new Map<string, SampleWindow>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** One operation at a time per model (an evaluation, or an operator's pause / resume / abort). */
  private readonly queues = new Map<string, Promise<unknown>>();
  private stopped = false;
  private readonly now: () => number;
  private readonly transitionsTotal: Counter<'model' | 'from' | 'to' | 'reason'>;
  private readonly stepGauge: Gauge<'model'>;
  private readonly shareGauge: Gauge<'model'>;
  private readonly stateGauge: Gauge<'model' | 'state'>;
  private readonly checkValue: Gauge<'model' | 'check'>;
  private readonly checkVerdict: Gauge<'model' | 'check'>;
  private readonly evaluationSeconds: Histogram;

  constructor(private readonly options: RolloutControllerOptions) {
    this.now = options.now ?? Date.now;
    const registers = [options.registry];
    this.transitionsTotal = new Counter({
      name: 'streaminfer_rollout_transitions_total',
      help: 'Rollout transitions by model, phase left and entered (none, shadow, step_<i>, paused, promoted, rolled_back, aborted) and reason.',
      labelNames: ['model', 'from', 'to', 'reason'],
      registers,
    });
    this.stepGauge = new Gauge({
      name: 'streaminfer_rollout_step',
      help: "Index of the rollout's current step (-1 in the shadow phase).",
      labelNames: ['model'],
      registers,
    });
    this.shareGauge = new Gauge({
      name: 'streaminfer_rollout_share',
      help: 'Percent of unpinned requests the rollout has the candidate serve (100 once promoted, 0 rolled back).',
      labelNames: ['model'],
      registers,
    });
    this.stateGauge = new Gauge({
      name: 'streaminfer_rollout_state',
      help: "1 for the state the model's latest rollout is in (shadow, progressing, paused, promoted, rolled_back, aborted), 0 for the others.",
      labelNames: ['model', 'state'],
      registers,
    });
    this.checkValue = new Gauge({
      name: 'streaminfer_rollout_check_value',
      help: 'Last value of each rollout check: error-rate increase over stable, p99 ratio to stable, disagreement share.',
      labelNames: ['model', 'check'],
      registers,
    });
    this.checkVerdict = new Gauge({
      name: 'streaminfer_rollout_check_verdict',
      help: 'Last verdict of each rollout check: 1 pass, 0 insufficient (too few samples or too close to call), -1 fail.',
      labelNames: ['model', 'check'],
      registers,
    });
    this.evaluationSeconds = new Histogram({
      name: 'streaminfer_rollout_evaluation_duration_seconds',
      help: 'Time one rollout evaluation takes: collecting the nodes’ counters, the analysis and persisting the record (not the registry change).',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    });
  }

  /** Whether a rollout of this model is running (registry actions by hand are refused meanwhile). */
  active(model: string): boolean {
    const record = this.records.get(model);
    return record !== undefined && isActive(record);
  }

  /** Loads the persisted rollouts and resumes the active ones at their step. */
  resume(): void {
    const { records, warnings } = this.options.store.load();
    for (const warning of warnings) this.options.logger.warn(warning);
    for (const record of records) {
      this.records.set(record.model, record);
      this.export(record);
      if (!isActive(record)) continue;
      this.options.logger.info(
        { model: record.model, candidate: record.candidate, state: record.state, step: record.step },
        'rollout resumed after a restart',
      );
      this.schedule(record.model, 0);
    }
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  /** The admin API's entry: the rollout's view, or a ProtocolError (never anything else). */
  async handle(model: string, action: RolloutAction, body: Record<string, unknown>): Promise<unknown> {
    try {
      switch (action) {
        case 'get': {
          const record = this.records.get(model);
          if (!record) throw new ProtocolError('not_found', `model "${model}" has no rollout`);
          return { rollout: rolloutView(record) };
        }
        case 'start':
          return { rollout: rolloutView(await this.serial(model, () => this.start(model, body))) };
        default:
          return { rollout: rolloutView(await this.serial(model, () => this.operate(model, action))) };
      }
    } catch (error) {
      throw asProtocolError(error);
    }
  }

  private serial<T>(model: string, run: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(model) ?? Promise.resolve();
    const next = previous.then(run, run);
    this.queues.set(
      model,
      next.catch(() => undefined),
    );
    return next;
  }

  private async start(model: string, body: Record<string, unknown>): Promise<RolloutRecord> {
    const table = this.options.host.table();
    const served = table.models.find((m) => m.name === model);
    if (!served) throw new ProtocolError('not_found', `unknown model "${model}"`);
    if (this.active(model))
      throw new ProtocolError(
        'conflict',
        `a rollout of "${model}" is ${this.records.get(model)!.state}: pause, resume or abort it first`,
      );
    const plan = validatePlan(body, { classifier: this.options.host.isClassifier(model) });
    if (plan.version === served.stable)
      throw new ProtocolError(
        'bad_request',
        `version "${plan.version}" is already the stable version of "${model}"`,
      );
    const now = this.now();
    const { record, transition } = startRollout({
      model,
      stable: served.stable,
      candidate: plan.version,
      plan,
      now,
    });
    // Candidate loaded (if it was not) and the first phase's routing, in one epoch; refused → no rollout.
    const routing = desiredRouting(record);
    await this.options.host.route(model, routing, `rollout ${model}: started`);
    this.records.set(model, record);
    const window = new SampleWindow(plan.windowMs, BOUNDS);
    this.windows.set(model, window);
    this.record(record, [transition]);
    // The first sample now: the window's baseline.
    await this.sample(record).then(
      (sample) => window.add(sample),
      () => undefined,
    );
    this.schedule(model, plan.intervalMs);
    return record;
  }

  private async operate(model: string, action: 'pause' | 'resume' | 'abort'): Promise<RolloutRecord> {
    const record = this.records.get(model);
    if (!record) throw new ProtocolError('not_found', `model "${model}" has no rollout`);
    const now = this.now();
    const moved =
      action === 'pause'
        ? pauseRollout(record, now)
        : action === 'resume'
          ? resumeRollout(record, now)
          : abortRollout(record, now, { reason: 'aborted', detail: 'aborted by the operator' });
    this.records.set(model, moved.record);
    this.record(moved.record, [moved.transition]);
    await this.reconcile(moved.record, true);
    if (action === 'resume') this.schedule(model, record.plan.intervalMs);
    return moved.record;
  }

  private schedule(model: string, delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timers.get(model));
    const timer = setTimeout(() => {
      this.timers.delete(model);
      void this.serial(model, () => this.tick(model)).catch((error: Error) =>
        this.options.logger.error({ model, err: error.message }, 'rollout evaluation failed'),
      );
    }, delayMs);
    timer.unref();
    this.timers.set(model, timer);
  }

  /** One evaluation of one model's rollout, then the next one scheduled while it is active. */
  private async tick(model: string): Promise<void> {
    let record = this.records.get(model);
    if (!record || !isActive(record) || this.stopped) return;
    try {
      const started = performance.now();
      const served = this.options.host.table().models.find((m) => m.name === model);
      if (served?.candidate !== record.candidate && served?.stable !== record.candidate) {
        // Someone replaced the candidate (or removed the model) under the rollout: it cannot go on.
        const moved = abortRollout(record, this.now(), {
          reason: 'candidate_replaced',
          detail: `the registry's candidate of "${model}" is ${served?.candidate ?? 'none'}, not ${record.candidate}`,
        });
        this.records.set(model, moved.record);
        this.record(moved.record, [moved.transition]);
        return;
      }
      const window = this.windows.get(model) ?? new SampleWindow(record.plan.windowMs, BOUNDS);
      this.windows.set(model, window);
      const sample = await this.sample(record);
      const delta = window.add(sample);
      const evaluation = evaluateRollout(record, {
        totals: window.totals(),
        bounds: BOUNDS,
        delta,
        now: this.now(),
      });
      record = evaluation.record;
      this.records.set(model, record);
      this.record(record, evaluation.transitions);
      this.evaluationSeconds.observe((performance.now() - started) / 1000);
      await this.reconcile(record, evaluation.transitions.length > 0);
    } finally {
      if (isActive(this.records.get(model)!)) this.schedule(model, record.plan.intervalMs);
    }
  }

  /** The counters of the rollout's two versions, summed over the nodes. */
  private async sample(record: RolloutRecord): Promise<CounterSample> {
    const perNode = await this.options.host.collectMetrics();
    return counterSample(perNode, record.model, record.stable, record.candidate, this.now());
  }

  /** Makes the registry hold what the record asks for; a failure is logged and tried again next time. */
  private async reconcile(record: RolloutRecord, changed: boolean): Promise<void> {
    const served = this.options.host.table().models.find((m) => m.name === record.model);
    if (!served) return;
    const routing = desiredRouting(record);
    let needed: boolean;
    if (routing.kind === 'promote')
      needed = served.stable !== record.candidate && served.candidate === record.candidate;
    else
      needed =
        served.candidate === record.candidate &&
        ((served.canaryPercent ?? 0) !== routing.canaryPercent ||
          (served.shadow ?? false) !== routing.shadow);
    if (!needed) return;
    try {
      await this.options.host.route(record.model, routing, `rollout ${record.model}: ${record.state}`);
    } catch (error) {
      this.options.logger[changed ? 'error' : 'warn'](
        { model: record.model, state: record.state, err: (error as Error).message },
        'rollout: registry change failed; trying again at the next evaluation',
      );
    }
  }

  /** Persists every record, counts and logs the transitions, and exports the gauges. */
  private record(record: RolloutRecord, transitions: readonly Transition[]): void {
    try {
      this.options.store.save([...this.records.values()]);
    } catch (error) {
      this.options.logger.error({ err: (error as Error).message }, 'cannot save the rollout records');
    }
    for (const transition of transitions) {
      this.transitionsTotal.inc({
        model: record.model,
        from: transition.from,
        to: transition.to,
        reason: transition.reason,
      });
      const log = {
        model: record.model,
        stable: record.stable,
        candidate: record.candidate,
        from: transition.from,
        to: transition.to,
        reason: transition.reason,
        share: shareOf(record),
        ...(record.reason ? { detail: record.reason } : {}),
      };
      if (record.state === 'rolled_back') this.options.logger.warn(log, 'rollout rolled back');
      else this.options.logger.info(log, 'rollout transition');
    }
    this.export(record);
  }

  private export(record: RolloutRecord): void {
    const model = record.model;
    this.stepGauge.set({ model }, record.step);
    this.shareGauge.set({ model }, shareOf(record));
    for (const state of ['shadow', 'progressing', 'paused', 'promoted', 'rolled_back', 'aborted'] as const)
      this.stateGauge.set({ model, state }, record.state === state ? 1 : 0);
    for (const check of record.checks) {
      this.checkVerdict.set({ model, check: check.name }, VERDICT_VALUE[check.verdict]);
      if (check.value !== null) this.checkValue.set({ model, check: check.name }, check.value);
      else this.checkValue.remove({ model, check: check.name });
    }
  }
}

/** A rollout refusal as the API answers it. */
function asProtocolError(error: unknown): ProtocolError {
  if (error instanceof ProtocolError) {
    // The contract answers an unknown model or version 404 not_found.
    if (error.code === 'unknown_model' || error.code === 'unknown_version')
      return new ProtocolError('not_found', error.message);
    return error;
  }
  if (error instanceof RolloutError)
    return new ProtocolError(error.code === 'invalid_state' ? 'conflict' : 'bad_request', error.message);
  return new ProtocolError('internal', (error as Error).message);
}

function emptyCounters(): { requests: number; errors: number; latency: number[] } {
  return { requests: 0, errors: 0, latency: BOUNDS.map(() => 0) };
}

/** The rollout's counters from every node's metrics JSON (what /metrics aggregates), summed. */
export function counterSample(
  perNode: readonly MetricJson[][],
  model: string,
  stable: string,
  candidate: string,
  at: number,
): CounterSample {
  const sides = { stable: emptyCounters(), candidate: emptyCounters() };
  const shadow = { agree: 0, disagree: 0 };
  const sideOf = (labels: Record<string, unknown>) =>
    labels.model !== model
      ? undefined
      : labels.version === stable
        ? sides.stable
        : labels.version === candidate
          ? sides.candidate
          : undefined;
  for (const metrics of perNode)
    for (const metric of metrics) {
      if (metric.name === 'streaminfer_requests_total') {
        for (const value of metric.values) {
          const side = sideOf(value.labels);
          const code = String(value.labels.code);
          if (!side || CLIENT_FAULT_CODES.has(code)) continue;
          side.requests += value.value;
          if (code !== 'ok') side.errors += value.value;
        }
      } else if (metric.name === 'streaminfer_request_duration_seconds') {
        for (const value of metric.values) {
          if (!('metricName' in value) || !value.metricName?.endsWith('_bucket')) continue;
          const side = sideOf(value.labels);
          if (!side) continue;
          const le = String(value.labels.le);
          const index = le === '+Inf' ? BOUNDS.length - 1 : BOUNDS.indexOf(Number(le));
          if (index >= 0) side.latency[index]! += value.value;
        }
      } else if (metric.name === 'streaminfer_shadow_comparisons_total') {
        for (const value of metric.values) {
          if (value.labels.model !== model) continue;
          if (value.labels.agree === 'true') shadow.agree += value.value;
          else shadow.disagree += value.value;
        }
      }
    }
  return {
    at,
    stable: sides.stable as VersionCounters,
    candidate: sides.candidate as VersionCounters,
    shadow,
  };
}
