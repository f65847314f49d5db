/**
 * Progressive delivery on one host: the loop around libs/rollout. Every plan interval it reads the host's own
 * counters (the nodes' metrics, as /metrics collects them), adds a sample to the model's sliding window,
 * evaluates, and makes the registry match the record (`desiredRouting`) through the supervisor's registry
 * change path — the epoch barrier, and under a fleet the fleet's barrier on every host. Rollback happens in
 * the evaluation that decides it, so the candidate stops receiving traffic within one interval (plus the
 * barrier's own time). A registry change that fails (another reload running) is tried again at the next
 * evaluation — for a finished rollout too: its record is written `settled: false` before the change and
 * `true` once the registry holds it, so a crash in between is made good after the restart. Records persist
 * after every evaluation; a restarted supervisor resumes each active rollout at its step (its window starts
 * again: the counters it reads restart with the nodes).
 *
 * In a fleet (FleetRolloutStore) one host drives each rollout: the one it was started on. Its write at every
 * evaluation is its lease (compare-and-set on the revision it last wrote); a host that finds a rollout
 * unwritten for 3 intervals + 5 s takes it over with the same compare-and-set, and a driver whose write
 * conflicts reads what won (an operator's pause or abort from another host keeps the driver; a takeover
 * does not). The checks read the driving host's own counters.
 *
 * A finished rollout (promoted, rolled back, aborted) never becomes active again: the state machine has no
 * way out of those states, so an active copy of a rollout this host knows finished — or an older revision of
 * it — can only be a stale read (a scan that listed the store before the last writes), and is ignored.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { MetricJson } from '../../../libs/metrics';
import { ProtocolError } from '../../../libs/protocol';
import type { TablePlan } from '../../../libs/registry';
import {
  abortRollout,
  type CounterSample,
  desiredRouting,
  evaluateRollout,
  isActive,
  pauseRollout,
  RolloutError,
  type RolloutRecord,
  resumeRollout,
  rolloutView,
  SampleWindow,
  startRollout,
  type Transition,
  validatePlan,
} from '../../../libs/rollout';
import { FleetError } from '../fleet';
import { BOUNDS, counterSample } from './counter-sample';
import { RolloutConflictError } from './errors';
import { RolloutMetrics } from './rollout-metrics';
import type { RolloutStore, StoredRollout } from './rollout-store';

/** A routing change the controller asks of the registry (one epoch). */
export type RolloutRouting =
  | { kind: 'canary'; candidate: string; canaryPercent: number; shadow: boolean }
  | { kind: 'promote'; candidate: string };

export interface RolloutHost {
  /** The table the host serves now. */
  table(): TablePlan;
  /** Every node's metrics (one entry per node that answered). */
  collectMetrics(): Promise<MetricJson[][]>;
  /** Whether the model's outputs carry labels (the disagreement check's default); ProtocolError when unknown. */
  isClassifier(model: string): boolean;
  /** Moves the registry (loads `candidate` when it is not the candidate yet). Throws on refusal or failure. */
  route(model: string, routing: RolloutRouting, reason: string): Promise<void>;
}

export interface RolloutControllerOptions {
  readonly host: RolloutHost;
  store: RolloutStore;
  registry: Registry;
  logger: Logger;
  /** This host's name as a rollout's driver (the fleet host id; any name on a single host). */
  hostId: string;
  now?: () => number;
  /** A fleet: how often a host reads the others' rollouts (to follow them, and take over a silent driver). */
  scanMs?: number;
}

export type RolloutAction = 'start' | 'get' | 'pause' | 'resume' | 'abort';

/** A fleet host takes a rollout over when its driver has not written it for 3 intervals + this. */
const TAKEOVER_GRACE_MS = 5000;

export class RolloutController {
  private readonly records = new Map<string, RolloutRecord>();
  /** The store revision each record was read or written at (the next write's compare-and-set). */
  private readonly revisions = new Map<string, number>();
  /** Models whose rollout this host drives (all of them on a single host). */
  private readonly owned = new Set<string>();
  /** Finished rollouts whose routing the registry is not known to hold yet (see StoredRollout.settled). */
  private readonly unsettled = new Set<string>();
  private readonly windows = new Map<string, SampleWindow>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private scanTimer: NodeJS.Timeout | undefined;
  /** One operation at a time per model (an evaluation, or an operator's pause / resume / abort). */
  private readonly queues = new Map<string, Promise<unknown>>();
  private stopped = false;
  private readonly now: () => number;
  private readonly metrics: RolloutMetrics;

  constructor(private readonly options: RolloutControllerOptions) {
    this.now = options.now ?? Date.now;
    this.metrics = new RolloutMetrics(options.registry, options.logger);
  }

  /** A fleet host keeps its rollouts in the fleet's store, as `hostId` (set before resume()). */
  useStore(store: RolloutStore, hostId: string): void {
    this.options.store = store;
    this.options.hostId = hostId;
  }

  /** Whether a rollout of this model is running (registry actions by hand are refused meanwhile). */
  active(model: string): boolean {
    const record = this.records.get(model);
    return record !== undefined && isActive(record);
  }

  /**
   * Loads the persisted rollouts and resumes the active ones at their step (on a single host all of them; in
   * a fleet those this host drove, or whose driver is silent). In a fleet it then follows the others' every
   * `scanMs`. A store that cannot be read (NATS down) is tried again by the scan.
   */
  async resume(): Promise<void> {
    await this.scan(true).catch((error: Error) =>
      this.options.logger.warn({ err: error.message }, 'rollout: cannot read the rollouts now'),
    );
    if (this.options.store.shared) this.scheduleScan();
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    if (this.scanTimer) clearTimeout(this.scanTimer);
  }

  private scheduleScan(): void {
    if (this.stopped) return;
    this.scanTimer = setTimeout(() => {
      void this.scan(false)
        .catch((error: Error) => this.options.logger.debug({ err: error.message }, 'rollout: scan failed'))
        .finally(() => this.scheduleScan());
    }, this.options.scanMs ?? 2000);
    this.scanTimer.unref();
  }

  /** Reads the store: follows what other hosts wrote, and drives what is this host's (or left silent). */
  private async scan(atStart: boolean): Promise<void> {
    const { entries, warnings } = await this.options.store.list();
    for (const warning of warnings) this.options.logger.warn(warning);
    for (const entry of entries) {
      const model = entry.record.model;
      await this.serial(model, async () => {
        const known = this.revisions.get(model) ?? 0;
        if (this.owned.has(model) && entry.revision <= known) return;
        if (this.stale(entry)) return;
        if (entry.revision !== known) {
          this.records.set(model, entry.record);
          this.revisions.set(model, entry.revision);
          this.metrics.export(entry.record);
          // Taken over while this host could not write (cut off from NATS): the other host drives it now.
          if (entry.driver !== this.options.hostId) this.owned.delete(model);
        }
        // Active, or finished with its routing not confirmed: it needs a driver.
        if ((!isActive(entry.record) && entry.settled) || this.owned.has(model)) return;
        const silentMs = this.now() - entry.beatAt;
        const mine = entry.driver === this.options.hostId;
        if (
          this.options.store.shared &&
          !mine &&
          silentMs < 3 * entry.record.plan.intervalMs + TAKEOVER_GRACE_MS
        )
          return;
        // Ours (a restart), or its driver went silent: drive it from here, if no one else took it first.
        if (!entry.settled) this.unsettled.add(model);
        try {
          await this.persist(entry.record);
        } catch (error) {
          this.unsettled.delete(model);
          if (error instanceof RolloutConflictError) return;
          throw error;
        }
        this.owned.add(model);
        this.options.logger.info(
          {
            model,
            candidate: entry.record.candidate,
            state: entry.record.state,
            step: entry.record.step,
            ...(mine ? {} : { previous_driver: entry.driver, silent_ms: silentMs }),
          },
          atStart && mine ? 'rollout resumed after a restart' : 'rollout taken over from a silent host',
        );
        this.schedule(model, 0);
      });
    }
  }

  /**
   * The admin API's entry: the rollout's view. Refusals are ProtocolErrors; a busy or conflicting reload
   * keeps its own error (the admin API's respond() answers both).
   */
  async handle(model: string, action: RolloutAction, body: Record<string, unknown>): Promise<unknown> {
    try {
      switch (action) {
        case 'get': {
          // A fleet answers from its store (any host's writes); without NATS, from what this host read last.
          const stored = this.options.store.shared
            ? await this.options.store.read(model).catch(() => undefined)
            : undefined;
          const record = stored?.record ?? this.records.get(model);
          if (!record) throw new ProtocolError('not_found', `model "${model}" has no rollout`);
          return { rollout: rolloutView(record) };
        }
        case 'start':
          return { rollout: rolloutView(await this.serial(model, () => this.start(model, body))) };
        default:
          return { rollout: rolloutView(await this.serial(model, () => this.operate(model, action))) };
      }
    } catch (error) {
      throw asProtocolError(error);
    }
  }

  private serial<T>(model: string, run: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(model) ?? Promise.resolve();
    const next = previous.then(run, run);
    this.queues.set(
      model,
      next.catch(() => undefined),
    );
    return next;
  }

  /** The latest stored rollout of a model (a fleet: what any host wrote), adopted locally. */
  private async latest(model: string): Promise<RolloutRecord | undefined> {
    if (!this.options.store.shared) return this.records.get(model);
    const entry = await this.options.store.read(model);
    if (entry && !this.stale(entry) && entry.revision !== this.revisions.get(model)) {
      this.records.set(model, entry.record);
      this.revisions.set(model, entry.revision);
      this.metrics.export(entry.record);
    }
    return this.records.get(model) ?? entry?.record;
  }

  /**
   * A stored entry of the rollout this host holds that is behind what it holds: an older revision, or an
   * active copy of a rollout it knows finished. Another rollout of the model (a new start) is never stale.
   */
  private stale(entry: StoredRollout): boolean {
    const known = this.records.get(entry.record.model);
    if (!known || known.startedAt !== entry.record.startedAt || known.candidate !== entry.record.candidate)
      return false;
    if (!isActive(known) && isActive(entry.record)) return true;
    return entry.revision < (this.revisions.get(entry.record.model) ?? 0);
  }

  /** Writes a record at the revision last seen; this host drives it from then on. */
  private async persist(record: RolloutRecord): Promise<void> {
    const revision = await this.options.store.write(
      record,
      this.options.hostId,
      this.now(),
      !this.unsettled.has(record.model),
      this.revisions.get(record.model) ?? 0,
    );
    this.revisions.set(record.model, revision);
    this.records.set(record.model, record);
  }

  private async start(model: string, body: Record<string, unknown>): Promise<RolloutRecord> {
    const table = this.options.host.table();
    const served = table.models.find((m) => m.name === model);
    if (!served) throw new ProtocolError('not_found', `unknown model "${model}"`);
    const existing = await this.latest(model);
    if (existing && isActive(existing))
      throw new ProtocolError(
        'conflict',
        `a rollout of "${model}" is ${existing.state}: pause, resume or abort it first`,
      );
    const plan = validatePlan(body, { classifier: this.options.host.isClassifier(model) });
    if (plan.version === served.stable)
      throw new ProtocolError(
        'bad_request',
        `version "${plan.version}" is already the stable version of "${model}"`,
      );
    const now = this.now();
    const { record, transition } = startRollout({
      model,
      stable: served.stable,
      candidate: plan.version,
      plan,
      now,
    });
    // Candidate loaded (if it was not) and the first phase's routing, in one epoch; refused → no rollout.
    await this.options.host.route(model, desiredRouting(record), `rollout ${model}: started`);
    this.unsettled.delete(model);
    try {
      await this.persist(record);
    } catch (error) {
      if (error instanceof RolloutConflictError)
        throw new ProtocolError('conflict', `another host started a rollout of "${model}" at the same time`);
      // Not saved (a full disk): no rollout watches the candidate, so it serves nothing (best effort: the
      // registry change may fail for the same reason, and says so in the log).
      await this.options.host
        .route(
          model,
          { kind: 'canary', candidate: record.candidate, canaryPercent: 0, shadow: false },
          `rollout ${model}: not saved`,
        )
        .catch((undo: Error) =>
          this.options.logger.error(
            { model, err: undo.message },
            'rollout: cannot take the unsaved start back',
          ),
        );
      throw error;
    }
    this.owned.add(model);
    const window = new SampleWindow(plan.windowMs, BOUNDS);
    this.windows.set(model, window);
    this.metrics.announce(record, [transition]);
    // The first sample now: the window's baseline.
    await this.sample(record).then(
      (sample) => window.add(sample),
      () => undefined,
    );
    this.schedule(model, plan.intervalMs);
    return record;
  }

  /** pause / resume / abort, from any host: written by compare-and-set, tried again once when it moved. */
  private async operate(model: string, action: 'pause' | 'resume' | 'abort'): Promise<RolloutRecord> {
    for (let attempt = 0; ; attempt++) {
      const record = await this.latest(model);
      if (!record) throw new ProtocolError('not_found', `model "${model}" has no rollout`);
      const now = this.now();
      const moved =
        action === 'pause'
          ? pauseRollout(record, now)
          : action === 'resume'
            ? resumeRollout(record, now)
            : abortRollout(record, now, { reason: 'aborted', detail: 'aborted by the operator' });
      if (action === 'abort') this.unsettled.add(model);
      try {
        await this.writeKeepingDriver(moved.record);
      } catch (error) {
        this.unsettled.delete(model);
        if (error instanceof RolloutConflictError && attempt === 0) continue;
        throw error;
      }
      this.metrics.announce(moved.record, [moved.transition]);
      // The share changes now, from this host, whoever drives the rollout (it settles an abort if this fails).
      if ((await this.reconcile(moved.record, true)) && this.unsettled.delete(model))
        await this.writeKeepingDriver(moved.record).catch(() => undefined);
      if (action === 'resume' && this.owned.has(model)) this.schedule(model, record.plan.intervalMs);
      return moved.record;
    }
  }

  /** An operator's write: on a fleet, the driver stays who it was (it reads the change at its next write). */
  private async writeKeepingDriver(record: RolloutRecord): Promise<void> {
    if (!this.options.store.shared || this.owned.has(record.model)) return this.persist(record);
    const entry = await this.options.store.read(record.model);
    const revision = await this.options.store.write(
      record,
      entry?.driver ?? this.options.hostId,
      entry?.beatAt ?? this.now(),
      !this.unsettled.has(record.model),
      this.revisions.get(record.model) ?? 0,
    );
    this.revisions.set(record.model, revision);
    this.records.set(record.model, record);
  }

  private schedule(model: string, delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timers.get(model));
    const timer = setTimeout(() => {
      this.timers.delete(model);
      void this.serial(model, () => this.tick(model)).catch((error: Error) =>
        this.options.logger.error({ model, err: error.message }, 'rollout evaluation failed'),
      );
    }, delayMs);
    timer.unref();
    this.timers.set(model, timer);
  }

  /**
   * One evaluation of one model's rollout, then the next one scheduled while it is active and ours. A finished
   * one whose routing is not settled (the registry change failed, or a restart came in between) only tries
   * the registry again, every interval, until it holds.
   */
  private async tick(model: string): Promise<void> {
    const before = this.records.get(model);
    if (!before || this.stopped || !this.owned.has(model)) return;
    try {
      if (!isActive(before)) {
        if (this.unsettled.has(model) && (await this.reconcile(before, false))) {
          this.unsettled.delete(model);
          await this.persist(before);
        }
        return;
      }
      const started = performance.now();
      const served = this.options.host.table().models.find((m) => m.name === model);
      let evaluation: { record: RolloutRecord; transitions: Transition[] };
      if (served?.candidate !== before.candidate) {
        // Someone replaced the candidate (or removed the model) under the rollout: it cannot go on.
        const aborted = abortRollout(before, this.now(), {
          reason: 'candidate_replaced',
          detail: `the registry's candidate of "${model}" is ${served?.candidate ?? 'none'}, not ${before.candidate}`,
        });
        evaluation = { record: aborted.record, transitions: [aborted.transition] };
      } else {
        const window = this.windows.get(model) ?? new SampleWindow(before.plan.windowMs, BOUNDS);
        this.windows.set(model, window);
        const delta = window.add(await this.sample(before));
        evaluation = evaluateRollout(before, {
          totals: window.totals(),
          bounds: BOUNDS,
          delta,
          now: this.now(),
        });
      }
      // Finished: written unsettled first, so a crash before the registry change is retried after a restart.
      if (!isActive(evaluation.record)) this.unsettled.add(model);
      try {
        await this.persist(evaluation.record);
      } catch (error) {
        this.unsettled.delete(model);
        if (!(error instanceof RolloutConflictError)) throw error;
        // Another host wrote it (an operator's pause or abort, or a takeover): follow what it wrote.
        const entry = await this.options.store.read(model);
        if (entry && !this.stale(entry)) {
          this.records.set(model, entry.record);
          this.revisions.set(model, entry.revision);
          this.metrics.export(entry.record);
          if (entry.driver !== this.options.hostId) this.owned.delete(model);
          else if (!entry.settled) this.unsettled.add(model);
        }
        return;
      }
      this.metrics.announce(evaluation.record, evaluation.transitions);
      this.metrics.observeEvaluation((performance.now() - started) / 1000);
      if (
        (await this.reconcile(evaluation.record, evaluation.transitions.length > 0)) &&
        this.unsettled.delete(model)
      )
        await this.persist(evaluation.record);
    } catch (error) {
      // NATS away, a node not answering: the next evaluation tries again.
      this.options.logger.warn({ model, err: (error as Error).message }, 'rollout evaluation failed');
    } finally {
      const now = this.records.get(model)!;
      if (this.owned.has(model) && (isActive(now) || this.unsettled.has(model)))
        this.schedule(model, now.plan.intervalMs);
      else this.owned.delete(model);
    }
  }

  /** The counters of the rollout's two versions, summed over the nodes. */
  private async sample(record: RolloutRecord): Promise<CounterSample> {
    const perNode = await this.options.host.collectMetrics();
    return counterSample(perNode, record.model, record.stable, record.candidate, this.now());
  }

  /**
   * Makes the registry hold what the record asks for. True when it does (or nothing can be done: the model
   * or the candidate is gone); false when the change failed (logged; the caller tries again next interval).
   */
  private async reconcile(record: RolloutRecord, changed: boolean): Promise<boolean> {
    const served = this.options.host.table().models.find((m) => m.name === record.model);
    if (!served) return true;
    const routing = desiredRouting(record);
    let needed: boolean;
    if (routing.kind === 'promote')
      needed = served.stable !== record.candidate && served.candidate === record.candidate;
    else
      needed =
        served.candidate === record.candidate &&
        ((served.canaryPercent ?? 0) !== routing.canaryPercent ||
          (served.shadow ?? false) !== routing.shadow);
    if (!needed) return true;
    try {
      await this.options.host.route(record.model, routing, `rollout ${record.model}: ${record.state}`);
      return true;
    } catch (error) {
      this.options.logger[changed ? 'error' : 'warn'](
        { model: record.model, state: record.state, err: (error as Error).message },
        'rollout: registry change failed; trying again at the next evaluation',
      );
      return false;
    }
  }
}

/**
 * A rollout refusal as the API answers it: plan and state errors typed, an unknown model or version 404
 * not_found (the contract), NATS away 503 cluster_unavailable; a busy or conflicting reload is left for the
 * admin API's `respond` (409 reload_in_progress / conflict).
 */
function asProtocolError(error: unknown): unknown {
  if (error instanceof ProtocolError) {
    if (error.code === 'unknown_model' || error.code === 'unknown_version')
      return new ProtocolError('not_found', error.message);
    return error;
  }
  if (error instanceof RolloutError)
    return new ProtocolError(error.code === 'invalid_state' ? 'conflict' : 'bad_request', error.message);
  if (error instanceof FleetError)
    return new ProtocolError(error.code === 'conflict' ? 'conflict' : 'cluster_unavailable', error.message);
  return error;
}
