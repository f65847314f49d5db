/**
 * Every request for the host's next table — a reload (a version, a default model, a repository re-read, a
 * configuration's settings), a registry action, a rollout's routing — planned with libs/registry from a current
 * table (the host's, or in a fleet the fleet's committed one: the same plans either way) and run through this
 * host's epoch barrier or, in a fleet, the fleet's.
 */
import { ProtocolError } from '../../libs/protocol';
import {
  defaultModelPlan,
  findModel,
  type ModelPlan,
  type NodeSettings,
  type Planned,
  type RegistryAction,
  registryChange,
  registryTransition,
  rescanPlan,
  type TablePlan,
  versionReloadPlan,
  withModel,
  withoutFailed,
  withSettings,
} from '../../libs/registry';
import type { ReloadRequest } from './admin/admin-api';
import type { ReloadCoordinator, ReloadOutcome, ReloadStrategy } from './coordinator';
import type { FleetLink } from './fleet-link';
import type { HostRepository } from './host-repository';
import type { RolloutRouting } from './rollout/rollout-controller';

export interface TableChangesOptions {
  coordinator: () => ReloadCoordinator;
  repository: HostRepository;
  fleet: FleetLink;
  /** Whether a rollout of the model is running (a change by hand would move what it compares against). */
  rolloutActive: (model: string) => boolean;
}

export class TableChanges {
  constructor(private readonly options: TableChangesOptions) {}

  /**
   * Builds the next table for a reload request and runs it. `model` + `version`: make that version stable
   * (loading it if needed). `model` alone: make it the default model. Neither: re-read the repository.
   */
  async reload(
    request: ReloadRequest & { defaultModel?: string; settings?: NodeSettings },
    reason: string,
  ): Promise<ReloadOutcome> {
    const { fleet, repository } = this.options;
    const strategy = request.strategy ?? 'atomic';
    // A version reload would move stable under a running rollout (whose checks compare against it).
    if (
      request.model !== undefined &&
      request.version !== undefined &&
      this.options.rolloutActive(request.model)
    )
      throw new ProtocolError(
        'conflict',
        `a rollout of "${request.model}" is running: abort it (POST /api/models/${request.model}/rollout/abort) before reloading a version of it`,
      );
    const next = await this.reloadPlan(request, strategy);
    if (fleet.joined)
      return fleet.change(
        next,
        {
          strategy,
          reason: `${reason} (fleet)`,
          // A configuration reload changes this host's settings even when the fleet's table stays as it is.
          force: request.settings !== undefined,
          // A repository reload (POST /api/reload {}) also replaces an invalid registry record.
          repair: request.model === undefined,
          ...(request.ifRevision !== undefined ? { ifRevision: request.ifRevision } : {}),
        },
        { settings: request.settings },
      );
    const coordinator = this.options.coordinator();
    const current = coordinator.table;
    return coordinator.reload(
      repository.hostSide(withSettings(next(current), current, request.settings)),
      strategy,
      reason,
    );
  }

  /** The next table a reload request asks for, from a current one. */
  private async reloadPlan(
    request: ReloadRequest & { defaultModel?: string },
    strategy: ReloadStrategy,
  ): Promise<(table: TablePlan) => TablePlan> {
    const { repository } = this.options;
    const { model, version } = request;
    if (model !== undefined && version !== undefined) {
      // A version pushed to the fleet but not yet here is fetched (and verified) before it is planned.
      await this.options.fleet.fetchVersion(model, version);
      const entry = repository.readEntry(model);
      const found = entry.versions.map((v) => v.version);
      return (table) => settle(versionReloadPlan(table, entry.name, version, found, strategy));
    }
    if (model !== undefined) return (table) => settle(defaultModelPlan(table, model));
    const entries = repository.scan();
    return (table) => {
      const unavailable = repository.unavailable;
      const plan = withoutFailed(
        settle(
          rescanPlan(
            entries,
            request.defaultModel ?? table.defaultModel,
            table,
            repository.defaults,
            unavailable.map((u) => u.model),
          ),
        ),
        unavailable,
      );
      // A served model whose config.json broke on disk keeps serving what it loaded (its last good versions);
      // it is listed unavailable (health degraded) until the file is repaired.
      const broken = new Set(unavailable.flatMap((u) => (u.version === undefined ? [u.model] : [])));
      const kept = table.models.filter(
        (model) => broken.has(model.name) && !plan.models.some((m) => m.name === model.name),
      );
      repository.rememberDefaults(entries);
      return kept.length === 0 ? plan : { ...plan, models: [...plan.models, ...kept] };
    };
  }

  /**
   * A registry action (candidate, canary, shadow, promote, rollback): the next table from registryTransition,
   * through the epoch barrier (a new candidate is loaded beside the stable one first). In a fleet, through the
   * fleet's barrier, from the fleet's committed table (`if_revision` in the body: refused 409 when it moved).
   */
  async registry(
    name: string,
    action: RegistryAction,
    body: Record<string, unknown>,
    ifRevision?: number,
  ): Promise<{ outcome: ReloadOutcome; model: ModelPlan }> {
    const { fleet, repository } = this.options;
    const change = settle(registryChange(action, body));
    if (this.options.rolloutActive(name))
      throw new ProtocolError(
        'conflict',
        `a rollout of "${name}" is running: pause or abort it (POST /api/models/${name}/rollout/abort) before changing the registry by hand`,
      );
    let found: string[] = [];
    if (change.action === 'candidate') {
      try {
        await fleet.fetchVersion(name, change.version);
        found = repository.readEntry(name).versions.map((v) => v.version);
      } catch (error) {
        if (error instanceof ProtocolError) throw error;
        throw new ProtocolError('bad_request', (error as Error).message);
      }
    }
    let model: ModelPlan | undefined;
    const next = (table: TablePlan): TablePlan => {
      model = settle(registryTransition(settle(findModel(table, name)), change, found));
      return withModel(table, model);
    };
    const outcome = await this.atomic(next, `${action} ${name}`, ifRevision);
    return { outcome, model: model ?? settle(findModel(this.options.coordinator().table, name)) };
  }

  /**
   * A rollout's routing change as one registry change (one epoch; in a fleet, through the fleet's barrier):
   * load the candidate when it is not the candidate yet, then the canary share and shadow flag — or promote.
   */
  async route(name: string, routing: RolloutRouting, reason: string): Promise<void> {
    let found: string[] = [];
    const current = settle(findModel(this.options.coordinator().table, name));
    if (routing.kind === 'canary' && current.candidate !== routing.candidate) {
      await this.options.fleet.fetchVersion(name, routing.candidate);
      found = this.options.repository.readEntry(name).versions.map((v) => v.version);
    }
    const next = (table: TablePlan): TablePlan => {
      let model = settle(findModel(table, name));
      if (routing.kind === 'promote') model = settle(registryTransition(model, { action: 'promote' }));
      else {
        if (model.candidate !== routing.candidate)
          model = settle(
            registryTransition(model, { action: 'candidate', version: routing.candidate }, found),
          );
        model = settle(registryTransition(model, { action: 'canary', percent: routing.canaryPercent }));
        model = settle(registryTransition(model, { action: 'shadow', enabled: routing.shadow }));
      }
      return withModel(table, model);
    };
    const outcome = await this.atomic(next, reason);
    if (outcome.result === 'failed')
      throw new ProtocolError(outcome.code ?? 'reload_failed', outcome.error ?? 'reload failed');
  }

  /** A registry change in one atomic epoch: through the fleet's barrier in a fleet, else this host's. */
  private atomic(
    next: (table: TablePlan) => TablePlan,
    reason: string,
    ifRevision?: number,
  ): Promise<ReloadOutcome> {
    if (this.options.fleet.joined)
      return this.options.fleet.change(next, {
        strategy: 'atomic',
        reason,
        ...(ifRevision !== undefined ? { ifRevision } : {}),
      });
    const coordinator = this.options.coordinator();
    return coordinator.reload(this.options.repository.hostSide(next(coordinator.table)), 'atomic', reason);
  }
}

/** A plan's rejection becomes the typed error the API answers with. */
function settle<T>(planned: Planned<T>): T {
  if (!planned.ok) throw planned.error;
  return planned.value;
}
