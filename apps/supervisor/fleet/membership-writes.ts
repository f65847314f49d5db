/**
 * The record's members as this host writes them, by CAS (the epoch, table and last reload stay as they are):
 * it joins once it is caught up, leaves on a clean stop, and takes out a member an operator excludes. The
 * pure rules (who is live, what changed) are fleet-membership.ts's.
 */
import { FleetError, type FleetRecord, REGISTRY_RECORD_FORMAT, type RegistryEntry } from './';
import { withMember } from './fleet-membership';
import type { FleetMemberOptions, MemberState } from './member-state';

/** Tries of one membership CAS (join, leave, exclude) against other writers before it gives up. */
export const MEMBERSHIP_TRIES = 10;
/** The reloadId of the step that asks a heartbeating host whether it is there (format-1 migration). */
const PROBE_RELOAD_ID = 'membership-probe';
const PROBE_TIMEOUT_MS = 5000;

export class MembershipWrites {
  constructor(
    private readonly options: FleetMemberOptions,
    private readonly state: MemberState,
  ) {}

  /**
   * A read-modify-write of the record's members by CAS: `next` gives the new members, or null for no change
   * (then the record read is returned). Retries when another write came first.
   */
  async changeMembers(
    next: (record: FleetRecord) => string[] | null | Promise<string[] | null>,
  ): Promise<RegistryEntry> {
    for (let attempt = 1; ; attempt++) {
      const base = await this.options.store.read();
      if (!base) throw new FleetError('cluster_unavailable', 'the fleet has no registry record');
      const members = await next(base.record);
      if (members === null) return base;
      const record: FleetRecord = { ...base.record, format: REGISTRY_RECORD_FORMAT, members };
      try {
        return { record, revision: await this.options.store.commit(record, base.revision) };
      } catch (error) {
        if (!(error instanceof FleetError && error.code === 'conflict') || attempt >= MEMBERSHIP_TRIES)
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
  async ensureMember(): Promise<void> {
    const state = this.state;
    if (state.stopped || !this.options.connection.available) return;
    const self = this.options.hostId;
    if (state.joined && !state.excluded && state.latest?.record.members?.includes(self)) return;
    const coordinator = this.options.host.coordinator();
    let behind = false;
    const entry = await this.changeMembers(async (record) => {
      if (record.members?.includes(self)) return null;
      behind = state.inDoubt !== undefined || coordinator.epoch < record.epoch;
      if (behind) return null;
      if (record.members !== undefined) return withMember(record.members, self);
      return withMember(await this.probeBeating(), self);
    });
    if (behind || !entry.record.members?.includes(self)) return;
    state.latest = entry;
    if (!state.joined || state.excluded)
      this.options.logger.info(
        { members: entry.record.members, revision: entry.revision, epoch: entry.record.epoch },
        state.excluded ? 'fleet: re-joined the members after an exclusion' : 'fleet: a member',
      );
    state.joined = true;
    if (state.excluded) {
      state.excluded = false;
      state.unfence();
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
}
