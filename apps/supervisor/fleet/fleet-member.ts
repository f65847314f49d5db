/**
 * This host as a member of a fleet (`--cluster`): it answers the fleet coordinator's barrier steps with its own
 * node barrier (prepare held until the fleet commits or aborts), follows the fleet's registry record (a record
 * ahead of the host is caught up to; a host in doubt about a reload is fenced until it learns the outcome),
 * heartbeats what it serves, and coordinates the fleet reloads its own admin API is asked for (one coordinator
 * at a time, by a KV lease). The NATS side is apps/supervisor/fleet; the cross-host barrier is fleet-reload.ts.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { ProtocolError } from '../../../libs/protocol';
import { isRepositoryName, type TablePlan } from '../../../libs/registry';
import { testDelayMs } from '../../../libs/test-hooks';
import type { ReloadCoordinator, ReloadStrategy, StepAnswer } from '../coordinator';
import {
  type ClusterConnection,
  ClusterError,
  type CoordinatorLease,
  type FleetRecord,
  type FleetTable,
  type HostBeat,
  type HostBoard,
  type HostStepAnswer,
  type HostStepClient,
  type HostStepRequest,
  type HostStepServer,
  isHostId,
  type ModelArtifacts,
  REGISTRY_RECORD_FORMAT,
  type RegistryEntry,
  type RegistryStore,
  type RegistryWatch,
  RolloutRecords,
  SILENCE_POLL_MS,
  serveHostSteps,
} from './';
import { onlyMembersMoved, rollCall, withMember, withoutMember } from './fleet-membership';
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
  /** The host starts behind the record (it could not load or read it at join): see FleetMember.behind. */
  behind?: string;
}

/** The fleet as GET /api/fleet answers it. */
export interface FleetView {
  fleet: string;
  host: string;
  epoch: number;
  revision: number;
  record: FleetRecord;
  /** The record's members; live: heartbeating (a change needs its PREPARE), else down (a change goes on without it). */
  members: Array<{ host: string; live: boolean }>;
  /** Heartbeat keys of hosts that are not members: ignored. */
  strangers: string[];
  /** The members' heartbeats. */
  hosts: HostBeat[];
  coordinator: { host: string; reloadId: string } | null;
}

const RESOLVE_POLL_MS = 1000;
const MAX_RETRY_MS = 30_000;
/** Tries of one membership CAS (join, leave, exclude) against other writers before it gives up. */
const MEMBERSHIP_TRIES = 10;
/** The reloadId of the step that asks a heartbeating host whether it is there (format-1 migration). */
const PROBE_RELOAD_ID = 'membership-probe';
const PROBE_TIMEOUT_MS = 5000;

/** How a fleet change asked of a host's admin API runs. */
export interface FleetChangeOptions {
  strategy: ReloadStrategy;
  reason: string;
  ifRevision?: number;
  force?: boolean;
  /** A record that cannot be read (invalid_record) is replaced by CAS from this host's table. */
  repair?: boolean;
}

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
  /** Why this host serves an older table than the record's (it cannot load the record's), while it does. */
  private behindReason: string | undefined;
  private latest: { record: FleetRecord; revision: number } | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  /** Catch-ups that failed in a row: the next try waits longer. */
  private failedCatchUps = 0;
  private stopped = false;
  private server: HostStepServer | undefined;
  /** This host is in the record's members (it joined, or found itself there). */
  private joined = false;
  /** It was a member and the record no longer lists it (an operator excluded it): it re-joins once caught up. */
  private excluded = false;
  /** Stranger heartbeats already logged (each host id once). */
  private readonly strangersLogged = new Set<string>();
  /** The record the next CAS of the change in progress is based on (a membership-only move is merged). */
  private casBase: RegistryEntry | undefined;
  private readonly metrics: FleetMetrics | undefined;
  private watcher: RegistryWatch | undefined;
  private offAvailability: (() => void) | undefined;

  constructor(private readonly options: FleetMemberOptions) {
    this.commitTimeoutMs = options.commitTimeoutMs ?? 10_000;
    this.heartbeatMs = options.heartbeatMs ?? 2_500;
    this.now = options.now ?? Date.now;
    this.behindReason = options.behind;
    if (options.registry) this.metrics = fleetMetrics(options.registry, this);
    this.reloads = new FleetReloadCoordinator({
      hosts: (record) => this.channels(record),
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

  /** This host is in the record's members (false before it joined, and while excluded). */
  get member(): boolean {
    return this.joined && !this.excluded;
  }

  /**
   * Set while this host lags a record it cannot load (a version missing here and not pushed): it keeps serving
   * its last committed table, degraded, and retries; only a host in doubt about a reload is fenced.
   */
  get behind(): string | undefined {
    return this.behindReason;
  }

  /** The fleet epoch of the last registry record this host read (watch, catch-up or its own change). */
  get recordEpoch(): number | undefined {
    return this.latest?.record.epoch;
  }

  /**
   * Starts answering steps, joins the record's members (by CAS; NATS down: the next reconcile does), then
   * heartbeats and follows the record (the host's nodes are up by now).
   */
  async start(): Promise<void> {
    const { connection, board, store, logger } = this.options;
    this.server = serveHostSteps(connection, (request) => this.step(request));
    await this.serialized(() => this.ensureMember()).catch((error: Error) =>
      logger.warn({ err: error.message }, 'fleet: cannot join the members yet; retrying with the record'),
    );
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

  /**
   * Leaves the fleet: no more steps, beats or watching; the heartbeat is removed, then the host leaves the
   * record's members by CAS, so later changes need nothing of it. NATS down: it stays a member, down, until it
   * is back or excluded.
   */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.inDoubt) clearTimeout(this.inDoubt.timer);
    this.server?.stop();
    this.watcher?.stop();
    this.offAvailability?.();
    this.options.board.stop();
    if (this.available) {
      await this.options.board.remove().catch(() => undefined);
      await this.changeMembers((record) => withoutMember(record.members, this.options.hostId))
        .then((entry) => this.options.logger.info({ revision: entry?.revision }, 'fleet: left the members'))
        .catch((error: Error) =>
          this.options.logger.warn({ err: error.message }, 'fleet: could not leave the members'),
        );
    }
    await this.options.connection.close().catch(() => undefined);
  }

  /**
   * POST /api/fleet/hosts/{host}/exclude: takes a member out of the record's members by CAS, so fleet changes go
   * on without it (one that is silent or cannot PREPARE). The host, when it is back, catches up and re-joins.
   */
  async exclude(host: string): Promise<{
    fleet: string;
    excluded: string;
    revision: number;
    epoch: number;
    members: string[];
    warning?: string;
  }> {
    this.requireCluster();
    if (!isHostId(host)) throw new ProtocolError('bad_request', `not a host id: ${JSON.stringify(host)}`);
    if (host === this.options.hostId)
      throw new ProtocolError(
        'bad_request',
        `host ${host} cannot exclude itself: ask another member, or stop it (a clean stop leaves the fleet)`,
      );
    const entry = await this.clusterCall(() =>
      this.changeMembers((record) => {
        const next = withoutMember(record.members, host);
        if (next === null)
          throw new ProtocolError('not_found', `host ${host} is not a member of fleet ${this.options.fleet}`);
        return next;
      }),
    );
    this.latest = entry;
    const alive = await this.options.board.alive(host).catch(() => false);
    this.options.logger.warn({ excluded: host, revision: entry.revision, alive }, 'fleet: member excluded');
    return {
      fleet: this.options.fleet,
      excluded: host,
      revision: entry.revision,
      epoch: entry.record.epoch,
      members: entry.record.members ?? [],
      ...(alive
        ? {
            warning: `host ${host} still heartbeats: it re-joins as soon as it has caught up (stop it to keep it out)`,
          }
        : {}),
    };
  }

  /**
   * A fleet change asked of this host's admin API: it coordinates it (or answers 409 conflict when another
   * host does, 503 cluster_unavailable without NATS). `next` maps the committed table to the next one.
   */
  async change(
    next: (table: FleetTable) => FleetTable,
    options: FleetChangeOptions,
  ): Promise<FleetReloadOutcome> {
    this.requireCluster();
    if (this.excluded)
      throw new FleetConflictError(
        `host ${this.options.hostId} was excluded from fleet ${this.options.fleet} and re-joins once caught up: ask another member`,
        this.latest,
      );
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
      const base = await this.readBase(options.repair === true);
      if (!base) throw new ProtocolError('cluster_unavailable', 'the fleet has no registry record');
      if (!base.invalid) {
        this.latest = base;
        this.casBase = base;
      }
      if (options.ifRevision !== undefined && options.ifRevision !== base.revision)
        throw new FleetConflictError(
          `the registry is at revision ${base.revision}, not ${options.ifRevision}: another change came first`,
          { record: base.record, revision: base.revision },
        );
      const outcome = await this.reloads.reload({
        id: reloadId,
        table: next(base.record.table),
        strategy: options.strategy,
        reason: options.reason,
        base,
        force: options.force === true || base.invalid,
      });
      this.metrics?.reloads.inc({ result: outcome.result, strategy: outcome.strategy });
      if (outcome.result === 'conflict')
        throw new FleetConflictError(outcome.error ?? 'conflict', this.latest);
      return outcome;
    } finally {
      this.casBase = undefined;
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
    const [base, beats, holder] = await this.clusterCall(() =>
      Promise.all([this.options.store.read(), this.options.board.list(), this.options.lease.current()]),
    );
    if (!base) throw new ProtocolError('cluster_unavailable', 'the fleet has no registry record');
    const beating = beats.map((beat) => beat.host);
    const roll = rollCall(base.record.members, beating, this.options.hostId);
    const members = base.record.members ?? roll.live;
    return {
      fleet: this.options.fleet,
      host: this.options.hostId,
      epoch: base.record.epoch,
      revision: base.revision,
      record: base.record,
      members: members.map((host) => ({ host, live: beating.includes(host) })),
      strangers: roll.strangers,
      hosts: beats.filter((beat) => members.includes(beat.host)),
      coordinator: holder ? { host: holder.host, reloadId: holder.reloadId } : null,
    };
  }

  /**
   * The record a change starts from. An invalid one (garbage, a shape this build does not read) blocks every
   * change with 503 invalid_record — unless this is the repair (a repository reload): then the change starts
   * from this host's own table at its own epoch and its commit point replaces the bad entry by CAS.
   */
  private async readBase(
    repair: boolean,
  ): Promise<{ record: FleetRecord; revision: number; invalid: boolean } | undefined> {
    try {
      const base = await this.options.store.read();
      return base && { ...base, invalid: false };
    } catch (error) {
      if (!(repair && error instanceof ClusterError && error.code === 'invalid_record'))
        throw this.apiError(error);
      if (error.revision === undefined) throw this.apiError(error);
      const coordinator = this.options.host.coordinator();
      this.options.logger.warn(
        { err: error.message, revision: error.revision },
        'fleet: the registry record is invalid; rewriting it from this host’s table',
      );
      return {
        invalid: true,
        revision: error.revision,
        record: {
          format: 1,
          epoch: coordinator.epoch,
          table: { models: coordinator.table.models, defaultModel: coordinator.table.defaultModel },
          reloadId: 'invalid-record',
          reason: `the record at revision ${error.revision} was invalid`,
          strategy: 'atomic',
          committedBy: this.options.hostId,
          committedAt: new Date(this.now()).toISOString(),
        },
      };
    }
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
      throw this.apiError(error);
    }
  }

  /** A cluster failure as the admin API answers it. */
  private apiError(error: unknown): unknown {
    if (!(error instanceof ClusterError)) return error;
    if (error.code === 'cluster_unavailable') return new ProtocolError('cluster_unavailable', error.message);
    // The fleet's record is unreadable: the fleet's fault, not the caller's; a repository reload repairs it.
    if (error.code === 'invalid_record')
      return new ProtocolError(
        'invalid_record',
        `${error.message}; POST /api/reload {} on a host rewrites it from that host's table`,
      );
    // This host coordinates another change already (its lease is held here): the same answer as elsewhere.
    if (error.code === 'conflict') return new FleetConflictError(error.message, this.latest);
    // A pushed file that does not match its checksum, or its signature, is the fleet's fault, not the caller's;
    // a pull cache that cannot be written is this host's.
    if (
      error.code === 'checksum_mismatch' ||
      error.code === 'artifact_refused' ||
      error.code === 'artifact_unwritable'
    )
      return new ProtocolError('reload_failed', error.message);
    return new ProtocolError('bad_request', error.message);
  }

  private async commitPoint(
    record: FleetRecord,
    revision: number,
  ): Promise<{ ok: true; revision: number } | { ok: false; conflict: boolean; error: string }> {
    const holdMs = this.options.testHooks ? testDelayMs('FLEET_COMMIT_DELAY_MS') : 0;
    if (holdMs > 0) {
      this.options.logger.info({ ms: holdMs }, 'test hook: holding the commit point');
      await new Promise((resolve) => setTimeout(resolve, holdMs));
    }
    try {
      // Every version the record names is here or pushed to the fleet: a record no host could load never lands.
      await checkLoadable(this.options.artifacts, this.options.modelsDir, record.table);
    } catch (error) {
      return { ok: false, conflict: false, error: (error as Error).message };
    }
    let next = record;
    let expected = revision;
    for (let attempt = 1; ; attempt++) {
      try {
        const written = await this.options.store.commit(next, expected);
        this.casBase = { record: next, revision: written };
        return { ok: true, revision: written };
      } catch (error) {
        const conflict = error instanceof ClusterError && error.code === 'conflict';
        const current = error instanceof ClusterError ? error.current : undefined;
        const base = this.casBase;
        // A host joined, left or was excluded since the change read the record: the change stands, with
        // today's members (whoever joined did not PREPARE it and catches up from the record).
        if (
          conflict &&
          current &&
          base?.revision === expected &&
          onlyMembersMoved(base.record, current.record) &&
          attempt < MEMBERSHIP_TRIES
        ) {
          next = { ...next, members: current.record.members ?? [] };
          expected = current.revision;
          this.casBase = current;
          continue;
        }
        return { ok: false, conflict, error: (error as Error).message };
      }
    }
  }

  /**
   * A read-modify-write of the record's members by CAS (the epoch, table and last reload stay as they are):
   * `next` gives the new members, or null for no change (then the record read is returned). Retries when
   * another write came first.
   */
  private async changeMembers(
    next: (record: FleetRecord) => string[] | null | Promise<string[] | null>,
  ): Promise<RegistryEntry> {
    for (let attempt = 1; ; attempt++) {
      const base = await this.options.store.read();
      if (!base) throw new ClusterError('cluster_unavailable', 'the fleet has no registry record');
      const members = await next(base.record);
      if (members === null) return base;
      const record: FleetRecord = { ...base.record, format: REGISTRY_RECORD_FORMAT, members };
      try {
        return { record, revision: await this.options.store.commit(record, base.revision) };
      } catch (error) {
        if (!(error instanceof ClusterError && error.code === 'conflict') || attempt >= MEMBERSHIP_TRIES)
          throw error;
      }
    }
  }

  /**
   * Joins the record's members unless it is one (run serialized): only when not behind the record's epoch and
   * not in doubt, so a host that comes back behind — excluded meanwhile — catches up before it is a member again
   * (a host ahead of the record is not held out: that is the epoch's question, not membership's). A
   * format-1 record gets its first members: this host and the heartbeating hosts that answer a step.
   */
  private async ensureMember(): Promise<void> {
    if (this.stopped || !this.available) return;
    const self = this.options.hostId;
    if (this.joined && !this.excluded && this.latest?.record.members?.includes(self)) return;
    const coordinator = this.options.host.coordinator();
    let behind = false;
    const entry = await this.changeMembers(async (record) => {
      if (record.members?.includes(self)) return null;
      behind = this.inDoubt !== undefined || coordinator.epoch < record.epoch;
      if (behind) return null;
      if (record.members !== undefined) return withMember(record.members, self);
      return withMember(await this.probeBeating(), self);
    });
    if (behind || !entry.record.members?.includes(self)) return;
    this.latest = entry;
    if (!this.joined || this.excluded)
      this.options.logger.info(
        { members: entry.record.members, revision: entry.revision, epoch: entry.record.epoch },
        this.excluded ? 'fleet: re-joined the members after an exclusion' : 'fleet: a member',
      );
    this.joined = true;
    if (this.excluded) {
      this.excluded = false;
      this.unfence();
    }
  }

  /**
   * The heartbeating hosts that answer a harmless step (an abort of nothing) within PROBE_TIMEOUT_MS: a
   * hand-written key does not. One left out joins by itself once it runs this build.
   */
  private async probeBeating(): Promise<string[]> {
    const beats = await this.options.board.list();
    const answers = await Promise.all(
      beats
        .filter((beat) => beat.host !== this.options.hostId)
        .map(async (beat) => {
          let timer: NodeJS.Timeout | undefined;
          const answer = await Promise.race([
            this.options.steps.call(beat.host, { step: 'abort', reloadId: PROBE_RELOAD_ID }),
            new Promise<{ ok: false }>((resolve) => {
              timer = setTimeout(() => resolve({ ok: false }), PROBE_TIMEOUT_MS);
            }),
          ]).finally(() => clearTimeout(timer));
          return answer.ok ? beat.host : undefined;
        }),
    );
    const members = answers.filter((host): host is string => host !== undefined);
    this.options.logger.info(
      { heartbeating: beats.map((beat) => beat.host), members },
      'fleet: first members written (format-1 record): the heartbeating hosts that answered',
    );
    return members;
  }

  /**
   * The record's members as the fleet coordinator talks to them: this one directly, the others over NATS; a
   * member without a fresh heartbeat is marked down (not asked). A heartbeat of a non-member is ignored, and
   * said once.
   */
  private async channels(record: FleetRecord): Promise<HostChannel[]> {
    const beats = await this.options.board.list();
    // The epoch each host last said it serves: the next fleet epoch goes above every one of them.
    const epochs = new Map(beats.map((beat) => [beat.host, beat.epoch]));
    epochs.set(this.options.hostId, this.options.host.coordinator().epoch);
    const roll = rollCall(
      record.members,
      beats.map((beat) => beat.host),
      this.options.hostId,
    );
    for (const stranger of roll.strangers) {
      if (this.strangersLogged.has(stranger)) continue;
      this.strangersLogged.add(stranger);
      this.options.logger.warn(
        { host: stranger, members: record.members },
        'fleet: ignoring the heartbeat of a host that is not a member (a stale or hand-written key, or an excluded host)',
      );
    }
    const ttl = this.options.board.ttlMs;
    return [
      ...roll.live.map((host) => this.channel(host, epochs.get(host))),
      ...roll.down.map((host) => ({
        ...this.channel(host, epochs.get(host)),
        down: `no heartbeat within ${ttl} ms: down, the change goes on without it`,
      })),
    ].sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
  }

  private channel(host: string, epoch?: number): HostChannel {
    const call =
      host === this.options.hostId
        ? (request: HostStepRequest) => this.step(request)
        : (request: HostStepRequest) => this.untilSilent(host, this.options.steps.call(host, request));
    return {
      host,
      ...(epoch !== undefined ? { epoch } : {}),
      prepare: (table, reloadId) => call({ step: 'prepare', reloadId, plan: table }),
      commit: (table, epoch, reloadId) => call({ step: 'commit', reloadId, plan: table, epoch }),
      abort: (reloadId) => call({ step: 'abort', reloadId }),
      release: (table, reloadId) => call({ step: 'release', reloadId, plan: table }),
      roll: (table, epoch, reloadId) => call({ step: 'roll', reloadId, plan: table, epoch }),
    };
  }

  /**
   * A step to another member, given up as `down` once the member's heartbeat has expired (or it is no longer
   * a member): a silent member holds a change for at most the heartbeat TTL, not the step timeout. One that
   * prepared and then went silent is in doubt on its side, and fences itself until it reads the outcome.
   */
  private untilSilent(host: string, step: Promise<HostStepAnswer>): Promise<HostStepAnswer> {
    const wait = this.options.board.whenSilent(host, SILENCE_POLL_MS, () => {
      const members = this.latest?.record.members;
      return members !== undefined && !members.includes(host);
    });
    const silent = wait.silent.then(
      (why): HostStepAnswer => ({
        ok: false,
        down: true,
        error:
          why === 'removed'
            ? `host ${host} is no longer a member`
            : `host ${host} went silent: no heartbeat within ${this.options.board.ttlMs} ms`,
      }),
    );
    return Promise.race([step, silent]).finally(() => wait.stop());
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
    // A PREPARE delivered late (this host was frozen or cut off, the fleet went on without it) for a reload the
    // record already holds: held now, it would never hear its COMMIT again.
    if (this.latest?.record.reloadId === reloadId)
      return { ok: false, error: `fleet reload ${reloadId} is committed already` };
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
    this.setBehind(undefined);
    return { ok: true, data: { epoch } };
  }

  private async settleHeld(how: 'commit', epoch: number): Promise<void>;
  private async settleHeld(how: 'abort', why: string): Promise<void>;
  private async settleHeld(how: 'commit' | 'abort', arg: number | string): Promise<void> {
    const held = this.inDoubt!;
    const coordinator = this.options.host.coordinator();
    try {
      if (how === 'commit') {
        await coordinator.commitHeld(arg as number);
        // On the fleet's committed table now: no longer behind it.
        this.setBehind(undefined);
      } else await coordinator.abortHeld(arg as string);
    } finally {
      // In doubt until the host's barrier has settled the reload (committed, or aborted when refused): never
      // cleared while the reload is still held, or every later PREPARE is refused as "in progress".
      if (coordinator.heldReason === undefined && this.inDoubt === held) {
        clearTimeout(held.timer);
        this.inDoubt = undefined;
        this.unfence();
      }
    }
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
      // At or below the epoch the host held from (a record that went back included): the reload is not in it.
      if (held && base && base.record.reloadId !== held.reloadId && base.record.epoch <= held.epochBefore) {
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

  /** Brings the host to the latest record it knows of, then makes it a member if it is not (run serialized). */
  private async reconcile(): Promise<void> {
    const latest = this.latest;
    if (!latest || this.stopped) return;
    const { record } = latest;
    const self = this.options.hostId;
    if (this.joined && record.members !== undefined && !record.members.includes(self) && !this.excluded) {
      this.excluded = true;
      this.options.logger.warn(
        { members: record.members, epoch: record.epoch },
        'fleet: excluded from the members; catching up, then re-joining',
      );
    }
    await this.catchUp(record);
    try {
      await this.ensureMember();
    } catch (error) {
      this.options.logger.warn({ err: (error as Error).message }, 'fleet: cannot join the members yet');
      this.retryLater();
    }
  }

  private async catchUp(record: FleetRecord): Promise<void> {
    const coordinator = this.options.host.coordinator();
    // Excluded and behind: changes went on without it, so it serves nothing until it has caught up and re-joined.
    if (this.excluded && (coordinator.epoch < record.epoch || this.inDoubt))
      this.setFence(
        `excluded from fleet ${this.options.fleet} at epoch ${record.epoch}: catching up before it re-joins`,
      );
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
        this.setBehind(undefined);
        return;
      case 'raise':
        await this.raise(record, coordinator.epoch);
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
      this.setBehind(undefined);
    } catch (error) {
      this.metrics?.catchUps.inc({ result: 'failed' });
      this.failedCatchUps++;
      // Not in doubt (what it held is settled): the host serves its last committed table, degraded, not fenced.
      if (this.inDoubt === undefined) this.unfence();
      this.setBehind(
        `cannot reach fleet epoch ${epoch}: ${(error as Error).message}; serving epoch ${coordinator.epoch}`,
      );
      // A table this host cannot load (a version missing everywhere) fails the same way each time: back off.
      this.retryLater(Math.min(MAX_RETRY_MS, RESOLVE_POLL_MS * 2 ** Math.min(this.failedCatchUps - 1, 5)));
    }
  }

  /**
   * The record is below this host's epoch: it went back (its bucket lost, a fleet re-founded, a restore). The
   * fleet epoch must never go backwards, so this host writes the record's table again, by CAS under the
   * coordinator lease, at max(known epochs) + 1; every host, this one included, converges to it.
   */
  private async raise(seen: FleetRecord, own: number): Promise<void> {
    const { lease, store, board, logger, hostId } = this.options;
    const reloadId = randomUUID();
    let raised: { record: FleetRecord; revision: number } | undefined;
    try {
      const held = await lease.acquire({ host: hostId, reloadId });
      if (!held.held) {
        // Someone is changing the fleet: its commit goes above every host's epoch; look again after it.
        this.retryLater();
        return;
      }
      try {
        const base = await store.read();
        if (!base || base.record.epoch >= own) {
          if (base) this.latest = base;
          this.retryLater();
          return;
        }
        const beats = await board.list().catch(() => []);
        const epoch = Math.max(own, base.record.epoch, ...beats.map((beat) => beat.epoch)) + 1;
        const record: FleetRecord = {
          ...base.record,
          epoch,
          reloadId,
          reason: `fleet epoch raised from ${base.record.epoch} to ${epoch}: host ${hostId} was at ${own} (the record went back)`,
          strategy: 'atomic',
          committedBy: hostId,
          committedAt: new Date(this.now()).toISOString(),
        };
        raised = { record, revision: await store.commit(record, base.revision) };
        this.latest = raised;
        logger.warn(
          { from: base.record.epoch, epoch, hostEpoch: own, seen: seen.reloadId },
          'fleet: the registry record went back below this host; raised its epoch',
        );
      } finally {
        await lease.release().catch(() => undefined);
      }
    } catch (error) {
      logger.warn({ err: (error as Error).message }, 'fleet: cannot raise the registry record yet');
      this.retryLater();
      return;
    }
    if (raised) await this.converge(raised.record.table, raised.record.epoch, raised.record.reason);
  }

  private retryLater(delayMs = RESOLVE_POLL_MS): void {
    if (this.retryTimer || this.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.serialized(() => this.resolveFromStore());
    }, delayMs);
    this.retryTimer.unref();
  }

  private setBehind(reason: string | undefined): void {
    if (this.behindReason === reason) return;
    this.behindReason = reason;
    if (reason !== undefined)
      this.options.logger.warn(
        { reason },
        'fleet: behind the registry record; serving the last committed table',
      );
    else this.options.logger.info({ epoch: this.options.host.coordinator().epoch }, 'fleet: caught up');
  }

  private setFence(reason: string): void {
    if (this.fenceReason === reason) return;
    this.fenceReason = reason;
    this.options.logger.warn({ reason }, 'fleet: fenced, not taking traffic');
    this.options.host.fence(reason);
  }

  private unfence(): void {
    // An excluded host serves again once it is a member again (ensureMember).
    if (this.fenceReason === undefined || this.excluded) return;
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

/**
 * Every version the table names is in `modelsDir` or pushed to the fleet (checked before a record is written;
 * names are the record parser's to check). Throws naming the first one that is neither.
 */
export async function checkLoadable(
  artifacts: ModelArtifacts,
  modelsDir: string,
  table: FleetTable,
): Promise<void> {
  for (const model of table.models)
    for (const version of model.versions) {
      if (existsSync(path.join(modelsDir, model.name, version, 'model.onnx'))) continue;
      if ((await artifacts.digest(model.name, version)) !== undefined) continue;
      throw new Error(
        `version ${version} of model ${model.name} is neither in ${modelsDir} nor pushed to the fleet (streaminfer models push): not written to the registry`,
      );
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
    name: 'streaminfer_fleet_member',
    help: "1 while this host is in its fleet's members (0: not joined yet, or excluded and catching up).",
    registers,
    collect() {
      this.set(member.member ? 1 : 0);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_behind',
    help: "1 while this host serves an older table than the fleet's record because it cannot load the record's (a version missing here and not pushed): degraded, still serving.",
    registers,
    collect() {
      this.set(member.behind === undefined ? 0 : 1);
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
