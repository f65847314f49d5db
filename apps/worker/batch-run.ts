/**
 * One claimed batch through the lane's session: CPU sessions one at a time on this thread, the run, the cost
 * model taught by it, and batch isolation — a failed run bisected until only the items that fail alone get
 * `model_error`. Its answers are written by the ResponseWriter.
 */

import { ort } from '../../libs/inference';
import type { MetricsShard } from '../../libs/metrics';
import { sharedClock as clock } from '../../libs/ring';
import type { BatchBuffers } from './batch';
import { type Lane, logFitChange, recordPolicy, type WorkerLog } from './lane';
import type { ResponseWriter, TypedArray } from './response-writer';

export class BatchRunner {
  /** Settles when the batch now running on this worker's CPU cores is done. */
  private deviceTurn: Promise<void> = Promise.resolve();
  /** Test hook: set by a 'crash' command; the next batch this thread runs dies with it. */
  crashReason: string | undefined;

  constructor(
    private readonly metrics: MetricsShard,
    private readonly writer: ResponseWriter,
    private readonly log: WorkerLog,
  ) {}

  /** Runs one claimed batch; CPU sessions one at a time on this thread. */
  async run(lane: Lane, buffers: BatchBuffers): Promise<void> {
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
    recordPolicy(this.metrics, lane);
    logFitChange(lane, this.log);
    await this.writer.writeOutputs(lane, buffers, fetches, outputs, 0, count, started, computeMs);
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
      await this.writer.failRange(lane, buffers, from, to, started, clock() - started, runFailed(error));
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
    await this.writer.writeOutputs(lane, buffers, fetches, outputs, from, to, started, clock() - started);
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
}

function runFailed(error: unknown): string {
  return `model run failed: ${(error as Error).message}`;
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
