/**
 * A worker thread's one long-lived task (a LaneHost). For each slot of the node (a loaded model version) it
 * holds a lane: that version's ONNX Runtime session and the micro-batcher loop over the slot's request rings —
 * wait on the rings → ask the batch policy → claim a batch → run → write one response record per item into
 * the node's response ring.
 */
import { threadId } from 'node:worker_threads';
import type { BatchPolicy } from '../../libs/batching';
import { createBatchPolicy } from '../../libs/batching';
import type { LoadedSession } from '../../libs/inference';
import { compareSignature, loadSession, ort } from '../../libs/inference';
import { MetricsShard } from '../../libs/metrics';
import type { ErrorCode, ModelSignature } from '../../libs/protocol';
import {
  bytesPerElement,
  errorResponseBytes,
  outputSectionHeaderBytes,
  RECORD_PROBLEMS,
  RESPONSE_HEADER_BYTES,
  readDeadlineAt,
  readEnqueuedAt,
  utf8Length,
  writeErrorResponse,
  writeOutputSectionHeader,
  writeResponseHeader,
} from '../../libs/protocol';
import { sharedClock as clock, Doorbell, RingBuffer } from '../../libs/ring';
import { BatchBuffers } from './batch';
import { InflightTable, MAX_BATCH_ITEMS, MAX_BATCHES_IN_FLIGHT } from './inflight-table';
import type { LoadCommand, WorkerCommand, WorkerEvent, WorkerInit } from './messages';

const IDLE_WAIT_MS = 250;
/** A cost model fit is logged when a or b moved by more than this share since the last logged fit. */
const FIT_LOG_CHANGE = 0.25;
/** …and by more than a quarter of this many ms (a fit near 0 ms would otherwise log on every wobble). */
const FIT_LOG_FLOOR_MS = 0.2;
const EXPIRED_MESSAGE = 'deadline passed before the request was batched; it was not computed';
const utf8 = new TextEncoder();

type TypedArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;

interface Lane {
  slot: number;
  model: string;
  version: string;
  signature: ModelSignature;
  /** Request rings by priority code (0 low, 1 normal, 2 high). */
  rings: RingBuffer[];
  doorbell: Doorbell;
  policy: BatchPolicy;
  /** The options `policy` was made from (JSON), to tell a rebatch that changes nothing. */
  batching: string;
  /**
   * Items ever written to the rings since the lane began, exact: each ring's write sequence (mod 2^32) is
   * accumulated here so the adaptive policy counts arrivals once, at enqueue, even across held dispatches.
   */
  enqueuedTotal: number;
  /** Each ring's write sequence when last accumulated into enqueuedTotal. */
  seenWrites: number[];
  /** The cost model fit last logged (a, b in ms); NaN before the first. */
  loggedFit: [number, number];
  loaded: LoadedSession;
  maxBatch: number;
  spare: BatchBuffers[];
  inFlight: number;
  stopped: boolean;
  /** Resolves the lane loop's current wait early (a batch finished, or the lane is stopping). */
  wake: (() => void) | undefined;
  done: Promise<void>;
}

/** What runs on one worker thread: its lanes, the batch regions they share, and its control port. */
class LaneHost {
  private readonly lanes = new Map<number, Lane>();
  private readonly responses: RingBuffer;
  private readonly metrics: MetricsShard;
  private readonly inflight: InflightTable;
  private readonly freeRegions: number[] = [];
  /** Lanes with requests waiting for a batch region (every region busy): they get the next one first. */
  private readonly regionWaiters = new Set<Lane>();
  private draining = false;
  /** Test hook: set by a 'crash' command; the next batch this thread runs dies with it. */
  private crashReason: string | undefined;
  /** Settles when the batch now running on this worker's CPU cores is done. */
  private deviceTurn: Promise<void> = Promise.resolve();
  private finish!: () => void;
  readonly finished = new Promise<void>((resolve) => {
    this.finish = resolve;
  });

  constructor(private readonly init: WorkerInit) {
    this.responses = RingBuffer.from(init.responseRing);
    this.responses.setOwnerId(threadId + 1);
    this.metrics = new MetricsShard(init.metrics, init.metricsShard);
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
          this.recordPolicy(lane);
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
        this.crashReason = command.reason;
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
      this.recordPolicy(lane);
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
      this.recordPolicy(lane);
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
        if (buffers.expiredCount > 0) await this.answerExpired(lane, buffers);
        if (buffers.invalidCount > 0 || buffers.droppedCount > 0) await this.answerInvalid(lane, buffers);
        if (buffers.count === 0) {
          lane.spare.push(this.sized(lane, buffers));
          continue;
        }
        const region = this.freeRegions.pop()!;
        this.inflight.publish(region, buffers.requestIds, buffers.count);
        lane.inFlight++;
        void this.runBatch(lane, buffers).finally(() => {
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

  /** The lane's policy state into this worker's metrics shard (gauges; see libs/metrics). */
  private recordPolicy(lane: Lane): void {
    const state = lane.policy.state();
    const rate = state.arrivalRatePerMs;
    this.metrics.recordPolicy(
      lane.slot,
      state.costIntercept ?? Number.NaN,
      state.costPerItem ?? Number.NaN,
      rate === undefined ? Number.NaN : rate * 1000,
      state.targetBatchSize,
      state.waitMs,
    );
  }

  /** One log line when the learned cost model moved materially (rare: not per batch). */
  private logFitChange(lane: Lane): void {
    const state = lane.policy.state();
    const a = state.costIntercept;
    const b = state.costPerItem;
    if (a === undefined || b === undefined) return;
    const [loggedA, loggedB] = lane.loggedFit;
    // b is compared through a full batch's cost: a tiny b (a cheap model) jitters by large shares of itself.
    const moved = (now: number, then: number, scale: number): boolean =>
      !(Math.abs(now - then) * scale <= FIT_LOG_CHANGE * Math.max(Math.abs(then) * scale, FIT_LOG_FLOOR_MS));
    if (!moved(a, loggedA, 1) && !moved(b, loggedB, lane.maxBatch)) return;
    lane.loggedFit = [a, b];
    this.log('info', 'batch cost model fit changed', {
      model: lane.model,
      version: lane.version,
      cost_intercept_ms: round(a),
      cost_per_item_ms: round(b),
      arrival_rate: round((state.arrivalRatePerMs ?? 0) * 1000),
      target_batch_size: state.targetBatchSize,
      slo_p99_ms: state.sloP99Ms,
    });
  }

  /** `buffers`, or new ones when the lane's max batch changed since they were made. */
  private sized(lane: Lane, buffers: BatchBuffers): BatchBuffers {
    return buffers.maxItems === lane.maxBatch ? buffers : new BatchBuffers(lane.signature, lane.maxBatch);
  }

  /** Expired items answered `deadline_exceeded`: no promise per answer while the response ring has room. */
  private async answerExpired(lane: Lane, buffers: BatchBuffers): Promise<void> {
    const now = clock();
    for (let i = 0; i < buffers.expiredCount; i++) {
      const requestId = buffers.expiredIds[i]!;
      const queueMs = now - buffers.expiredEnqueuedAt[i]!;
      if (!this.tryWriteError(lane, requestId, queueMs, 0, 0, 'deadline_exceeded', EXPIRED_MESSAGE))
        await this.writeError(lane, requestId, queueMs, 0, 0, 'deadline_exceeded', EXPIRED_MESSAGE);
    }
    this.responses.notifyConsumers();
  }

  /** Records the check refused: each answered `internal` alone and counted; the batch runs without them. */
  private async answerInvalid(lane: Lane, buffers: BatchBuffers): Promise<void> {
    for (let i = 0; i < buffers.droppedCount; i++) this.metrics.recordInvalidRecord(lane.slot);
    if (buffers.droppedCount > 0)
      this.log('error', 'request records too short for a header were dropped', {
        model: lane.model,
        version: lane.version,
        count: buffers.droppedCount,
      });
    const now = clock();
    for (let i = 0; i < buffers.invalidCount; i++) {
      this.metrics.recordInvalidRecord(lane.slot);
      await this.writeError(
        lane,
        buffers.invalidIds[i]!,
        now - buffers.invalidEnqueuedAt[i]!,
        0,
        0,
        'internal',
        `the worker refused this request's record (${RECORD_PROBLEMS[buffers.invalidProblems[i]!]}); it was not computed`,
      );
    }
  }

  private async runBatch(lane: Lane, buffers: BatchBuffers): Promise<void> {
    const count = buffers.count;
    // CPU sessions share this worker's cores: run one batch at a time (the next one waits, already claimed).
    const exclusive = lane.loaded.executionProvider === 'cpu';
    const previous = this.deviceTurn;
    let release!: () => void;
    if (exclusive) {
      this.deviceTurn = new Promise<void>((resolve) => {
        release = resolve;
      });
      await previous;
    }
    try {
      if (this.crashReason !== undefined) await this.crashNow(this.crashReason);
      await this.computeBatch(lane, buffers, count);
    } finally {
      if (exclusive) release();
    }
  }

  /** An uncaught error kills this thread like a native fault would; nothing after it runs. */
  private crashNow(reason: string): Promise<never> {
    setImmediate(() => {
      throw new Error(`worker crash requested: ${reason}`);
    });
    return new Promise<never>(() => undefined);
  }

  private async computeBatch(lane: Lane, buffers: BatchBuffers, count: number): Promise<void> {
    const started = clock();
    let outputs: ort.InferenceSession.OnnxValueMapType;
    const fetches = lane.signature.outputs
      .filter(
        (spec) =>
          spec.from === undefined ||
          buffers.inputMask & (1 << lane.signature.inputs.findIndex((input) => input.name === spec.from)),
      )
      .map((spec) => spec.name);
    try {
      outputs = await lane.loaded.session.run(this.buildFeeds(lane, buffers, 0, count), fetches);
    } catch (error) {
      await this.isolate(lane, buffers, fetches, started, 0, count, error);
      return;
    }
    const computeMs = clock() - started;
    this.metrics.recordBatch(lane.slot, count);
    // Only a full batch's successful run teaches the cost model. Bisection runs are sized by where the failing
    // items sit, not by the policy, and follow a failed run: learning from them would let a client that sends
    // failing requests drag the fit, and with it every client's batch sizes and waits, where it likes.
    lane.policy.observe(count, computeMs, clock());
    this.recordPolicy(lane);
    this.logFitChange(lane);
    await this.writeOutputs(lane, buffers, fetches, outputs, 0, count, started, computeMs);
  }

  /**
   * Batch isolation: the run of items [from, to) failed, and a failure may be one item's own (an id out of
   * range for a lookup, a length a Reshape rejects). Each half runs on its own, recursively, so only an item
   * that fails alone is answered `model_error` (with `error`, its run's); its batch-mates get their answers.
   * k failing items of n cost about 2k·log2(n/k) extra runs, each counted in
   * streaminfer_batch_isolation_runs_total.
   */
  private async isolate(
    lane: Lane,
    buffers: BatchBuffers,
    fetches: string[],
    started: number,
    from: number,
    to: number,
    error: unknown,
  ): Promise<void> {
    if (to - from === 1) {
      await this.failRange(lane, buffers, from, to, started, clock() - started, runFailed(error));
      return;
    }
    const middle = from + ((to - from) >> 1);
    await this.runPart(lane, buffers, fetches, started, from, middle);
    await this.runPart(lane, buffers, fetches, started, middle, to);
  }

  /**
   * One bisection run of items [from, to). Its answers carry the size of this run and a compute time from the
   * batch's start (the failed runs before it were spent on these items too); the queue time stays the ring's.
   */
  private async runPart(
    lane: Lane,
    buffers: BatchBuffers,
    fetches: string[],
    started: number,
    from: number,
    to: number,
  ): Promise<void> {
    this.metrics.recordIsolationRun(lane.slot);
    let outputs: ort.InferenceSession.OnnxValueMapType;
    try {
      outputs = await lane.loaded.session.run(this.buildFeeds(lane, buffers, from, to), fetches);
    } catch (error) {
      await this.isolate(lane, buffers, fetches, started, from, to, error);
      return;
    }
    await this.writeOutputs(lane, buffers, fetches, outputs, from, to, started, clock() - started);
  }

  /** ONNX Runtime feeds for items [from, to) of the batch: views over its buffers, no tensor bytes copied. */
  private buildFeeds(
    lane: Lane,
    buffers: BatchBuffers,
    from: number,
    to: number,
  ): Record<string, ort.Tensor> {
    const feeds: Record<string, ort.Tensor> = {};
    const count = to - from;
    lane.signature.inputs.forEach((spec, index) => {
      const dims = [count, ...buffers.itemDims[index]!];
      if (spec.dtype === 'string') {
        const elements = buffers.itemElements(index);
        const all = buffers.strings[index]!;
        const strings =
          buffers.inputMask & (1 << index)
            ? count === buffers.count
              ? all
              : all.slice(from * elements, to * elements)
            : new Array<string>(count * elements).fill('');
        feeds[spec.name] = new ort.Tensor('string', strings, dims);
        return;
      }
      const bytes = buffers.numericBytes(index, from, to);
      feeds[spec.name] = new ort.Tensor(spec.dtype, typedView(spec.dtype, bytes), dims);
    });
    return feeds;
  }

  /** One response record per item of [from, to), from the outputs of the run of exactly those items. */
  private async writeOutputs(
    lane: Lane,
    buffers: BatchBuffers,
    fetches: string[],
    outputs: ort.InferenceSession.OnnxValueMapType,
    from: number,
    to: number,
    started: number,
    computeMs: number,
  ): Promise<void> {
    const count = to - from;
    const specs = lane.signature.outputs;
    const tensors: ort.Tensor[] = [];
    const outputIndexes: number[] = [];
    const itemElements: number[] = [];
    const itemDims: number[][] = [];
    for (const name of fetches) {
      const tensor = outputs[name] as ort.Tensor | undefined;
      if (!tensor || tensor.dims[0] !== count) {
        // Not any one item's fault: the whole run is answered alike (no bisection).
        await this.failRange(
          lane,
          buffers,
          from,
          to,
          started,
          computeMs,
          `model output "${name}" has batch dimension ${tensor?.dims[0]} for a batch of ${count}`,
        );
        return;
      }
      tensors.push(tensor);
      outputIndexes.push(specs.findIndex((spec) => spec.name === name));
      const dims = tensor.dims.slice(1);
      itemDims.push(dims);
      itemElements.push(dims.reduce((product, dim) => product * dim, 1));
    }
    const ring = this.responses;
    for (let item = from; item < to; item++) {
      const row = item - from;
      let length = RESPONSE_HEADER_BYTES;
      for (let t = 0; t < tensors.length; t++) {
        const tensor = tensors[t]!;
        length +=
          outputSectionHeaderBytes(itemDims[t]!.length) + itemByteLength(tensor, row, itemElements[t]!);
      }
      const queueMs = started - buffers.enqueuedAt[item]!;
      const requestId = buffers.requestIds[item]!;
      if (length > ring.maxRecordBytes) {
        await this.writeError(
          lane,
          requestId,
          queueMs,
          computeMs,
          count,
          'model_error',
          `answer of ${length} bytes exceeds the response ring's record limit`,
        );
        continue;
      }
      // the ring almost always has room: no promise and no microtask per answer then; never an await between
      // reserve() and commit() (see writeError)
      let offset = ring.reserve(length);
      while (offset < 0) {
        await this.waitForRoom(length);
        offset = ring.reserve(length);
      }
      const view = ring.view;
      writeResponseHeader(
        view,
        offset,
        {
          requestId,
          slot: lane.slot,
          queueMs,
          computeMs,
          batchSize: count,
          workerIndex: this.init.workerIndex,
        },
        0,
        tensors.length,
      );
      let at = offset + RESPONSE_HEADER_BYTES;
      for (let t = 0; t < tensors.length; t++) {
        const tensor = tensors[t]!;
        const elements = itemElements[t]!;
        const bytes = itemByteLength(tensor, row, elements);
        at = writeOutputSectionHeader(view, at, outputIndexes[t]!, itemDims[t]!, bytes);
        if (tensor.type === 'string') {
          const data = tensor.data as string[];
          for (let e = row * elements; e < (row + 1) * elements; e++) {
            const text = data[e] ?? '';
            const textBytes = utf8Length(text);
            view.setUint32(at, textBytes, true);
            if (textBytes > 0) utf8.encodeInto(text, ring.bytes.subarray(at + 4, at + 4 + textBytes));
            at += 4 + textBytes;
          }
        } else {
          const data = tensor.data as TypedArray;
          const source = new Uint8Array(data.buffer, data.byteOffset + row * bytes, bytes);
          ring.bytes.set(source, at);
          at += bytes;
        }
      }
      ring.commit(undefined, false);
    }
    ring.notifyConsumers();
  }

  /** Every item of [from, to), computed in one run the model could not answer, gets the same typed error. */
  private async failRange(
    lane: Lane,
    buffers: BatchBuffers,
    from: number,
    to: number,
    started: number,
    computeMs: number,
    message: string,
  ): Promise<void> {
    for (let i = from; i < to; i++) {
      await this.writeError(
        lane,
        buffers.requestIds[i]!,
        started - buffers.enqueuedAt[i]!,
        computeMs,
        to - from,
        'model_error',
        message,
      );
    }
  }

  /**
   * Resolves when the response ring may have room for `length` bytes (or after a while): the caller reserves
   * again. Never a reservation held across the wait: see writeError.
   */
  private async waitForRoom(length: number): Promise<void> {
    // Records committed without a notify must reach the gateway before we wait for it to make room.
    this.responses.notifyConsumers();
    await this.responses.waitForSpace(length, IDLE_WAIT_MS);
  }

  /**
   * One error answer, waiting for room when the ring has none. The lanes of this thread share one response
   * ring object, and between any two awaits of one lane's loop another lane's runs: a reservation must be
   * reserved, written and committed in one synchronous step, or the other lane's reserve() finds it open,
   * throws, and its lane loop ends (its version then went unanswered for good).
   */
  private async writeError(
    lane: Lane,
    requestId: number,
    queueMs: number,
    computeMs: number,
    batchSize: number,
    code: ErrorCode,
    message: string,
  ): Promise<void> {
    while (!this.tryWriteError(lane, requestId, queueMs, computeMs, batchSize, code, message))
      await this.waitForRoom(errorResponseBytes(message));
    this.responses.notifyConsumers();
  }

  /** Writes one error answer if the response ring has room now (committed, consumers not notified); else false. */
  private tryWriteError(
    lane: Lane,
    requestId: number,
    queueMs: number,
    computeMs: number,
    batchSize: number,
    code: ErrorCode,
    message: string,
  ): boolean {
    const offset = this.responses.reserve(errorResponseBytes(message));
    if (offset < 0) return false;
    writeErrorResponse(
      this.responses.view,
      this.responses.bytes,
      offset,
      {
        requestId,
        slot: lane.slot,
        queueMs,
        computeMs,
        batchSize,
        workerIndex: this.init.workerIndex,
      },
      code,
      message,
    );
    this.responses.commit(undefined, false);
    return true;
  }
}

function runFailed(error: unknown): string {
  return `model run failed: ${(error as Error).message}`;
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

function itemByteLength(tensor: ort.Tensor, item: number, elements: number): number {
  if (tensor.type !== 'string') return elements * bytesPerElement(tensor.type as 'float32');
  const data = tensor.data as string[];
  let total = 0;
  for (let e = item * elements; e < (item + 1) * elements; e++) total += 4 + utf8Length(data[e] ?? '');
  return total;
}

function typedView(dtype: string, bytes: Uint8Array): TypedArray {
  const { buffer, byteOffset, byteLength } = bytes;
  switch (dtype) {
    case 'float32':
      return new Float32Array(buffer, byteOffset, byteLength / 4);
    case 'float64':
      return new Float64Array(buffer, byteOffset, byteLength / 8);
    case 'int32':
      return new Int32Array(buffer, byteOffset, byteLength / 4);
    case 'int64':
      return new BigInt64Array(buffer, byteOffset, byteLength / 8);
    default:
      return new Uint8Array(buffer, byteOffset, byteLength);
  }
}

/** Piscina entry point: resolves only when the node drains this worker. */
export default async function serve(init: WorkerInit): Promise<string> {
  const host = new LaneHost(init);
  await host.finished;
  return 'drained';
}
