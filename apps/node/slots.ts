/**
 * The slots of a node: a number each (at most MAX_SLOTS - 1 versions loaded at once), their request rings,
 * doorbell and model queue guard, and loading a version's lanes on every worker as the rings' consumer.
 */
import type { Logger } from 'pino';
import type { ResolvedBackpressureOptions } from '../../libs/backpressure';
import { ModelQueueGuard, validateBackpressureOptions } from '../../libs/backpressure';
import { MAX_SLOTS, resetSlot } from '../../libs/metrics';
import type { ModelEntry, NodeSettings } from '../../libs/registry';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import { VersionLoadError } from './errors';
import type { NodeStartOptions } from './ipc';
import type { Slot } from './models';
import { batchOptionsFor } from './models';
import type { WorkerThreads } from './worker-threads';

/** Ring size divisor per priority (low, normal, high): normal traffic gets the full STREAMINFER_RING_BYTES. */
const PRIORITY_RING_SHARE = [4, 1, 4];

export class Slots {
  /** Every slot by number; undefined where free. */
  readonly all: Array<Slot | undefined> = [];
  private readonly freeNumbers: number[] = [];
  /** The model queue bounds every slot's guard is made with (a configuration reload changes them). */
  private queueOptions: ResolvedBackpressureOptions;

  constructor(
    private readonly options: NodeStartOptions,
    private readonly threads: WorkerThreads,
    private readonly metrics: SharedArrayBuffer,
    private readonly logger: Logger,
  ) {
    for (let slot = MAX_SLOTS - 1; slot >= 1; slot--) this.freeNumbers.push(slot);
    this.queueOptions = queueOptions(options.backpressure);
  }

  /** Rings and a slot number, no lanes yet: requests routed here wait until lanes attach. */
  create(entry: ModelEntry, version: string): Slot {
    const index = this.freeNumbers.pop();
    if (index === undefined)
      throw new Error(`no free model slot (at most ${MAX_SLOTS - 1} versions loaded at once)`);
    resetSlot(this.metrics, index);
    const rings = PRIORITY_RING_SHARE.map((share) => {
      const ring = RingBuffer.create(Math.max(4096, this.options.ringBytes / share));
      ring.setOwnerId(1);
      return ring;
    });
    const slot: Slot = {
      index,
      model: entry,
      version,
      rings,
      doorbell: Doorbell.create(),
      guard: new ModelQueueGuard(this.queueOptions, clock()),
      admitted: 0,
      executionProvider: 'pending',
      loadedWorkers: 0,
      retiring: false,
      resultHead: '',
      resultHeadEpoch: -1,
    };
    this.all[index] = slot;
    return slot;
  }

  /** A thread that died inside reserve/claim would hold its rings' locks forever: release them. */
  forceReleaseLocks(ringOwnerId: number): void {
    for (const slot of this.all) for (const ring of slot?.rings ?? []) ring.forceReleaseLocks(ringOwnerId);
  }

  /** The slot's number back to the pool (its lanes are unloaded). */
  free(slot: Slot): void {
    if (this.all[slot.index] !== slot) return;
    this.all[slot.index] = undefined;
    this.freeNumbers.push(slot.index);
  }

  /** Loads `file` on every worker as the consumer of the slot's rings. */
  async attachLanes(slot: Slot, file: string, version: string): Promise<void> {
    const result = await this.threads.loadLane({
      type: 'load',
      slot: slot.index,
      model: slot.model.name,
      version,
      file,
      signature: slot.model.signature,
      rings: slot.rings.map((ring) => ring.buffer),
      doorbell: slot.doorbell.buffer,
      batching: batchOptionsFor(slot.model, this.options.batch),
    });
    slot.version = version;
    slot.executionProvider = result.executionProvider;
    slot.loadedWorkers = this.threads.size;
    if (result.fallbackReason) {
      slot.fallbackReason = result.fallbackReason;
      this.logger.warn(
        {
          model: slot.model.name,
          version,
          provider: result.executionProvider,
          reason: result.fallbackReason,
        },
        `--device auto fell back to ${result.executionProvider}`,
      );
    }
    this.logger.info(
      {
        model: slot.model.name,
        version,
        provider: result.executionProvider,
        loadMs: Math.round(result.loadMs),
      },
      'model loaded',
    );
  }

  /** Loads one version into a slot of its own; nothing routes to it yet. */
  async load(entry: ModelEntry, version: string): Promise<Slot> {
    const slot = this.create(entry, version);
    try {
      await this.attachLanes(slot, fileOf(entry, version), version);
    } catch (error) {
      this.free(slot);
      throw new VersionLoadError(
        entry.name,
        version,
        `model ${entry.name} version ${version}: ${(error as Error).message}`,
      );
    }
    return slot;
  }

  /** A configuration reload's COMMIT: every slot's model queue bound, then its batch options (on every worker). */
  async applySettings(settings: NodeSettings): Promise<void> {
    this.queueOptions = queueOptions(settings.backpressure);
    const now = clock();
    for (const slot of this.all) if (slot) slot.guard = slot.guard.reconfigured(this.queueOptions, now);
    await Promise.all(
      this.all.map((slot) =>
        slot ? this.threads.rebatchLane(slot.index, batchOptionsFor(slot.model, settings.batch)) : undefined,
      ),
    );
  }
}

export function fileOf(entry: ModelEntry, version: string): string {
  const found = entry.versions.find((candidate) => candidate.version === version);
  if (!found) throw new Error(`model ${entry.name} has no version ${version} in ${entry.dir}`);
  return found.file;
}

/** The backpressure options a slot's model queue guard is made with. */
function queueOptions(backpressure: NodeStartOptions['backpressure']): ResolvedBackpressureOptions {
  return validateBackpressureOptions({
    rateLimitRps: backpressure.rateLimitRps,
    rateLimitBurst: backpressure.rateLimitBurst,
    maxInflightPerClient: backpressure.maxInflightPerClient,
    maxModelQueue: backpressure.maxModelQueue,
  });
}
