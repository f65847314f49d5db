/**
 * This node's model table: which versions are loaded (each in its own slot: rings + a lane on every worker),
 * which one `stable` routes to, and the steps a reload is made of — prepare (load beside, not routable),
 * commit (attach what was prepared and switch routes), abort (drop what was prepared), release (unload what
 * the new table no longer holds), and the rolling swap (drain, unload, load in place) for devices that cannot
 * hold two versions at once.
 */
import * as path from 'node:path';
import type { Logger } from 'pino';
import { validateBackpressureOptions } from '../../libs/backpressure';
import { validateBatchPolicyOptions } from '../../libs/batching';
import { MAX_SLOTS, resetSlot } from '../../libs/metrics';
import type { ModelEntry } from '../../libs/registry';
import { readModel } from '../../libs/registry';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import type { Gateway } from './gateway';
import type { ModelPlan, NodeSettings, NodeStartOptions, TablePlan } from './ipc';
import type { ModelRuntime, SlotRuntime } from './models';
import { batchOptionsFor } from './models';
import type { WorkerPool } from './pool';

/** Ring size divisor per priority (low, normal, high): normal traffic gets the full STREAMINFER_RING_BYTES. */
const PRIORITY_RING_SHARE = [4, 1, 4];
const DRAIN_POLL_MS = 5;

export class ModelTable {
  readonly models = new Map<string, ModelRuntime>();
  readonly slots: Array<SlotRuntime | undefined> = [];
  private readonly freeSlots: number[] = [];
  /**
   * Versions loaded by a prepare that was not committed yet. They are in no model's `versions` (and a new
   * model is not in `models`), so nothing routes to them until commit attaches them; abort drops them.
   */
  private prepared: SlotRuntime[] = [];

  constructor(
    private readonly options: NodeStartOptions,
    private readonly pool: WorkerPool,
    private readonly gateway: () => Gateway,
    private readonly metrics: SharedArrayBuffer,
    private readonly logger: Logger,
  ) {
    for (let slot = MAX_SLOTS - 1; slot >= 1; slot--) this.freeSlots.push(slot);
  }

  readEntry(name: string): ModelEntry {
    return readModel(path.join(this.options.modelsDir, name), name);
  }

  /** Rings and a slot number, no lanes yet: requests routed here wait until lanes attach. */
  private createSlot(entry: ModelEntry, version: string): SlotRuntime {
    const slot = this.freeSlots.pop();
    if (slot === undefined)
      throw new Error(`no free model slot (at most ${MAX_SLOTS - 1} versions loaded at once)`);
    resetSlot(this.metrics, slot);
    const rings = PRIORITY_RING_SHARE.map((share) => {
      const ring = RingBuffer.create(Math.max(4096, this.options.ringBytes / share));
      ring.setOwnerId(1);
      return ring;
    });
    const runtime: SlotRuntime = {
      slot,
      model: entry,
      version,
      rings,
      doorbell: Doorbell.create(),
      guard: this.gateway().newModelGuard(clock()),
      admitted: 0,
      executionProvider: 'pending',
      loadedWorkers: 0,
      retiring: false,
      resultHead: '',
      resultHeadEpoch: -1,
    };
    this.slots[slot] = runtime;
    return runtime;
  }

  private freeSlot(runtime: SlotRuntime): void {
    if (this.slots[runtime.slot] !== runtime) return;
    this.slots[runtime.slot] = undefined;
    this.freeSlots.push(runtime.slot);
  }

  /** Loads `file` on every worker as the consumer of the slot's rings. */
  private async attachLanes(runtime: SlotRuntime, file: string, version: string): Promise<void> {
    const result = await this.pool.loadLane({
      type: 'load',
      slot: runtime.slot,
      model: runtime.model.name,
      version,
      file,
      signature: runtime.model.signature,
      rings: runtime.rings.map((ring) => ring.buffer),
      doorbell: runtime.doorbell.buffer,
      batching: batchOptionsFor(runtime.model, this.options.batch),
    });
    runtime.version = version;
    runtime.executionProvider = result.executionProvider;
    runtime.loadedWorkers = this.pool.size;
    if (result.fallbackReason) {
      runtime.fallbackReason = result.fallbackReason;
      this.logger.warn(
        { model: runtime.model.name, version, reason: result.fallbackReason },
        'GPU unavailable: running on CPU (--device auto)',
      );
    }
    this.logger.info(
      {
        model: runtime.model.name,
        version,
        provider: result.executionProvider,
        loadMs: Math.round(result.loadMs),
      },
      'model loaded',
    );
  }

  private fileOf(entry: ModelEntry, version: string): string {
    const found = entry.versions.find((candidate) => candidate.version === version);
    if (!found) throw new Error(`model ${entry.name} has no version ${version} in ${entry.dir}`);
    return found.file;
  }

  /** Loads one version into a slot of its own; nothing routes to it yet. */
  private async loadSlot(entry: ModelEntry, version: string): Promise<SlotRuntime> {
    const runtime = this.createSlot(entry, version);
    try {
      await this.attachLanes(runtime, this.fileOf(entry, version), version);
    } catch (error) {
      this.freeSlot(runtime);
      throw new Error(`model ${entry.name} version ${version}: ${(error as Error).message}`);
    }
    return runtime;
  }

  /** Makes a loaded version routable under its model (created on its first version). */
  private attach(runtime: SlotRuntime): void {
    let model = this.models.get(runtime.model.name);
    if (!model) {
      model = {
        entry: runtime.model,
        versions: new Map(),
        stable: runtime.version,
        candidate: undefined,
        previousStable: undefined,
        canaryFraction: 0,
        shadow: false,
      };
      this.models.set(runtime.model.name, model);
    }
    model.versions.set(runtime.version, runtime);
  }

  /** Loads one version and makes it routable at once (start-up, before the node listens). */
  async loadVersion(entry: ModelEntry, version: string): Promise<SlotRuntime> {
    const runtime = await this.loadSlot(entry, version);
    this.attach(runtime);
    return runtime;
  }

  /** Stops routing to a version, waits until everything admitted for it is answered, then unloads it. */
  async unloadVersion(runtime: SlotRuntime): Promise<void> {
    runtime.retiring = true;
    const model = this.models.get(runtime.model.name);
    if (model?.versions.get(runtime.version) === runtime) model.versions.delete(runtime.version);
    while (runtime.admitted > 0) await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
    await this.pool.unloadLane(runtime.slot);
    this.freeSlot(runtime);
    this.logger.info({ model: runtime.model.name, version: runtime.version }, 'model version released');
  }

  /** Start-up (and restart): load exactly the host's current table. */
  async loadPlan(plan: TablePlan): Promise<void> {
    await Promise.all(
      plan.models.flatMap((modelPlan) => {
        const entry = this.readEntry(modelPlan.name);
        return modelPlan.versions.map((version) => this.loadVersion(entry, version));
      }),
    );
    for (const modelPlan of plan.models) {
      const model = this.models.get(modelPlan.name);
      if (model) applyRoutes(model, modelPlan);
    }
    this.gateway().setDefaultModel(plan.defaultModel);
  }

  // ---------------------------------------------------------------- atomic reload (epoch barrier)

  /** PREPARE: load every version the plan names that is not loaded yet, beside the old ones, unroutable. */
  async prepare(plan: TablePlan): Promise<number> {
    // A prepare that was neither committed nor aborted (its coordinator gave up on this node) is dropped.
    await this.abort();
    try {
      for (const modelPlan of plan.models) {
        const loaded = this.models.get(modelPlan.name);
        const entry = this.readEntry(modelPlan.name);
        for (const version of modelPlan.versions) {
          if (loaded?.versions.has(version)) continue;
          this.prepared.push(await this.loadSlot(entry, version));
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
    await Promise.all(prepared.map((runtime) => this.unloadVersion(runtime)));
  }

  /** COMMIT: attach what prepare loaded and switch every route at once. Requests admitted from now on use the new table. */
  commit(plan: TablePlan, epoch: number): void {
    // Checked before anything changes, so a refused commit leaves the table as it was.
    for (const modelPlan of plan.models) {
      const known =
        this.models.has(modelPlan.name) ||
        this.prepared.some((runtime) => runtime.model.name === modelPlan.name);
      if (!known) throw new Error(`commit names model ${modelPlan.name}, which is not loaded`);
    }
    for (const runtime of this.prepared) this.attach(runtime);
    this.prepared = [];
    for (const modelPlan of plan.models) {
      const model = this.models.get(modelPlan.name)!;
      model.entry = model.versions.get(modelPlan.stable)?.model ?? model.entry;
      applyRoutes(model, modelPlan);
    }
    const gateway = this.gateway();
    gateway.setDefaultModel(plan.defaultModel);
    gateway.epoch = epoch;
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
    const retiring: SlotRuntime[] = [];
    for (const [name, model] of this.models) {
      const wanted = keep.get(name);
      for (const [version, runtime] of model.versions) if (!wanted?.has(version)) retiring.push(runtime);
      if (!wanted) this.models.delete(name);
    }
    await Promise.all(retiring.map((runtime) => this.unloadVersion(runtime)));
    return retiring.length;
  }

  // ---------------------------------------------------------------- configuration reload

  /** PREPARE side of a configuration reload: throws (failing the prepare) when this node cannot apply it. */
  checkSettings(settings: NodeSettings): void {
    validateBackpressureOptions({
      rateLimitRps: settings.backpressure.rateLimitRps,
      rateLimitBurst: settings.backpressure.rateLimitBurst,
      maxInflightPerClient: settings.backpressure.maxInflightPerClient,
      maxModelQueue: settings.backpressure.maxModelQueue,
    });
    for (const model of this.models.values())
      validateBatchPolicyOptions(batchOptionsFor(model.entry, settings.batch));
  }

  /** COMMIT side: the gateway's limits, then every loaded lane's batch options (on every worker). */
  async applySettings(settings: NodeSettings): Promise<void> {
    this.gateway().applySettings(settings);
    await Promise.all(
      this.slots.map((runtime) =>
        runtime
          ? this.pool.rebatchLane(runtime.slot, batchOptionsFor(runtime.model, settings.batch))
          : undefined,
      ),
    );
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
      const file = this.fileOf(entry, modelPlan.stable);
      const fresh = this.createSlot(entry, modelPlan.stable);
      model.versions.set(modelPlan.stable, fresh);
      const previousStable = model.stable;
      model.stable = modelPlan.stable;
      // From this moment requests are routed to the new version: they belong to the new epoch.
      this.gateway().epoch = epoch;
      if (old) await this.unloadVersion(old);
      try {
        await this.attachLanes(fresh, file, modelPlan.stable);
      } catch (error) {
        failures.push(`model ${modelPlan.name} version ${modelPlan.stable}: ${(error as Error).message}`);
        // Known-good file back into the same rings; relabel the slot.
        model.versions.delete(modelPlan.stable);
        await this.attachLanes(fresh, this.fileOf(old?.model ?? entry, previousStable), previousStable);
        model.versions.set(previousStable, fresh);
        model.stable = previousStable;
        // Routing went back: that is another epoch (the coordinator moves every node there too).
        this.gateway().epoch = epoch + 1;
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
  };
}

/** Aliases, canary and shadow from a plan; an alias naming a version that is not loaded is dropped. */
function applyRoutes(model: ModelRuntime, plan: ModelPlan): void {
  model.stable = plan.stable;
  model.candidate =
    plan.candidate !== undefined && model.versions.has(plan.candidate) ? plan.candidate : undefined;
  model.previousStable = plan.previousStable;
  model.canaryFraction =
    model.candidate === undefined ? 0 : Math.min(100, Math.max(0, plan.canaryPercent ?? 0)) / 100;
  model.shadow = model.candidate !== undefined && plan.shadow === true;
}
