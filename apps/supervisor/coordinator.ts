/**
 * Hot-swap coordinator: moves every node from one model table to the next, one reload at a time.
 *
 * atomic (epoch barrier): PREPARE on every node (each loads the new versions beside the old on all of its
 * workers) → if any node fails or does not answer, ABORT everywhere and keep the epoch → else COMMIT the new
 * epoch everywhere (routes switch at once) → RELEASE what the new table no longer holds.
 * rolling: node by node, each swapping in place while the others serve; a failure moves every node back to the
 * previous table at the next epoch, and checks each answer.
 * A node that cannot reach the table the host settled on (a missed commit, a failed roll-back) is restarted
 * onto it; every outcome says, per node, what was done and what was seen.
 * In a fleet the phases are the fleet's: prepareHeld keeps the reload open until the fleet coordinator's
 * COMMIT (commitHeld, at the fleet's epoch) or ABORT (abortHeld), and a catch-up reloads to the fleet's epoch.
 * The host's table is saved (`persist`) before any node commits it: a host's own reload that cannot save it
 * aborts and fails (a full disk must not answer "committed" and revert at the next restart); what a fleet
 * decided commits anyway (its record is durable in NATS) and the outcome warns.
 *
 * It talks to nodes only through NodeChannel, so every failure point is testable without processes.
 */
import { type ErrorCode, ProtocolError } from '../../libs/protocol';
import type { TablePlan } from '../../libs/registry';
import { ReloadBusyError } from './errors';

export type ReloadStrategy = 'atomic' | 'rolling';

export interface StepAnswer {
  ok: boolean;
  error?: string;
  data?: unknown;
}

/** One node as the coordinator sees it. `call` resolves { ok: false } on failure, timeout or death — never throws. */
export interface NodeChannel {
  index: number;
  prepare(plan: TablePlan): Promise<StepAnswer>;
  commit(plan: TablePlan, epoch: number): Promise<StepAnswer>;
  abort(): Promise<StepAnswer>;
  release(plan: TablePlan): Promise<StepAnswer>;
  roll(plan: TablePlan, epoch: number): Promise<StepAnswer>;
  /** Replaces the node's process; resolves once it is ready on the host's current table and epoch. */
  restart(reason: string): Promise<StepAnswer>;
}

/**
 * What happened to one node in a reload. committed / rolled: on the new table. rolled_back: had rolled, is on
 * the previous table again. restored: its own roll failed and it is on the previous table again. unchanged:
 * never switched (prepare failed somewhere; or a rolling reload stopped before reaching it). restarted: could not
 * reach the host's table, so its process was replaced and came up on it. restart_failed: not even that.
 */
export type NodeState =
  | 'committed'
  | 'rolled'
  | 'rolled_back'
  | 'restored'
  | 'unchanged'
  | 'restarted'
  | 'restart_failed';

export interface NodeOutcome {
  node: number;
  state: NodeState;
  /** What went wrong on the way (the failed step's answer, then the restart's). */
  error?: string;
}

export interface VersionChange {
  model: string;
  from: string | null;
  to: string | null;
}

export interface ReloadOutcome {
  id: number;
  result: 'committed' | 'failed' | 'unchanged';
  strategy: ReloadStrategy;
  reason: string;
  epochBefore: number;
  epoch: number;
  changes: VersionChange[];
  defaultModel: { from: string; to: string };
  startedAt: string;
  durationMs: number;
  error?: string;
  /** A failed reload's typed error when it is not `reload_failed` (the table could not be saved). */
  code?: ErrorCode;
  warnings?: string[];
  /** Per node, in node order: checked answers, never assumed. */
  nodes: NodeOutcome[];
  /** A configuration reload: the settings it applied, and those that need a restart (set by the supervisor). */
  config?: { applied: string[]; restartRequired: string[] };
  /** A fleet reload: its id and what each host did (the nodes above are this host's). */
  fleet?: { reloadId: string; hosts: Array<{ host: string; state: string; error?: string }> };
}

export interface CoordinatorOptions {
  nodes: () => NodeChannel[];
  now: () => number;
  /** A reload begins (it was not refused): systemd hears RELOADING=1. */
  onStart?: (reload: { id: number; reason: string; strategy: ReloadStrategy }) => void;
  onOutcome?: (outcome: ReloadOutcome) => void;
  /** Saves the host's next table; throws (a ProtocolError storage_full / persist_failed) when it cannot. */
  persist?: (plan: TablePlan) => void;
}

export class ReloadCoordinator {
  private running: { id: number; reason: string } | undefined;
  private nextId = 1;
  epoch = 0;
  table: TablePlan;
  last: ReloadOutcome | undefined;
  private warnings: string[] = [];
  private nodeOutcomes: NodeOutcome[] = [];
  /** The running reload has settled the host's table and epoch; only restarts of stragglers are left. */
  private settled = false;
  private started = 0;
  /** The nodes the running reload prepared: the ones that commit or abort. */
  private prepared: NodeChannel[] = [];
  /** A fleet reload prepared on every node, waiting for the fleet's COMMIT or ABORT. */
  private held: { plan: TablePlan; outcome: ReloadOutcome } | undefined;
  /** Why the running reload's table could not be saved (it failed for that). */
  private refusal: ErrorCode | undefined;

  constructor(
    initial: TablePlan,
    private readonly options: CoordinatorOptions,
  ) {
    this.table = initial;
  }

  get busy(): boolean {
    return this.running !== undefined;
  }

  /**
   * A reload is deciding the host's table: a (re)starting node must wait before it joins. Once the table is
   * settled the node may join at once — a reload restarting a straggler waits for exactly that node.
   */
  get deciding(): boolean {
    return this.running !== undefined && !this.settled;
  }

  /** The reload in progress, if any. */
  get current(): { id: number; reason: string } | undefined {
    return this.running;
  }

  /**
   * Moves the host to `plan`. Refuses (ReloadBusyError) while another reload runs: reloads never interleave.
   * `epoch`: the epoch to reach (a fleet decides it; it must be above the host's), else the next one.
   */
  async reload(
    plan: TablePlan,
    strategy: ReloadStrategy,
    reason: string,
    epoch?: number,
  ): Promise<ReloadOutcome> {
    const target = this.targetEpoch(epoch);
    const outcome = this.begin(plan, strategy, reason);
    // The host's own reload must be saved to commit; a catch-up to the fleet's epoch commits what the fleet holds.
    const own = epoch === undefined;
    try {
      const error =
        strategy === 'atomic' ? await this.atomic(plan, target, own) : await this.rolling(plan, target, own);
      outcome.result = error ? 'failed' : 'committed';
      if (error) outcome.error = error;
      if (error && this.refusal) outcome.code = this.refusal;
    } finally {
      this.finish(outcome);
    }
    return outcome;
  }

  /**
   * A fleet's PREPARE: every node prepares `plan` and the reload stays open (busy) until commitHeld or
   * abortHeld settles it. A failed prepare is aborted on every node at once and settles the reload as failed.
   */
  async prepareHeld(plan: TablePlan, reason: string): Promise<StepAnswer> {
    const outcome = this.begin(plan, 'atomic', reason);
    let error: string | undefined;
    try {
      error = await this.prepareAll(plan);
    } catch (thrown) {
      error = (thrown as Error).message;
    }
    if (error) {
      outcome.result = 'failed';
      outcome.error = error;
      this.finish(outcome);
      return { ok: false, error };
    }
    this.held = { plan, outcome };
    return { ok: true };
  }

  /** The held reload, if one is prepared and waiting for the fleet's decision. */
  get heldReason(): string | undefined {
    return this.held?.outcome.reason;
  }

  /**
   * A fleet's COMMIT of the held reload at the fleet's epoch: commit on every node, release, restart stragglers.
   * An epoch at or below the host's (a fleet whose record went back) is refused, and the held reload is aborted
   * on every node and settled: it is never left holding the host busy.
   */
  async commitHeld(epoch: number): Promise<ReloadOutcome> {
    const held = this.takeHeld('commit');
    try {
      let target: number;
      try {
        target = this.targetEpoch(epoch);
      } catch (refused) {
        await this.abortAll();
        held.outcome.result = 'failed';
        held.outcome.error = (refused as Error).message;
        throw refused;
      }
      this.save(held.plan, false);
      await this.commitAll(held.plan, target);
      held.outcome.result = 'committed';
    } finally {
      this.finish(held.outcome);
    }
    return held.outcome;
  }

  /** A fleet's ABORT of the held reload: every node drops what it prepared; nothing changed. */
  async abortHeld(why: string): Promise<ReloadOutcome> {
    const held = this.takeHeld('abort');
    try {
      await this.abortAll();
      held.outcome.result = 'failed';
      held.outcome.error = why;
    } finally {
      this.finish(held.outcome);
    }
    return held.outcome;
  }

  private takeHeld(step: string): { plan: TablePlan; outcome: ReloadOutcome } {
    const held = this.held;
    if (!held) throw new Error(`no prepared reload to ${step}`);
    this.held = undefined;
    return held;
  }

  private targetEpoch(epoch: number | undefined): number {
    if (epoch === undefined) return this.epoch + 1;
    if (!Number.isInteger(epoch) || epoch <= this.epoch)
      throw new Error(`epoch ${epoch} is not above the host's epoch ${this.epoch}`);
    return epoch;
  }

  private begin(plan: TablePlan, strategy: ReloadStrategy, reason: string): ReloadOutcome {
    if (this.running) throw new ReloadBusyError(this.running);
    const id = this.nextId++;
    this.running = { id, reason };
    this.settled = false;
    this.options.onStart?.({ id, reason, strategy });
    this.started = this.options.now();
    this.warnings = [];
    this.nodeOutcomes = [];
    this.refusal = undefined;
    return {
      id,
      result: 'unchanged',
      strategy,
      reason,
      epochBefore: this.epoch,
      epoch: this.epoch,
      changes: diffTables(this.table, plan),
      defaultModel: { from: this.table.defaultModel, to: plan.defaultModel },
      startedAt: new Date().toISOString(),
      durationMs: 0,
      nodes: [],
    };
  }

  private finish(outcome: ReloadOutcome): void {
    // A failed rolling reload moved on to an epoch that serves the previous table; atomic never moves.
    outcome.epoch = this.epoch;
    if (this.warnings.length > 0) outcome.warnings = this.warnings;
    outcome.nodes = this.nodeOutcomes.sort((a, b) => a.node - b.node);
    outcome.durationMs = this.options.now() - this.started;
    this.running = undefined;
    this.last = outcome;
    this.options.onOutcome?.(outcome);
  }

  /** Returns an error text on failure (nothing changed), undefined when committed. */
  private async atomic(plan: TablePlan, epoch: number, own: boolean): Promise<string | undefined> {
    const error = await this.prepareAll(plan);
    if (error) return error;
    const refused = this.save(plan, own);
    if (refused) {
      await this.abortAll();
      return refused;
    }
    await this.commitAll(plan, epoch);
    return undefined;
  }

  /**
   * Saves `plan` as the host's table. `strict`: a failure is the reload's (returned, with its code kept);
   * otherwise it only warns.
   */
  private save(plan: TablePlan, strict: boolean): string | undefined {
    try {
      this.options.persist?.(plan);
      return undefined;
    } catch (error) {
      const message = (error as Error).message;
      if (!strict) {
        this.warnings.push(`registry state not saved: ${message}`);
        return undefined;
      }
      this.refusal = error instanceof ProtocolError ? error.code : 'persist_failed';
      return `cannot persist the registry state, nothing changed: ${message}`;
    }
  }

  /** PREPARE on every node; on any failure every node aborts and the error names each failed node. */
  private async prepareAll(plan: TablePlan): Promise<string | undefined> {
    const nodes = this.options.nodes();
    this.prepared = nodes;
    const prepared = await Promise.all(nodes.map((node) => node.prepare(plan)));
    const failures = prepared
      .map((answer, i) => (answer.ok ? undefined : `node ${nodes[i]!.index}: ${answer.error}`))
      .filter(Boolean);
    if (failures.length === 0) return undefined;
    await this.abortAll();
    return `prepare failed, nothing changed: ${failures.join('; ')}`;
  }

  private async abortAll(): Promise<void> {
    const nodes = this.prepared;
    const aborted = await Promise.all(nodes.map((node) => node.abort()));
    for (const [i, answer] of aborted.entries()) {
      const node = nodes[i]!.index;
      // Routing never saw what was prepared; a failed abort only leaves memory held until the next reload.
      if (!answer.ok) this.warnings.push(`node ${node} did not confirm the abort: ${answer.error}`);
      this.nodeOutcomes.push(
        answer.ok
          ? { node, state: 'unchanged' }
          : { node, state: 'unchanged', error: `abort: ${answer.error}` },
      );
    }
  }

  /** COMMIT `epoch` on the nodes that prepared, then RELEASE; a node that missed the commit is restarted onto it. */
  private async commitAll(plan: TablePlan, epoch: number): Promise<void> {
    const nodes = this.prepared;
    const committed = await Promise.all(nodes.map((node) => node.commit(plan, epoch)));
    // From here the new table is the host's: a node that missed the commit is restarted onto it.
    this.epoch = epoch;
    this.table = plan;
    const missed: Array<{ channel: NodeChannel; error: string }> = [];
    for (const [i, answer] of committed.entries()) {
      const channel = nodes[i]!;
      if (answer.ok) this.nodeOutcomes.push({ node: channel.index, state: 'committed' });
      else missed.push({ channel, error: `commit: ${answer.error}` });
    }
    await Promise.all([
      ...nodes.filter((_, i) => committed[i]!.ok).map((node) => node.release(plan)),
      this.restartAll(missed, 'missed the commit'),
    ]);
  }

  /** Restarts each node onto the host's current table and epoch, and records what came of it. */
  private async restartAll(
    nodes: Array<{ channel: NodeChannel; error: string }>,
    why: string,
  ): Promise<void> {
    this.settled = true;
    await Promise.all(
      nodes.map(async ({ channel, error }) => {
        const restarted = await channel.restart(`${why} (${error}); restarting onto epoch ${this.epoch}`);
        if (restarted.ok) {
          this.warnings.push(`node ${channel.index} ${why} (${error}); restarted onto epoch ${this.epoch}`);
          this.nodeOutcomes.push({ node: channel.index, state: 'restarted', error });
        } else {
          this.warnings.push(
            `node ${channel.index} ${why} (${error}) and its restart failed: ${restarted.error}`,
          );
          this.nodeOutcomes.push({
            node: channel.index,
            state: 'restart_failed',
            error: `${error}; restart: ${restarted.error}`,
          });
        }
      }),
    );
  }

  private async rolling(plan: TablePlan, epoch: number, own: boolean): Promise<string | undefined> {
    const nodes = this.options.nodes();
    const previous = this.table;
    // Saved before the first node swaps; a failed roll saves the previous table again below.
    const refused = this.save(plan, own);
    if (refused) return refused;
    for (const [k, node] of nodes.entries()) {
      const answer = await node.roll(plan, epoch);
      if (answer.ok) continue;
      // Epochs only grow, so "back" is the next epoch after the attempted one, serving the previous table.
      // Every node goes there: the rolled ones swap back, the failing one confirms it restored itself, the
      // untouched ones only move epoch. Each answer is checked; a node that cannot get there is restarted.
      const back = epoch + 1;
      this.epoch = back;
      const roster = nodes.map((channel, i) => ({
        channel,
        ok: i < k ? ('rolled_back' as const) : i === k ? ('restored' as const) : ('unchanged' as const),
      }));
      const unreached: Array<{ channel: NodeChannel; error: string }> = [];
      // The failing node first, then the rolled ones in reverse, then the untouched ones.
      const order = [roster[k]!, ...roster.slice(0, k).reverse(), ...roster.slice(k + 1)];
      for (const { channel, ok } of order) {
        const returned = await channel.roll(previous, back);
        if (returned.ok) this.nodeOutcomes.push({ node: channel.index, state: ok });
        else
          unreached.push({
            channel,
            error:
              channel === node
                ? `roll: ${answer.error}; roll back: ${returned.error}`
                : `roll back: ${returned.error}`,
          });
      }
      await this.restartAll(unreached, 'could not return to the previous table');
      this.save(previous, false);
      const summary = this.nodeOutcomes
        .slice()
        .sort((a, b) => a.node - b.node)
        .map((outcome) => `node ${outcome.node} ${outcome.state.replace('_', ' ')}`)
        .join(', ');
      return `rolling reload failed on node ${node.index}: ${answer.error}; back to the previous table at epoch ${back}: ${summary}`;
    }
    this.epoch = epoch;
    this.table = plan;
    for (const node of nodes) this.nodeOutcomes.push({ node: node.index, state: 'rolled' });
    return undefined;
  }
}

/** Stable-version changes per model (from null: new model; to null: removed). */
export function diffTables(before: TablePlan, after: TablePlan): VersionChange[] {
  const changes: VersionChange[] = [];
  const old = new Map(before.models.map((model) => [model.name, model.stable]));
  for (const model of after.models) {
    const from = old.get(model.name) ?? null;
    if (from !== model.stable) changes.push({ model: model.name, from, to: model.stable });
    old.delete(model.name);
  }
  for (const [model, from] of old) changes.push({ model, from, to: null });
  return changes;
}
