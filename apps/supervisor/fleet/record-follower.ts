/**
 * Brings this host to the fleet's registry record: a record ahead of the host is caught up to (its versions
 * fetched first), a reload the host holds is settled from what the record says, a record that went back below
 * the host is raised above every host's epoch, and a host that cannot load the record's table serves its last
 * one, behind, and retries with a backoff. Everything here runs in the member's queue (MemberState.serialized).
 */
import { randomUUID } from 'node:crypto';
import type { Counter } from 'prom-client';
import type { FleetRecord, FleetTable } from './';
import { planHostCatchUp } from './fleet-reload';
import type { FleetMemberOptions, MemberState } from './member-state';
import { ensureArtifacts } from './pulled-versions';
import type { StepFollower } from './step-answers';

const RESOLVE_POLL_MS = 1000;
const MAX_RETRY_MS = 30_000;

/** What following the record needs of the member's other parts. */
export interface FollowerParts {
  /** Commits the reload this host holds at the fleet's epoch (StepAnswers.settleHeld). */
  commitHeld(epoch: number): Promise<void>;
  /** Aborts the reload this host holds (StepAnswers.settleHeld). */
  abortHeld(why: string): Promise<void>;
  /** Joins the record's members unless it is one (MembershipWrites.ensureMember). */
  ensureMember(): Promise<void>;
}

export class RecordFollower implements StepFollower {
  private readonly now: () => number;
  private retryTimer: NodeJS.Timeout | undefined;
  /** Catch-ups that failed in a row: the next try waits longer. */
  private failedCatchUps = 0;

  constructor(
    private readonly options: FleetMemberOptions,
    private readonly state: MemberState,
    private readonly parts: FollowerParts,
    /** streaminfer_fleet_catchups_total, with a registry. */
    private readonly catchUps: Counter<'result'> | undefined,
  ) {
    this.now = options.now ?? Date.now;
  }

  /** No more retries (the member is closing). */
  stop(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
  }

  /**
   * Reads the record (and the lease) to settle a held reload or catch up. A host fenced in doubt asks again
   * every RESOLVE_POLL_MS until it knows (NATS down included).
   */
  async resolveFromStore(): Promise<void> {
    try {
      await this.resolveOnce();
    } finally {
      if (this.state.inDoubt !== undefined && this.state.fenced !== undefined) this.retryLater();
    }
  }

  private async resolveOnce(): Promise<void> {
    if (!this.options.connection.available) return;
    try {
      const base = await this.options.store.read();
      if (base) this.state.latest = base;
      const held = this.state.inDoubt;
      // At or below the epoch the host held from (a record that went back included): the reload is not in it.
      if (held && base && base.record.reloadId !== held.reloadId && base.record.epoch <= held.epochBefore) {
        // Not committed (yet): aborted once no coordinator holds the lease for it any more.
        const holder = await this.options.lease.current();
        if (holder?.reloadId !== held.reloadId) await this.parts.abortHeld('the fleet did not commit it');
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
  async reconcile(): Promise<void> {
    const state = this.state;
    const latest = state.latest;
    if (!latest || state.stopped) return;
    const { record } = latest;
    const self = this.options.hostId;
    if (state.joined && record.members !== undefined && !record.members.includes(self) && !state.excluded) {
      state.excluded = true;
      this.options.logger.warn(
        { members: record.members, epoch: record.epoch },
        'fleet: excluded from the members; catching up, then re-joining',
      );
    }
    await this.catchUp(record);
    try {
      await this.parts.ensureMember();
    } catch (error) {
      this.options.logger.warn({ err: (error as Error).message }, 'fleet: cannot join the members yet');
      this.retryLater();
    }
  }

  private async catchUp(record: FleetRecord): Promise<void> {
    const state = this.state;
    const coordinator = this.options.host.coordinator();
    // Excluded and behind: changes went on without it, so it serves nothing until it has caught up and re-joined.
    if (state.excluded && (coordinator.epoch < record.epoch || state.inDoubt))
      state.setFence(
        `excluded from fleet ${this.options.fleet} at epoch ${record.epoch}: catching up before it re-joins`,
      );
    const held = state.inDoubt;
    const own = held
      ? { epoch: held.epochBefore, reloadInDoubt: held.reloadId }
      : { epoch: coordinator.epoch };
    switch (planHostCatchUp(own, record)) {
      case 'commit-prepared':
        await this.parts.commitHeld(record.epoch);
        return;
      case 'fenced-wait':
        return;
      case 'none':
        state.unfence();
        state.setBehind(undefined);
        return;
      case 'raise':
        await this.raise(record, coordinator.epoch);
        return;
      case 'converge':
        // Another reload committed after the one this host holds: that one was aborted.
        if (held) await this.parts.abortHeld(`superseded by fleet reload ${record.reloadId}`);
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

  async converge(table: FleetTable, epoch: number, reason: string): Promise<void> {
    const state = this.state;
    const coordinator = this.options.host.coordinator();
    try {
      await ensureArtifacts(this.options.artifacts, this.options.modelsDir, table, this.options.logger);
      const outcome = await coordinator.reload(this.options.host.hostPlan(table), 'atomic', reason, epoch);
      if (outcome.result === 'failed') throw new Error(outcome.error ?? 'reload failed');
      this.options.logger.info({ epoch, reason }, 'fleet: caught up');
      this.catchUps?.inc({ result: 'caught_up' });
      this.failedCatchUps = 0;
      state.unfence();
      state.setBehind(undefined);
    } catch (error) {
      this.catchUps?.inc({ result: 'failed' });
      this.failedCatchUps++;
      // Not in doubt (what it held is settled): the host serves its last committed table, degraded, not fenced.
      if (state.inDoubt === undefined) state.unfence();
      state.setBehind(
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
          if (base) this.state.latest = base;
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
        this.state.latest = raised;
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

  /** Reads the record again in `delayMs` (one retry pending at a time). */
  retryLater(delayMs = RESOLVE_POLL_MS): void {
    if (this.retryTimer || this.state.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.state.serialized(() => this.resolveFromStore());
    }, delayMs);
    this.retryTimer.unref();
  }
}
