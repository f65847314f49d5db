/**
 * This host as a member of a fleet (`--cluster`): it answers the fleet coordinator's barrier steps with its own
 * node barrier (step-answers.ts: prepare held until the fleet commits or aborts), follows the fleet's registry
 * record (record-follower.ts: a record ahead of the host is caught up to; a host in doubt about a reload is
 * fenced until it learns the outcome), keeps itself in the record's members (membership-writes.ts), heartbeats
 * what it serves, and coordinates the fleet changes its own admin API is asked for (fleet-change.ts: one
 * coordinator at a time, by a KV lease). This file wires those parts and is their one public face.
 */
import { ProtocolError } from '../../../libs/protocol';
import { isRepositoryName } from '../../../libs/registry';
import type { StepAnswer } from '../coordinator';
import {
  type FleetRecord,
  type FleetTable,
  type HostBeat,
  type HostStepRequest,
  type HostStepServer,
  isHostId,
  type RegistryWatch,
  RolloutRecords,
  serveHostSteps,
} from './';
import { type FleetChangeOptions, FleetChanges } from './fleet-change';
import { rollCall, withoutMember } from './fleet-membership';
import { type FleetMetrics, fleetMetrics } from './fleet-metrics';
import type { FleetReloadOutcome } from './fleet-reload';
import { type FleetMemberOptions, MemberState } from './member-state';
import { MembershipWrites } from './membership-writes';
import { fetchPushed } from './pulled-versions';
import { RecordFollower } from './record-follower';
import { StepAnswers } from './step-answers';

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

export class FleetMember {
  private readonly heartbeatMs: number;
  private readonly now: () => number;
  private readonly startedAt = new Date().toISOString();
  private readonly state: MemberState;
  private readonly steps: StepAnswers;
  private readonly follower: RecordFollower;
  private readonly membership: MembershipWrites;
  private readonly changes: FleetChanges;
  private readonly metrics: FleetMetrics | undefined;
  private server: HostStepServer | undefined;
  private watcher: RegistryWatch | undefined;
  private offAvailability: (() => void) | undefined;

  constructor(private readonly options: FleetMemberOptions) {
    this.heartbeatMs = options.heartbeatMs ?? 2_500;
    this.now = options.now ?? Date.now;
    this.state = new MemberState(options.host, options.logger, options.behind);
    if (options.registry) this.metrics = fleetMetrics(options.registry, this);
    const state = this.state;
    this.membership = new MembershipWrites(options, state);
    this.follower = new RecordFollower(
      options,
      state,
      {
        commitHeld: (epoch) => this.steps.settleHeld('commit', epoch),
        abortHeld: (why) => this.steps.settleHeld('abort', why),
        ensureMember: () => this.membership.ensureMember(),
      },
      this.metrics?.catchUps,
    );
    this.steps = new StepAnswers(options, state, this.follower, this.metrics?.inDoubt);
    this.changes = new FleetChanges(options, state, (request) => this.step(request), this.metrics?.reloads);
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
    return this.state.fenced;
  }

  /** This host is in the record's members (false before it joined, and while excluded). */
  get member(): boolean {
    return this.state.joined && !this.state.excluded;
  }

  /**
   * Set while this host lags a record it cannot load (a version missing here and not pushed): it keeps serving
   * its last committed table, degraded, and retries; only a host in doubt about a reload is fenced.
   */
  get behind(): string | undefined {
    return this.state.behind;
  }

  /** The fleet epoch of the last registry record this host read (watch, catch-up or its own change). */
  get recordEpoch(): number | undefined {
    return this.state.latest?.record.epoch;
  }

  /**
   * Starts answering steps, joins the record's members (by CAS; NATS down: the next reconcile does), then
   * heartbeats and follows the record (the host's nodes are up by now).
   */
  async start(): Promise<void> {
    const { connection, board, store, logger } = this.options;
    const state = this.state;
    this.server = serveHostSteps(connection, (request) => this.step(request));
    await state
      .serialized(() => this.membership.ensureMember())
      .catch((error: Error) =>
        logger.warn({ err: error.message }, 'fleet: cannot join the members yet; retrying with the record'),
      );
    board.start(() => this.beat(), this.heartbeatMs);
    this.watcher = store.watch(
      (record, revision) => {
        state.latest = { record, revision };
        void state.serialized(() => this.follower.reconcile());
      },
      (error) => logger.warn({ err: (error as Error).message }, 'fleet: registry watch'),
    );
    // After a reconnect the record may have moved without the watch having said so yet; in doubt, ask.
    this.offAvailability = connection.onAvailability((available) => {
      if (available) logger.info('fleet: NATS reachable again');
      else logger.warn('fleet: NATS unreachable; serving the last committed table, admin writes refused');
      if (available) void state.serialized(() => this.follower.resolveFromStore());
    });
  }

  /**
   * Leaves the fleet: no more steps, beats or watching; the heartbeat is removed, then the host leaves the
   * record's members by CAS, so later changes need nothing of it. NATS down: it stays a member, down, until it
   * is back or excluded.
   */
  async close(): Promise<void> {
    this.state.stopped = true;
    this.follower.stop();
    if (this.state.inDoubt) clearTimeout(this.state.inDoubt.timer);
    this.server?.stop();
    this.watcher?.stop();
    this.offAvailability?.();
    this.options.board.stop();
    if (this.available) {
      await this.options.board.remove().catch(() => undefined);
      await this.membership
        .changeMembers((record) => withoutMember(record.members, this.options.hostId))
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
    this.changes.requireCluster();
    if (!isHostId(host)) throw new ProtocolError('bad_request', `not a host id: ${JSON.stringify(host)}`);
    if (host === this.options.hostId)
      throw new ProtocolError(
        'bad_request',
        `host ${host} cannot exclude itself: ask another member, or stop it (a clean stop leaves the fleet)`,
      );
    const entry = await this.changes.call(() =>
      this.membership.changeMembers((record) => {
        const next = withoutMember(record.members, host);
        if (next === null)
          throw new ProtocolError('not_found', `host ${host} is not a member of fleet ${this.options.fleet}`);
        return next;
      }),
    );
    this.state.latest = entry;
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
  change(next: (table: FleetTable) => FleetTable, options: FleetChangeOptions): Promise<FleetReloadOutcome> {
    return this.changes.change(next, options);
  }

  /** A version pushed to the fleet but missing here is fetched and verified (before a plan names it). */
  async fetchVersion(model: string, version: string): Promise<void> {
    // A name that cannot be a version is the plan's to refuse (unknown_version), not the store's.
    if (!this.available || !isRepositoryName(model) || !isRepositoryName(version)) return;
    await this.changes.call(() =>
      fetchPushed(this.options.artifacts, this.options.modelsDir, model, version),
    );
  }

  /** The fleet's rollout records (KV `rollout.<model>` in the registry bucket, by CAS). */
  openRollouts(): Promise<RolloutRecords> {
    return RolloutRecords.open(this.options.connection);
  }

  /** GET /api/fleet. */
  async view(): Promise<FleetView> {
    this.changes.requireCluster();
    const [base, beats, holder] = await this.changes.call(() =>
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

  /** One barrier step from the fleet coordinator. Never throws: a failure is `{ok: false}`. */
  step(request: HostStepRequest): Promise<StepAnswer> {
    return this.steps.step(request);
  }

  private beat(): HostBeat {
    const coordinator = this.options.host.coordinator();
    const table = coordinator.table;
    const load = this.options.host.load();
    const fenced = this.state.fenced;
    const beat: HostBeat = {
      host: this.options.hostId,
      address: this.options.address,
      epoch: coordinator.epoch,
      ready: load.nodesReady === load.nodes && fenced === undefined,
      fenced: fenced !== undefined,
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
    if (fenced !== undefined) beat.fenceReason = fenced;
    return beat;
  }
}
