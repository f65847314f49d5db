import type { ModelSignature, TensorSpec } from '../../libs/protocol';
import {
  bytesPerElement,
  findInputSection,
  readDeadlineAt,
  readEnqueuedAt,
  readRequestId,
  readStrings,
  sectionByteLength,
  sectionDataOffset,
  sectionDim,
  sectionRank,
} from '../../libs/protocol';
import type { RingBuffer } from '../../libs/ring';

interface NumericInput {
  spec: TensorSpec;
  bytes: Uint8Array;
  itemBytes: number;
}

/**
 * Reusable buffers for one batch being formed or run. The claim visitor copies each request's tensor bytes
 * straight out of the ring into these buffers (ONNX Runtime gets ordinary memory, never the shared ring).
 */
export class BatchBuffers {
  readonly requestIds: Uint32Array;
  readonly enqueuedAt: Float64Array;
  readonly expiredIds: Uint32Array;
  readonly expiredEnqueuedAt: Float64Array;
  count = 0;
  expiredCount = 0;
  inputMask = 0;
  /** Per input: resolved per-item dims of this batch (absent inputs keep their declared dims with -1 → 0). */
  readonly itemDims: number[][];
  readonly numeric: Array<NumericInput | undefined>;
  readonly strings: Array<string[] | undefined>;
  private ring: RingBuffer | undefined;
  private now = 0;
  readonly visitor: (offset: number, length: number, index: number) => boolean;

  constructor(
    private readonly signature: ModelSignature,
    readonly maxItems: number,
  ) {
    this.requestIds = new Uint32Array(maxItems);
    this.enqueuedAt = new Float64Array(maxItems);
    this.expiredIds = new Uint32Array(maxItems);
    this.expiredEnqueuedAt = new Float64Array(maxItems);
    this.itemDims = signature.inputs.map((spec) => spec.shape.map((dim) => (dim === -1 ? 0 : dim)));
    this.numeric = signature.inputs.map((spec) =>
      spec.dtype === 'string' ? undefined : { spec, bytes: new Uint8Array(1024), itemBytes: 0 },
    );
    this.strings = signature.inputs.map((spec) => (spec.dtype === 'string' ? [] : undefined));
    this.visitor = (offset) => this.take(offset);
  }

  /** Starts a new batch: nothing claimed yet. */
  begin(now: number): void {
    this.reset();
    this.now = now;
  }

  /**
   * Claims up to `size` more requests from `ring` that fit this batch (same inputs and per-item dims as its
   * first request); requests whose deadline passed are taken too but set aside, never computed. Returns how
   * many records were taken from the ring.
   */
  claimMore(ring: RingBuffer, size: number): number {
    if (size <= 0) return 0;
    this.ring = ring;
    const taken = ring.claim(this.visitor, size);
    this.ring = undefined;
    return taken;
  }

  private reset(): void {
    this.count = 0;
    this.expiredCount = 0;
    this.inputMask = 0;
    for (const list of this.strings) if (list) list.length = 0;
  }

  private take(offset: number): boolean {
    const ring = this.ring!;
    const view = ring.view;
    if (readDeadlineAt(view, offset) <= this.now) {
      this.expiredIds[this.expiredCount] = readRequestId(view, offset);
      this.expiredEnqueuedAt[this.expiredCount] = readEnqueuedAt(view, offset);
      this.expiredCount++;
      return true;
    }
    if (this.count === 0) {
      this.inputMask = view.getUint8(offset + 7);
      this.captureDims(view, offset);
    } else if (!this.matchesShape(view, offset)) {
      return false;
    }
    this.copyInputs(ring, offset, this.count);
    this.requestIds[this.count] = readRequestId(view, offset);
    this.enqueuedAt[this.count] = readEnqueuedAt(view, offset);
    this.count++;
    return true;
  }

  /** Same supplied inputs with the same per-item dims as the batch's first request (it may sit in another ring). */
  private matchesShape(view: DataView, offset: number): boolean {
    if (view.getUint8(offset + 7) !== this.inputMask) return false;
    const inputs = this.signature.inputs;
    for (let index = 0; index < inputs.length; index++) {
      if ((this.inputMask & (1 << index)) === 0) continue;
      const section = findInputSection(view, offset, index);
      const dims = this.itemDims[index]!;
      const rank = sectionRank(view, section);
      if (rank !== dims.length) return false;
      for (let axis = 0; axis < rank; axis++)
        if (sectionDim(view, section, axis) !== dims[axis]) return false;
    }
    return true;
  }

  private captureDims(view: DataView, offset: number): void {
    this.signature.inputs.forEach((spec, index) => {
      const dims = this.itemDims[index]!;
      const section = findInputSection(view, offset, index);
      if (section < 0) {
        dims.length = spec.shape.length;
        for (let axis = 0; axis < spec.shape.length; axis++)
          dims[axis] = spec.shape[axis] === -1 ? 0 : spec.shape[axis]!;
        return;
      }
      const rank = sectionRank(view, section);
      dims.length = rank;
      for (let axis = 0; axis < rank; axis++) dims[axis] = sectionDim(view, section, axis);
    });
  }

  private copyInputs(ring: RingBuffer, offset: number, item: number): void {
    const view = ring.view;
    const inputs = this.signature.inputs;
    for (let index = 0; index < inputs.length; index++) {
      const section = findInputSection(view, offset, index);
      if (section < 0) continue;
      const data = sectionDataOffset(view, section);
      const byteLength = sectionByteLength(view, section);
      const numeric = this.numeric[index];
      if (numeric) {
        if (item === 0) numeric.itemBytes = byteLength;
        const end = (item + 1) * byteLength;
        if (end > numeric.bytes.length) {
          const grown = new Uint8Array(Math.max(end, numeric.bytes.length * 2));
          grown.set(numeric.bytes.subarray(0, item * byteLength));
          numeric.bytes = grown;
        }
        numeric.bytes.set(ring.bytes.subarray(data, data + byteLength), item * byteLength);
      } else {
        const elements = this.itemDims[index]!.reduce((product, dim) => product * dim, 1);
        readStrings(ring.bytes, view, data, elements, this.strings[index]!);
      }
    }
  }

  itemElements(inputIndex: number): number {
    return this.itemDims[inputIndex]!.reduce((product, dim) => product * dim, 1);
  }

  /**
   * Bytes of numeric input `inputIndex` for items [from, to) of the batch (default: all of it), a view into a
   * buffer ORT may read: the items lie contiguous, so a part of the batch (batch isolation) copies nothing.
   */
  numericBytes(inputIndex: number, from = 0, to = this.count): Uint8Array {
    const numeric = this.numeric[inputIndex]!;
    const supplied = (this.inputMask & (1 << inputIndex)) !== 0;
    const itemBytes = supplied
      ? numeric.itemBytes
      : this.itemElements(inputIndex) * bytesPerElement(numeric.spec.dtype);
    const length = this.count * itemBytes;
    if (length > numeric.bytes.length) numeric.bytes = new Uint8Array(length);
    if (!supplied) numeric.bytes.fill(0, 0, length);
    return numeric.bytes.subarray(from * itemBytes, to * itemBytes);
  }
}
