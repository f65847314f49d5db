/**
 * Answers written into the node's response ring: one record per computed item, the typed errors of items
 * that expired, were refused or failed, and waiting for room when the ring is full — never a reservation held
 * across a wait.
 */
import type { ort } from '../../libs/inference';
import type { MetricsShard } from '../../libs/metrics';
import type { ErrorCode } from '../../libs/protocol';
import {
  bytesPerElement,
  errorResponseBytes,
  outputSectionHeaderBytes,
  RECORD_PROBLEMS,
  RESPONSE_HEADER_BYTES,
  utf8Length,
  writeErrorResponse,
  writeOutputSectionHeader,
  writeResponseHeader,
} from '../../libs/protocol';
import { sharedClock as clock, type RingBuffer } from '../../libs/ring';
import type { BatchBuffers } from './batch';
import { IDLE_WAIT_MS, type Lane, type WorkerLog } from './lane';

const EXPIRED_MESSAGE = 'deadline passed before the request was batched; it was not computed';
const utf8 = new TextEncoder();

export type TypedArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;

export class ResponseWriter {
  constructor(
    private readonly responses: RingBuffer,
    private readonly workerIndex: number,
    private readonly metrics: MetricsShard,
    private readonly log: WorkerLog,
  ) {}

  /** Expired items answered `deadline_exceeded`: no promise per answer while the response ring has room. */
  async answerExpired(lane: Lane, buffers: BatchBuffers): Promise<void> {
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
  async answerInvalid(lane: Lane, buffers: BatchBuffers): Promise<void> {
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

  /** One response record per item of [from, to), from the outputs of the run of exactly those items. */
  async writeOutputs(
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
          workerIndex: this.workerIndex,
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
  async failRange(
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
  async writeError(
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
        workerIndex: this.workerIndex,
      },
      code,
      message,
    );
    this.responses.commit(undefined, false);
    return true;
  }
}

function itemByteLength(tensor: ort.Tensor, item: number, elements: number): number {
  if (tensor.type !== 'string') return elements * bytesPerElement(tensor.type as 'float32');
  const data = tensor.data as string[];
  let total = 0;
  for (let e = item * elements; e < (item + 1) * elements; e++) total += 4 + utf8Length(data[e] ?? '');
  return total;
}
