/**
 * A fleet change asked of this host's admin API, coordinated from here: one coordinator at a time (the KV
 * lease), from the committed record (or, to repair an invalid one, from this host's table), through the
 * cross-host barrier (fleet-reload.ts) over the record's members, and committed by CAS. NATS failures become
 * the API's typed answers.
 */
import { randomUUID } from 'node:crypto';
import type { Counter } from 'prom-client';
import { ProtocolError } from '../../../libs/protocol';
import { testDelayMs } from '../../../libs/test-hooks';
import type { ReloadStrategy, StepAnswer } from '../coordinator';
import {
  FleetError,
  type FleetRecord,
  type FleetTable,
  type HostStepAnswer,
  type HostStepRequest,
  type RegistryEntry,
  SILENCE_POLL_MS,
} from './';
import { FleetConflictError } from './errors';
import { onlyMembersMoved, rollCall } from './fleet-membership';
import { FleetReloadCoordinator, type FleetReloadOutcome, type HostChannel } from './fleet-reload';
import type { FleetMemberOptions, MemberState } from './member-state';
import { MEMBERSHIP_TRIES } from './membership-writes';
import { checkLoadable } from './pulled-versions';

/** How a fleet change asked of a host's admin API runs. */
export interface FleetChangeOptions {
  strategy: ReloadStrategy;
  reason: string;
  ifRevision?: number;
  force?: boolean;
  /** A record that cannot be read (invalid_record) is replaced by CAS from this host's table. */
  repair?: boolean;
}

export class FleetChanges {
  private readonly now: () => number;
  private readonly reloads: FleetReloadCoordinator;
  /** The record the next CAS of the change in progress is based on (a membership-only move is merged). */
  private casBase: RegistryEntry | undefined;
  /** Stranger heartbeats already logged (each host id once). */
  private readonly strangersLogged = new Set<string>();

  constructor(
    private readonly options: FleetMemberOptions,
    private readonly state: MemberState,
    /** This host's own answer to a step (StepAnswers.step): the coordinator's channel to itself. */
    private readonly selfStep: (request: HostStepRequest) => Promise<StepAnswer>,
    /** streaminfer_fleet_reloads_total, with a registry. */
    private readonly reloadsTotal: Counter<'result' | 'strategy'> | undefined,
  ) {
    this.now = options.now ?? Date.now;
    this.reloads = new FleetReloadCoordinator({
      hosts: (record) => this.channels(record),
      commitPoint: (record, revision) => this.commitPoint(record, revision),
      now: this.now,
      newId: () => randomUUID(),
      host: options.hostId,
    });
  }

  /**
   * Coordinates the change (or answers 409 conflict when another host does, 503 cluster_unavailable without
   * NATS). `next` maps the committed table to the next one.
   */
  async change(
    next: (table: FleetTable) => FleetTable,
    options: FleetChangeOptions,
  ): Promise<FleetReloadOutcome> {
    this.requireCluster();
    const state = this.state;
    if (state.excluded)
      throw new FleetConflictError(
        `host ${this.options.hostId} was excluded from fleet ${this.options.fleet} and re-joins once caught up: ask another member`,
        state.latest,
      );
    const reloadId = randomUUID();
    const held = await this.call(() => this.options.lease.acquire({ host: this.options.hostId, reloadId }));
    if (!held.held)
      throw new FleetConflictError(
        `fleet change ${held.holder.reloadId} by host ${held.holder.host} is in progress; try again when it has finished`,
        state.latest,
      );
    try {
      const base = await this.readBase(options.repair === true);
      if (!base) throw new ProtocolError('cluster_unavailable', 'the fleet has no registry record');
      if (!base.invalid) {
        state.latest = base;
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
      this.reloadsTotal?.inc({ result: outcome.result, strategy: outcome.strategy });
      if (outcome.result === 'conflict')
        throw new FleetConflictError(outcome.error ?? 'conflict', state.latest);
      return outcome;
    } finally {
      this.casBase = undefined;
      await this.options.lease.release().catch(() => undefined);
    }
  }

  /** Refuses (503 cluster_unavailable) while NATS is not reachable: the fleet cannot be changed now. */
  requireCluster(): void {
    if (!this.options.connection.available)
      throw new ProtocolError(
        'cluster_unavailable',
        `NATS is not reachable: fleet "${this.options.fleet}" cannot be changed now; this host keeps serving epoch ${this.options.host.coordinator().epoch}`,
      );
  }

  /** A cluster call whose NATS failure is the API's 503 cluster_unavailable. */
  async call<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw this.apiError(error);
    }
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
      if (!(repair && error instanceof FleetError && error.code === 'invalid_record'))
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

  /** A cluster failure as the admin API answers it. */
  private apiError(error: unknown): unknown {
    if (!(error instanceof FleetError)) return error;
    if (error.code === 'cluster_unavailable') return new ProtocolError('cluster_unavailable', error.message);
    // The fleet's record is unreadable: the fleet's fault, not the caller's; a repository reload repairs it.
    if (error.code === 'invalid_record')
      return new ProtocolError(
        'invalid_record',
        `${error.message}; POST /api/reload {} on a host rewrites it from that host's table`,
      );
    // This host coordinates another change already (its lease is held here): the same answer as elsewhere.
    if (error.code === 'conflict') return new FleetConflictError(error.message, this.state.latest);
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
        const conflict = error instanceof FleetError && error.code === 'conflict';
        const current = error instanceof FleetError ? error.current : undefined;
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
        ? (request: HostStepRequest) => this.selfStep(request)
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
      const members = this.state.latest?.record.members;
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
}
