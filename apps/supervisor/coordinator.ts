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
 *
 * It talks to nodes only through NodeChannel, so every failure point is testable without processes.
 */
import type { TablePlan } from '../../libs/registry';

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
  warnings?: string[];
  /** Per node, in node order: checked answers, never assumed. */
  nodes: NodeOutcome[];
  /** A configuration reload: the settings it applied, and those that need a restart (set by the supervisor). */
  config?: { applied: string[]; restartRequired: string[] };
}

export class ReloadBusyError extends Error {
  readonly code = 'reload_in_progress';
  constructor(readonly current: { id: number; reason: string }) {
    super(`reload ${current.id} (${current.reason}) is still in progress; try again when it has finished`);
    this.name = 'ReloadBusyError';
  }
}

export interface CoordinatorOptions {
  nodes: () => NodeChannel[];
  now: () => number;
  /** A reload begins (it was not refused): systemd hears RELOADING=1. */
  onStart?: (reload: { id: number; reason: string; strategy: ReloadStrategy }) => void;
  onOutcome?: (outcome: ReloadOutcome) => void;
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

  /** Moves the host to `plan`. Refuses (ReloadBusyError) while another reload runs: reloads never interleave. */
  async reload(plan: TablePlan, strategy: ReloadStrategy, reason: string): Promise<ReloadOutcome> {
    if (this.running) throw new ReloadBusyError(this.running);
    const id = this.nextId++;
    this.running = { id, reason };
    this.settled = false;
    this.options.onStart?.({ id, reason, strategy });
    const started = this.options.now();
    const before = this.table;
    const outcome: ReloadOutcome = {
      id,
      result: 'unchanged',
      strategy,
      reason,
      epochBefore: this.epoch,
      epoch: this.epoch,
      changes: diffTables(before, plan),
      defaultModel: { from: before.defaultModel, to: plan.defaultModel },
      startedAt: new Date().toISOString(),
      durationMs: 0,
      nodes: [],
    };
    this.warnings = [];
    this.nodeOutcomes = [];
    try {
      const error = strategy === 'atomic' ? await this.atomic(plan) : await this.rolling(plan);
      if (error) {
        outcome.result = 'failed';
        outcome.error = error;
      } else {
        outcome.result = 'committed';
      }
    } finally {
      // A failed rolling reload moved on to an epoch that serves the previous table; atomic never moves.
      outcome.epoch = this.epoch;
      if (this.warnings.length > 0) outcome.warnings = this.warnings;
      outcome.nodes = this.nodeOutcomes.sort((a, b) => a.node - b.node);
      outcome.durationMs = this.options.now() - started;
      this.running = undefined;
      this.last = outcome;
      this.options.onOutcome?.(outcome);
    }
    return outcome;
  }

  /** Returns an error text on failure (nothing changed), undefined when committed. */
  private async atomic(plan: TablePlan): Promise<string | undefined> {
    const nodes = this.options.nodes();
    const prepared = await Promise.all(nodes.map((node) => node.prepare(plan)));
    const failures = prepared
      .map((answer, i) => (answer.ok ? undefined : `node ${nodes[i]!.index}: ${answer.error}`))
      .filter(Boolean);
    if (failures.length > 0) {
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
      return `prepare failed, nothing changed: ${failures.join('; ')}`;
    }
    const epoch = this.epoch + 1;
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
    return undefined;
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

  private async rolling(plan: TablePlan): Promise<string | undefined> {
    const nodes = this.options.nodes();
    const previous = this.table;
    const epoch = this.epoch + 1;
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
