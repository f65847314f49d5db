/**
 * A worker thread's one long-lived task (a LaneHost). For each slot of the node (a loaded model version) it
 * holds a lane: that version's ONNX Runtime session and the micro-batcher loop over the slot's request rings —
 * wait on the rings → ask the batch policy → claim a batch → run (batch-run.ts) → write one response record
 * per item into the node's response ring (response-writer.ts). The lane itself: lane.ts.
 */
import { threadId } from 'node:worker_threads';
import { createBatchPolicy } from '../../libs/batching';
import { compareSignature, loadSession } from '../../libs/inference';
import { MetricsShard } from '../../libs/metrics';
import { readDeadlineAt, readEnqueuedAt } from '../../libs/protocol';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import { BatchBuffers } from './batch';
import { BatchRunner } from './batch-run';
import { InflightTable, MAX_BATCH_ITEMS, MAX_BATCHES_IN_FLIGHT } from './inflight-table';
import { IDLE_WAIT_MS, type Lane, recordPolicy } from './lane';
import type { LoadCommand, WorkerCommand, WorkerEvent, WorkerInit } from './messages';
import { ResponseWriter } from './response-writer';

/** What runs on one worker thread: its lanes, the batch regions they share, and its control port. */
class LaneHost {
  private readonly lanes = new Map<number, Lane>();
  private readonly metrics: MetricsShard;
  /** Every answer this thread writes into the node's response ring. */
  private readonly writer: ResponseWriter;
  private readonly runner: BatchRunner;
  private readonly inflight: InflightTable;
  private readonly freeRegions: number[] = [];
  /** Lanes with requests waiting for a batch region (every region busy): they get the next one first. */
  private readonly regionWaiters = new Set<Lane>();
  private draining = false;
  private finish!: () => void;
  readonly finished = new Promise<void>((resolve) => {
    this.finish = resolve;
  });

  constructor(private readonly init: WorkerInit) {
    const responses = RingBuffer.from(init.responseRing);
    responses.setOwnerId(threadId + 1);
    this.metrics = new MetricsShard(init.metrics, init.metricsShard);
    const log = (level: 'info' | 'warn' | 'error', msg: string, data?: Record<string, unknown>): void =>
      this.log(level, msg, data);
    this.writer = new ResponseWriter(responses, init.workerIndex, this.metrics, log);
    this.runner = new BatchRunner(this.metrics, this.writer, log);
    this.inflight = new InflightTable(init.inflight, init.workerIndex);
    for (let region = MAX_BATCHES_IN_FLIGHT - 1; region >= 0; region--) this.freeRegions.push(region);
    // The node needs our ring owner id to release any ring lock this thread might die holding.
    this.post({ type: 'hello', workerIndex: init.workerIndex, ownerId: threadId + 1 });
    init.port.on('message', (command: WorkerCommand) => {
      this.handle(command).catch((error: Error) =>
        this.log('error', 'control command failed', { error: error.message }),
      );
    });
  }

  private post(event: WorkerEvent): void {
    this.init.port.postMessage(event);
  }

  private log(level: 'info' | 'warn' | 'error', msg: string, data?: Record<string, unknown>): void {
    this.post(data ? { type: 'log', level, msg, data } : { type: 'log', level, msg });
  }

  private async handle(command: WorkerCommand): Promise<void> {
    switch (command.type) {
      case 'load':
        await this.load(command);
        return;
      case 'unload': {
        const lane = this.lanes.get(command.slot);
        if (lane) {
          lane.stopped = true;
          lane.wake?.();
          await lane.done;
          this.lanes.delete(command.slot);
          this.metrics.clearPolicy(command.slot);
          await lane.loaded.session.release().catch(() => undefined);
        }
        this.post({ type: 'unloaded', slot: command.slot, workerIndex: this.init.workerIndex });
        return;
      }
      case 'rebatch': {
        const lane = this.lanes.get(command.slot);
        // Unchanged options (a reload that changed other settings) keep what the policy learned.
        const batching = JSON.stringify(command.batching);
        if (lane && batching !== lane.batching) {
          lane.batching = batching;
          lane.policy = createBatchPolicy(command.batching);
          lane.loggedFit = [Number.NaN, Number.NaN];
          recordPolicy(this.metrics, lane);
          lane.maxBatch = Math.min(command.batching.maxBatchSize, MAX_BATCH_ITEMS);
          // Idle buffers are resized now; those of running batches when they come back (spareBuffers).
          lane.spare = lane.spare.map((buffers) => this.sized(lane, buffers));
          lane.wake?.();
        }
        this.post({ type: 'rebatched', slot: command.slot, workerIndex: this.init.workerIndex });
        return;
      }
      case 'drain':
        this.draining = true;
        for (const lane of this.lanes.values()) lane.wake?.();
        await Promise.all([...this.lanes.values()].map((lane) => lane.done));
        for (const lane of this.lanes.values()) await lane.loaded.session.release().catch(() => undefined);
        this.post({ type: 'drained', workerIndex: this.init.workerIndex });
        this.init.port.close();
        this.finish();
        return;
      case 'crash':
        // Test hook: the thread dies inside its next batch, holding that batch's requests, as a native fault in
        // a model run would — so a test always has requests for the node to answer on the dead thread's behalf.
        this.runner.crashReason = command.reason;
        return;
    }
  }

  private async load(command: LoadCommand): Promise<void> {
    const started = clock();
    try {
      const loaded = await loadSession(command.file, {
        device: this.init.device,
        intraOpThreads: this.init.intraOpThreads,
      });
      const problems = compareSignature(command.signature, loaded.session);
      if (problems.length > 0) {
        await loaded.session.release().catch(() => undefined);
        throw new Error(`config.json does not match ${command.file}: ${problems.join('; ')}`);
      }
      const rings = command.rings.map((buffer) => {
        const ring = RingBuffer.from(buffer);
        ring.setOwnerId(threadId + 1);
        return ring;
      });
      const maxBatch = Math.min(command.batching.maxBatchSize, MAX_BATCH_ITEMS);
      const lane: Lane = {
        slot: command.slot,
        model: command.model,
        version: command.version,
        signature: command.signature,
        rings,
        doorbell: Doorbell.from(command.doorbell),
        policy: createBatchPolicy(command.batching),
        batching: JSON.stringify(command.batching),
        enqueuedTotal: 0,
        seenWrites: rings.map((ring) => ring.writeSequence()),
        loggedFit: [Number.NaN, Number.NaN],
        loaded,
        maxBatch,
        spare: Array.from(
          { length: MAX_BATCHES_IN_FLIGHT },
          () => new BatchBuffers(command.signature, maxBatch),
        ),
        inFlight: 0,
        stopped: false,
        wake: undefined,
        done: Promise.resolve(),
      };
      this.lanes.set(command.slot, lane);
      recordPolicy(this.metrics, lane);
      lane.done = this.runLane(lane).catch((error: Error) => {
        this.log('error', 'lane loop failed', {
          model: lane.model,
          version: lane.version,
          error: error.stack ?? error.message,
        });
        // A lane whose loop ended would keep its version loaded and answer none of its requests (its
        // version would go silent for good). The thread dies instead, and the node replaces it: lanes reloaded,
        // the requests it held answered.
        setImmediate(() => {
          throw new Error(`lane loop of ${lane.model} v${lane.version} failed: ${error.message}`);
        });
      });
      const event: WorkerEvent = {
        type: 'loaded',
        slot: command.slot,
        workerIndex: this.init.workerIndex,
        executionProvider: loaded.executionProvider,
        loadMs: clock() - started,
      };
      if (loaded.fallbackReason) event.fallbackReason = loaded.fallbackReason;
      this.post(event);
    } catch (error) {
      this.post({
        type: 'load-failed',
        slot: command.slot,
        workerIndex: this.init.workerIndex,
        error: (error as Error).message,
      });
    }
  }

  /** Waits until new data, the deadline, or an early wake — whichever comes first. */
  private async pause(lane: Lane, sequence: number, timeoutMs: number): Promise<void> {
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    lane.wake = wake;
    // The control port keeps this thread alive: no timer per wait.
    await Promise.race([lane.doorbell.wait(sequence, Math.max(0, timeoutMs), false), woken]);
    lane.wake = undefined;
  }

  private async runLane(lane: Lane): Promise<void> {
    const rings = lane.rings;
    let oldest = 0;
    let earliestDeadline = 0;
    let peeked: RingBuffer = rings[0]!;
    const readOldest = (offset: number): boolean => {
      const enqueuedAt = readEnqueuedAt(peeked.view, offset);
      if (enqueuedAt < oldest) oldest = enqueuedAt;
      const deadlineAt = readDeadlineAt(peeked.view, offset);
      if (deadlineAt < earliestDeadline) earliestDeadline = deadlineAt;
      return false;
    };
    while (!lane.stopped) {
      const sequence = lane.doorbell.sequence();
      let pending = 0;
      for (const ring of rings) pending += ring.pendingRecords();
      if (pending === 0) {
        if (this.draining && lane.inFlight === 0) break;
        await this.pause(lane, sequence, IDLE_WAIT_MS);
        continue;
      }
      if (lane.inFlight >= MAX_BATCHES_IN_FLIGHT) {
        await this.pause(lane, sequence, IDLE_WAIT_MS);
        continue;
      }
      if (this.freeRegions.length === 0) {
        this.regionWaiters.add(lane);
        await this.pause(lane, sequence, IDLE_WAIT_MS);
        this.regionWaiters.delete(lane);
        continue;
      }
      oldest = Number.POSITIVE_INFINITY;
      earliestDeadline = Number.POSITIVE_INFINITY;
      for (const ring of rings) {
        peeked = ring;
        ring.peek(readOldest, 1);
      }
      if (oldest === Number.POSITIVE_INFINITY) continue;
      for (let i = 0; i < rings.length; i++) {
        const written = rings[i]!.writeSequence();
        lane.enqueuedTotal += (written - lane.seenWrites[i]!) >>> 0;
        lane.seenWrites[i] = written;
      }
      const now = clock();
      const decision = lane.policy.decide(
        {
          length: pending,
          oldestEnqueuedAt: oldest,
          inFlightBatches: lane.inFlight,
          enqueuedTotal: lane.enqueuedTotal,
          earliestDeadlineAt: earliestDeadline,
        },
        now,
      );
      recordPolicy(this.metrics, lane);
      // A second batch is only prepared once it is full: on a device that runs one batch at a time, starting a
      // partial one early would just queue it behind the running one instead of letting it grow.
      const holdForRunning = lane.inFlight > 0 && pending < lane.maxBatch;
      if (decision.kind === 'dispatch' && holdForRunning) {
        await this.pause(lane, sequence, IDLE_WAIT_MS);
      } else if (decision.kind === 'dispatch') {
        const buffers = lane.spare.pop()!;
        // Higher priority first: high, then normal, then low fill what is left of the batch.
        let room = Math.min(decision.size, lane.maxBatch);
        buffers.begin(clock());
        for (let priority = rings.length - 1; priority >= 0 && room > 0; priority--) {
          room -= buffers.claimMore(rings[priority]!, room);
        }
        if (buffers.expiredCount > 0) await this.writer.answerExpired(lane, buffers);
        if (buffers.invalidCount > 0 || buffers.droppedCount > 0)
          await this.writer.answerInvalid(lane, buffers);
        if (buffers.count === 0) {
          lane.spare.push(this.sized(lane, buffers));
          continue;
        }
        const region = this.freeRegions.pop()!;
        this.inflight.publish(region, buffers.requestIds, buffers.count);
        lane.inFlight++;
        void this.runner.run(lane, buffers).finally(() => {
          this.inflight.clear(region);
          this.freeRegions.push(region);
          lane.spare.push(this.sized(lane, buffers));
          lane.inFlight--;
          this.wakeOthersFirst(lane);
        });
      } else if (decision.kind === 'wait') {
        await this.pause(lane, sequence, decision.untilMs - now);
      } else {
        await this.pause(lane, sequence, IDLE_WAIT_MS);
      }
    }
    while (lane.inFlight > 0) await this.pause(lane, lane.doorbell.sequence(), IDLE_WAIT_MS);
  }

  /**
   * A batch region was freed: lanes that wait for one (another model with requests queued) take it before
   * this lane does, instead of a lane with a long backlog taking it back every time. Wake-ups run in this
   * order (microtasks are FIFO); a doorbell alone would not do, as ONNX Runtime's CPU run is synchronous and a
   * waitAsync wake-up waits behind it — another model's requests then waited for this lane's whole backlog.
   * Idle lanes are not woken: they wait on their doorbells, and waking them costs a wait per batch.
   */
  private wakeOthersFirst(lane: Lane): void {
    if (this.regionWaiters.size > 0)
      for (const waiter of this.regionWaiters) if (waiter !== lane) waiter.wake?.();
    lane.wake?.();
  }

  /** `buffers`, or new ones when the lane's max batch changed since they were made. */
  private sized(lane: Lane, buffers: BatchBuffers): BatchBuffers {
    return buffers.maxItems === lane.maxBatch ? buffers : new BatchBuffers(lane.signature, lane.maxBatch);
  }
}

/** Piscina entry point: resolves only when the node drains this worker. */
export default async function serve(init: WorkerInit): Promise<string> {
  const host = new LaneHost(init);
  await host.finished;
  return 'drained';
}
