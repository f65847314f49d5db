/**
 * This host's answers to the fleet coordinator's barrier steps, run on its own node barrier: a PREPARE is held
 * (the reload in doubt) until the fleet commits or aborts it; one that hears neither in time fences the host
 * until it reads the outcome from the record (record-follower.ts).
 */
import type { Counter } from 'prom-client';
import type { StepAnswer } from '../coordinator';
import type { FleetTable, HostStepRequest } from './';
import type { FleetMemberOptions, MemberState } from './member-state';
import { ensureArtifacts } from './pulled-versions';

/** What the steps need of the part that follows the record. */
export interface StepFollower {
  /** Reloads the host to `table` at the fleet's `epoch` (a COMMIT it did not prepare, a catch-up). */
  converge(table: FleetTable, epoch: number, reason: string): Promise<void>;
  /** Reads the record to settle a held reload (run serialized). */
  resolveFromStore(): Promise<void>;
}

export class StepAnswers {
  private readonly commitTimeoutMs: number;

  constructor(
    private readonly options: FleetMemberOptions,
    private readonly state: MemberState,
    private readonly follower: StepFollower,
    /** streaminfer_fleet_in_doubt_total, with a registry. */
    private readonly inDoubtTotal: Counter | undefined,
  ) {
    this.commitTimeoutMs = options.commitTimeoutMs ?? 10_000;
  }

  /** One barrier step from the fleet coordinator. Never throws: a failure is `{ok: false}`. */
  step(request: HostStepRequest): Promise<StepAnswer> {
    return this.state.serialized(async () => {
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
    const state = this.state;
    if (state.inDoubt) return { ok: false, error: `host still holds fleet reload ${state.inDoubt.reloadId}` };
    // A PREPARE delivered late (this host was frozen or cut off, the fleet went on without it) for a reload the
    // record already holds: held now, it would never hear its COMMIT again.
    if (state.latest?.record.reloadId === reloadId)
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
    state.inDoubt = { reloadId, epochBefore, timer };
    return { ok: true, data: { host: this.options.hostId, epoch: epochBefore } };
  }

  private async commit(table: FleetTable, epoch: number, reloadId: string): Promise<StepAnswer> {
    const coordinator = this.options.host.coordinator();
    if (this.state.inDoubt?.reloadId === reloadId) {
      await this.settleHeld('commit', epoch);
      return { ok: true, data: { epoch } };
    }
    // Already committed from the record (the watch came first), or never prepared: catch up.
    if (coordinator.epoch >= epoch) return { ok: true, data: { epoch: coordinator.epoch } };
    await this.follower.converge(table, epoch, `fleet commit ${reloadId}`);
    return { ok: true, data: { epoch } };
  }

  private async abort(reloadId: string, why: string): Promise<StepAnswer> {
    if (this.state.inDoubt?.reloadId === reloadId) await this.settleHeld('abort', why);
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
    this.state.unfence();
    this.state.setBehind(undefined);
    return { ok: true, data: { epoch } };
  }

  /** Commits (at the fleet's epoch) or aborts the reload this host holds. */
  async settleHeld(how: 'commit', epoch: number): Promise<void>;
  async settleHeld(how: 'abort', why: string): Promise<void>;
  async settleHeld(how: 'commit' | 'abort', arg: number | string): Promise<void> {
    const state = this.state;
    const held = state.inDoubt!;
    const coordinator = this.options.host.coordinator();
    try {
      if (how === 'commit') {
        await coordinator.commitHeld(arg as number);
        // On the fleet's committed table now: no longer behind it.
        state.setBehind(undefined);
      } else await coordinator.abortHeld(arg as string);
    } finally {
      // In doubt until the host's barrier has settled the reload (committed, or aborted when refused): never
      // cleared while the reload is still held, or every later PREPARE is refused as "in progress".
      if (coordinator.heldReason === undefined && state.inDoubt === held) {
        clearTimeout(held.timer);
        state.inDoubt = undefined;
        state.unfence();
      }
    }
  }

  /** PREPAREd, then silence: the fleet may have committed without this host. Stop serving until it knows. */
  private enterDoubt(reloadId: string): void {
    if (this.state.inDoubt?.reloadId !== reloadId) return;
    this.inDoubtTotal?.inc();
    this.state.setFence(
      `in doubt about fleet reload ${reloadId}: no COMMIT or ABORT within ${this.commitTimeoutMs} ms`,
    );
    void this.state.serialized(() => this.follower.resolveFromStore());
  }
}
