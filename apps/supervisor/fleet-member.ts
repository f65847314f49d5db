/**
 * This host as a member of a fleet (`--cluster`): it answers the fleet coordinator's barrier steps with its own
 * node barrier (prepare held until the fleet commits or aborts), follows the fleet's registry record (a record
 * ahead of the host is caught up to; a host in doubt about a reload is fenced until it learns the outcome),
 * heartbeats what it serves, and coordinates the fleet reloads its own admin API is asked for (one coordinator
 * at a time, by a KV lease). The NATS side is apps/supervisor/cluster; the cross-host barrier is fleet-reload.ts.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { ProtocolError } from '../../libs/protocol';
import { isRepositoryName, type TablePlan } from '../../libs/registry';
import {
  type ClusterConnection,
  ClusterError,
  type CoordinatorLease,
  type FleetRecord,
  type FleetTable,
  type HostBeat,
  type HostBoard,
  type HostStepClient,
  type HostStepRequest,
  type HostStepServer,
  type ModelArtifacts,
  type RegistryStore,
  type RegistryWatch,
  RolloutRecords,
  serveHostSteps,
} from './cluster';
import type { ReloadCoordinator, ReloadStrategy, StepAnswer } from './coordinator';
import {
  FleetReloadCoordinator,
  type FleetReloadOutcome,
  type HostChannel,
  planHostCatchUp,
} from './fleet-reload';

/** What the member needs of its host (the supervisor). */
export interface FleetHost {
  /** The host's own barrier over its nodes. */
  coordinator(): ReloadCoordinator;
  /** The fleet's table as this host serves it: with this host's own live settings. */
  hostPlan(table: FleetTable): TablePlan;
  /** Stop (reason) or resume (null) taking traffic. */
  fence(reason: string | null): void;
  /** What the heartbeat says of the host's nodes and load. */
  load(): { nodes: number; nodesReady: number; requestsPerSecond: number };
}

export interface FleetMemberOptions {
  fleet: string;
  hostId: string;
  address: string;
  modelsDir: string;
  connection: ClusterConnection;
  store: RegistryStore;
  board: HostBoard;
  lease: CoordinatorLease;
  steps: HostStepClient;
  artifacts: ModelArtifacts;
  host: FleetHost;
  logger: Logger;
  /**
   * A prepared host that hears neither COMMIT nor ABORT this long is in doubt: it fences itself. It must exceed
   * the coordinator's step timeout (the longest a coordinator waits for the slowest PREPARE before it decides).
   */
  commitTimeoutMs?: number;
  /** STREAMINFER_TEST_FLEET_COMMIT_DELAY_MS: a coordinator holds its commit point that long (tests only). */
  testHooks?: boolean;
  /** The supervisor's metrics registry: the fleet's series join it. */
  registry?: Registry;
  heartbeatMs?: number;
  now?: () => number;
}

/** The fleet as GET /api/fleet answers it. */
export interface FleetView {
  fleet: string;
  host: string;
  epoch: number;
  revision: number;
  record: FleetRecord;
  hosts: HostBeat[];
  coordinator: { host: string; reloadId: string } | null;
}

const RESOLVE_POLL_MS = 1000;
const MAX_RETRY_MS = 30_000;

export class FleetMember {
  private readonly commitTimeoutMs: number;
  private readonly heartbeatMs: number;
  private readonly now: () => number;
  private readonly startedAt = new Date().toISOString();
  private readonly reloads: FleetReloadCoordinator;
  /** Member actions on the host's barrier run one at a time (a step, a catch-up, an in-doubt resolution). */
  private queue: Promise<unknown> = Promise.resolve();
  /** The reload this host prepared and holds, until the fleet commits or aborts it. */
  private inDoubt: { reloadId: string; epochBefore: number; timer: NodeJS.Timeout } | undefined;
  private fenceReason: string | undefined;
  private latest: { record: FleetRecord; revision: number } | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  /** Catch-ups that failed in a row: the next try waits longer. */
  private failedCatchUps = 0;
  private stopped = false;
  private server: HostStepServer | undefined;
  private readonly metrics: FleetMetrics | undefined;
  private watcher: RegistryWatch | undefined;
  private offAvailability: (() => void) | undefined;

  constructor(private readonly options: FleetMemberOptions) {
    this.commitTimeoutMs = options.commitTimeoutMs ?? 10_000;
    this.heartbeatMs = options.heartbeatMs ?? 2_500;
    this.now = options.now ?? Date.now;
    if (options.registry) this.metrics = fleetMetrics(options.registry, this);
    this.reloads = new FleetReloadCoordinator({
      hosts: () => this.channels(),
      commitPoint: (record, revision) => this.commitPoint(record, revision),
      now: this.now,
      newId: () => randomUUID(),
      host: options.hostId,
    });
  }

  get fleet(): string {
    return this.options.fleet;
  }

  get hostId(): string {
    return this.options.hostId;
  }

  get available(): boolean {
    return this.options.connection.available;
  }

  get fenced(): string | undefined {
    return this.fenceReason;
  }

  /** The fleet epoch of the last registry record this host read (watch, catch-up or its own change). */
  get recordEpoch(): number | undefined {
    return this.latest?.record.epoch;
  }

  /** Starts answering steps, heartbeating and following the record (the host's nodes are up by now). */
  async start(): Promise<void> {
    const { connection, board, store, logger } = this.options;
    this.server = serveHostSteps(connection, (request) => this.step(request));
    board.start(() => this.beat(), this.heartbeatMs);
    this.watcher = store.watch(
      (record, revision) => {
        this.latest = { record, revision };
        void this.serialized(() => this.reconcile());
      },
      (error) => logger.warn({ err: (error as Error).message }, 'fleet: registry watch'),
    );
    // After a reconnect the record may have moved without the watch having said so yet; in doubt, ask.
    this.offAvailability = connection.onAvailability((available) => {
      if (available) logger.info('fleet: NATS reachable again');
      else logger.warn('fleet: NATS unreachable; serving the last committed table, admin writes refused');
      if (available) void this.serialized(() => this.resolveFromStore());
    });
  }

  /** Leaves the fleet: no more steps, beats or watching; the heartbeat is removed so the host drops out at once. */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.inDoubt) clearTimeout(this.inDoubt.timer);
    this.server?.stop();
    this.watcher?.stop();
    this.offAvailability?.();
    this.options.board.stop();
    if (this.available) await this.options.board.remove().catch(() => undefined);
    await this.options.connection.close().catch(() => undefined);
  }

  /**
   * A fleet change asked of this host's admin API: it coordinates it (or answers 409 conflict when another
   * host does, 503 cluster_unavailable without NATS). `next` maps the committed table to the next one.
   */
  async change(
    next: (table: FleetTable) => FleetTable,
    options: { strategy: ReloadStrategy; reason: string; ifRevision?: number; force?: boolean },
  ): Promise<FleetReloadOutcome> {
    this.requireCluster();
    const reloadId = randomUUID();
    const held = await this.clusterCall(() =>
      this.options.lease.acquire({ host: this.options.hostId, reloadId }),
    );
    if (!held.held)
      throw new FleetConflictError(
        `fleet change ${held.holder.reloadId} by host ${held.holder.host} is in progress; try again when it has finished`,
        this.latest,
      );
    try {
      const base = await this.clusterCall(() => this.options.store.read());
      if (!base) throw new ProtocolError('cluster_unavailable', 'the fleet has no registry record');
      this.latest = base;
      if (options.ifRevision !== undefined && options.ifRevision !== base.revision)
        throw new FleetConflictError(
          `the registry is at revision ${base.revision}, not ${options.ifRevision}: another change came first`,
          base,
        );
      const outcome = await this.reloads.reload({
        id: reloadId,
        table: next(base.record.table),
        strategy: options.strategy,
        reason: options.reason,
        base,
        force: options.force === true,
      });
      this.metrics?.reloads.inc({ result: outcome.result, strategy: outcome.strategy });
      if (outcome.result === 'conflict')
        throw new FleetConflictError(outcome.error ?? 'conflict', this.latest);
      return outcome;
    } finally {
      await this.options.lease.release().catch(() => undefined);
    }
  }

  /** A version pushed to the fleet but missing here is fetched and verified (before a plan names it). */
  async fetchVersion(model: string, version: string): Promise<void> {
    // A name that cannot be a version is the plan's to refuse (unknown_version), not the store's.
    if (!this.available || !isRepositoryName(model) || !isRepositoryName(version)) return;
    await this.clusterCall(() => fetchPushed(this.options.artifacts, this.options.modelsDir, model, version));
  }

  /** The fleet's rollout records (KV `rollout.<model>` in the registry bucket, by CAS). */
  openRollouts(): Promise<RolloutRecords> {
    return RolloutRecords.open(this.options.connection);
  }

  /** GET /api/fleet. */
  async view(): Promise<FleetView> {
    this.requireCluster();
    const [base, hosts, holder] = await this.clusterCall(() =>
      Promise.all([this.options.store.read(), this.options.board.list(), this.options.lease.current()]),
    );
    if (!base) throw new ProtocolError('cluster_unavailable', 'the fleet has no registry record');
    return {
      fleet: this.options.fleet,
      host: this.options.hostId,
      epoch: base.record.epoch,
      revision: base.revision,
      record: base.record,
      hosts,
      coordinator: holder ? { host: holder.host, reloadId: holder.reloadId } : null,
    };
  }

  private requireCluster(): void {
    if (!this.available)
      throw new ProtocolError(
        'cluster_unavailable',
        `NATS is not reachable: fleet "${this.options.fleet}" cannot be changed now; this host keeps serving epoch ${this.options.host.coordinator().epoch}`,
      );
  }

  /** A cluster call whose NATS failure is the API's 503 cluster_unavailable. */
  private async clusterCall<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof ClusterError)) throw error;
      if (error.code === 'cluster_unavailable') throw new ProtocolError('cluster_unavailable', error.message);
      // This host coordinates another change already (its lease is held here): the same answer as elsewhere.
      if (error.code === 'conflict') throw new FleetConflictError(error.message, this.latest);
      // A pushed file that does not match its checksum, or its signature, is the fleet's fault, not the caller's;
      // a pull cache that cannot be written is this host's.
      if (
        error.code === 'checksum_mismatch' ||
        error.code === 'artifact_refused' ||
        error.code === 'artifact_unwritable'
      )
        throw new ProtocolError('reload_failed', error.message);
      throw new ProtocolError('bad_request', error.message);
    }
  }

  private async commitPoint(
    record: FleetRecord,
    revision: number,
  ): Promise<{ ok: true; revision: number } | { ok: false; conflict: boolean; error: string }> {
    const holdMs = this.options.testHooks
      ? Number(process.env.STREAMINFER_TEST_FLEET_COMMIT_DELAY_MS ?? 0)
      : 0;
    if (holdMs > 0) {
      this.options.logger.info({ ms: holdMs }, 'test hook: holding the commit point');
      await new Promise((resolve) => setTimeout(resolve, holdMs));
    }
    try {
      const written = await this.options.store.commit(record, revision);
      return { ok: true, revision: written };
    } catch (error) {
      const conflict = error instanceof ClusterError && error.code === 'conflict';
      return { ok: false, conflict, error: (error as Error).message };
    }
  }

  /** The live hosts as the fleet coordinator talks to them: this one directly, the others over NATS. */
  private async channels(): Promise<HostChannel[]> {
    const beats = await this.options.board.list();
    const ids = new Set(beats.map((beat) => beat.host));
    ids.add(this.options.hostId);
    return [...ids].sort().map((host) => this.channel(host));
  }

  private channel(host: string): HostChannel {
    const call =
      host === this.options.hostId
        ? (request: HostStepRequest) => this.step(request)
        : (request: HostStepRequest) => this.options.steps.call(host, request);
    return {
      host,
      prepare: (table, reloadId) => call({ step: 'prepare', reloadId, plan: table }),
      commit: (table, epoch, reloadId) => call({ step: 'commit', reloadId, plan: table, epoch }),
      abort: (reloadId) => call({ step: 'abort', reloadId }),
      release: (table, reloadId) => call({ step: 'release', reloadId, plan: table }),
      roll: (table, epoch, reloadId) => call({ step: 'roll', reloadId, plan: table, epoch }),
    };
  }

  /** One barrier step from the fleet coordinator. Never throws: a failure is `{ok: false}`. */
  step(request: HostStepRequest): Promise<StepAnswer> {
    return this.serialized(async () => {
      try {
        switch (request.step) {
          case 'prepare':
            return await this.prepare(request.plan!, request.reloadId);
          case 'commit':
            return await this.commit(request.plan!, request.epoch!, request.reloadId);
          case 'abort':
            return await this.abort(request.reloadId, 'the fleet aborted the reload');
          case 'release':
            // The host's own barrier released what it no longer serves when it committed.
            return { ok: true };
          case 'roll':
            return await this.roll(request.plan!, request.epoch!);
        }
      } catch (error) {
        return { ok: false, error: (error as Error).message };
      }
    }) as Promise<StepAnswer>;
  }

  private async prepare(table: FleetTable, reloadId: string): Promise<StepAnswer> {
    if (this.inDoubt) return { ok: false, error: `host still holds fleet reload ${this.inDoubt.reloadId}` };
    const coordinator = this.options.host.coordinator();
    if (coordinator.busy) return { ok: false, error: 'a reload is in progress on this host' };
    // Every version is here and is the one pushed to the fleet before any node loads it.
    await ensureArtifacts(this.options.artifacts, this.options.modelsDir, table, this.options.logger);
    const answer = await coordinator.prepareHeld(
      this.options.host.hostPlan(table),
      `fleet reload ${reloadId}`,
    );
    if (!answer.ok) return answer;
    const epochBefore = coordinator.epoch;
    const timer = setTimeout(() => this.enterDoubt(reloadId), this.commitTimeoutMs);
    timer.unref();
    this.inDoubt = { reloadId, epochBefore, timer };
    return { ok: true, data: { host: this.options.hostId, epoch: epochBefore } };
  }

  private async commit(table: FleetTable, epoch: number, reloadId: string): Promise<StepAnswer> {
    const coordinator = this.options.host.coordinator();
    if (this.inDoubt?.reloadId === reloadId) {
      await this.settleHeld('commit', epoch);
      return { ok: true, data: { epoch } };
    }
    // Already committed from the record (the watch came first), or never prepared: catch up.
    if (coordinator.epoch >= epoch) return { ok: true, data: { epoch: coordinator.epoch } };
    await this.converge(table, epoch, `fleet commit ${reloadId}`);
    return { ok: true, data: { epoch } };
  }

  private async abort(reloadId: string, why: string): Promise<StepAnswer> {
    if (this.inDoubt?.reloadId === reloadId) await this.settleHeld('abort', why);
    return { ok: true };
  }

  private async roll(table: FleetTable, epoch: number): Promise<StepAnswer> {
    const coordinator = this.options.host.coordinator();
    if (coordinator.epoch >= epoch) return { ok: true, data: { epoch: coordinator.epoch } };
    await ensureArtifacts(this.options.artifacts, this.options.modelsDir, table, this.options.logger);
    const outcome = await coordinator.reload(
      this.options.host.hostPlan(table),
      'atomic',
      `fleet roll to epoch ${epoch}`,
      epoch,
    );
    if (outcome.result === 'failed') return { ok: false, error: outcome.error ?? 'roll failed' };
    this.unfence();
    return { ok: true, data: { epoch } };
  }

  private async settleHeld(how: 'commit', epoch: number): Promise<void>;
  private async settleHeld(how: 'abort', why: string): Promise<void>;
  private async settleHeld(how: 'commit' | 'abort', arg: number | string): Promise<void> {
    const held = this.inDoubt!;
    clearTimeout(held.timer);
    this.inDoubt = undefined;
    const coordinator = this.options.host.coordinator();
    if (how === 'commit') await coordinator.commitHeld(arg as number);
    else await coordinator.abortHeld(arg as string);
    this.unfence();
  }

  /** PREPAREd, then silence: the fleet may have committed without this host. Stop serving until it knows. */
  private enterDoubt(reloadId: string): void {
    if (this.inDoubt?.reloadId !== reloadId) return;
    this.metrics?.inDoubt.inc();
    this.setFence(
      `in doubt about fleet reload ${reloadId}: no COMMIT or ABORT within ${this.commitTimeoutMs} ms`,
    );
    void this.serialized(() => this.resolveFromStore());
  }

  /**
   * Reads the record (and the lease) to settle a held reload or catch up. A host fenced in doubt asks again
   * every RESOLVE_POLL_MS until it knows (NATS down included).
   */
  private async resolveFromStore(): Promise<void> {
    try {
      await this.resolveOnce();
    } finally {
      if (this.inDoubt !== undefined && this.fenceReason !== undefined) this.retryLater();
    }
  }

  private async resolveOnce(): Promise<void> {
    if (!this.available) return;
    try {
      const base = await this.options.store.read();
      if (base) this.latest = base;
      const held = this.inDoubt;
      if (held && base && base.record.reloadId !== held.reloadId && base.record.epoch === held.epochBefore) {
        // Not committed (yet): aborted once no coordinator holds the lease for it any more.
        const holder = await this.options.lease.current();
        if (holder?.reloadId !== held.reloadId) await this.settleHeld('abort', 'the fleet did not commit it');
        return;
      }
      await this.reconcile();
    } catch (error) {
      this.options.logger.warn(
        { err: (error as Error).message },
        'fleet: cannot read the registry record yet',
      );
    }
  }

  /** Brings the host to the latest record it knows of (run serialized). */
  private async reconcile(): Promise<void> {
    const latest = this.latest;
    if (!latest || this.stopped) return;
    const { record } = latest;
    const coordinator = this.options.host.coordinator();
    const held = this.inDoubt;
    const own = held
      ? { epoch: held.epochBefore, reloadInDoubt: held.reloadId }
      : { epoch: coordinator.epoch };
    switch (planHostCatchUp(own, record)) {
      case 'commit-prepared':
        await this.settleHeld('commit', record.epoch);
        return;
      case 'fenced-wait':
        return;
      case 'none':
        this.unfence();
        return;
      case 'converge':
        // Another reload committed after the one this host holds: that one was aborted.
        if (held) await this.settleHeld('abort', `superseded by fleet reload ${record.reloadId}`);
    }
    // A rolling fleet reload moves hosts one by one from its coordinator (this host's turn included, when it is
    // the coordinator): wait for it while it holds the lease.
    if (record.strategy === 'rolling') {
      const holder = await this.options.lease.current().catch(() => undefined);
      if (holder && holder.reloadId === record.reloadId) {
        this.retryLater();
        return;
      }
    }
    if (coordinator.busy) {
      this.retryLater();
      return;
    }
    await this.converge(
      record.table,
      record.epoch,
      `caught up to fleet epoch ${record.epoch} (${record.reason})`,
    );
  }

  private async converge(table: FleetTable, epoch: number, reason: string): Promise<void> {
    const coordinator = this.options.host.coordinator();
    try {
      await ensureArtifacts(this.options.artifacts, this.options.modelsDir, table, this.options.logger);
      const outcome = await coordinator.reload(this.options.host.hostPlan(table), 'atomic', reason, epoch);
      if (outcome.result === 'failed') throw new Error(outcome.error ?? 'reload failed');
      this.options.logger.info({ epoch, reason }, 'fleet: caught up');
      this.metrics?.catchUps.inc({ result: 'caught_up' });
      this.failedCatchUps = 0;
      this.unfence();
    } catch (error) {
      this.metrics?.catchUps.inc({ result: 'failed' });
      this.failedCatchUps++;
      this.setFence(`cannot reach fleet epoch ${epoch}: ${(error as Error).message}`);
      // A table this host cannot load (a version missing everywhere) fails the same way each time: back off.
      this.retryLater(Math.min(MAX_RETRY_MS, RESOLVE_POLL_MS * 2 ** Math.min(this.failedCatchUps - 1, 5)));
    }
  }

  private retryLater(delayMs = RESOLVE_POLL_MS): void {
    if (this.retryTimer || this.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.serialized(() => this.resolveFromStore());
    }, delayMs);
    this.retryTimer.unref();
  }

  private setFence(reason: string): void {
    if (this.fenceReason === reason) return;
    this.fenceReason = reason;
    this.options.logger.warn({ reason }, 'fleet: fenced, not taking traffic');
    this.options.host.fence(reason);
  }

  private unfence(): void {
    if (this.fenceReason === undefined) return;
    this.fenceReason = undefined;
    this.options.logger.info(
      { epoch: this.options.host.coordinator().epoch },
      'fleet: caught up, fence lifted',
    );
    this.options.host.fence(null);
  }

  private beat(): HostBeat {
    const coordinator = this.options.host.coordinator();
    const table = coordinator.table;
    const load = this.options.host.load();
    const beat: HostBeat = {
      host: this.options.hostId,
      address: this.options.address,
      epoch: coordinator.epoch,
      ready: load.nodesReady === load.nodes && this.fenceReason === undefined,
      fenced: this.fenceReason !== undefined,
      defaultModel: table.defaultModel,
      models: table.models.map((model) => ({
        name: model.name,
        stable: model.stable,
        ...(model.candidate !== undefined ? { candidate: model.candidate } : {}),
        canaryPercent: model.canaryPercent ?? 0,
        shadow: model.shadow ?? false,
      })),
      nodes: load.nodes,
      nodesReady: load.nodesReady,
      requestsPerSecond: load.requestsPerSecond,
      startedAt: this.startedAt,
      beatAt: new Date(this.now()).toISOString(),
    };
    if (this.fenceReason !== undefined) beat.fenceReason = this.fenceReason;
    return beat;
  }

  private serialized<T>(action: () => Promise<T>): Promise<T> {
    const run = this.queue.then(action, action);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

/** 409 conflict, carrying the fleet's current record so the loser sees what won. */
export class FleetConflictError extends ProtocolError {
  constructor(
    message: string,
    readonly current: { record: FleetRecord; revision: number } | undefined,
  ) {
    super('conflict', message);
  }
}

/** See FleetMember.ensureArtifacts; also used at join, before the nodes start. */
export async function ensureArtifacts(
  artifacts: ModelArtifacts,
  modelsDir: string,
  table: FleetTable,
  logger: Logger,
): Promise<void> {
  for (const model of table.models) {
    for (const version of model.versions) {
      const got = await fetchPushed(artifacts, modelsDir, model.name, version);
      if (got === undefined) {
        if (!existsSync(path.join(modelsDir, model.name, version, 'model.onnx')))
          throw new Error(
            `version ${version} of model ${model.name} is neither in ${modelsDir} nor pushed to the fleet (streaminfer models push)`,
          );
        continue;
      }
      if (got.fetched)
        logger.info(
          { model: model.name, version, sha256: got.sha256, bytes: got.bytes, keyId: got.keyId },
          got.keyId === undefined
            ? 'fleet: fetched a model version from the fleet store (checksum verified)'
            : 'fleet: fetched a model version from the fleet store (signature and checksum verified)',
        );
    }
  }
}

interface FleetMetrics {
  reloads: Counter<'result' | 'strategy'>;
  catchUps: Counter<'result'>;
  inDoubt: Counter;
}

/** The fleet's series on this host (no `host` label: Prometheus's `instance` already says which host). */
function fleetMetrics(registry: Registry, member: FleetMember): FleetMetrics {
  const registers = [registry];
  new Gauge({
    name: 'streaminfer_fleet_cluster_up',
    help: "1 while this host reaches its fleet's NATS (admin writes need it; serving does not).",
    registers,
    collect() {
      this.set(member.available ? 1 : 0);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_fenced',
    help: '1 while this host is fenced from its fleet (in doubt about a reload, or behind it): it refuses traffic.',
    registers,
    collect() {
      this.set(member.fenced === undefined ? 0 : 1);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_record_epoch',
    help: "The fleet's epoch in the last registry record this host read (the host's own is streaminfer_model_epoch).",
    registers,
    collect() {
      const epoch = member.recordEpoch;
      if (epoch !== undefined) this.set(epoch);
    },
  });
  return {
    reloads: new Counter({
      name: 'streaminfer_fleet_reloads_total',
      help: 'Fleet reloads this host coordinated, by result (committed, failed, unchanged, conflict) and strategy.',
      labelNames: ['result', 'strategy'],
      registers,
    }),
    catchUps: new Counter({
      name: 'streaminfer_fleet_catchups_total',
      help: "Times this host reloaded itself to the fleet's record (after a partition, a late start, a missed COMMIT).",
      labelNames: ['result'],
      registers,
    }),
    inDoubt: new Counter({
      name: 'streaminfer_fleet_in_doubt_total',
      help: 'Times this host prepared a fleet reload and heard neither COMMIT nor ABORT in time (it fenced itself).',
      registers,
    }),
  };
}

/** fetchInto, one store lookup: undefined when the version was never pushed (the local file, if any, stands). */
async function fetchPushed(
  artifacts: ModelArtifacts,
  modelsDir: string,
  model: string,
  version: string,
): Promise<Awaited<ReturnType<ModelArtifacts['fetchInto']>> | undefined> {
  try {
    return await artifacts.fetchInto(modelsDir, model, version);
  } catch (error) {
    if (error instanceof ClusterError && error.code === 'artifact_missing') return undefined;
    throw error;
  }
}
