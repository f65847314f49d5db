/**
 * What the host serves, saved in STREAMINFER_STATE_DIR so a restart serves it again: read at start over the
 * repository's table, written before any node commits a table. Failed writes (of it and of the rollouts) are
 * counted and logged here.
 */
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { ServerConfig } from '../../libs/config';
import { ProtocolError } from '../../libs/protocol';
import { loadState, registryStateOf, saveState, type TablePlan, withSavedState } from '../../libs/registry';

export class HostState {
  private readonly persistFailures: Counter<'file' | 'code'>;

  /** `config`: the configuration in force (its stateDir and configured default model). */
  constructor(
    private readonly config: () => ServerConfig,
    private readonly logger: Logger,
    registry: Registry,
  ) {
    this.persistFailures = new Counter({
      name: 'streaminfer_state_persist_failures_total',
      help: 'Writes to STREAMINFER_STATE_DIR that failed, by file (registry, rollouts) and code (storage_full: no room; persist_failed: any other error).',
      labelNames: ['file', 'code'],
      registers: [registry],
    });
    for (const file of ['registry', 'rollouts'] as const)
      for (const code of ['storage_full', 'persist_failed'] as const)
        this.persistFailures.inc({ file, code }, 0);
  }

  /** The repository's table with the persisted registry state applied (bad entries skipped, with a warning). */
  savedPlan(plan: TablePlan): TablePlan {
    const config = this.config();
    const loaded = loadState(config.stateDir);
    if (loaded.warning) this.logger.warn(loaded.warning);
    if (!loaded.state) return plan;
    const saved = withSavedState(plan, loaded.state, config.defaultModel);
    for (const notice of saved.notices) this.logger[notice.level](notice.details, notice.message);
    return saved.plan;
  }

  /**
   * Saves what the host serves, with the configured default model (the coordinator calls it before any node
   * commits a table). Throws the typed error (storage_full, persist_failed), counted and logged.
   */
  save(plan: TablePlan, configuredDefaultModel: string): void {
    try {
      saveState(this.config().stateDir, registryStateOf(plan, configuredDefaultModel));
    } catch (error) {
      this.failed('registry', error);
      throw error;
    }
  }

  failed(file: 'registry' | 'rollouts', error: unknown): void {
    const code = error instanceof ProtocolError ? error.code : 'persist_failed';
    this.persistFailures.inc({ file, code });
    this.logger.error(
      { err: (error as Error).message, code, dir: this.config().stateDir },
      `cannot save the ${file === 'registry' ? 'registry' : 'rollout'} state`,
    );
  }
}
