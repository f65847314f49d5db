/**
 * The supervisor: control plane of one host. It holds the host's model table (through the reload
 * coordinator), starts and stops the host's parts in order, and wires them together: the node processes are
 * the node set's (node-set.ts), the HTTP control answers the admin API's (admin/admin-api.ts), the next table
 * of every request is planned by table-changes.ts, the configuration in force and its reload are
 * config-reload.ts's, the repository and what of it does not load host-repository.ts's, the saved table
 * host-state.ts's, and the fleet (`--cluster`) fleet-link.ts's.
 */
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Registry } from 'prom-client';
import type { AdminAddress, AdminPolicy } from '../../libs/admin';
import type { ServerConfig } from '../../libs/config';
import { defaultIntraOpThreads } from '../../libs/device';
import { registerProcessMetrics } from '../../libs/metrics';
import type { NatsAuth } from '../../libs/nats-auth';
import {
  type ModelPlan,
  type NodeSettings,
  type RegistryAction,
  repositoryPlan,
  type TablePlan,
  type UnavailableModel,
} from '../../libs/registry';
import type { ControlResponse, NodeStartOptions } from '../node/ipc';
import { AdminApi, type AdminHost, type ReloadRequest, type RolloutAdmin } from './admin/admin-api';
import { outcomeResponse, respond } from './admin/responses';
import { ConfigReload, type StartConfig } from './config-reload';
import type { ReloadOutcome, ReloadStrategy } from './coordinator';
import { ReloadCoordinator } from './coordinator';
import { FleetLink } from './fleet-link';
import { HostRepository } from './host-repository';
import { HostState } from './host-state';
import { NodeSet } from './node-set';
import type { NodeHeartbeat, NotifyHost, SystemdNotifier } from './notify';
import { ReloadLog } from './reload-log';
import { RolloutController } from './rollout/rollout-controller';
import { FileRolloutStore } from './rollout/rollout-store';
import { TableChanges } from './table-changes';
import { TenantShares } from './tenant-shares';

export interface SupervisorOptions extends StartConfig {
  testHooks: boolean;
  cores: number;
  /** systemd notify and watchdog (NOTIFY_SOCKET set); see notify.ts. */
  notifier?: SystemdNotifier;
  /** The fleet's NATS settings loaded at start (with `cluster`); default: loaded from `config` on joining. */
  nats?: NatsAuth;
}

export class Supervisor implements AdminHost, NotifyHost {
  private coordinator: ReloadCoordinator | undefined;
  private readonly nodeSet: NodeSet;
  private readonly admin: AdminApi;
  private readonly rollouts: RolloutController;
  private readonly tenantShares: TenantShares;
  private currentDefaultModel: string;
  private readonly settings: ConfigReload;
  private readonly repository: HostRepository;
  private readonly state: HostState;
  private readonly reloadLog: ReloadLog;
  private readonly fleetLink: FleetLink;
  private readonly changes: TableChanges;

  constructor(
    private readonly options: SupervisorOptions,
    private readonly logger: Logger,
  ) {
    const registry = new Registry();
    registerProcessMetrics(registry, 'streaminfer_supervisor_');
    this.settings = new ConfigReload(options, logger, {
      running: () => this.coordinator!.current,
      reload: (request, reason) => this.reload(request, reason),
      applied: (tenants, secrets) => {
        this.tenantShares.setTenants(tenants);
        if (secrets.tls) this.admin.useTls(secrets.tls);
      },
    });
    this.currentDefaultModel = options.config.defaultModel;
    this.tenantShares = new TenantShares((node, message) => this.nodeSet.sendToNode(node, message));
    const config = (): ServerConfig => this.options.config;
    const table = (): TablePlan => this.coordinator!.table;
    this.reloadLog = new ReloadLog(logger, registry);
    this.state = new HostState(config, logger, registry);
    this.repository = new HostRepository(config, table, logger, registry);
    const fanOutsTotal = new Counter({
      name: 'streaminfer_control_fanouts_total',
      help: 'Requests to every node for /health or /metrics (concurrent scrapes share one), by what was collected.',
      labelNames: ['what'],
      registers: [registry],
    });
    this.nodeSet = new NodeSet({
      logger,
      testHooks: options.testHooks,
      timeouts: () => ({
        reloadStepMs: this.options.config.reloadStepTimeoutMs,
        shutdownMs: this.options.config.shutdownTimeoutMs,
      }),
      host: () => this.coordinator!,
      startOptions: (index) => this.startOptions(index),
      control: (request) => this.admin.answer(request, 'data'),
      loadFailures: (node, failures) => this.nodeLoadFailures(node, failures),
      tenants: this.tenantShares,
      sharedListener: options.tls?.clientCaFile !== undefined,
    });
    this.fleetLink = new FleetLink({
      config,
      ...(options.nats ? { nats: options.nats } : {}),
      logger,
      testHooks: options.testHooks,
      registry,
      trustedKeys: () => this.settings.trustedKeys,
      coordinator: () => this.coordinator!,
      hostSide: (plan) => this.repository.hostSide(plan),
      nodeSet: this.nodeSet,
      pingsNodes: options.notifier !== undefined,
    });
    this.changes = new TableChanges({
      coordinator: () => this.coordinator!,
      repository: this.repository,
      fleet: this.fleetLink,
      rolloutActive: (model) => this.rollouts.active(model),
    });
    // Made before the rollouts, so its series come before theirs on /metrics (as they always did).
    const rollouts: RolloutAdmin = {
      handle: (model, action, body) => this.rollouts.handle(model, action, body),
    };
    this.admin = new AdminApi(this, this.fleetLink, rollouts, this.nodeSet, registry, fanOutsTotal);
    this.rollouts = new RolloutController({
      host: {
        table,
        collectMetrics: async () => {
          const answers = await this.nodeSet.collect('metrics');
          return answers.flatMap((answer) =>
            answer?.type === 'collected' && answer.metrics ? [answer.metrics] : [],
          );
        },
        isClassifier: (model) => this.repository.readEntry(model).signature.labels !== undefined,
        route: (model, routing, reason) => this.changes.route(model, routing, reason),
      },
      store: new FileRolloutStore(options.config.stateDir, (error) => this.state.failed('rollouts', error)),
      hostId: 'local',
      registry,
      logger,
    });
  }

  get config(): ServerConfig {
    return this.options.config;
  }

  get adminPolicy(): AdminPolicy {
    return this.settings.adminPolicy;
  }

  /** Where the admin listener listens (after start). */
  get adminAddress(): AdminAddress | undefined {
    return this.admin.address;
  }

  get testHooks(): boolean {
    return this.options.testHooks;
  }

  get defaultModel(): string {
    return this.currentDefaultModel;
  }

  get lastReload(): ReloadOutcome | undefined {
    return this.coordinator?.last;
  }

  get epoch(): number {
    return this.coordinator?.epoch ?? 0;
  }

  get nodes(): number {
    return this.options.config.nodes;
  }

  get nodesReady(): number {
    return this.nodeSet.nodes.filter((handle) => handle.ready).length;
  }

  /** What this host could not load, served to no one (health, admission's `model_unavailable`). */
  get unavailable(): readonly UnavailableModel[] {
    return this.repository.unavailable;
  }

  heartbeat(): NodeHeartbeat {
    return this.nodeSet.heartbeat();
  }

  private startOptions(index: number): Omit<NodeStartOptions, 'port' | 'restarts'> {
    const config = this.options.config;
    return {
      nodeIndex: index,
      host: config.host,
      device: config.devices[index]!,
      workers: config.workers,
      intraOpThreads:
        config.intraOpThreads ?? defaultIntraOpThreads(this.options.cores, config.workers, config.nodes),
      modelsDir: path.resolve(config.modelsDir),
      modelCacheDir: this.repository.cacheDir,
      defaultModel: this.currentDefaultModel,
      ringBytes: config.ringBytes,
      testHooks: this.options.testHooks,
      metricsOnDataPort: config.metricsOnDataPort,
      plan: this.coordinator!.table,
      epoch: this.coordinator!.epoch,
      ...(this.fleetLink.fence !== undefined ? { fence: this.fleetLink.fence } : {}),
      // The host's live settings are those of its table (a node restarted after a failed roll-back gets the
      // settings the other nodes went back to).
      ...(this.coordinator!.table.settings ?? this.settings.nodeSettings()),
    };
  }

  /**
   * A starting node could not load part of the host's table. Before any node serves (the host's start, or a
   * lone node's restart), the host's table drops it (withoutFailed: the last good version stays stable) and the
   * node is synced to that; once nodes serve the table, or with --strict-models, the node's start fails instead
   * (it is restarted; the others keep serving).
   */
  private nodeLoadFailures(
    node: number,
    failures: UnavailableModel[],
  ): { ok: true } | { ok: false; error: string } {
    const error = failures.map((failure) => failure.reason).join('; ');
    const coordinator = this.coordinator!;
    if (this.options.config.strictModels)
      return { ok: false, error: `${error} (--strict-models: nothing that fails to load is left out)` };
    if (this.nodesReady > 0 || coordinator.busy)
      return {
        ok: false,
        error: `${error} (the host serves it: this node cannot load what the host serves)`,
      };
    const left = this.repository.leaveOut(node, failures, coordinator.table);
    if (!left.ok) return left;
    coordinator.table = left.table;
    this.currentDefaultModel = left.table.defaultModel;
    return { ok: true };
  }

  /** Starts node 0 first (it may pick the port when --port 0), then the others on the same port. */
  async start(): Promise<number> {
    const entries = this.repository.scan();
    if (entries.length === 0)
      throw new Error(
        `no model of ${this.options.config.modelsDir} can be served: ${this.repository.unavailable.map((u) => u.reason).join('; ')}`,
      );
    const defaultUnavailable = this.repository.unavailable.some((u) => u.model === this.currentDefaultModel);
    if (!defaultUnavailable && !entries.some((entry) => entry.name === this.currentDefaultModel)) {
      throw new Error(
        `default model "${this.currentDefaultModel}" (STREAMINFER_MODEL_NAME) is not in ${this.options.config.modelsDir}; found ${entries.map((entry) => entry.name).join(', ')}`,
      );
    }
    const initial: TablePlan = this.repository.hostSide({
      ...this.state.savedPlan(repositoryPlan(entries, this.currentDefaultModel)),
      settings: this.settings.nodeSettings(),
    });
    let table = initial;
    let epoch = 0;
    const joined = await this.fleetLink.join({ models: initial.models, defaultModel: initial.defaultModel });
    if (joined) {
      table = this.repository.hostSide({ ...joined.table, settings: initial.settings });
      epoch = joined.epoch;
    }
    this.currentDefaultModel = table.defaultModel;
    this.coordinator = new ReloadCoordinator(table, {
      nodes: () => this.nodeSet.channels().map((channel) => this.repository.watchPrepare(channel)),
      now: () => Date.now(),
      onStart: () => this.options.notifier?.reloading(),
      onOutcome: (outcome) => this.recordOutcome(outcome),
      persist: (plan) => this.state.save(plan, this.settings.configuredDefaultModel),
    });
    this.coordinator.epoch = epoch;
    this.repository.rememberDefaults(entries);
    // What the host serves from now on, including a configured default model that won over the saved one. It
    // serves that table whether or not it can be saved (the file it came from, or the repository, is unchanged).
    try {
      this.state.save(table, this.settings.configuredDefaultModel);
    } catch {
      // counted and logged
    }
    this.options.notifier?.begin(this);
    this.tenantShares.setTenants(this.settings.tenants);
    // Bound before the nodes load anything: a taken admin port fails the start at once.
    const config = this.options.config;
    await this.admin.listen(
      { host: config.adminHost, port: config.adminPort, socket: config.adminSocket },
      this.settings.secrets.tls,
    );
    const port = await this.nodeSet.start(
      this.options.config.nodes,
      this.options.config.port,
      this.options.config.host,
    );
    // A fleet's rollouts live in its KV bucket (any host follows them; one drives each); a host's in its state dir.
    const fleetRollouts = await this.fleetLink.start();
    if (fleetRollouts) this.rollouts.useStore(fleetRollouts.store, fleetRollouts.hostId);
    await this.rollouts.resume();
    this.options.notifier?.started();
    return port;
  }

  private recordOutcome(outcome: ReloadOutcome): void {
    this.settings.settle(outcome);
    this.reloadLog.record(outcome);
    // The coordinator saved the table before committing it.
    if (outcome.result === 'committed') this.currentDefaultModel = outcome.defaultModel.to;
    this.options.notifier?.reloaded(outcome.result === 'failed' ? outcome.error : undefined);
  }

  /** A reload request (see TableChanges.reload). */
  reload(
    request: ReloadRequest & { defaultModel?: string; settings?: NodeSettings },
    reason: string,
  ): Promise<ReloadOutcome> {
    return this.changes.reload(request, reason);
  }

  /** A registry action (see TableChanges.registry). */
  changeRegistry(
    name: string,
    action: RegistryAction,
    body: Record<string, unknown>,
    ifRevision?: number,
  ): Promise<{ outcome: ReloadOutcome; model: ModelPlan }> {
    return this.changes.registry(name, action, body, ifRevision);
  }

  /** SIGHUP, `reload --config` and POST /api/reload with "config" (see ConfigReload.reload). */
  reloadConfig(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ReloadOutcome> {
    return this.settings.reload(file, filePath, reason, strategy);
  }

  /** reloadConfig as the API answers it (SIGHUP uses it too). */
  reloadConfigResponse(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ControlResponse> {
    return respond(async () => outcomeResponse(await this.reloadConfig(file, filePath, reason, strategy)));
  }

  nodePids(): number[] {
    return this.nodeSet.pids();
  }

  /** SIGTERM: every node stops accepting, answers what it admitted, exits; then the supervisor exits. */
  async shutdown(): Promise<void> {
    if (this.nodeSet.stopping) return;
    this.rollouts.stop();
    this.tenantShares.stop();
    this.options.notifier?.stopping();
    // Out of the fleet first: no coordinator counts on a host that is going away.
    await this.fleetLink.close();
    this.logger.info('shutting down: draining nodes');
    await this.nodeSet.shutdown(this.options.config.shutdownTimeoutMs + 10000);
    this.logger.info('all nodes stopped');
    await this.admin.close();
    await this.options.notifier?.close();
  }
}
