/**
 * This node's model table: which versions are loaded (each in its own slot: rings + a lane on every worker),
 * which one `stable` routes to, and the steps a reload is made of — prepare (load beside, not routable),
 * commit (attach what was prepared and switch routes), abort (drop what was prepared), release (unload what
 * the new table no longer holds), and the rolling swap (drain, unload, load in place) for devices that cannot
 * hold two versions at once. The table owns the epoch (the generation of its routes) and the default model:
 * nothing else writes them.
 */
import * as path from 'node:path';
import type { Logger } from 'pino';
import { validateBackpressureOptions } from '../../libs/backpressure';
import { validateBatchPolicyOptions } from '../../libs/batching';
import { unknownModel } from '../../libs/protocol';
import type { ModelEntry, ModelPlan, NodeSettings, TablePlan, UnavailableModel } from '../../libs/registry';
import { readModel } from '../../libs/registry';
import type { NodeStartOptions } from './ipc';
import type { ServedModel, Slot } from './models';
import { batchOptionsFor } from './models';
import { fileOf, Slots } from './slots';
import type { WorkerThreads } from './worker-threads';

const DRAIN_POLL_MS = 5;

export class ModelTable {
  readonly models = new Map<string, ServedModel>();
  /** Every slot by number (the same array for the node's life: the answers read it). */
  readonly slots: ReadonlyArray<Slot | undefined>;
  /** The slots' numbers, rings, queue guards and lanes (slots.ts). */
  private readonly slotSet: Slots;
  /**
   * Versions loaded by a prepare that was not committed yet. They are in no model's `versions` (and a new
   * model is not in `models`), so nothing routes to them until commit attaches them; abort drops them.
   */
  private prepared: Slot[] = [];
  private _epoch = 0;
  private _defaultModel: string;
  /** What the host could not load (the plan's `unavailable`), by model: answered `model_unavailable`. */
  private unavailable = new Map<string, UnavailableModel[]>();

  constructor(
    private readonly options: NodeStartOptions,
    private readonly threads: WorkerThreads,
    metrics: SharedArrayBuffer,
    private readonly logger: Logger,
  ) {
    this.slotSet = new Slots(options, threads, metrics, logger);
    this.slots = this.slotSet.all;
    this._defaultModel = options.defaultModel;
  }

  /** The generation of the routes: requests admitted now report it; a reload commit moves it. */
  get epoch(): number {
    return this._epoch;
  }

  /** The model of requests that name none. */
  get defaultModel(): string {
    return this._defaultModel;
  }

  private setDefaultModel(model: string): void {
    // A default model that failed to load stays the default: requests naming none hear why it is unavailable.
    if (!this.models.has(model) && !this.unavailable.has(model))
      throw unknownModel(model, this.models.keys());
    this._defaultModel = model;
  }

  /** Why `model` (or that version of it) is unavailable on this host; undefined when it is not known so. */
  unavailableReason(model: string, version?: string): string | undefined {
    const entries = this.unavailable.get(model);
    if (!entries) return undefined;
    // A model that is not served at all: any of its failures says why.
    if (!this.models.has(model)) return entries[0]?.reason;
    // A served model listed as a whole (its config.json broke after it loaded) still serves what it loaded.
    return entries.find((candidate) => candidate.version !== undefined && candidate.version === version)
      ?.reason;
  }

  private setUnavailable(plan: TablePlan): void {
    this.unavailable = new Map();
    for (const entry of plan.unavailable ?? []) {
      const list = this.unavailable.get(entry.model) ?? [];
      list.push(entry);
      this.unavailable.set(entry.model, list);
    }
  }

  readEntry(name: string): ModelEntry {
    const cache = this.options.modelCacheDir;
    return readModel(
      path.join(this.options.modelsDir, name),
      name,
      cache === undefined ? undefined : path.join(cache, name),
    );
  }

  /** A thread that died inside reserve/claim would hold its rings' locks forever: release them. */
  forceReleaseLocks(ringOwnerId: number): void {
    this.slotSet.forceReleaseLocks(ringOwnerId);
  }

  /** Makes a loaded version routable under its model (created on its first version). */
  private attach(slot: Slot): void {
    let model = this.models.get(slot.model.name);
    if (!model) {
      model = {
        entry: slot.model,
        versions: new Map(),
        stable: slot.version,
        candidate: undefined,
        previousStable: undefined,
        canaryFraction: 0,
        shadow: false,
      };
      this.models.set(slot.model.name, model);
    }
    model.versions.set(slot.version, slot);
  }

  /** Loads one version and makes it routable at once (start-up, before the node listens). */
  async loadVersion(entry: ModelEntry, version: string): Promise<Slot> {
    const slot = await this.slotSet.load(entry, version);
    this.attach(slot);
    return slot;
  }

  /** Stops routing to a version, waits until everything admitted for it is answered, then unloads it. */
  async unloadVersion(slot: Slot): Promise<void> {
    slot.retiring = true;
    const model = this.models.get(slot.model.name);
    if (model?.versions.get(slot.version) === slot) model.versions.delete(slot.version);
    while (slot.admitted > 0) await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
    await this.threads.unloadLane(slot.index);
    this.slotSet.free(slot);
    this.logger.info({ model: slot.model.name, version: slot.version }, 'model version released');
  }

  /**
   * Start-up (and restart): load the host's current table. What fails to load is left out and returned (the
   * supervisor decides: the host's table without it, or this node restarted); the rest is loaded. With
   * failures, routes and default model wait for the table the supervisor syncs this node to.
   */
  async loadPlan(plan: TablePlan, epoch: number): Promise<UnavailableModel[]> {
    const failures: UnavailableModel[] = [];
    await Promise.all(
      plan.models.flatMap((modelPlan) => {
        let entry: ModelEntry;
        try {
          entry = this.readEntry(modelPlan.name);
        } catch (error) {
          failures.push({ model: modelPlan.name, reason: (error as Error).message });
          return [];
        }
        return modelPlan.versions.map((version) =>
          this.loadVersion(entry, version).then(
            () => undefined,
            (error: Error) => {
              failures.push({ model: modelPlan.name, version, reason: error.message });
            },
          ),
        );
      }),
    );
    this.setUnavailable(plan);
    this._epoch = epoch;
    if (failures.length > 0) return failures;
    for (const modelPlan of plan.models) {
      const model = this.models.get(modelPlan.name);
      if (model) applyRoutes(model, modelPlan);
    }
    this.setDefaultModel(plan.defaultModel);
    return failures;
  }

  // ---------------------------------------------------------------- atomic reload (epoch barrier)

  /** PREPARE: load every version the plan names that is not loaded yet, beside the old ones, unroutable. */
  async prepare(plan: TablePlan): Promise<number> {
    // A prepare that was neither committed nor aborted (its coordinator gave up on this node) is dropped.
    await this.abort();
    try {
      for (const modelPlan of plan.models) {
        const loaded = this.models.get(modelPlan.name);
        // Read only when something is to be loaded: a served model's config.json may be broken on disk now.
        let entry: ModelEntry | undefined;
        for (const version of modelPlan.versions) {
          if (loaded?.versions.has(version)) continue;
          entry ??= this.readEntry(modelPlan.name);
          this.prepared.push(await this.slotSet.load(entry, version));
        }
        if (!modelPlan.versions.includes(modelPlan.stable))
          throw new Error(`plan for ${modelPlan.name} makes ${modelPlan.stable} stable without loading it`);
      }
      return this.prepared.length;
    } catch (error) {
      await this.abort();
      throw error;
    }
  }

  /** ABORT: drop what prepare loaded; routing never saw it. */
  async abort(): Promise<void> {
    const prepared = this.prepared;
    this.prepared = [];
    await Promise.all(prepared.map((slot) => this.unloadVersion(slot)));
  }

  /** COMMIT: attach what prepare loaded and switch every route at once. Requests admitted from now on use the new table. */
  commit(plan: TablePlan, epoch: number): void {
    // Checked before anything changes, so a refused commit leaves the table as it was.
    for (const modelPlan of plan.models) {
      const known =
        this.models.has(modelPlan.name) || this.prepared.some((slot) => slot.model.name === modelPlan.name);
      if (!known) throw new Error(`commit names model ${modelPlan.name}, which is not loaded`);
    }
    for (const slot of this.prepared) this.attach(slot);
    this.prepared = [];
    this.setUnavailable(plan);
    for (const modelPlan of plan.models) {
      const model = this.models.get(modelPlan.name)!;
      model.entry = model.versions.get(modelPlan.stable)?.model ?? model.entry;
      applyRoutes(model, modelPlan);
    }
    this.setDefaultModel(plan.defaultModel);
    this._epoch = epoch;
  }

  /**
   * A node that serves nothing yet (restarted while a reload committed) moves to the host's table: release
   * first (no traffic to drain, and a device may not hold both tables), then load what is missing, then commit.
   */
  async syncTo(plan: TablePlan, epoch: number): Promise<void> {
    await this.release(plan);
    await this.prepare(plan);
    this.commit(plan, epoch);
  }

  /** RELEASE: unload versions the committed plan no longer holds (each after its admitted requests). */
  async release(plan: TablePlan): Promise<number> {
    const keep = new Map(plan.models.map((model) => [model.name, new Set(model.versions)]));
    const retiring: Slot[] = [];
    for (const [name, model] of this.models) {
      const wanted = keep.get(name);
      for (const [version, slot] of model.versions) if (!wanted?.has(version)) retiring.push(slot);
      if (!wanted) this.models.delete(name);
    }
    await Promise.all(retiring.map((slot) => this.unloadVersion(slot)));
    return retiring.length;
  }

  // ---------------------------------------------------------------- configuration reload

  /** PREPARE side of a configuration reload: throws (failing the prepare) when this node cannot apply it. */
  checkSettings(settings: NodeSettings): void {
    validateBackpressureOptions({
      rateLimitRps: settings.backpressure.rateLimitRps,
      rateLimitBurst: settings.backpressure.rateLimitBurst,
      modelErrorPenalty: settings.backpressure.modelErrorPenalty,
      maxInflightPerClient: settings.backpressure.maxInflightPerClient,
      maxModelQueue: settings.backpressure.maxModelQueue,
    });
    for (const model of this.models.values())
      validateBatchPolicyOptions(batchOptionsFor(model.entry, settings.batch));
  }

  /** COMMIT side: every slot's model queue bound, then its batch options (on every worker). */
  async applySettings(settings: NodeSettings): Promise<void> {
    await this.slotSet.applySettings(settings);
  }

  // ---------------------------------------------------------------- rolling swap, in place

  /**
   * For devices that cannot hold two versions: per model whose stable version changes to one not loaded,
   * route its traffic to fresh rings (requests wait there), drain the old version, unload it, then load the
   * new one as the rings' consumer. If the new one fails to load, the old file is loaded into the same rings
   * and the error is reported: requests waited, none failed.
   */
  async rollInPlace(plan: TablePlan, epoch: number): Promise<void> {
    const failures: string[] = [];
    for (const modelPlan of plan.models) {
      const model = this.models.get(modelPlan.name);
      if (!model || model.stable === modelPlan.stable || model.versions.has(modelPlan.stable)) continue;
      const old = model.versions.get(model.stable);
      const entry = this.readEntry(modelPlan.name);
      const file = fileOf(entry, modelPlan.stable);
      const fresh = this.slotSet.create(entry, modelPlan.stable);
      model.versions.set(modelPlan.stable, fresh);
      const previousStable = model.stable;
      model.stable = modelPlan.stable;
      // From this moment requests are routed to the new version: they belong to the new epoch.
      this._epoch = epoch;
      if (old) await this.unloadVersion(old);
      try {
        await this.slotSet.attachLanes(fresh, file, modelPlan.stable);
      } catch (error) {
        failures.push(`model ${modelPlan.name} version ${modelPlan.stable}: ${(error as Error).message}`);
        // Known-good file back into the same rings; relabel the slot.
        model.versions.delete(modelPlan.stable);
        await this.slotSet.attachLanes(fresh, fileOf(old?.model ?? entry, previousStable), previousStable);
        model.versions.set(previousStable, fresh);
        model.stable = previousStable;
        // Routing went back: that is another epoch (the coordinator moves every node there too).
        this._epoch = epoch + 1;
      }
    }
    if (failures.length > 0) throw new Error(failures.join('; '));
    this.commit(plan, epoch);
    await this.release(plan);
  }
}

/** The settings a node runs with, as a configuration reload would set them. */
export function nodeSettingsOf(options: NodeStartOptions): NodeSettings {
  return {
    batch: options.batch,
    maxPayloadBytes: options.maxPayloadBytes,
    requestTimeoutMs: options.requestTimeoutMs,
    backpressure: options.backpressure,
    shutdownTimeoutMs: options.shutdownTimeoutMs,
    logLevel: options.logLevel,
    ...(options.tls ? { tls: options.tls } : {}),
    ...(options.tenants ? { tenants: options.tenants } : {}),
  };
}

/** Aliases, canary and shadow from a plan; an alias naming a version that is not loaded is dropped. */
function applyRoutes(model: ServedModel, plan: ModelPlan): void {
  model.stable = plan.stable;
  model.candidate =
    plan.candidate !== undefined && model.versions.has(plan.candidate) ? plan.candidate : undefined;
  model.previousStable = plan.previousStable;
  model.canaryFraction =
    model.candidate === undefined ? 0 : Math.min(100, Math.max(0, plan.canaryPercent ?? 0)) / 100;
  model.shadow = model.candidate !== undefined && plan.shadow === true;
}
