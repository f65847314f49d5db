/**
 * Hot-swap coordinator: moves every node from one model table to the next, one reload at a time.
 *
 * atomic (epoch barrier): PREPARE on every node (each loads the new versions beside the old on all of its
 * workers) → if any node fails or does not answer, ABORT everywhere and keep the epoch → else COMMIT the new
 * epoch everywhere (routes switch at once) → RELEASE what the new table no longer holds.
 * rolling: node by node, each swapping in place while the others serve; a failure rolls the nodes already
 * done back to the previous table.
 *
 * It talks to nodes only through NodeChannel, so every failure point is testable without processes.
 */
import type { TablePlan } from '../node/ipc';

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
  onOutcome?: (outcome: ReloadOutcome) => void;
}

export class ReloadCoordinator {
  private running: { id: number; reason: string } | undefined;
  private nextId = 1;
  epoch = 0;
  table: TablePlan;
  last: ReloadOutcome | undefined;
  private warnings: string[] = [];

  constructor(
    initial: TablePlan,
    private readonly options: CoordinatorOptions,
  ) {
    this.table = initial;
  }

  get busy(): boolean {
    return this.running !== undefined;
  }

  /** Moves the host to `plan`. Refuses (ReloadBusyError) while another reload runs: reloads never interleave. */
  async reload(plan: TablePlan, strategy: ReloadStrategy, reason: string): Promise<ReloadOutcome> {
    if (this.running) throw new ReloadBusyError(this.running);
    const id = this.nextId++;
    this.running = { id, reason };
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
    };
    this.warnings = [];
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
      await Promise.all(nodes.map((node) => node.abort()));
      return `prepare failed, nothing changed: ${failures.join('; ')}`;
    }
    const epoch = this.epoch + 1;
    const committed = await Promise.all(nodes.map((node) => node.commit(plan, epoch)));
    // From here the new table is the host's: a node that missed the commit (it died) restarts on it.
    this.epoch = epoch;
    this.table = plan;
    await Promise.all(nodes.map((node) => node.release(plan)));
    for (const [i, answer] of committed.entries()) {
      if (!answer.ok)
        this.warnings.push(
          `node ${nodes[i]!.index} missed the commit (${answer.error}); it restarts on the new table`,
        );
    }
    return undefined;
  }

  private async rolling(plan: TablePlan): Promise<string | undefined> {
    const nodes = this.options.nodes();
    const previous = this.table;
    const epoch = this.epoch + 1;
    const done: NodeChannel[] = [];
    for (const node of nodes) {
      const answer = await node.roll(plan, epoch);
      if (!answer.ok) {
        // The failing node restored itself; put the nodes already rolled back on the previous table. Epochs
        // only grow, so "back" is the next epoch after the attempted one, serving the previous table.
        for (const rolled of done.reverse()) await rolled.roll(previous, epoch + 1);
        this.epoch = epoch + 1;
        return `rolling reload failed on node ${node.index}; every node serves the previous table again (epoch ${this.epoch}): ${answer.error}`;
      }
      done.push(node);
    }
    this.epoch = epoch;
    this.table = plan;
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
