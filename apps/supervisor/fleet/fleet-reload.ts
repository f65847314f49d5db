/**
 * Fleet reload coordinator: moves the hosts of a fleet from the committed registry record to a next table, one
 * fleet reload at a time (per instance here; per fleet through the KV lease its caller holds).
 *
 * atomic (the epoch barrier across hosts): PREPARE on every live host (each runs its own node barrier inside) →
 * any failure or timeout: ABORT everywhere, nothing written → else the commit point, a CAS write of the record
 * at the next epoch (a conflict or an unreachable KV aborts everywhere) → COMMIT everywhere → RELEASE. Once the
 * record is written the reload has happened: a host that misses COMMIT fences itself and catches up from it.
 * rolling: the record is written first (the table every host converges to), then host by host; a failure
 * writes the previous table at the next epoch and moves every host back to it.
 *
 * It talks to hosts only through HostChannel and to NATS only through commitPoint, so every failure point is
 * testable without processes.
 */
import { isDeepStrictEqual } from 'node:util';
import { diffTables, type ReloadStrategy, type StepAnswer, type VersionChange } from '../coordinator';
import { ReloadBusyError } from '../errors';
import type { FleetRecord, FleetTable, HostStepAnswer } from './';
import { REGISTRY_RECORD_FORMAT } from './records';

/**
 * One member as the coordinator sees it (its own host included). Every call resolves { ok: false } on failure,
 * timeout or an unreachable host — never throws; `down` in an answer: the host is gone (no NATS connection, or
 * its heartbeat expired while it was asked), so the reload goes on without it. The plan is the fleet table:
 * each host adds its own settings.
 */
export interface HostChannel {
  host: string;
  /** Set: a member that is down already (no fresh heartbeat): never asked, listed `down` with this reason. */
  down?: string;
  /** The epoch the host last said it serves (its heartbeat), when known: the next epoch goes above it. */
  epoch?: number;
  prepare(plan: FleetTable, reloadId: string): Promise<HostStepAnswer>;
  commit(plan: FleetTable, epoch: number, reloadId: string): Promise<HostStepAnswer>;
  abort(reloadId: string): Promise<HostStepAnswer>;
  release(plan: FleetTable, reloadId: string): Promise<HostStepAnswer>;
  roll(plan: FleetTable, epoch: number, reloadId: string): Promise<HostStepAnswer>;
}

/** The CAS write of the registry record. conflict: the revision was stale (someone else wrote). */
export type CommitPointResult =
  | { ok: true; revision: number }
  | { ok: false; conflict: boolean; error: string };

/**
 * What happened to one host. committed / rolled: on the new table. rolled_back: on the previous table again at
 * the epoch after the attempted one. unchanged: never switched. fenced: did not reach the record's table (it
 * missed COMMIT or a roll-back) and must catch up from the record. down: a member that is gone (no fresh
 * heartbeat, no NATS connection): the reload went on without it; it catches up from the record when it is back.
 */
export type HostState = 'committed' | 'rolled' | 'rolled_back' | 'unchanged' | 'fenced' | 'down';

export interface HostOutcome {
  host: string;
  state: HostState;
  /** What went wrong on the way (the failed steps' answers). */
  error?: string;
}

export interface FleetReloadOutcome {
  id: string;
  result: 'committed' | 'failed' | 'unchanged' | 'conflict';
  strategy: ReloadStrategy;
  reason: string;
  epochBefore: number;
  /** The record's epoch after the reload. */
  epoch: number;
  /** The record's revision after the reload; absent when it wrote nothing. */
  revision?: number;
  changes: VersionChange[];
  startedAt: string;
  durationMs: number;
  error?: string;
  warnings?: string[];
  /** Per host, sorted by host: checked answers, never assumed. */
  hosts: HostOutcome[];
}

export interface FleetReloadRequest {
  table: FleetTable;
  strategy: ReloadStrategy;
  reason: string;
  /** The record read under the lease, and its KV revision (the CAS base). */
  base: { record: FleetRecord; revision: number };
  /** The reload's id, when the caller made it (it names the lease it holds); else newId(). */
  id?: string;
  /** Run the barrier even when the table stays as it is (a host's own settings change rides on it). */
  force?: boolean;
}

export interface FleetCoordinatorOptions {
  /** This host's id: the records' committedBy. */
  host: string;
  /** The members of the base record, read once per reload: those without a fresh heartbeat marked `down`. */
  hosts: (record: FleetRecord) => HostChannel[] | Promise<HostChannel[]>;
  commitPoint: (record: FleetRecord, expectedRevision: number) => Promise<CommitPointResult>;
  /** Wall-clock milliseconds: committedAt, startedAt and the duration. */
  now: () => number;
  newId: () => string;
}

/** How one reload ended, before the outcome is assembled. */
interface Ended {
  result: FleetReloadOutcome['result'];
  epoch: number;
  revision?: number;
  error?: string;
}

interface Run {
  id: string;
  strategy: ReloadStrategy;
  table: FleetTable;
  reason: string;
  base: { record: FleetRecord; revision: number };
  /** The members the records it writes carry: the base's (a format-1 base: the hosts it asks). */
  members: string[];
}

export class FleetReloadCoordinator {
  private running: { id: string; reason: string } | undefined;
  /** ReloadBusyError names a reload by number: the count of reloads this instance has begun. */
  private begun = 0;
  last: FleetReloadOutcome | undefined;
  private warnings: string[] = [];
  private hostOutcomes: HostOutcome[] = [];

  constructor(private readonly options: FleetCoordinatorOptions) {}

  get busy(): boolean {
    return this.running !== undefined;
  }

  /** The fleet reload in progress, if any. */
  get current(): { id: string; reason: string } | undefined {
    return this.running;
  }

  /** Moves the fleet to `table`. Refuses (ReloadBusyError) while another reload runs: reloads never interleave. */
  async reload(request: FleetReloadRequest): Promise<FleetReloadOutcome> {
    if (this.running) throw new ReloadBusyError({ id: this.begun, reason: this.running.reason });
    const { strategy, reason, base } = request;
    const id = request.id ?? this.options.newId();
    this.begun++;
    this.running = { id, reason };
    const started = this.options.now();
    const table = fleetTableOf(request.table);
    const outcome: FleetReloadOutcome = {
      id,
      result: 'unchanged',
      strategy,
      reason,
      epochBefore: base.record.epoch,
      epoch: base.record.epoch,
      changes: diffTables(base.record.table, table),
      startedAt: new Date(started).toISOString(),
      durationMs: 0,
      hosts: [],
    };
    this.warnings = [];
    this.hostOutcomes = [];
    try {
      if (request.force === true || !sameTable(table, base.record.table)) {
        const run = { id, table, reason, base, strategy, members: base.record.members ?? [] };
        const ended = strategy === 'atomic' ? await this.atomic(run) : await this.rolling(run);
        outcome.result = ended.result;
        outcome.epoch = ended.epoch;
        if (ended.revision !== undefined) outcome.revision = ended.revision;
        if (ended.error !== undefined) outcome.error = ended.error;
      }
    } finally {
      if (this.warnings.length > 0) outcome.warnings = this.warnings;
      outcome.hosts = this.hostOutcomes.sort((a, b) => a.host.localeCompare(b.host));
      outcome.durationMs = this.options.now() - started;
      this.running = undefined;
      this.last = outcome;
    }
    return outcome;
  }

  /** The members to ask: those down already are listed so and left out. */
  private async members(run: Run): Promise<HostChannel[]> {
    const all = await this.options.hosts(run.base.record);
    if (run.base.record.members === undefined) run.members = all.map((host) => host.host).sort();
    for (const host of all)
      if (host.down !== undefined)
        this.hostOutcomes.push({ host: host.host, state: 'down', error: host.down });
    return all.filter((host) => host.down === undefined);
  }

  /** Takes the hosts whose answer says they are gone out of `hosts` (and `answers`), listing them down. */
  private dropDown(run: Run, hosts: HostChannel[], answers: HostStepAnswer[], step: string): void {
    for (let i = hosts.length - 1; i >= 0; i--) {
      const answer = answers[i]!;
      if (answer.ok || answer.down !== true) continue;
      const host = hosts[i]!.host;
      // A format-1 base: the first members are the hosts that took part (a hand-written heartbeat does not).
      if (run.base.record.members === undefined)
        run.members = run.members.filter((member) => member !== host);
      this.hostOutcomes.push({ host, state: 'down', error: `${step}: ${answer.error}` });
      hosts.splice(i, 1);
      answers.splice(i, 1);
    }
  }

  private async atomic(run: Run): Promise<Ended> {
    const { id, table, base } = run;
    const hosts = await this.members(run);
    const nothingChanged: Ended = { result: 'failed', epoch: base.record.epoch };
    const prepared = await Promise.all(hosts.map((host) => ask(() => host.prepare(table, id))));
    // A member gone before it answered cannot hold the reload open: it catches up from the record (and one that
    // prepared and then went silent is in doubt, fenced, until it reads the outcome).
    this.dropDown(run, hosts, prepared, 'prepare');
    const failures = prepared.flatMap((answer, i) =>
      answer.ok ? [] : [`host ${hosts[i]!.host}: ${answer.error}`],
    );
    if (failures.length > 0) {
      await this.abortAll(hosts, id, prepared);
      return { ...nothingChanged, error: `prepare failed, nothing changed: ${failures.join('; ')}` };
    }
    const epoch = nextEpoch(base.record.epoch, hosts, prepared);
    const written = await this.write(run, table, epoch, run.reason, base.revision);
    if (!written.ok) {
      await this.abortAll(hosts, id);
      if (written.conflict)
        return {
          ...nothingChanged,
          result: 'conflict',
          error: `the registry record changed since revision ${base.revision} (${written.error}); nothing changed`,
        };
      // A write whose answer was lost may have landed: then the aborted hosts converge to it from the record.
      this.warnings.push('if the record was written after all, every host converges to it from its watch');
      return { ...nothingChanged, error: `the commit point failed, every host aborted: ${written.error}` };
    }
    const committed = await Promise.all(hosts.map((host) => ask(() => host.commit(table, epoch, id))));
    const fenced: string[] = [];
    await Promise.all(
      hosts.map(async (host, i) => {
        const answer = committed[i]!;
        if (!answer.ok && answer.down === true) {
          this.hostOutcomes.push({ host: host.host, state: 'down', error: `commit: ${answer.error}` });
          return;
        }
        if (!answer.ok) {
          fenced.push(host.host);
          this.hostOutcomes.push({ host: host.host, state: 'fenced', error: `commit: ${answer.error}` });
          return;
        }
        this.hostOutcomes.push({ host: host.host, state: 'committed' });
        const released = await ask(() => host.release(table, id));
        // The new table serves already; a failed release only leaves memory held until the next reload.
        if (!released.ok)
          this.warnings.push(`host ${host.host} did not confirm the release: ${released.error}`);
      }),
    );
    if (fenced.length > 0)
      this.warnings.push(
        `${fenced
          .sort()
          .map((host) => `host ${host}`)
          .join(', ')} missed the commit: fenced until caught up from the record at epoch ${epoch}`,
      );
    return { result: 'committed', epoch, revision: written.revision };
  }

  /** ABORT on every host; none has switched. A failed abort leaves the prepared versions held, nothing more. */
  private async abortAll(hosts: HostChannel[], id: string, prepared?: StepAnswer[]): Promise<void> {
    const aborted = await Promise.all(hosts.map((host) => ask(() => host.abort(id))));
    for (const [i, answer] of aborted.entries()) {
      const host = hosts[i]!.host;
      const errors: string[] = [];
      const prepare = prepared?.[i];
      if (prepare && !prepare.ok) errors.push(`prepare: ${prepare.error}`);
      if (!answer.ok) {
        errors.push(`abort: ${answer.error}`);
        this.warnings.push(`host ${host} did not confirm the abort: ${answer.error}`);
      }
      this.hostOutcomes.push(
        errors.length > 0
          ? { host, state: 'unchanged', error: errors.join('; ') }
          : { host, state: 'unchanged' },
      );
    }
  }

  private async rolling(run: Run): Promise<Ended> {
    const { id, table, base } = run;
    const hosts = await this.members(run);
    const epoch = nextEpoch(base.record.epoch, hosts);
    const written = await this.write(run, table, epoch, run.reason, base.revision);
    if (!written.ok) {
      for (const host of hosts) this.hostOutcomes.push({ host: host.host, state: 'unchanged' });
      return written.conflict
        ? {
            result: 'conflict',
            epoch: base.record.epoch,
            error: `the registry record changed since revision ${base.revision} (${written.error}); nothing changed`,
          }
        : {
            result: 'failed',
            epoch: base.record.epoch,
            error: `the commit point failed, nothing changed: ${written.error}`,
          };
    }
    for (let k = 0; k < hosts.length; k++) {
      const answer = await ask(() => hosts[k]!.roll(table, epoch, id));
      if (!answer.ok && answer.down === true) {
        // Gone: it catches up from the record, which names the new table already.
        this.hostOutcomes.push({ host: hosts[k]!.host, state: 'down', error: `roll: ${answer.error}` });
        hosts.splice(k--, 1);
        continue;
      }
      if (!answer.ok) return this.rollBack(run, hosts, k, answer.error ?? 'failed', epoch, written.revision);
    }
    for (const host of hosts) this.hostOutcomes.push({ host: host.host, state: 'rolled' });
    return { result: 'committed', epoch, revision: written.revision };
  }

  /**
   * Host k failed its roll: the previous table goes back into the record at the epoch after the attempted one
   * (epochs only grow), then every host goes there — the failing one first, then the rolled ones in reverse,
   * then the untouched ones, which only move epoch.
   */
  private async rollBack(
    run: Run,
    hosts: HostChannel[],
    k: number,
    error: string,
    epoch: number,
    revision: number,
  ): Promise<Ended> {
    const failing = hosts[k]!.host;
    const back = epoch + 1;
    const reason = `${run.reason} (rolled back: host ${failing} failed)`;
    const rewritten = await this.write(run, run.base.record.table, back, reason, revision);
    if (!rewritten.ok) {
      // The record keeps the new table, and it is the truth: the rolled hosts stay on it, the others catch up.
      for (const [i, host] of hosts.entries())
        this.hostOutcomes.push(
          i < k
            ? { host: host.host, state: 'rolled' }
            : i === k
              ? { host: host.host, state: 'fenced', error: `roll: ${error}` }
              : { host: host.host, state: 'unchanged' },
        );
      this.warnings.push(
        `the record stays at epoch ${epoch} with the new table: the hosts not on it catch up from the record`,
      );
      return {
        result: 'failed',
        epoch,
        revision,
        error: `rolling reload failed on host ${failing}: ${error}; the previous table could not be written back: ${rewritten.error}; ${this.summary()}`,
      };
    }
    const roster = hosts.map((channel, i) => ({
      channel,
      state: i <= k ? ('rolled_back' as const) : ('unchanged' as const),
    }));
    const order = [roster[k]!, ...roster.slice(0, k).reverse(), ...roster.slice(k + 1)];
    for (const { channel, state } of order) {
      const returned = await ask(() => channel.roll(run.base.record.table, back, run.id));
      const errors = channel.host === failing ? [`roll: ${error}`] : [];
      if (!returned.ok) {
        errors.push(`roll back: ${returned.error}`);
        this.warnings.push(
          `host ${channel.host} did not return to the previous table (${returned.error}): fenced until caught up from the record at epoch ${back}`,
        );
      }
      const outcome: HostOutcome = {
        host: channel.host,
        state: returned.ok ? state : returned.down === true ? 'down' : 'fenced',
      };
      if (errors.length > 0) outcome.error = errors.join('; ');
      this.hostOutcomes.push(outcome);
    }
    return {
      result: 'failed',
      epoch: back,
      revision: rewritten.revision,
      error: `rolling reload failed on host ${failing}: ${error}; back to the previous table at epoch ${back}: ${this.summary()}`,
    };
  }

  private summary(): string {
    return this.hostOutcomes
      .slice()
      .sort((a, b) => a.host.localeCompare(b.host))
      .map((outcome) => `host ${outcome.host} ${outcome.state.replace('_', ' ')}`)
      .join(', ');
  }

  /** The commit point: the record at `epoch` serving `table`, CAS on `revision`. A throw counts as a failure. */
  private async write(
    run: Run,
    table: FleetTable,
    epoch: number,
    reason: string,
    revision: number,
  ): Promise<CommitPointResult> {
    const record: FleetRecord = {
      format: REGISTRY_RECORD_FORMAT,
      epoch,
      members: run.members,
      table,
      reloadId: run.id,
      reason,
      strategy: run.strategy,
      committedBy: this.options.host,
      committedAt: new Date(this.options.now()).toISOString(),
    };
    try {
      return await this.options.commitPoint(record, revision);
    } catch (error) {
      return { ok: false, conflict: false, error: messageOf(error) };
    }
  }
}

/**
 * The epoch a reload commits at: above the record and above every host it knows of (heartbeats, PREPARE
 * answers), so the fleet epoch never goes backwards even when the record did (a lost bucket, a re-founded
 * fleet) and no host is ever asked to commit below the epoch it serves.
 */
function nextEpoch(recordEpoch: number, hosts: HostChannel[], prepared: StepAnswer[] = []): number {
  let known = recordEpoch;
  for (const host of hosts) if (host.epoch !== undefined) known = Math.max(known, host.epoch);
  for (const answer of prepared) {
    const epoch = (answer.data as { epoch?: unknown } | undefined)?.epoch;
    if (typeof epoch === 'number' && Number.isSafeInteger(epoch)) known = Math.max(known, epoch);
  }
  return known + 1;
}

/** What a host does on seeing the registry record (its watch, or its start). */
export type HostCatchUp = 'none' | 'commit-prepared' | 'converge' | 'fenced-wait' | 'raise';

/**
 * The member side's decision. own.reloadInDoubt: the fleet reload this host prepared and has seen neither COMMIT
 * nor ABORT for. A record that took that reload commits what was prepared; any other newer record is converged
 * to (a prepared reload it did not take is dead); an older or same-epoch record does not decide a prepared
 * reload, so the host keeps waiting for COMMIT or ABORT (fenced once its commit timeout passes).
 */
export function planHostCatchUp(
  own: { epoch: number; reloadInDoubt?: string },
  record: { epoch: number; reloadId: string },
): HostCatchUp {
  if (record.epoch > own.epoch) return record.reloadId === own.reloadInDoubt ? 'commit-prepared' : 'converge';
  if (own.reloadInDoubt !== undefined && record.reloadId !== own.reloadInDoubt) return 'fenced-wait';
  // The record went back below this host (a lost or restored bucket, a fleet re-founded): the host writes it
  // again above its own epoch, and every host, this one included, converges to it.
  if (record.epoch < own.epoch) return 'raise';
  return 'none';
}

/** Only the models and the default model are shared: a host's plan also carries its own settings. */
export function fleetTableOf(table: FleetTable): FleetTable {
  return { models: table.models, defaultModel: table.defaultModel };
}

/** Compared as JSON, as the record stores it: an absent field and an undefined one are the same. */
function sameTable(a: FleetTable, b: FleetTable): boolean {
  return isDeepStrictEqual(JSON.parse(JSON.stringify(a)), JSON.parse(JSON.stringify(b)));
}

async function ask(step: () => Promise<HostStepAnswer>): Promise<HostStepAnswer> {
  try {
    return await step();
  } catch (error) {
    return { ok: false, error: messageOf(error) };
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
