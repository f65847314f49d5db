/**
 * A rollout's series and transition log lines: what an operator watches a rollout by. The controller calls
 * announce() on every transition and export() whenever it adopts a record another host wrote.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { ROLLOUT_STATES, type RolloutRecord, shareOf, type Transition } from '../../../libs/rollout';

const VERDICT_VALUE = { pass: 1, insufficient: 0, fail: -1 } as const;

export class RolloutMetrics {
  private readonly transitionsTotal: Counter<'model' | 'from' | 'to' | 'reason'>;
  private readonly stepGauge: Gauge<'model'>;
  private readonly shareGauge: Gauge<'model'>;
  private readonly stateGauge: Gauge<'model' | 'state'>;
  private readonly checkValue: Gauge<'model' | 'check'>;
  private readonly checkVerdict: Gauge<'model' | 'check'>;
  private readonly evaluationSeconds: Histogram;

  constructor(
    registry: Registry,
    private readonly logger: Logger,
  ) {
    const registers = [registry];
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
      help: "Time one rollout evaluation takes: collecting the nodes' counters, the analysis and persisting the record (not the registry change).",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    });
  }

  /** One evaluation's time (collecting, analysing and persisting; not the registry change). */
  observeEvaluation(seconds: number): void {
    this.evaluationSeconds.observe(seconds);
  }

  /** Counts and logs the transitions, and exports the gauges. */
  announce(record: RolloutRecord, transitions: readonly Transition[]): void {
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
      if (record.state === 'rolled_back') this.logger.warn(log, 'rollout rolled back');
      else this.logger.info(log, 'rollout transition');
    }
    this.export(record);
  }

  export(record: RolloutRecord): void {
    const model = record.model;
    this.stepGauge.set({ model }, record.step);
    this.shareGauge.set({ model }, shareOf(record));
    for (const state of ROLLOUT_STATES) this.stateGauge.set({ model, state }, record.state === state ? 1 : 0);
    for (const check of record.checks) {
      this.checkVerdict.set({ model, check: check.name }, VERDICT_VALUE[check.verdict]);
      if (check.value !== null) this.checkValue.set({ model, check: check.name }, check.value);
      else this.checkValue.remove({ model, check: check.name });
    }
  }
}
