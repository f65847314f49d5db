/**
 * The supervisor: control plane of one host. Forks the node processes, forwards nothing of the request path,
 * answers control requests that any node receives on the data port (health, metrics, admin API) for the whole
 * host, restarts a crashed node with backoff, and drains everything on SIGTERM.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { createServer } from 'node:net';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Histogram, Registry } from 'prom-client';
import type { ServerConfig } from '../../libs/config';
import { ConfigError, planConfigChange, resolveConfigDetailed } from '../../libs/config';
import { defaultIntraOpThreads } from '../../libs/inference';
import type { MetricJson } from '../../libs/metrics';
import { aggregateToText, PROMETHEUS_CONTENT_TYPE, registerProcessMetrics } from '../../libs/metrics';
import { decodePathSegment, type ErrorCode, encodeError, httpStatusOf } from '../../libs/protocol';
import {
  loadState,
  type ModelEntry,
  type ModelState,
  type RegistryState,
  readModel,
  saveState,
  scanRepository,
} from '../../libs/registry';
import type {
  ControlRequest,
  ControlResponse,
  ModelPlan,
  NodeHealth,
  NodeMessage,
  NodeSettings,
  NodeStartOptions,
  SupervisorMessage,
  TablePlan,
} from '../node/ipc';
import { authorizeAdmin } from './admin-auth';
import { Coalescer } from './coalesce';
import type { NodeChannel, ReloadOutcome, ReloadStrategy, StepAnswer } from './coordinator';
import { ReloadBusyError, ReloadCoordinator } from './coordinator';

const COLLECT_TIMEOUT_MS = 5000;
const START_TIMEOUT_MS = 120000;
const RESTART_POLL_MS = 50;
/** Scrapes of one kind start node fan-outs at least this far apart (concurrent scrapes share them). */
const SCRAPE_MIN_INTERVAL_MS = 50;

const JOIN_POLL_MS = 10;

interface NodeHandle {
  index: number;
  child: ChildProcess;
  /** At the host's table and epoch and taking part in every reload: set when the node is told to listen. */
  ready: boolean;
  restarts: number;
  lastHealth: NodeHealth | undefined;
}

export interface SupervisorOptions {
  config: ServerConfig;
  explicitBatchSize: boolean;
  explicitBatchTimeout: boolean;
  /** What the configuration was resolved from at start: a configuration reload resolves again with them. */
  sources?: { flags: Record<string, unknown>; env: Record<string, string | undefined>; filePath?: string };
  testHooks: boolean;
  cores: number;
}

export class Supervisor {
  private readonly nodes: NodeHandle[] = [];
  private port = 0;
  private stopping = false;
  private readonly waiters = new Map<
    number,
    { node: number; answer: (message: NodeMessage | undefined) => void }
  >();
  private coordinator: ReloadCoordinator | undefined;
  private readonly reloadsTotal: Counter<'result' | 'strategy'>;
  private readonly reloadDuration: Histogram<'strategy'>;
  private readonly fanOutsTotal: Counter<'what'>;
  private readonly healthScrapes = new Coalescer(() => this.buildHealthReport(), SCRAPE_MIN_INTERVAL_MS);
  private readonly metricsScrapes = new Coalescer(() => this.buildMetricsText(), SCRAPE_MIN_INTERVAL_MS);
  private nextRequestId = 1;
  private readonly registry = new Registry();
  private defaultModel: string;
  private readonly startedAt = Date.now();
  /** The configuration the processes were started with (fixes what a configuration reload can change). */
  private readonly startedConfig: ServerConfig;
  /** The configuration a running configuration reload installs once it commits. */
  private pendingConfig:
    | {
        config: ServerConfig;
        explicitSize: boolean;
        explicitTimeout: boolean;
        applied: string[];
        restartRequired: string[];
      }
    | undefined;

  constructor(
    private readonly options: SupervisorOptions,
    private readonly logger: Logger,
  ) {
    registerProcessMetrics(this.registry, 'streaminfer_supervisor_');
    this.defaultModel = options.config.defaultModel;
    this.startedConfig = options.config;
    this.reloadsTotal = new Counter({
      name: 'streaminfer_reloads_total',
      help: 'Model table reloads, by result (committed, failed, unchanged) and strategy.',
      labelNames: ['result', 'strategy'],
      registers: [this.registry],
    });
    this.reloadDuration = new Histogram({
      name: 'streaminfer_reload_duration_seconds',
      help: 'Time from a reload request to its outcome (prepare + commit + release, or every node rolled).',
      labelNames: ['strategy'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [this.registry],
    });
    this.fanOutsTotal = new Counter({
      name: 'streaminfer_control_fanouts_total',
      help: 'Requests to every node for /health or /metrics (concurrent scrapes share one), by what was collected.',
      labelNames: ['what'],
      registers: [this.registry],
    });
  }

  get listeningPort(): number {
    return this.port;
  }

  private startOptions(index: number): NodeStartOptions {
    const config = this.options.config;
    return {
      nodeIndex: index,
      port: this.port,
      host: config.host,
      device: config.devices[index]!,
      workers: config.workers,
      intraOpThreads:
        config.intraOpThreads ?? defaultIntraOpThreads(this.options.cores, config.workers, config.nodes),
      modelsDir: path.resolve(config.modelsDir),
      defaultModel: this.defaultModel,
      ringBytes: config.ringBytes,
      testHooks: this.options.testHooks,
      plan: this.coordinator!.table,
      epoch: this.coordinator!.epoch,
      // The host's live settings are those of its table (a node restarted after a failed roll-back gets the
      // settings the other nodes went back to).
      ...(this.coordinator!.table.settings ??
        this.nodeSettingsFor(config, this.options.explicitBatchSize, this.options.explicitBatchTimeout)),
    };
  }

  /** The node settings a configuration asks for (see NodeSettings: what a configuration reload changes). */
  private nodeSettingsFor(
    config: ServerConfig,
    explicitSize: boolean,
    explicitTimeout: boolean,
  ): NodeSettings {
    return {
      batch: {
        policy: config.batchPolicy,
        maxBatchSize: config.batchSize,
        maxQueueDelayMs: config.batchTimeoutMs,
        explicitSize,
        explicitTimeout,
      },
      maxPayloadBytes: config.maxPayloadBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      backpressure: {
        rateLimitRps: config.rateLimitRps,
        rateLimitBurst: config.rateLimitBurst,
        maxInflightPerClient: config.maxQueueSize,
        maxModelQueue: config.maxModelQueue,
        slowConsumerWarnBytes: config.slowConsumerWarnBytes,
        slowConsumerCloseBytes: config.slowConsumerCloseBytes,
        trustForwardedFor: config.trustForwardedFor,
      },
      shutdownTimeoutMs: config.shutdownTimeoutMs,
      logLevel: config.logLevel,
    };
  }

  /** The table the repository asks for: every version loaded, stable = config.json's default_version. */
  private repositoryPlan(entries: ModelEntry[], defaultModel: string, keepStable?: TablePlan): TablePlan {
    return {
      defaultModel,
      models: entries.map((entry) => {
        const current = keepStable?.models.find((model) => model.name === entry.name);
        const versions = entry.versions.map((version) => version.version);
        // A stable version chosen through the API survives a rescan unless config.json's default moved.
        const stable =
          current &&
          versions.includes(current.stable) &&
          this.lastDefaults.get(entry.name) === entry.defaultVersion
            ? current.stable
            : entry.defaultVersion;
        const plan: ModelPlan = { name: entry.name, versions, stable };
        // Registry settings survive a rescan while the versions they name still exist.
        if (current?.candidate && versions.includes(current.candidate)) {
          plan.candidate = current.candidate;
          plan.canaryPercent = current.canaryPercent ?? 0;
          plan.shadow = current.shadow ?? false;
        }
        if (current?.previousStable && versions.includes(current.previousStable))
          plan.previousStable = current.previousStable;
        return plan;
      }),
    };
  }

  /** Applies the persisted registry state (aliases, canary, shadow) to the repository's plan; bad entries are skipped. */
  private withSavedState(plan: TablePlan): TablePlan {
    const loaded = loadState(this.options.config.stateDir);
    if (loaded.warning) this.logger.warn(loaded.warning);
    if (!loaded.state) return plan;
    const saved = loaded.state;
    let defaultModel = plan.defaultModel;
    // The saved default model (a `reload --model X`) wins unless the operator changed STREAMINFER_MODEL_NAME
    // since it was saved, or the model is gone.
    if (saved.defaultModel !== undefined && saved.defaultModel !== plan.defaultModel) {
      const configured = this.options.config.defaultModel;
      if (saved.configuredDefaultModel !== undefined && saved.configuredDefaultModel !== configured) {
        this.logger.info(
          { saved: saved.defaultModel, configured },
          'the configured default model changed since the state was saved; using the configured one',
        );
      } else if (!plan.models.some((model) => model.name === saved.defaultModel)) {
        this.logger.warn(
          { saved: saved.defaultModel, configured },
          'saved default model is not in the repository; using the configured one',
        );
      } else defaultModel = saved.defaultModel;
    }
    return {
      ...plan,
      defaultModel,
      models: plan.models.map((model) => {
        const state = saved.models[model.name];
        if (!state) return model;
        const missing = [state.stable, state.candidate, state.previousStable].filter(
          (v) => v !== undefined && !model.versions.includes(v),
        );
        if (missing.length > 0) {
          this.logger.warn(
            { model: model.name, missing },
            'saved registry state names versions that are gone; using the repository defaults for this model',
          );
          return model;
        }
        const next: ModelPlan = {
          ...model,
          stable: state.stable,
          canaryPercent: state.canaryPercent,
          shadow: state.shadow,
        };
        if (state.candidate !== undefined) next.candidate = state.candidate;
        if (state.previousStable !== undefined) next.previousStable = state.previousStable;
        return next;
      }),
    };
  }

  private persist(plan: TablePlan): void {
    const state: RegistryState = {
      defaultModel: plan.defaultModel,
      configuredDefaultModel: this.options.config.defaultModel,
      models: {},
    };
    for (const model of plan.models) {
      const entry: ModelState = {
        stable: model.stable,
        canaryPercent: model.canaryPercent ?? 0,
        shadow: model.shadow ?? false,
      };
      if (model.candidate !== undefined) entry.candidate = model.candidate;
      if (model.previousStable !== undefined) entry.previousStable = model.previousStable;
      state.models[model.name] = entry;
    }
    try {
      saveState(this.options.config.stateDir, state);
    } catch (error) {
      this.logger.error(
        { err: (error as Error).message, dir: this.options.config.stateDir },
        'cannot save registry state',
      );
    }
  }

  private readonly lastDefaults = new Map<string, string>();

  private scan(): ModelEntry[] {
    return scanRepository(path.resolve(this.options.config.modelsDir));
  }

  /** Starts node 0 first (it may pick the port when --port 0), then the others on the same port. */
  async start(): Promise<number> {
    const entries = this.scan();
    if (!entries.some((entry) => entry.name === this.defaultModel)) {
      throw new Error(
        `default model "${this.defaultModel}" (STREAMINFER_MODEL_NAME) is not in ${this.options.config.modelsDir}; found ${entries.map((entry) => entry.name).join(', ')}`,
      );
    }
    const initial: TablePlan = {
      ...this.withSavedState(this.repositoryPlan(entries, this.defaultModel)),
      settings: this.nodeSettingsFor(
        this.options.config,
        this.options.explicitBatchSize,
        this.options.explicitBatchTimeout,
      ),
    };
    this.defaultModel = initial.defaultModel;
    this.coordinator = new ReloadCoordinator(initial, {
      // A node that is (re)starting is not in the barrier: it joins at the table the reload leaves behind.
      nodes: () => this.nodes.filter((handle) => handle.ready).map((handle) => this.channel(handle)),
      now: () => Date.now(),
      onOutcome: (outcome) => this.recordOutcome(outcome),
    });
    for (const entry of entries) this.lastDefaults.set(entry.name, entry.defaultVersion);
    // What the host serves from now on, including a configured default model that won over the saved one.
    this.persist(initial);
    this.port = this.options.config.port;
    // A port picked by the kernel (port 0) is not shared through SO_REUSEPORT, and a node restarted after a
    // graceful drain cannot bind it again (its old connections linger in TIME_WAIT): pick one first, always.
    if (this.port === 0) this.port = await pickFreePort(this.options.config.host);
    await this.startNode(0, 0);
    await Promise.all(
      Array.from({ length: this.options.config.nodes - 1 }, (_, i) => this.startNode(i + 1, 0)),
    );
    return this.port;
  }

  private startNode(index: number, restarts: number): Promise<void> {
    // STREAMINFER_NODE_ARGS passes extra Node flags to node processes (profiling: "--cpu-prof --cpu-prof-dir=/tmp/p").
    const extraArgs = process.env.STREAMINFER_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
    const child = fork(path.join(__dirname, '../node/main.js'), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
      execArgv: [...process.execArgv, ...extraArgs],
    });
    const handle: NodeHandle = { index, child, ready: false, restarts, lastHealth: undefined };
    this.nodes[index] = handle;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`node ${index} did not become ready within ${START_TIMEOUT_MS / 1000}s`)),
        START_TIMEOUT_MS,
      );
      child.on('message', (message: NodeMessage) => {
        switch (message.type) {
          case 'loaded':
            void this.join(handle, message.epoch);
            return;
          case 'listening':
            if (this.port === 0) this.port = message.port;
            return;
          case 'ready':
            handle.lastHealth = message.health;
            clearTimeout(timer);
            resolve();
            return;
          case 'start-failed':
            clearTimeout(timer);
            reject(new Error(`node ${index} failed to start: ${message.error}`));
            return;
          default:
            this.onNodeMessage(handle, message);
        }
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        handle.ready = false;
        this.failWaitersOf(index);
        if (this.nodes[index] !== handle) return;
        if (this.stopping) return;
        reject(new Error(`node ${index} exited during start (code ${code}, signal ${signal})`));
        this.logger.error({ node: index, code, signal }, 'node exited; restarting');
        const delay = Math.min(10000, 250 * 2 ** Math.min(handle.restarts, 6));
        // Not unref'd: with --nodes 1 this timer is all that keeps the supervisor alive until the restart.
        setTimeout(() => {
          if (this.stopping) return;
          this.startNode(index, handle.restarts + 1).then(
            () => this.logger.info({ node: index }, 'node restarted'),
            (error: Error) => this.logger.error({ node: index, err: error.message }, 'node restart failed'),
          );
        }, delay);
      });
      child.send({
        type: 'start',
        options: { ...this.startOptions(index), restarts },
      } satisfies SupervisorMessage);
    });
  }

  /**
   * A node has loaded its start table. If a reload committed meanwhile (it was not in that barrier), it is
   * moved to the current table first; it is told to listen only when no reload is deciding the table (one that
   * is restarting this very node has settled it) and its epoch is the host's, and it joins the barrier in that
   * same turn, so no reload can commit between the check and the join.
   */
  private async join(handle: NodeHandle, loadedEpoch: number): Promise<void> {
    const coordinator = this.coordinator!;
    let epoch = loadedEpoch;
    while (this.nodes[handle.index] === handle && handle.child.connected && !this.stopping) {
      if (coordinator.deciding) {
        await new Promise((resolve) => setTimeout(resolve, JOIN_POLL_MS));
        continue;
      }
      if (epoch === coordinator.epoch) {
        handle.ready = true;
        this.sendTo(handle, { type: 'listen', port: this.port });
        return;
      }
      const plan = coordinator.table;
      const target = coordinator.epoch;
      this.logger.info(
        { node: handle.index, from: epoch, to: target },
        'a reload committed while the node started: syncing it before it listens',
      );
      const answer = await this.step(handle, (requestId) => ({
        type: 'sync',
        requestId,
        plan,
        epoch: target,
      }));
      if (!answer.ok) {
        // It cannot serve the host's table: start it afresh on it (the exit handler restarts it).
        this.logger.error({ node: handle.index, err: answer.error }, 'node could not sync; restarting it');
        handle.child.kill('SIGKILL');
        return;
      }
      epoch = target;
    }
  }

  private onNodeMessage(handle: NodeHandle, message: NodeMessage): void {
    switch (message.type) {
      case 'control-request':
        this.handleControl(message.request).then(
          (response) =>
            this.sendTo(handle, { type: 'control-response', requestId: message.requestId, response }),
          (error: Error) =>
            this.sendTo(handle, {
              type: 'control-response',
              requestId: message.requestId,
              response: jsonError('internal', error.message),
            }),
        );
        return;
      case 'collected':
      case 'command-result': {
        const waiter = this.waiters.get(message.requestId);
        this.waiters.delete(message.requestId);
        waiter?.answer(message);
        return;
      }
      case 'drained':
        this.logger.info(
          { node: message.nodeIndex, answered: message.answered, abandoned: message.abandoned },
          'node drained',
        );
        return;
      default:
        return;
    }
  }

  private sendTo(handle: NodeHandle, message: SupervisorMessage): void {
    if (handle.child.connected) handle.child.send(message);
  }

  /** Asks one node and waits for its answer; undefined on timeout or when the node dies first. */
  private ask(
    handle: NodeHandle,
    build: (requestId: number) => SupervisorMessage,
    timeoutMs = COLLECT_TIMEOUT_MS,
  ): Promise<NodeMessage | undefined> {
    const requestId = this.nextRequestId++;
    return new Promise((resolve) => {
      if (!handle.child.connected) {
        resolve(undefined);
        return;
      }
      const timer = setTimeout(() => {
        this.waiters.delete(requestId);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.set(requestId, {
        node: handle.index,
        answer: (message) => {
          clearTimeout(timer);
          resolve(message);
        },
      });
      handle.child.send(build(requestId));
    });
  }

  /** A node died: everything asked of it is answered "no answer" now, not at the timeout. */
  private failWaitersOf(nodeIndex: number): void {
    for (const [requestId, waiter] of this.waiters) {
      if (waiter.node !== nodeIndex) continue;
      this.waiters.delete(requestId);
      waiter.answer(undefined);
    }
  }

  private async step(
    handle: NodeHandle,
    build: (requestId: number) => SupervisorMessage,
  ): Promise<StepAnswer> {
    if (this.options.testHooks) {
      const injected = this.injectedFailure(handle.index, build(0).type);
      if (injected) return injected;
    }
    // Loading sessions can take a while for big models; a node silent this long counts as failed.
    const answer = await this.ask(handle, build, this.options.config.reloadStepTimeoutMs);
    if (!answer) return { ok: false, error: 'no answer (the node died or timed out)' };
    if (answer.type !== 'command-result') return { ok: false, error: `unexpected answer ${answer.type}` };
    return answer.error === undefined
      ? { ok: answer.ok, data: answer.data }
      : { ok: answer.ok, error: answer.error, data: answer.data };
  }

  /** Test hooks: reload steps scripted to fail (`node:step` → calls to let through first, then calls to fail). */
  private readonly failSteps = new Map<string, { skip: number; times: number }>();

  private injectedFailure(node: number, step: string): StepAnswer | undefined {
    const key = `${node}:${step}`;
    const script = this.failSteps.get(key);
    if (!script) return undefined;
    if (script.skip > 0) {
      script.skip--;
      return undefined;
    }
    if (--script.times <= 0) this.failSteps.delete(key);
    return { ok: false, error: `injected failure of ${step} (test hook)` };
  }

  private channel(handle: NodeHandle): NodeChannel {
    return {
      index: handle.index,
      prepare: (plan) => this.step(handle, (requestId) => ({ type: 'prepare', requestId, plan })),
      commit: (plan, epoch) => this.step(handle, (requestId) => ({ type: 'commit', requestId, plan, epoch })),
      abort: () => this.step(handle, (requestId) => ({ type: 'abort', requestId })),
      release: (plan) => this.step(handle, (requestId) => ({ type: 'release', requestId, plan })),
      roll: (plan, epoch) => this.step(handle, (requestId) => ({ type: 'roll', requestId, plan, epoch })),
      restart: (reason) => this.restartNode(handle, reason),
    };
  }

  /**
   * Replaces a node that cannot reach the host's table: it drains (SIGTERM; SIGKILL once the shutdown grace is
   * over, e.g. when it is wedged) and the crash-restart path brings it up on the host's current table and
   * epoch. Resolves when the replacement is ready, or with the reason it is not.
   */
  restartNode(handle: NodeHandle, reason: string): Promise<StepAnswer> {
    const index = handle.index;
    this.logger.warn({ node: index, reason }, 'restarting node onto the host table');
    const child = handle.child;
    if (child.exitCode === null && child.signalCode === null) {
      const grace = setTimeout(() => child.kill('SIGKILL'), this.options.config.shutdownTimeoutMs + 1000);
      child.once('exit', () => clearTimeout(grace));
      child.kill('SIGTERM');
    }
    const deadline = Date.now() + START_TIMEOUT_MS + this.options.config.shutdownTimeoutMs;
    return new Promise((resolve) => {
      const poll = (): void => {
        const current = this.nodes[index];
        if (current !== undefined && current !== handle && current.ready) {
          // A replacement that started before the host moved came up on the table it was given then.
          if (current.lastHealth?.epoch === this.coordinator!.epoch) resolve({ ok: true });
          else this.restartNode(current, `${reason}; came up at another epoch`).then(resolve);
        } else if (this.stopping) resolve({ ok: false, error: 'the server is shutting down' });
        else if (Date.now() > deadline)
          resolve({ ok: false, error: `node ${index} was not ready again in time` });
        else setTimeout(poll, RESTART_POLL_MS);
      };
      poll();
    });
  }

  private recordOutcome(outcome: ReloadOutcome): void {
    const pending = this.pendingConfig;
    if (pending) {
      outcome.config = {
        applied: outcome.result === 'failed' ? [] : pending.applied,
        restartRequired: pending.restartRequired,
      };
      if (outcome.result !== 'failed') {
        // Supervisor-side settings (admin token, log level, step timeout) and what restarted nodes get.
        this.options.config = pending.config;
        this.options.explicitBatchSize = pending.explicitSize;
        this.options.explicitBatchTimeout = pending.explicitTimeout;
        this.logger.level = pending.config.logLevel;
      }
    }
    this.reloadsTotal.inc({ result: outcome.result, strategy: outcome.strategy });
    this.reloadDuration.observe({ strategy: outcome.strategy }, outcome.durationMs / 1000);
    if (outcome.result === 'committed') {
      this.defaultModel = outcome.defaultModel.to;
      this.persist(this.coordinator!.table);
    }
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

  /**
   * Builds the next table for a reload request and runs it. `model` + `version`: make that version stable
   * (loading it if needed). `model` alone: make it the default model. Neither: re-read the repository.
   */
  async reload(
    request: {
      model?: string;
      version?: string;
      strategy?: ReloadStrategy;
      defaultModel?: string;
      settings?: NodeSettings;
    },
    reason: string,
  ): Promise<ReloadOutcome> {
    const coordinator = this.coordinator!;
    const current = coordinator.table;
    const strategy = request.strategy ?? 'atomic';
    let plan: TablePlan;
    if (request.model !== undefined && request.version !== undefined) {
      const entry = this.readEntry(request.model);
      if (!entry.versions.some((version) => version.version === request.version)) {
        throw new ReloadInputError(
          'unknown_version',
          `model "${request.model}" has no version "${request.version}" in the repository; found ${entry.versions.map((v) => v.version).join(', ')}`,
        );
      }
      const version = request.version;
      plan = {
        defaultModel: current.defaultModel,
        models: current.models.some((model) => model.name === entry.name)
          ? current.models.map((model) =>
              model.name !== entry.name
                ? model
                : strategy === 'rolling'
                  ? // Rolling swaps in place: one version on the device, so nothing else stays loaded.
                    { name: model.name, versions: [version], stable: version }
                  : {
                      ...model,
                      versions: [...new Set([...model.versions, version])],
                      stable: version,
                      ...(model.stable !== version ? { previousStable: model.stable } : {}),
                    },
            )
          : [...current.models, { name: entry.name, versions: [version], stable: version }],
      };
    } else if (request.model !== undefined) {
      if (!current.models.some((model) => model.name === request.model)) {
        throw new ReloadInputError(
          'unknown_model',
          `unknown model "${request.model}"; available: ${current.models.map((m) => m.name).join(', ')}`,
        );
      }
      plan = { ...current, defaultModel: request.model };
    } else {
      const entries = this.scan();
      plan = this.repositoryPlan(entries, request.defaultModel ?? current.defaultModel, current);
      if (!plan.models.some((model) => model.name === plan.defaultModel)) {
        throw new ReloadInputError(
          'unknown_model',
          `default model "${plan.defaultModel}" is not in the repository`,
        );
      }
      for (const entry of entries) this.lastDefaults.set(entry.name, entry.defaultVersion);
    }
    return coordinator.reload(
      { ...plan, settings: request.settings ?? current.settings ?? plan.settings },
      strategy,
      reason,
    );
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
    // Refused before anything is staged: the pending configuration belongs to the reload that runs next.
    const running = this.coordinator!.current;
    if (running) throw new ReloadBusyError(running);
    const sources = this.options.sources ?? { flags: {}, env: {} };
    let resolved: ReturnType<typeof resolveConfigDetailed>;
    try {
      resolved = resolveConfigDetailed({
        flags: sources.flags,
        env: sources.env,
        ...(file !== undefined ? { file } : {}),
        ...(filePath !== undefined ? { filePath } : {}),
      });
    } catch (error) {
      const message = error instanceof ConfigError ? error.message : (error as Error).message;
      this.logger.error({ reason, err: message }, 'configuration rejected; still serving the previous one');
      throw new ReloadInputError('bad_request', message);
    }
    for (const warning of resolved.warnings) this.logger.warn({ reason }, warning);
    const change = planConfigChange(this.options.config, resolved.config, this.startedConfig);
    const explicitSize = resolved.origins.batchSize !== 'default';
    const explicitTimeout = resolved.origins.batchTimeoutMs !== 'default';
    if (change.restartRequired.length > 0)
      this.logger.warn(
        { reason, restart_required: change.restartRequired },
        'configuration reload: these settings take effect only after a restart',
      );
    this.pendingConfig = {
      config: change.next,
      explicitSize,
      explicitTimeout,
      applied: change.applied,
      restartRequired: change.restartRequired,
    };
    try {
      const request: { defaultModel?: string; settings: NodeSettings; strategy?: ReloadStrategy } = {
        settings: this.nodeSettingsFor(change.next, explicitSize, explicitTimeout),
      };
      // The configured default model applies when the configuration changed it; otherwise the one being
      // served stays (it may come from `reload --model`).
      if (change.applied.includes('defaultModel')) request.defaultModel = change.next.defaultModel;
      if (strategy) request.strategy = strategy;
      return await this.reload(request, reason);
    } finally {
      this.pendingConfig = undefined;
    }
  }

  /** reloadConfig as the API answers it. */
  async reloadConfigResponse(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ControlResponse> {
    try {
      return outcomeResponse(await this.reloadConfig(file, filePath, reason, strategy));
    } catch (error) {
      return reloadErrorResponse(error);
    }
  }

  private readEntry(name: string): ModelEntry {
    try {
      return readModel(path.join(path.resolve(this.options.config.modelsDir), name), name);
    } catch (error) {
      const current = this.coordinator!.table.models.map((m) => m.name);
      if (!current.includes(name))
        throw new ReloadInputError(
          'unknown_model',
          `unknown model "${name}"; available: ${current.join(', ')}`,
        );
      throw new ReloadInputError('bad_request', (error as Error).message);
    }
  }

  get lastReload(): ReloadOutcome | undefined {
    return this.coordinator?.last;
  }

  private async collect(what: 'metrics' | 'health'): Promise<Array<NodeMessage | undefined>> {
    this.fanOutsTotal.inc({ what });
    return Promise.all(
      this.nodes.map((handle) => this.ask(handle, (requestId) => ({ type: 'collect', requestId, what }))),
    );
  }

  /** The host's health; concurrent callers share one fan-out to the nodes (see Coalescer). */
  healthReport(): Promise<{ ready: boolean; body: Record<string, unknown> }> {
    return this.healthScrapes.get();
  }

  private async buildHealthReport(): Promise<{ ready: boolean; body: Record<string, unknown> }> {
    const answers = await this.collect('health');
    const nodes = answers.map((answer, index) => {
      const health = answer?.type === 'collected' ? answer.health : undefined;
      if (health) this.nodes[index]!.lastHealth = health;
      return health;
    });
    const ready =
      !this.stopping &&
      nodes.length === this.options.config.nodes &&
      nodes.every(
        (node) => node !== undefined && node.state === 'ready' && node.workersReady === node.workers,
      );
    const first = nodes.find((node) => node !== undefined);
    const body = {
      status: this.stopping ? 'draining' : ready ? 'ok' : 'starting',
      ready,
      uptime_s: Math.round((Date.now() - this.startedAt) / 1000),
      default_model: first?.defaultModel ?? this.defaultModel,
      device: this.options.config.device,
      epoch: first?.epoch ?? 0,
      nodes: nodes.map((node, index) =>
        node
          ? {
              node: index,
              pid: node.pid,
              state: node.state,
              workers: node.workers,
              workers_ready: node.workersReady,
              inflight: node.inflight,
              ws_connections: node.wsConnections,
            }
          : { node: index, state: 'unreachable' },
      ),
      models: (first?.models ?? []).map((model) => ({
        name: model.name,
        default_version: model.defaultVersion,
        aliases: model.aliases,
        canary_percent: model.canaryPercent,
        shadow: model.shadow,
        versions: model.versions.map((version) => ({
          version: version.version,
          execution_provider: version.executionProvider,
          loaded_workers: version.loadedWorkers,
          ...(version.fallbackReason ? { fallback_reason: version.fallbackReason } : {}),
        })),
      })),
    };
    return { ready, body };
  }

  private metricsText(): Promise<string> {
    return this.metricsScrapes.get();
  }

  private async buildMetricsText(): Promise<string> {
    const answers = await this.collect('metrics');
    const perProcess: MetricJson[][] = [];
    for (const answer of answers)
      if (answer?.type === 'collected' && answer.metrics) perProcess.push(answer.metrics);
    perProcess.push((await this.registry.getMetricsAsJSON()) as unknown as MetricJson[]);
    return aggregateToText(perProcess);
  }

  /**
   * Registry changes: each builds the next table from the current one and goes through the epoch barrier
   * (loading a new candidate beside the stable one first). Rollback repoints stable at the previous stable,
   * which stayed loaded, so it is a commit without loading.
   */
  async registryResponse(
    name: string,
    action: RegistryAction,
    body: Record<string, unknown>,
  ): Promise<ControlResponse> {
    const current = this.coordinator!.table;
    const model = current.models.find((candidate) => candidate.name === name);
    if (!model)
      return jsonError(
        'unknown_model',
        `unknown model "${name}"; available: ${current.models.map((m) => m.name).join(', ')}`,
      );
    let next: ModelPlan;
    switch (action) {
      case 'candidate': {
        const version = typeof body.version === 'number' ? String(body.version) : body.version;
        if (typeof version !== 'string' || version.length === 0)
          return jsonError('bad_request', '"version" must name a version');
        let entry: ModelEntry;
        try {
          entry = this.readEntry(name);
        } catch (error) {
          return jsonError('bad_request', (error as Error).message);
        }
        if (!entry.versions.some((v) => v.version === version)) {
          return jsonError(
            'unknown_version',
            `model "${name}" has no version "${version}"; found ${entry.versions.map((v) => v.version).join(', ')}`,
          );
        }
        next = {
          ...model,
          versions: [...new Set([...model.versions, version])],
          candidate: version,
          canaryPercent: 0,
          shadow: false,
        };
        break;
      }
      case 'canary': {
        const percent = body.percent;
        if (typeof percent !== 'number' || !Number.isFinite(percent) || percent < 0 || percent > 100) {
          return jsonError('bad_request', '"percent" must be a number from 0 to 100');
        }
        if (model.candidate === undefined)
          return jsonError('bad_request', `model "${name}" has no candidate: deploy one first`);
        next = { ...model, canaryPercent: percent };
        break;
      }
      case 'shadow': {
        if (typeof body.enabled !== 'boolean')
          return jsonError('bad_request', '"enabled" must be true or false');
        if (body.enabled && model.candidate === undefined)
          return jsonError('bad_request', `model "${name}" has no candidate: deploy one first`);
        next = { ...model, shadow: body.enabled };
        break;
      }
      case 'promote': {
        if (model.candidate === undefined)
          return jsonError('bad_request', `model "${name}" has no candidate to promote`);
        next = {
          name,
          versions: model.versions,
          stable: model.candidate,
          previousStable: model.stable,
          canaryPercent: 0,
          shadow: false,
        };
        break;
      }
      case 'rollback': {
        if (model.previousStable === undefined)
          return jsonError('bad_request', `model "${name}" has no previous stable version to roll back to`);
        next = {
          ...model,
          stable: model.previousStable,
          previousStable: model.stable,
          versions: [...new Set([...model.versions, model.previousStable])],
        };
        if (next.candidate === next.stable) {
          next.candidate = undefined;
          next.canaryPercent = 0;
          next.shadow = false;
        }
        break;
      }
    }
    if (next.candidate === undefined) {
      delete next.candidate;
      next.canaryPercent = 0;
      next.shadow = false;
    }
    const plan: TablePlan = { ...current, models: current.models.map((m) => (m.name === name ? next : m)) };
    try {
      return outcomeResponse(await this.coordinator!.reload(plan, 'atomic', `${action} ${name}`), {
        model: modelView(next),
      });
    } catch (error) {
      return reloadErrorResponse(error);
    }
  }

  /** Runs a reload and turns its outcome into the API's answer. */
  async reloadResponse(
    request: { model?: string; version?: string; strategy?: ReloadStrategy; defaultModel?: string },
    reason: string,
  ): Promise<ControlResponse> {
    try {
      return outcomeResponse(await this.reload(request, reason));
    } catch (error) {
      return reloadErrorResponse(error);
    }
  }

  async handleControl(request: ControlRequest): Promise<ControlResponse> {
    const { method, path: url } = request;
    const probe = url === '/health' || url === '/v2/health/ready' || url === '/v2/health/live';
    if (probe && method !== 'GET' && method !== 'HEAD')
      return jsonError('method_not_allowed', `use GET ${url}`);
    if (url === '/health' || url === '/v2/health/ready') {
      const report = await this.healthReport();
      return json(report.ready ? 200 : 503, url === '/health' ? report.body : { ready: report.ready });
    }
    if (url === '/v2/health/live') return json(200, { live: true });
    if (url === '/metrics') {
      if (method !== 'GET') return jsonError('method_not_allowed', 'use GET /metrics');
      return { status: 200, contentType: PROMETHEUS_CONTENT_TYPE, body: await this.metricsText() };
    }
    if (url.startsWith('/api/')) {
      const auth = authorizeAdmin(
        this.options.config.adminToken,
        request.remoteAddress,
        request.authorization,
        { forwardedFor: request.forwardedFor, forwarded: request.forwarded },
      );
      if (!auth.ok) return jsonError('unauthorized', auth.reason);
      return this.handleAdmin(request);
    }
    return jsonError('not_found', `no route for ${method} ${url}`);
  }

  private async handleAdmin(request: ControlRequest): Promise<ControlResponse> {
    const { method, path: url } = request;
    let body: Record<string, unknown> = {};
    if (request.body.trim().length > 0) {
      try {
        const parsed: unknown = JSON.parse(request.body);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
          return jsonError('bad_request', 'body must be a JSON object');
        body = parsed as Record<string, unknown>;
      } catch {
        return jsonError('bad_request', 'malformed JSON body');
      }
    }
    if (url === '/api/reload') {
      if (method === 'GET') return json(200, this.lastReload ? outcomeBody(this.lastReload) : { id: 0 });
      if (method !== 'POST')
        return jsonError('method_not_allowed', 'use POST /api/reload (GET shows the last outcome)');
      for (const field of ['model', 'version', 'strategy'] as const) {
        const value = body[field];
        if (value !== undefined && (typeof value !== 'string' || value.length === 0))
          return jsonError('bad_request', `"${field}" must be a non-empty string`);
      }
      if (body.version !== undefined && body.model === undefined)
        return jsonError('bad_request', '"version" needs "model"');
      if (body.config !== undefined) {
        if (typeof body.config !== 'object' || body.config === null || Array.isArray(body.config))
          return jsonError(
            'bad_request',
            '"config" must be an object of settings (a config file\'s content)',
          );
        if (body.model !== undefined)
          return jsonError('bad_request', '"config" re-reads everything; it takes no "model" or "version"');
      }
      if (body.strategy !== undefined && body.strategy !== 'atomic' && body.strategy !== 'rolling') {
        return jsonError('bad_request', '"strategy" must be "atomic" or "rolling"');
      }
      const request: { model?: string; version?: string; strategy?: ReloadStrategy } = {};
      if (typeof body.model === 'string') request.model = body.model;
      if (typeof body.version === 'string') request.version = body.version;
      if (typeof body.strategy === 'string') request.strategy = body.strategy as ReloadStrategy;
      if (body.config !== undefined)
        return this.reloadConfigResponse(
          body.config,
          'sent with POST /api/reload',
          'POST /api/reload (config)',
          request.strategy,
        );
      return this.reloadResponse(request, 'POST /api/reload');
    }
    const registry = /^\/api\/models\/([^/]+)\/(candidate|canary|shadow|promote|rollback)$/.exec(url);
    if (registry) {
      if (method !== 'POST') return jsonError('method_not_allowed', `use POST ${url}`);
      const model = decodePathSegment(registry[1]);
      if (model === undefined)
        return jsonError('bad_request', 'malformed percent-escape in the model name of the path');
      return this.registryResponse(model, registry[2] as RegistryAction, body);
    }
    if (url === '/api/models' && method === 'GET') {
      const report = await this.healthReport();
      return json(200, { default_model: report.body.default_model, models: report.body.models });
    }
    if (url === '/api/debug/crash-worker' && method === 'POST') {
      if (!this.options.testHooks) return jsonError('not_found', 'test hooks are disabled');
      const node = this.nodes[Number(body.node ?? 0)];
      if (!node) return jsonError('bad_request', 'no such node');
      const answer = await this.ask(node, (requestId) => ({
        type: 'crash-worker',
        requestId,
        workerIndex: Number(body.worker ?? 0),
      }));
      return answer?.type === 'command-result' && answer.ok
        ? json(200, { ok: true })
        : jsonError('bad_request', 'no such worker');
    }
    if (url === '/api/debug/fail-step' && method === 'POST') {
      if (!this.options.testHooks) return jsonError('not_found', 'test hooks are disabled');
      const steps = ['prepare', 'commit', 'abort', 'release', 'roll'];
      if (!Number.isInteger(body.node) || typeof body.step !== 'string' || !steps.includes(body.step))
        return jsonError('bad_request', `"node" must be a node index and "step" one of ${steps.join(', ')}`);
      this.failSteps.set(`${body.node}:${body.step}`, {
        skip: Number(body.skip ?? 0),
        times: Number(body.times ?? 1),
      });
      return json(200, { ok: true });
    }
    return jsonError('not_found', `no admin route for ${method} ${url}`);
  }

  nodePids(): number[] {
    return this.nodes.map((handle) => handle.child.pid ?? -1);
  }

  /** SIGTERM: every node stops accepting, answers what it admitted, exits; then the supervisor exits. */
  async shutdown(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.logger.info('shutting down: draining nodes');
    const grace = this.options.config.shutdownTimeoutMs + 10000;
    await Promise.all(
      this.nodes.map(
        (handle) =>
          new Promise<void>((resolve) => {
            if (handle.child.exitCode !== null || handle.child.signalCode !== null) {
              resolve();
              return;
            }
            const timer = setTimeout(() => {
              this.logger.error({ node: handle.index }, 'node did not drain in time; killing it');
              handle.child.kill('SIGKILL');
            }, grace);
            handle.child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            this.sendTo(handle, { type: 'shutdown' });
          }),
      ),
    );
    this.logger.info('all nodes stopped');
  }
}

function pickFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** A reload's outcome as the API answers it: 200, or 500 reload_failed with the reason (nothing changed). */
function outcomeResponse(outcome: ReloadOutcome, extra: Record<string, unknown> = {}): ControlResponse {
  if (outcome.result === 'failed') {
    return json(500, {
      ...outcomeBody(outcome),
      type: 'error',
      code: 'reload_failed',
      message: outcome.error,
    });
  }
  return json(200, { ...outcomeBody(outcome), ...extra });
}

function reloadErrorResponse(error: unknown): ControlResponse {
  if (error instanceof ReloadBusyError) return jsonError('reload_in_progress', error.message);
  if (error instanceof ReloadInputError) return jsonError(error.code, error.message);
  return jsonError('internal', (error as Error).message);
}

type RegistryAction = 'candidate' | 'canary' | 'shadow' | 'promote' | 'rollback';

function modelView(model: ModelPlan): Record<string, unknown> {
  return {
    name: model.name,
    stable: model.stable,
    candidate: model.candidate ?? null,
    previous_stable: model.previousStable ?? null,
    canary_percent: model.canaryPercent ?? 0,
    shadow: model.shadow ?? false,
    loaded_versions: model.versions,
  };
}

class ReloadInputError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ReloadInputError';
  }
}

function outcomeBody(outcome: ReloadOutcome): Record<string, unknown> {
  return {
    ok: outcome.result !== 'failed',
    id: outcome.id,
    result: outcome.result,
    strategy: outcome.strategy,
    reason: outcome.reason,
    epoch: outcome.epoch,
    epoch_before: outcome.epochBefore,
    changes: outcome.changes,
    default_model: outcome.defaultModel.to,
    previous: outcome.defaultModel.from,
    duration_ms: outcome.durationMs,
    started_at: outcome.startedAt,
    ...(outcome.error ? { error: outcome.error } : {}),
    ...(outcome.warnings ? { warnings: outcome.warnings } : {}),
    ...(outcome.config
      ? { settings_applied: outcome.config.applied, restart_required: outcome.config.restartRequired }
      : {}),
    nodes: outcome.nodes,
  };
}

function json(status: number, body: unknown): ControlResponse {
  return { status, contentType: 'application/json', body: JSON.stringify(body) };
}

function jsonError(code: ErrorCode, message: string): ControlResponse {
  return {
    status: httpStatusOf(code),
    contentType: 'application/json',
    body: encodeError(null, code, message),
  };
}
