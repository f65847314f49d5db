/**
 * The instance's epoch: the pinned model version, recorded in the epoch log that every instance follows.
 * At start the log wins (or an operator's --version moves it); a reload records the next transition and
 * moves every owned partition through its barrier; a transition another instance recorded is followed.
 */
import type { Logger } from 'pino';
import type { InferenceBackend, ModelPin } from './inference/inference';
import { type UnservedPinCode, unservedPinCode } from './inference/pin-errors';
import type { EpochLog, EpochRecord } from './io/epochs';
import type { PipelineMetrics } from './metrics';

export interface ReloadOutcome {
  id: number;
  result: 'committed' | 'unchanged' | 'failed';
  strategy: 'atomic';
  epoch_before: number;
  epoch: number;
  changes: Array<{ model: string; from: string | null; to: string | null }>;
  /** Messages the barrier waited for (in flight when it closed). */
  drained: number;
  duration_ms: number;
  error?: string;
  /** Failed because the requested model or version does not exist (the admin API answers 404). */
  code?: UnservedPinCode;
}

export interface EpochDeps {
  backend: InferenceBackend;
  metrics: PipelineMetrics;
  logger: Logger;
  clock: () => number;
  instanceId: string;
  /** The config's pin was given on the command line: it wins over the epoch log at start. */
  pinFromOperator: boolean;
  /** Called whenever an epoch starts (at start, at each committed reload, when following another's). */
  onEpoch: ((pin: ModelPin, epoch: number) => void) | undefined;
  /** The instance is running (a reload or a followed transition needs it); else its state, for the error. */
  state(): string;
  /** Each owned partition's barrier to the instance's epoch; the partitions that could not, by number. */
  switchPartitions(): Promise<number[]>;
  /** Messages in flight now (what a reload's barrier waits for). */
  inFlight(): number;
  /** A recorded transition cannot be followed (why), or is followed again (undefined). */
  setError(error: string | undefined): void;
}

export class InstanceEpoch {
  private log: EpochLog | undefined;
  private pinNow: ModelPin;
  private epochNow = 0;
  /** Reloads and followed transitions one at a time. */
  private chain: Promise<unknown> = Promise.resolve();
  private reloads = 0;
  private lastReload: ReloadOutcome | undefined;

  constructor(
    private readonly deps: EpochDeps,
    pin: ModelPin,
  ) {
    this.pinNow = pin;
  }

  get pin(): ModelPin {
    return this.pinNow;
  }

  get epoch(): number {
    return this.epochNow;
  }

  /** Settles once no reload or followed transition is under way. */
  idle(): Promise<unknown> {
    return this.chain;
  }

  lastReloadOutcome(): ReloadOutcome | undefined {
    return this.lastReload;
  }

  /**
   * The epoch barrier: prepare the new version, record the transition in the epoch log (every instance
   * follows it), then each partition closes its barrier (every message in flight published), checkpoints as
   * of the new epoch and switches. No partition mixes two versions in one epoch.
   */
  reload(request: { model?: string; version?: string }, reason: string): Promise<ReloadOutcome> {
    const run = this.chain.then(() => this.reloadNow(request, reason));
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * At start the epoch log wins: the last recorded epoch continues, on its version, whatever the config
   * pins (a reload by API or SIGHUP is recorded there, and a restart or a routine deploy with the unchanged
   * config must not roll it back). Only an operator's `--version` on the command line (pinFromOperator)
   * moves it, as a transition recorded like a reload. With no log yet, the config's pin is epoch 1.
   */
  async resume(log: EpochLog, peers: string[]): Promise<void> {
    this.log = log;
    const last = await log.last();
    const others = peers.filter((id) => id !== this.deps.instanceId);
    const same = last !== null && last.model === this.pinNow.model && last.version === this.pinNow.version;
    if (last && same) {
      this.epochNow = last.epoch;
    } else if (last && !this.deps.pinFromOperator) {
      this.deps.logger.warn(
        {
          config: this.pinNow,
          log: { epoch: last.epoch, model: last.model, version: last.version, reason: last.reason },
          instances: others,
        },
        'the config pins another version than the epoch log; following the log (reload, or start with --version, to change it)',
      );
      this.pinNow = { model: last.model, version: last.version };
      this.epochNow = last.epoch;
    } else {
      const epoch = (last?.epoch ?? 0) + 1;
      await log.record(epoch, this.pinNow, last, last ? 'start --version' : 'start');
      this.epochNow = epoch;
      if (last)
        this.deps.logger.warn(
          {
            epoch,
            from: { epoch: last.epoch, model: last.model, version: last.version },
            to: this.pinNow,
            instances: others,
          },
          'epoch transition at start: --version on the command line overrides the epoch log',
        );
    }
    this.deps.metrics.epochs.setPin(this.pinNow.model, this.pinNow.version, this.epochNow);
    this.deps.onEpoch?.({ ...this.pinNow }, this.epochNow);
  }

  /** Another instance recorded a transition: this one adopts it; its partitions switch at their barriers. */
  follow(): Promise<void> {
    if (this.deps.state() !== 'running') return Promise.resolve();
    const run = this.chain.then(async () => {
      const last = await this.log!.last();
      if (!last || this.deps.state() !== 'running') return;
      const same = last.model === this.pinNow.model && last.version === this.pinNow.version;
      if (last.epoch < this.epochNow || (last.epoch === this.epochNow && same)) return;
      const next = { model: last.model, version: last.version };
      try {
        await this.deps.backend.prepare(next);
      } catch (err) {
        this.deps.setError(
          `cannot follow epoch ${last.epoch} (${next.model}@${next.version}): ${(err as Error).message}`,
        );
        this.deps.logger.error(
          { epoch: last.epoch, pin: next, err: String(err) },
          'cannot follow the epoch log',
        );
        return;
      }
      this.deps.setError(undefined);
      this.adopt(next, last.epoch);
      this.deps.logger.info({ epoch: last.epoch, pin: next, reason: last.reason }, 'following the epoch log');
      await this.deps.switchPartitions();
    });
    this.chain = run.catch(() => undefined);
    return run.catch((err: unknown) =>
      this.deps.logger.warn({ err: String(err) }, 'reading the epoch log failed'),
    );
  }

  private adopt(pin: ModelPin, epoch: number): void {
    this.pinNow = { ...pin };
    this.epochNow = epoch;
    this.deps.metrics.epochs.setPin(pin.model, pin.version, epoch);
    this.deps.onEpoch?.({ ...pin }, epoch);
  }

  private async reloadNow(
    request: { model?: string; version?: string },
    reason: string,
  ): Promise<ReloadOutcome> {
    const started = this.deps.clock();
    const id = ++this.reloads;
    const before = { ...this.pinNow };
    const epochBefore = this.epochNow;
    const next: ModelPin = {
      model: request.model ?? before.model,
      version: request.version ?? before.version,
    };
    const outcome = (
      result: ReloadOutcome['result'],
      drained: number,
      error?: string,
      code?: UnservedPinCode,
    ): ReloadOutcome => {
      const o: ReloadOutcome = {
        id,
        result,
        strategy: 'atomic',
        epoch_before: epochBefore,
        epoch: this.epochNow,
        changes:
          result === 'committed'
            ? [
                {
                  model: next.model,
                  from: `${before.model}@${before.version}`,
                  to: `${next.model}@${next.version}`,
                },
              ]
            : [],
        drained,
        duration_ms: this.deps.clock() - started,
        ...(error ? { error } : {}),
        ...(code ? { code } : {}),
      };
      this.lastReload = o;
      return o;
    };
    if (next.model === before.model && next.version === before.version) return outcome('unchanged', 0);
    if (this.deps.state() !== 'running') return outcome('failed', 0, `pipeline is ${this.deps.state()}`);
    try {
      await this.deps.backend.prepare(next);
    } catch (err) {
      return outcome(
        'failed',
        0,
        `cannot pin ${next.model}@${next.version}: ${(err as Error).message}`,
        unservedPinCode(err),
      );
    }
    const drained = this.deps.inFlight();
    let previous: EpochRecord | null;
    try {
      previous = await this.log!.last();
      await this.log!.record(this.epochNow + 1, next, previous, reason);
    } catch (err) {
      return outcome('failed', 0, `transition not recorded: ${(err as Error).message}`);
    }
    this.adopt(next, this.epochNow + 1);
    const lagging = await this.deps.switchPartitions();
    this.deps.logger.info(
      { epoch: this.epochNow, from: before, to: next, drained, reason },
      'epoch committed',
    );
    return outcome(
      'committed',
      drained,
      lagging.length > 0
        ? `partitions ${lagging.join(', ')} switch at their next barrier (checkpoint failed)`
        : undefined,
    );
  }
}
