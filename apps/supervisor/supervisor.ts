/**
 * The supervisor: control plane of one host. It holds the host's model table (through the reload
 * coordinator), turns reload, registry and configuration requests into the next table (libs/registry's plan)
 * and runs them through the epoch barrier, persists what the host serves, and records every outcome. The node
 * processes are the node set's (node-set.ts); the HTTP control answers are the admin API's (admin-api.ts).
 */
import { statSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import {
  type AdminAddress,
  AdminListener,
  type AdminPolicy,
  type AdminSecrets,
  AdminSetupError,
  parseAllowedOrigins,
} from '../../libs/admin';
import type { ConfigChange, ServerConfig, SettingKey } from '../../libs/config';
import { ConfigError, planConfigChange, resolveConfigDetailed } from '../../libs/config';
import { defaultIntraOpThreads } from '../../libs/inference';
import { registerProcessMetrics } from '../../libs/metrics';
import type { NatsAuth } from '../../libs/nats-auth';
import { ProtocolError, unknownModel } from '../../libs/protocol';
import {
  defaultModelPlan,
  findModel,
  loadState,
  type ModelEntry,
  type ModelPlan,
  type NodeSettings,
  type NodeTls,
  type Planned,
  type RegistryAction,
  readModel,
  registryChange,
  registryStateOf,
  registryTransition,
  repositoryPlan,
  rescanPlan,
  saveState,
  scanRepositoryDetailed,
  type TablePlan,
  type UnavailableModel,
  versionReloadPlan,
  withModel,
  withoutFailed,
  withSavedState,
  withSettings,
} from '../../libs/registry';
import type { TrustedKeys } from '../../libs/signing';
import type { TenantSpec } from '../../libs/tenants';
import type { ControlResponse, NodeStartOptions } from '../node/ipc';
import { loadTls } from '../node/tls-files';
import { AdminApi, type AdminHost, type ReloadRequest, serverAdminSecrets } from './admin/admin-api';
import { outcomeResponse, respond } from './admin/responses';
import type { ReloadOutcome, ReloadStrategy } from './coordinator';
import { diffTables, type NodeChannel, ReloadBusyError, ReloadCoordinator } from './coordinator';
import { type FleetTable, pullCacheDir } from './fleet';
import { joinFleet } from './fleet/fleet-join';
import type { FleetChangeOptions, FleetHost, FleetMember, FleetView } from './fleet/fleet-member';
import type { FleetReloadOutcome } from './fleet/fleet-reload';
import { NodeSet } from './node-set';
import type { NodeHeartbeat, NotifyHost, SystemdNotifier } from './notify';
import { type RolloutAction, RolloutController, type RolloutRouting } from './rollout/rollout-controller';
import { FileRolloutStore, FleetRolloutStore } from './rollout/rollout-store';
import { readTenantFile, TenantShares } from './tenant-shares';
import { readTrustedKeys } from './trusted-keys';

export interface SupervisorOptions {
  config: ServerConfig;
  explicitBatchSize: boolean;
  explicitBatchTimeout: boolean;
  explicitBatchPolicy: boolean;
  /** What the configuration was resolved from at start: a configuration reload resolves again with them. */
  sources?: { flags: Record<string, unknown>; env: Record<string, string | undefined>; filePath?: string };
  testHooks: boolean;
  cores: number;
  /** systemd notify and watchdog (NOTIFY_SOCKET set); see notify.ts. */
  notifier?: SystemdNotifier;
  /** The data port's certificate files as checked at start (apps/node/tls-files.ts); absent: plain. */
  tls?: NodeTls;
  /** The API keys file's tenants, read and validated at start (`apiKeysFile`); absent: anonymous clients. */
  tenants?: readonly TenantSpec[];
  /** The fleet's NATS settings loaded at start (with `cluster`); default: loaded from `config` on joining. */
  nats?: NatsAuth;
  /** The admin token and TLS files as read at start (serverAdminSecrets; the CLI reads them before it forks). */
  admin?: AdminSecrets;
}

/** Batch settings the operator gave explicitly: they override every model's config.json. */
interface ExplicitBatch {
  size: boolean;
  timeout: boolean;
  policy: boolean;
}

export class Supervisor implements AdminHost, NotifyHost {
  private coordinator: ReloadCoordinator | undefined;
  /** This host's membership of its fleet (`--cluster`); undefined when it works alone. */
  private member: FleetMember | undefined;
  /** The live settings a configuration reload running through the fleet gives this host. */
  private pendingSettings: NodeSettings | undefined;
  private readonly nodeSet: NodeSet;
  private readonly admin: AdminApi;
  /** The admin listener (/api/*, /metrics, /health), bound in start(). */
  private adminListener: AdminListener | undefined;
  private adminBound: AdminAddress | undefined;
  private adminSecrets: AdminSecrets;
  private readonly rollouts: RolloutController;
  private readonly reloadsTotal: Counter<'result' | 'strategy'>;
  private readonly reloadDuration: Histogram<'strategy'>;
  private readonly persistFailures: Counter<'file' | 'code'>;
  /** What this host's repository holds that does not load (config.json unreadable, a version that failed). */
  private unavailableNow: UnavailableModel[] = [];
  /** Versions that failed to load, by `model/version`: the file's size and mtime then (a changed file is retried). */
  private readonly failedFiles = new Map<string, string>();
  private readonly loadFailuresTotal: Counter<'model' | 'version'>;
  private readonly unavailableGauge: Gauge<'model' | 'version'>;
  private readonly registry = new Registry();
  private readonly requestRate = new RateSampler();
  /** The tenants in force (the API keys file as the last committed configuration read it). */
  private tenants: readonly TenantSpec[] | undefined;
  private readonly tenantShares: TenantShares;
  private currentDefaultModel: string;
  /** config.json's default version per model at the last scan: a rescan keeps an API-chosen stable unless it moved. */
  private readonly lastDefaults = new Map<string, string>();
  /** The configuration the processes were started with (fixes what a configuration reload can change). */
  private readonly startedConfig: ServerConfig;
  /** --trusted-keys as last read: what model versions pulled from the fleet must be signed by. */
  private trustedKeys: TrustedKeys | undefined;
  /** The configuration a running configuration reload installs once it commits. */
  private pendingConfig:
    | {
        config: ServerConfig;
        explicit: ExplicitBatch;
        applied: string[];
        restartRequired: string[];
        tls: NodeTls | undefined;
        /** Said in the outcome: TLS files that did not pass (the certificate served stays). */
        warning: string | undefined;
        tenants: readonly TenantSpec[] | undefined;
        secrets: AdminSecrets;
      }
    | undefined;

  constructor(
    private readonly options: SupervisorOptions,
    private readonly logger: Logger,
  ) {
    registerProcessMetrics(this.registry, 'streaminfer_supervisor_');
    // A bad trusted-keys file stops the start here (the CLI exits 2 with the file named).
    this.readTrustedKeys(options.config, 'start');
    this.currentDefaultModel = options.config.defaultModel;
    this.startedConfig = options.config;
    this.tenants = options.tenants;
    this.tenantShares = new TenantShares((node, message) => this.nodeSet.sendToNode(node, message));
    this.adminSecrets =
      options.admin ?? serverAdminSecrets(options.config, (message) => logger.warn(message));
    this.reloadsTotal = new Counter({
      name: 'streaminfer_reloads_total',
      help: 'Model table reloads, by result (committed, failed, unchanged) and strategy.',
      labelNames: ['result', 'strategy'],
      registers: [this.registry],
    });
    // Every series from 0: a counter's first sample at 1 has no increase, and the reload-failure alert needs one.
    for (const result of ['committed', 'failed', 'unchanged'] as const)
      for (const strategy of ['atomic', 'rolling'] as const) this.reloadsTotal.inc({ result, strategy }, 0);
    this.reloadDuration = new Histogram({
      name: 'streaminfer_reload_duration_seconds',
      help: 'Time from a reload request to its outcome (prepare + commit + release, or every node rolled).',
      labelNames: ['strategy'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [this.registry],
    });
    this.persistFailures = new Counter({
      name: 'streaminfer_state_persist_failures_total',
      help: 'Writes to STREAMINFER_STATE_DIR that failed, by file (registry, rollouts) and code (storage_full: no room; persist_failed: any other error).',
      labelNames: ['file', 'code'],
      registers: [this.registry],
    });
    for (const file of ['registry', 'rollouts'] as const)
      for (const code of ['storage_full', 'persist_failed'] as const)
        this.persistFailures.inc({ file, code }, 0);
    this.loadFailuresTotal = new Counter({
      name: 'streaminfer_model_load_failures_total',
      help: 'Models (version "*": its config.json) and versions of the repository that failed to load, counted when found.',
      labelNames: ['model', 'version'],
      registers: [this.registry],
    });
    this.unavailableGauge = new Gauge({
      name: 'streaminfer_model_unavailable',
      help: 'A model (version "*") or version of the repository that is not served because it failed to load (1 while so).',
      labelNames: ['model', 'version'],
      registers: [this.registry],
    });
    const fanOutsTotal = new Counter({
      name: 'streaminfer_control_fanouts_total',
      help: 'Requests to every node for /health or /metrics (concurrent scrapes share one), by what was collected.',
      labelNames: ['what'],
      registers: [this.registry],
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
    this.admin = new AdminApi(this, this.nodeSet, this.registry, fanOutsTotal);
    this.rollouts = new RolloutController({
      host: {
        table: () => this.coordinator!.table,
        collectMetrics: async () => {
          const answers = await this.nodeSet.collect('metrics');
          return answers.flatMap((answer) =>
            answer?.type === 'collected' && answer.metrics ? [answer.metrics] : [],
          );
        },
        isClassifier: (model) => this.readEntry(model).signature.labels !== undefined,
        route: (model, routing, reason) => this.routeRollout(model, routing, reason),
      },
      store: new FileRolloutStore(options.config.stateDir, (error) => this.persistFailed('rollouts', error)),
      hostId: 'local',
      registry: this.registry,
      logger,
    });
  }

  get listeningPort(): number {
    return this.nodeSet.port;
  }

  get config(): ServerConfig {
    return this.options.config;
  }

  get adminPolicy(): AdminPolicy {
    return {
      ...(this.adminSecrets.token !== undefined ? { token: this.adminSecrets.token } : {}),
      allowedOrigins: parseAllowedOrigins(this.options.config.adminAllowedOrigins),
    };
  }

  /** Where the admin listener listens (after start). */
  get adminAddress(): AdminAddress | undefined {
    return this.adminBound;
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

  heartbeat(): NodeHeartbeat {
    return this.nodeSet.heartbeat();
  }

  /** Test hook: wedge one node's event loop for `ms` (the watchdog must notice). */
  blockNode(node: number, ms: number): boolean {
    return this.nodeSet.blockNode(node, ms);
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
      modelCacheDir: this.modelCacheDir,
      defaultModel: this.currentDefaultModel,
      ringBytes: config.ringBytes,
      testHooks: this.options.testHooks,
      metricsOnDataPort: config.metricsOnDataPort,
      plan: this.coordinator!.table,
      epoch: this.coordinator!.epoch,
      ...(this.member?.fenced !== undefined ? { fence: this.member.fenced } : {}),
      // The host's live settings are those of its table (a node restarted after a failed roll-back gets the
      // settings the other nodes went back to).
      ...(this.coordinator!.table.settings ?? this.nodeSettingsFor(config, this.explicitBatch())),
    };
  }

  /** The node settings a configuration asks for (see NodeSettings: what a configuration reload changes). */
  private nodeSettingsFor(
    config: ServerConfig,
    explicit: ExplicitBatch,
    tls: NodeTls | undefined = this.options.tls,
    tenants: readonly TenantSpec[] | undefined = this.tenants,
  ): NodeSettings {
    return {
      ...(tenants ? { tenants } : {}),
      batch: {
        policy: config.batchPolicy,
        maxBatchSize: config.batchSize,
        maxQueueDelayMs: config.batchTimeoutMs,
        explicitSize: explicit.size,
        explicitTimeout: explicit.timeout,
        explicitPolicy: explicit.policy,
        // unset by default: set at all is explicit
        ...(config.sloP99Ms !== undefined ? { sloP99Ms: config.sloP99Ms } : {}),
      },
      maxPayloadBytes: config.maxPayloadBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      backpressure: {
        rateLimitRps: config.rateLimitRps,
        rateLimitBurst: config.rateLimitBurst,
        modelErrorPenalty: config.modelErrorPenalty,
        maxInflightPerClient: config.maxInflightPerClient,
        maxModelQueue: config.maxModelQueue,
        slowConsumerWarnBytes: config.slowConsumerWarnBytes,
        slowConsumerCloseBytes: config.slowConsumerCloseBytes,
        trustForwardedFor: config.trustForwardedFor,
        trustedProxies: config.trustedProxies,
        rateLimitKey: config.rateLimitKey,
        maxConnections: config.maxConnections,
        maxConnectionsPerIp: config.maxConnectionsPerIp,
        maxProtocolErrorsPerSecond: config.maxProtocolErrorsPerSecond,
        maxRateLimitedPerSecond: config.maxRateLimitedPerSecond,
        errorCoalesceMs: config.errorCoalesceMs,
      },
      shutdownTimeoutMs: config.shutdownTimeoutMs,
      logLevel: config.logLevel,
      ...(tls ? { tls } : {}),
    };
  }

  /** The repository's table with the persisted registry state applied (bad entries skipped, with a warning). */
  private savedPlan(plan: TablePlan): TablePlan {
    const loaded = loadState(this.options.config.stateDir);
    if (loaded.warning) this.logger.warn(loaded.warning);
    if (!loaded.state) return plan;
    const saved = withSavedState(plan, loaded.state, this.options.config.defaultModel);
    for (const notice of saved.notices) this.logger[notice.level](notice.details, notice.message);
    return saved.plan;
  }

  private explicitBatch(): ExplicitBatch {
    return {
      size: this.options.explicitBatchSize,
      timeout: this.options.explicitBatchTimeout,
      policy: this.options.explicitBatchPolicy,
    };
  }

  /**
   * Saves what the host serves (the coordinator calls it before any node commits a table). Throws the typed
   * error (storage_full, persist_failed), counted and logged.
   */
  private persist(plan: TablePlan): void {
    // A configuration reload saves the configured default model it brings (applied once it commits).
    const configured = (this.pendingConfig?.config ?? this.options.config).defaultModel;
    try {
      saveState(this.options.config.stateDir, registryStateOf(plan, configured));
    } catch (error) {
      this.persistFailed('registry', error);
      throw error;
    }
  }

  private persistFailed(file: 'registry' | 'rollouts', error: unknown): void {
    const code = error instanceof ProtocolError ? error.code : 'persist_failed';
    this.persistFailures.inc({ file, code });
    this.logger.error(
      { err: (error as Error).message, code, dir: this.options.config.stateDir },
      `cannot save the ${file === 'registry' ? 'registry' : 'rollout'} state`,
    );
  }

  /** Where versions pulled from the fleet are written and read: `<stateDir>/models` (see fetchInto). */
  get modelCacheDir(): string {
    return pullCacheDir(this.options.config.stateDir);
  }

  /** What this host could not load, served to no one (health, admission's `model_unavailable`). */
  get unavailable(): readonly UnavailableModel[] {
    return this.unavailableNow;
  }

  /**
   * The repository (with the pull cache) as it can be served: models whose config.json cannot be read, and
   * versions that failed to load before from the same file (size and mtime), are left out and listed unavailable.
   * With --strict-models any unreadable model stops the start (and fails a rescan).
   */
  private scan(): ModelEntry[] {
    const scan = scanRepositoryDetailed(path.resolve(this.options.config.modelsDir), this.modelCacheDir);
    if (this.options.config.strictModels && scan.broken.length > 0)
      throw new Error(`--strict-models: ${scan.broken.map((model) => model.reason).join('; ')}`);
    const failed: UnavailableModel[] = scan.broken.map((model) => ({
      model: model.name,
      reason: model.reason,
    }));
    const models = scan.models.map((entry) => {
      const versions = entry.versions.filter((version) => {
        const key = `${entry.name}/${version.version}`;
        const stamp = this.failedFiles.get(key);
        if (stamp === undefined) return true;
        if (stamp !== fileStamp(version.file)) {
          this.failedFiles.delete(key);
          return true;
        }
        const before = this.unavailableNow.find(
          (u) => u.model === entry.name && u.version === version.version,
        );
        failed.push({
          model: entry.name,
          version: version.version,
          reason: before?.reason ?? 'did not load',
        });
        return false;
      });
      return { ...entry, versions };
    });
    this.markUnavailable(failed);
    return models.filter((entry) => entry.versions.length > 0);
  }

  /** The host's unavailable list from now on: new entries logged and counted, the gauge set. */
  private markUnavailable(failed: readonly UnavailableModel[]): void {
    const key = (entry: UnavailableModel): string => `${entry.model}/${entry.version ?? '*'}`;
    const before = new Set(this.unavailableNow.map(key));
    for (const entry of failed) {
      if (before.has(key(entry))) continue;
      this.loadFailuresTotal.inc({ model: entry.model, version: entry.version ?? '*' });
      this.logger.error(
        { model: entry.model, version: entry.version ?? null, reason: entry.reason },
        entry.version === undefined
          ? 'model unavailable: it cannot be read; serving the others'
          : 'model version unavailable: it did not load; serving the rest',
      );
    }
    this.unavailableNow = [...failed];
    this.unavailableGauge.reset();
    for (const entry of failed)
      this.unavailableGauge.set({ model: entry.model, version: entry.version ?? '*' }, 1);
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
    for (const failure of failures) {
      if (failure.version === undefined) continue;
      const file = this.versionFile(failure.model, failure.version);
      if (file !== undefined) this.failedFiles.set(`${failure.model}/${failure.version}`, fileStamp(file));
    }
    const failed = [...this.unavailableNow, ...failures];
    const next = withoutFailed(coordinator.table, failed);
    if (next.models.length === 0)
      return {
        ok: false,
        error: `${failed.map((f) => f.reason).join('; ')} (no model of the repository loads)`,
      };
    this.markUnavailable(failed);
    this.logger.warn(
      { node, unavailable: failed.map((f) => `${f.model}/${f.version ?? '*'}`) },
      'serving the host table without what did not load',
    );
    coordinator.table = next;
    this.currentDefaultModel = next.defaultModel;
    return { ok: true };
  }

  private versionFile(model: string, version: string): string | undefined {
    try {
      return this.readEntry(model).versions.find((entry) => entry.version === version)?.file;
    } catch {
      return undefined;
    }
  }

  /**
   * A node's PREPARE that failed on a version that did not load: the version is listed unavailable (health,
   * metrics) and, from the same file, left out of later rescans (an explicit version reload tries it again).
   */
  private watchPrepare(channel: NodeChannel): NodeChannel {
    return {
      ...channel,
      prepare: async (plan) => {
        const answer = await channel.prepare(plan);
        const failed = (answer.data as { failed?: UnavailableModel } | undefined)?.failed;
        if (!answer.ok && failed?.version !== undefined) {
          const file = this.versionFile(failed.model, failed.version);
          if (file !== undefined) this.failedFiles.set(`${failed.model}/${failed.version}`, fileStamp(file));
          const others = this.unavailableNow.filter(
            (u) => u.model !== failed.model || u.version !== failed.version,
          );
          this.markUnavailable([...others, failed]);
        }
        return answer;
      },
    };
  }

  /** A plan as this host's nodes get it: with what this host could not load (host-side, like its settings). */
  private hostSide(plan: TablePlan): TablePlan {
    const next = { ...plan };
    if (this.unavailableNow.length > 0) next.unavailable = [...this.unavailableNow];
    else delete next.unavailable;
    return next;
  }

  private rememberDefaults(entries: readonly ModelEntry[]): void {
    for (const entry of entries) this.lastDefaults.set(entry.name, entry.defaultVersion);
  }

  /** One model as the repository holds it now: `unknown_model` when it is in neither, `bad_request` when unreadable. */
  private readEntry(name: string): ModelEntry {
    try {
      return readModel(
        path.join(path.resolve(this.options.config.modelsDir), name),
        name,
        path.join(this.modelCacheDir, name),
      );
    } catch (error) {
      const current = this.coordinator!.table.models.map((m) => m.name);
      if (!current.includes(name)) throw unknownModel(name, current);
      throw new ProtocolError('bad_request', (error as Error).message);
    }
  }

  /** Starts node 0 first (it may pick the port when --port 0), then the others on the same port. */
  async start(): Promise<number> {
    const entries = this.scan();
    if (entries.length === 0)
      throw new Error(
        `no model of ${this.options.config.modelsDir} can be served: ${this.unavailableNow.map((u) => u.reason).join('; ')}`,
      );
    const defaultUnavailable = this.unavailableNow.some((u) => u.model === this.currentDefaultModel);
    if (!defaultUnavailable && !entries.some((entry) => entry.name === this.currentDefaultModel)) {
      throw new Error(
        `default model "${this.currentDefaultModel}" (STREAMINFER_MODEL_NAME) is not in ${this.options.config.modelsDir}; found ${entries.map((entry) => entry.name).join(', ')}`,
      );
    }
    const initial: TablePlan = this.hostSide({
      ...this.savedPlan(repositoryPlan(entries, this.currentDefaultModel)),
      settings: this.nodeSettingsFor(this.options.config, this.explicitBatch()),
    });
    let table = initial;
    let epoch = 0;
    if (this.options.config.cluster !== undefined) {
      // The fleet's record wins over the local state: the host starts on the fleet's table at its epoch.
      const joined = await joinFleet({
        config: this.options.config,
        ...(this.options.nats ? { nats: this.options.nats } : {}),
        initial: { models: initial.models, defaultModel: initial.defaultModel },
        host: this.fleetHost(),
        logger: this.logger,
        testHooks: this.options.testHooks,
        registry: this.registry,
        trustedKeys: () => this.trustedKeys,
      });
      this.member = joined.member;
      table = this.hostSide({ ...joined.start.table, settings: initial.settings });
      epoch = joined.start.epoch;
    }
    this.currentDefaultModel = table.defaultModel;
    this.coordinator = new ReloadCoordinator(table, {
      nodes: () => this.nodeSet.channels().map((channel) => this.watchPrepare(channel)),
      now: () => Date.now(),
      onStart: () => this.options.notifier?.reloading(),
      onOutcome: (outcome) => this.recordOutcome(outcome),
      persist: (plan) => this.persist(plan),
    });
    this.coordinator.epoch = epoch;
    this.rememberDefaults(entries);
    // What the host serves from now on, including a configured default model that won over the saved one. It
    // serves that table whether or not it can be saved (the file it came from, or the repository, is unchanged).
    try {
      this.persist(table);
    } catch {
      // counted and logged
    }
    this.options.notifier?.begin(this);
    this.tenantShares.setTenants(this.tenants);
    // Bound before the nodes load anything: a taken admin port fails the start at once.
    const config = this.options.config;
    this.adminListener = new AdminListener(
      { host: config.adminHost, port: config.adminPort, socket: config.adminSocket },
      (req, res) => this.admin.serveHttp(req, res),
      this.adminSecrets.tls,
    );
    this.adminBound = await this.adminListener.listen();
    const port = await this.nodeSet.start(
      this.options.config.nodes,
      this.options.config.port,
      this.options.config.host,
    );
    await this.member?.start();
    // A fleet's rollouts live in its KV bucket (any host follows them; one drives each); a host's in its state dir.
    if (this.member)
      this.rollouts.useStore(new FleetRolloutStore(await this.member.openRollouts()), this.member.hostId);
    await this.rollouts.resume();
    this.options.notifier?.started();
    return port;
  }

  private recordOutcome(outcome: ReloadOutcome): void {
    const pending = this.pendingConfig;
    if (pending) {
      outcome.config = {
        applied: outcome.result === 'failed' ? [] : pending.applied,
        restartRequired: pending.restartRequired,
      };
      if (pending.warning) outcome.warnings = [...(outcome.warnings ?? []), pending.warning];
      if (outcome.result !== 'failed') {
        // Supervisor-side settings (admin token, log level, step timeout) and what restarted nodes get.
        this.options.config = pending.config;
        this.options.explicitBatchSize = pending.explicit.size;
        this.options.explicitBatchTimeout = pending.explicit.timeout;
        this.options.explicitBatchPolicy = pending.explicit.policy;
        if (pending.tls) this.options.tls = pending.tls;
        else delete this.options.tls;
        this.logger.level = pending.config.logLevel;
        // The nodes hold the new tenants since COMMIT: their shares follow at once.
        this.tenants = pending.tenants;
        this.tenantShares.setTenants(pending.tenants);
        // The token and certificate read for this reload: new connections get the certificate, open ones
        // keep theirs.
        this.adminSecrets = pending.secrets;
        if (pending.secrets.tls) this.adminListener?.useTls(pending.secrets.tls);
      }
    }
    this.reloadsTotal.inc({ result: outcome.result, strategy: outcome.strategy });
    this.reloadDuration.observe({ strategy: outcome.strategy }, outcome.durationMs / 1000);
    // The coordinator saved the table before committing it.
    if (outcome.result === 'committed') this.currentDefaultModel = outcome.defaultModel.to;
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
    this.options.notifier?.reloaded(outcome.result === 'failed' ? outcome.error : undefined);
  }
  /** The supervisor as its fleet membership sees it. */
  private fleetHost(): FleetHost {
    return {
      coordinator: () => this.coordinator!,
      hostPlan: (table) =>
        this.hostSide({
          ...table,
          settings: this.pendingSettings ?? this.coordinator!.table.settings,
        }),
      fence: (reason) => this.nodeSet.fence(reason),
      load: () => {
        // The notifier's heartbeat pings the nodes (their pongs carry the answered counts); without it, this one.
        if (!this.options.notifier) this.nodeSet.heartbeat();
        return {
          nodes: this.options.config.nodes,
          nodesReady: this.nodesReady,
          requestsPerSecond: this.requestRate.sample(this.nodeSet.answeredTotal(), Date.now()),
        };
      },
    };
  }

  get fence(): string | undefined {
    return this.member?.fenced;
  }

  get fleetBehind(): string | undefined {
    return this.member?.behind;
  }

  get fleet(): { name: string; host: string } | undefined {
    return this.member ? { name: this.member.fleet, host: this.member.hostId } : undefined;
  }

  /** GET /api/fleet: 404 when this host is not in a fleet. */
  async fleetView(): Promise<FleetView> {
    if (!this.member)
      throw new ProtocolError('not_found', 'this host is not in a fleet (start it with --cluster)');
    return this.member.view();
  }

  /** POST /api/fleet/hosts/{host}/exclude: 404 when this host is not in a fleet or the host not a member. */
  async fleetExclude(host: string): Promise<unknown> {
    if (!this.member)
      throw new ProtocolError('not_found', 'this host is not in a fleet (start it with --cluster)');
    return this.member.exclude(host);
  }

  /**
   * A change of the fleet's table, coordinated by this host through the fleet's barrier: `next` maps the
   * committed table to the one asked for. The answer is this host's outcome with the fleet's per host.
   */
  private async fleetChange(
    next: (table: FleetTable) => FleetTable,
    options: FleetChangeOptions,
  ): Promise<ReloadOutcome> {
    const coordinator = this.coordinator!;
    const before = coordinator.table;
    const fleet = await this.member!.change(next, options);
    return fleetOutcome(fleet, before, coordinator);
  }

  /**
   * Builds the next table for a reload request and runs it. `model` + `version`: make that version stable
   * (loading it if needed). `model` alone: make it the default model. Neither: re-read the repository.
   */
  async reload(
    request: ReloadRequest & { defaultModel?: string; settings?: NodeSettings },
    reason: string,
  ): Promise<ReloadOutcome> {
    const strategy = request.strategy ?? 'atomic';
    // A version reload would move stable under a running rollout (whose checks compare against it).
    if (request.model !== undefined && request.version !== undefined && this.rollouts.active(request.model))
      throw new ProtocolError(
        'conflict',
        `a rollout of "${request.model}" is running: abort it (POST /api/models/${request.model}/rollout/abort) before reloading a version of it`,
      );
    const next = await this.reloadPlan(request, strategy);
    if (this.member) {
      this.pendingSettings = request.settings;
      try {
        return await this.fleetChange(next, {
          strategy,
          reason: `${reason} (fleet)`,
          // A configuration reload changes this host's settings even when the fleet's table stays as it is.
          force: request.settings !== undefined,
          // A repository reload (POST /api/reload {}) also replaces an invalid registry record.
          repair: request.model === undefined,
          ...(request.ifRevision !== undefined ? { ifRevision: request.ifRevision } : {}),
        });
      } finally {
        this.pendingSettings = undefined;
      }
    }
    const coordinator = this.coordinator!;
    const current = coordinator.table;
    return coordinator.reload(
      this.hostSide(withSettings(next(current), current, request.settings)),
      strategy,
      reason,
    );
  }

  /**
   * The next table a reload request asks for, from a current one (the host's, or in a fleet the fleet's
   * committed one): the same plans either way.
   */
  private async reloadPlan(
    request: ReloadRequest & { defaultModel?: string },
    strategy: ReloadStrategy,
  ): Promise<(table: TablePlan) => TablePlan> {
    const { model, version } = request;
    if (model !== undefined && version !== undefined) {
      // A version pushed to the fleet but not yet here is fetched (and verified) before it is planned.
      await this.member?.fetchVersion(model, version);
      const entry = this.readEntry(model);
      const found = entry.versions.map((v) => v.version);
      return (table) => settle(versionReloadPlan(table, entry.name, version, found, strategy));
    }
    if (model !== undefined) return (table) => settle(defaultModelPlan(table, model));
    const entries = this.scan();
    return (table) => {
      const plan = withoutFailed(
        settle(
          rescanPlan(
            entries,
            request.defaultModel ?? table.defaultModel,
            table,
            this.lastDefaults,
            this.unavailableNow.map((u) => u.model),
          ),
        ),
        this.unavailableNow,
      );
      // A served model whose config.json broke on disk keeps serving what it loaded (its last good versions);
      // it is listed unavailable (health degraded) until the file is repaired.
      const broken = new Set(this.unavailableNow.flatMap((u) => (u.version === undefined ? [u.model] : [])));
      const kept = table.models.filter(
        (model) => broken.has(model.name) && !plan.models.some((m) => m.name === model.name),
      );
      this.rememberDefaults(entries);
      return kept.length === 0 ? plan : { ...plan, models: [...plan.models, ...kept] };
    };
  }

  /**
   * A registry action (candidate, canary, shadow, promote, rollback): the next table from registryTransition,
   * through the epoch barrier (a new candidate is loaded beside the stable one first). In a fleet, through the
   * fleet's barrier, from the fleet's committed table (`if_revision` in the body: refused 409 when it moved).
   */
  async changeRegistry(
    name: string,
    action: RegistryAction,
    body: Record<string, unknown>,
    ifRevision?: number,
  ): Promise<{ outcome: ReloadOutcome; model: ModelPlan }> {
    const change = settle(registryChange(action, body));
    if (this.rollouts.active(name))
      throw new ProtocolError(
        'conflict',
        `a rollout of "${name}" is running: pause or abort it (POST /api/models/${name}/rollout/abort) before changing the registry by hand`,
      );
    let found: string[] = [];
    if (change.action === 'candidate') {
      try {
        if (this.member) await this.member.fetchVersion(name, change.version);
        found = this.readEntry(name).versions.map((v) => v.version);
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
    const reason = `${action} ${name}`;
    const outcome = this.member
      ? await this.fleetChange(next, {
          strategy: 'atomic',
          reason,
          ...(ifRevision !== undefined ? { ifRevision } : {}),
        })
      : await this.coordinator!.reload(this.hostSide(next(this.coordinator!.table)), 'atomic', reason);
    return { outcome, model: model ?? settle(findModel(this.coordinator!.table, name)) };
  }

  /** Progressive delivery (admin API): start, get, pause, resume, abort a model's rollout. */
  rollout(model: string, action: RolloutAction, body: Record<string, unknown>): Promise<unknown> {
    return this.rollouts.handle(model, action, body);
  }

  /**
   * A rollout's routing change as one registry change (one epoch; in a fleet, through the fleet's barrier):
   * load the candidate when it is not the candidate yet, then the canary share and shadow flag — or promote.
   */
  private async routeRollout(name: string, routing: RolloutRouting, reason: string): Promise<void> {
    let found: string[] = [];
    const current = settle(findModel(this.coordinator!.table, name));
    if (routing.kind === 'canary' && current.candidate !== routing.candidate) {
      if (this.member) await this.member.fetchVersion(name, routing.candidate);
      found = this.readEntry(name).versions.map((v) => v.version);
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
    const outcome = this.member
      ? await this.fleetChange(next, { strategy: 'atomic', reason })
      : await this.coordinator!.reload(this.hostSide(next(this.coordinator!.table)), 'atomic', reason);
    if (outcome.result === 'failed')
      throw new ProtocolError(outcome.code ?? 'reload_failed', outcome.error ?? 'reload failed');
  }

  /**
   * SIGHUP and `reload --config`: resolves the configuration again from `file` (the config file's content),
   * with the flags and environment given at start still winning over it; applies every live setting on every
   * node through the epoch barrier, together with a re-read of the model repository; names the settings that
   * need a restart (in the log and in the outcome). An invalid configuration changes nothing.
   */
  async reloadConfig(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ReloadOutcome> {
    const sources = this.options.sources ?? { flags: {}, env: {} };
    let resolved: ReturnType<typeof resolveConfigDetailed>;
    try {
      resolved = resolveConfigDetailed({
        flags: sources.flags,
        env: sources.env,
        ...(file !== undefined ? { file } : {}),
        ...(filePath !== undefined ? { filePath } : {}),
      });
      // The trusted keys are this host's, not the fleet table's: they rotate at once, even when the reload that
      // follows is refused (busy) or fails elsewhere in the fleet.
      this.readTrustedKeys(resolved.config, reason);
    } catch (error) {
      const message = error instanceof ConfigError ? error.message : (error as Error).message;
      this.logger.error({ reason, err: message }, 'configuration rejected; still serving the previous one');
      throw new ProtocolError('bad_request', message);
    }
    // Refused before anything is staged: the pending configuration belongs to the reload that runs next.
    const running = this.coordinator!.current;
    if (running) throw new ReloadBusyError(running);
    for (const warning of resolved.warnings) this.logger.warn({ reason }, warning);
    const change = planConfigChange(this.options.config, resolved.config, this.startedConfig);
    // Token and TLS files are read again (rotation): one that cannot be used rejects the configuration.
    let secrets: AdminSecrets;
    try {
      secrets = serverAdminSecrets(change.next, (message) => this.logger.warn({ reason }, message));
    } catch (error) {
      if (!(error instanceof AdminSetupError)) throw error;
      this.logger.error(
        { reason, err: error.message },
        'configuration rejected; still serving the previous one',
      );
      throw new ProtocolError('bad_request', error.message);
    }
    const explicit: ExplicitBatch = {
      size: resolved.origins.batchSize !== 'default',
      timeout: resolved.origins.batchTimeoutMs !== 'default',
      policy: resolved.origins.batchPolicy !== 'default',
    };
    // The API keys file is read again on every configuration reload: a bad one keeps the tenants in force.
    let tenants: readonly TenantSpec[] | undefined;
    try {
      tenants = change.next.apiKeysFile === undefined ? undefined : readTenantFile(change.next.apiKeysFile);
    } catch (error) {
      const message = (error as Error).message;
      this.logger.error(
        { reason, err: message },
        'API keys file rejected; still serving the previous tenants',
      );
      throw new ProtocolError('bad_request', message);
    }
    if (change.restartRequired.length > 0)
      this.logger.warn(
        { reason, restart_required: change.restartRequired },
        'configuration reload: these settings take effect only after a restart',
      );
    const tls = this.reloadedTls(change, resolved.origins, reason);
    this.pendingConfig = {
      config: change.next,
      explicit,
      applied: change.applied,
      restartRequired: change.restartRequired,
      tls: tls.tls,
      warning: tls.warning,
      tenants,
      secrets,
    };
    try {
      const request: { defaultModel?: string; settings: NodeSettings; strategy?: ReloadStrategy } = {
        settings: this.nodeSettingsFor(change.next, explicit, tls.tls, tenants),
      };
      // The configured default model applies when the configuration changed it; otherwise the one being
      // served stays (it may come from `reload --model`).
      if (change.applied.includes('defaultModel')) request.defaultModel = change.next.defaultModel;
      if (strategy) request.strategy = strategy;
      const outcome = await this.reload(request, reason);
      // A fleet reload answers with the fleet's outcome: this host's TLS warning joins it here.
      if (tls.warning && !outcome.warnings?.includes(tls.warning))
        outcome.warnings = [...(outcome.warnings ?? []), tls.warning];
      return outcome;
    } finally {
      this.pendingConfig = undefined;
    }
  }

  /** Reads `config.trustedKeysFile` (throws SigningKeyError naming it; the keys held stay) and logs what it holds. */
  private readTrustedKeys(config: ServerConfig, reason: string): void {
    const file = config.trustedKeysFile;
    if (file === undefined) {
      if (this.trustedKeys !== undefined)
        this.logger.warn(
          { reason },
          'fleet: trusted keys unset; pulled artifacts are checked by checksum only',
        );
      this.trustedKeys = undefined;
      return;
    }
    this.trustedKeys = readTrustedKeys(file);
    this.logger.info({ reason, file, keys: [...this.trustedKeys.keys()] }, 'fleet: trusted keys read');
    if (config.cluster === undefined)
      this.logger.warn(
        { file },
        'trusted keys are set but this host is not in a fleet (--cluster): nothing is pulled',
      );
  }

  /**
   * Every configuration reload re-reads the data port's certificate files (the same names, or new ones), so a
   * certificate renewed on disk reaches the nodes (a new fingerprint is a changed setting). Files that do not
   * pass change nothing: the nodes keep the certificate they serve, the file settings keep their running
   * values, and the outcome says why in its warnings. TLS turned on or off waits for a restart.
   */
  private reloadedTls(
    change: ConfigChange,
    origins: ReturnType<typeof resolveConfigDetailed>['origins'],
    reason: string,
  ): { tls: NodeTls | undefined; warning?: string } {
    const running = this.options.tls;
    if (change.next.tlsCert === undefined || change.restartRequired.includes('tlsCert'))
      return { tls: running };
    try {
      const loaded = loadTls(change.next, Date.now(), origins);
      for (const warning of loaded!.warnings) this.logger.warn({ reason }, warning);
      return { tls: loaded!.tls };
    } catch (error) {
      const message = (error as Error).message;
      this.logger.error(
        { reason, err: message },
        'TLS files rejected; the nodes keep serving the previous certificate',
      );
      const next = change.next as unknown as Record<string, unknown>;
      for (const key of TLS_FILE_SETTINGS) next[key] = this.options.config[key];
      change.applied = change.applied.filter((key) => !TLS_FILE_SETTINGS.includes(key));
      return {
        tls: running,
        warning: `TLS certificate not reloaded: ${message}; still serving the previous one`,
      };
    }
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
    await this.member?.close();
    this.logger.info('shutting down: draining nodes');
    await this.nodeSet.shutdown(this.options.config.shutdownTimeoutMs + 10000);
    this.logger.info('all nodes stopped');
    await this.adminListener?.close();
    await this.options.notifier?.close();
  }
}

const TLS_FILE_SETTINGS: readonly SettingKey[] = ['tlsCert', 'tlsKey', 'tlsClientCa'];

/** Requests per second between two samples of a growing count (the fleet heartbeat's load figure). */
class RateSampler {
  private last: { count: number; at: number } | undefined;
  private rate = 0;

  sample(count: number, at: number): number {
    const last = this.last;
    if (last && at > last.at && count >= last.count)
      this.rate = ((count - last.count) * 1000) / (at - last.at);
    this.last = { count, at };
    return Math.round(this.rate * 10) / 10;
  }
}

/**
 * A fleet reload as this host answers it: the fleet's result and epochs, the table change, this host's own
 * nodes (when its part of the reload is the last one it ran), and every host's state.
 */
function fleetOutcome(
  fleet: FleetReloadOutcome,
  before: TablePlan,
  coordinator: ReloadCoordinator,
): ReloadOutcome {
  const local = coordinator.last;
  const mine = local?.reason.includes(fleet.id) ? local : undefined;
  const after = coordinator.table;
  const outcome: ReloadOutcome = {
    id: mine?.id ?? 0,
    result: fleet.result === 'conflict' ? 'failed' : fleet.result,
    strategy: fleet.strategy,
    reason: fleet.reason,
    epochBefore: fleet.epochBefore,
    epoch: fleet.epoch,
    changes: diffTables(before, after),
    defaultModel: { from: before.defaultModel, to: after.defaultModel },
    startedAt: fleet.startedAt,
    durationMs: fleet.durationMs,
    nodes: mine?.nodes ?? [],
    fleet: { reloadId: fleet.id, hosts: fleet.hosts },
  };
  if (fleet.error !== undefined) outcome.error = fleet.error;
  if (fleet.warnings !== undefined) outcome.warnings = fleet.warnings;
  return outcome;
}

/** A version file as it was when it failed to load: a new file under the same name is tried again. */
function fileStamp(file: string): string {
  try {
    const stat = statSync(file);
    return `${stat.size}:${stat.mtimeMs}`;
  } catch {
    return 'gone';
  }
}

/** A plan's rejection becomes the typed error the API answers with. */
function settle<T>(planned: Planned<T>): T {
  if (!planned.ok) throw planned.error;
  return planned.value;
}
