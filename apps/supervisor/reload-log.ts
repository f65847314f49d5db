/** Every reload outcome of this host's barrier, counted (by result and strategy, with its duration) and logged. */
import type { Logger } from 'pino';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { ReloadOutcome } from './coordinator';

export class ReloadLog {
  private readonly reloadsTotal: Counter<'result' | 'strategy'>;
  private readonly reloadDuration: Histogram<'strategy'>;

  constructor(
    private readonly logger: Logger,
    registry: Registry,
  ) {
    this.reloadsTotal = new Counter({
      name: 'streaminfer_reloads_total',
      help: 'Model table reloads, by result (committed, failed, unchanged) and strategy.',
      labelNames: ['result', 'strategy'],
      registers: [registry],
    });
    // Every series from 0: a counter's first sample at 1 has no increase, and the reload-failure alert needs one.
    for (const result of ['committed', 'failed', 'unchanged'] as const)
      for (const strategy of ['atomic', 'rolling'] as const) this.reloadsTotal.inc({ result, strategy }, 0);
    this.reloadDuration = new Histogram({
      name: 'streaminfer_reload_duration_seconds',
      help: 'Time from a reload request to its outcome (prepare + commit + release, or every node rolled).',
      labelNames: ['strategy'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
  }

  record(outcome: ReloadOutcome): void {
    this.reloadsTotal.inc({ result: outcome.result, strategy: outcome.strategy });
    this.reloadDuration.observe({ strategy: outcome.strategy }, outcome.durationMs / 1000);
    const log = {
      id: outcome.id,
      reason: outcome.reason,
      strategy: outcome.strategy,
      epoch: outcome.epoch,
      changes: outcome.changes,
      durationMs: outcome.durationMs,
      nodes: outcome.nodes,
      ...(outcome.warnings ? { warnings: outcome.warnings } : {}),
      ...(outcome.config
        ? { settingsApplied: outcome.config.applied, restartRequired: outcome.config.restartRequired }
        : {}),
    };
    if (outcome.result === 'failed') this.logger.error({ ...log, err: outcome.error }, 'reload failed');
    else if (outcome.warnings) this.logger.warn(log, 'reload committed, with warnings');
    else this.logger.info(log, 'reload committed');
  }
}
