import type { ModelSignature, TensorSpec } from '../../libs/protocol';
import {
  bytesPerElement,
  checkRequestRecord,
  findInputSection,
  REQUEST_HEADER_BYTES,
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

/** RECORD_PROBLEMS index for a record whose item size is not the lane's (checked again while copying). */
const ITEM_SIZE_PROBLEM = 6;

interface NumericInput {
  spec: TensorSpec;
  bytes: Uint8Array;
  itemBytes: number;
}

/**
 * Reusable buffers for one batch being formed or run. The claim visitor copies each request's tensor bytes
 * straight out of the ring into these buffers (ONNX Runtime gets ordinary memory, never the shared ring).
 * Every record is checked first (checkRequestRecord: reads bounded by the record, byte lengths = dims × dtype,
 * string prefixes inside their section): one that fails is taken but never copied, and set aside to be
 * answered `internal` alone; the rest of the batch runs.
 */
export class BatchBuffers {
  readonly requestIds: Uint32Array;
  readonly enqueuedAt: Float64Array;
  readonly expiredIds: Uint32Array;
  readonly expiredEnqueuedAt: Float64Array;
  count = 0;
  expiredCount = 0;
  /** Records refused by the record check: answered `internal` (with RECORD_PROBLEMS[problem]), never computed. */
  readonly invalidIds: Uint32Array;
  readonly invalidEnqueuedAt: Float64Array;
  readonly invalidProblems: Uint8Array;
  invalidCount = 0;
  /** Refused records too short to hold a request id: only counted (no answer could reach the right client). */
  droppedCount = 0;
  inputMask = 0;
  /** Per input: resolved per-item dims of this batch (absent inputs keep their declared dims with -1 → 0). */
  readonly itemDims: number[][];
  readonly numeric: Array<NumericInput | undefined>;
  readonly strings: Array<string[] | undefined>;
  private ring: RingBuffer | undefined;
  private now = 0;
  /** Per string input: its list's length before the record being copied (restored when a copy fails). */
  private readonly stringMarks: Int32Array;
  readonly visitor: (offset: number, length: number, index: number) => boolean;

  constructor(
    private readonly signature: ModelSignature,
    readonly maxItems: number,
  ) {
    this.requestIds = new Uint32Array(maxItems);
    this.enqueuedAt = new Float64Array(maxItems);
    this.expiredIds = new Uint32Array(maxItems);
    this.expiredEnqueuedAt = new Float64Array(maxItems);
    this.invalidIds = new Uint32Array(maxItems);
    this.invalidEnqueuedAt = new Float64Array(maxItems);
    this.invalidProblems = new Uint8Array(maxItems);
    this.stringMarks = new Int32Array(signature.inputs.length);
    this.itemDims = signature.inputs.map((spec) => spec.shape.map((dim) => (dim === -1 ? 0 : dim)));
    this.numeric = signature.inputs.map((spec) =>
      spec.dtype === 'string' ? undefined : { spec, bytes: new Uint8Array(1024), itemBytes: 0 },
    );
    this.strings = signature.inputs.map((spec) => (spec.dtype === 'string' ? [] : undefined));
    this.visitor = (offset, length) => this.take(offset, length);
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
    this.invalidCount = 0;
    this.droppedCount = 0;
    this.inputMask = 0;
    for (const list of this.strings) if (list) list.length = 0;
  }

  private take(offset: number, length: number): boolean {
    const ring = this.ring!;
    const view = ring.view;
    const problem = checkRequestRecord(view, offset, length, this.signature);
    if (problem !== 0) {
      this.setAside(view, offset, length, problem);
      return true;
    }
    if (readDeadlineAt(view, offset) <= this.now) {
      this.expiredIds[this.expiredCount] = readRequestId(view, offset);
      this.expiredEnqueuedAt[this.expiredCount] = readEnqueuedAt(view, offset);
      this.expiredCount++;
      return true;
    }
    if (this.count === 0) {
      this.inputMask = view.getUint8(offset + 7);
      this.captureDims(view, offset, length);
    } else if (!this.matchesShape(view, offset, length)) {
      return false;
    }
    if (!this.copyInputs(ring, offset, length, this.count)) {
      // the record check passed, so this is a lane/record disagreement: refused all the same, never copied
      if (this.count === 0) this.inputMask = 0;
      this.setAside(view, offset, length, ITEM_SIZE_PROBLEM);
      return true;
    }
    this.requestIds[this.count] = readRequestId(view, offset);
    this.enqueuedAt[this.count] = readEnqueuedAt(view, offset);
    this.count++;
    return true;
  }

  private setAside(view: DataView, offset: number, length: number, problem: number): void {
    if (length < REQUEST_HEADER_BYTES) {
      this.droppedCount++;
      return;
    }
    this.invalidIds[this.invalidCount] = readRequestId(view, offset);
    this.invalidEnqueuedAt[this.invalidCount] = readEnqueuedAt(view, offset);
    this.invalidProblems[this.invalidCount] = problem;
    this.invalidCount++;
  }

  /** Same supplied inputs with the same per-item dims as the batch's first request (it may sit in another ring). */
  private matchesShape(view: DataView, offset: number, length: number): boolean {
    if (view.getUint8(offset + 7) !== this.inputMask) return false;
    const inputs = this.signature.inputs;
    for (let index = 0; index < inputs.length; index++) {
      if ((this.inputMask & (1 << index)) === 0) continue;
      const section = findInputSection(view, offset, length, index);
      if (section < 0) return false;
      const dims = this.itemDims[index]!;
      const rank = sectionRank(view, section);
      if (rank !== dims.length) return false;
      for (let axis = 0; axis < rank; axis++)
        if (sectionDim(view, section, axis) !== dims[axis]) return false;
    }
    return true;
  }

  private captureDims(view: DataView, offset: number, length: number): void {
    const inputs = this.signature.inputs;
    for (let index = 0; index < inputs.length; index++) {
      const spec = inputs[index]!;
      const dims = this.itemDims[index]!;
      const section = findInputSection(view, offset, length, index);
      if (section < 0) {
        dims.length = spec.shape.length;
        for (let axis = 0; axis < spec.shape.length; axis++)
          dims[axis] = spec.shape[axis] === -1 ? 0 : spec.shape[axis]!;
        continue;
      }
      const rank = sectionRank(view, section);
      dims.length = rank;
      for (let axis = 0; axis < rank; axis++) dims[axis] = sectionDim(view, section, axis);
    }
  }

  /**
   * Copies item `item`'s inputs out of the record; false (nothing of it kept) when a section is not what the
   * lane expects: a numeric item of another byte length than elements × bytesPerElement (the batch's first
   * item's), or strings whose prefixes leave their section.
   */
  private copyInputs(ring: RingBuffer, offset: number, length: number, item: number): boolean {
    const view = ring.view;
    const inputs = this.signature.inputs;
    for (let index = 0; index < inputs.length; index++) {
      const strings = this.strings[index];
      if (strings) this.stringMarks[index] = strings.length;
    }
    for (let index = 0; index < inputs.length; index++) {
      if ((this.inputMask & (1 << index)) === 0) continue;
      const section = findInputSection(view, offset, length, index);
      if (section < 0) return this.undoStrings();
      const numeric = this.numeric[index];
      if (numeric) {
        const byteLength = sectionByteLength(view, section);
        const expected = this.itemElements(index) * bytesPerElement(numeric.spec.dtype);
        if (byteLength !== expected || (item > 0 && byteLength !== numeric.itemBytes))
          return this.undoStrings();
        if (item === 0) numeric.itemBytes = byteLength;
        const end = (item + 1) * byteLength;
        if (end > numeric.bytes.length) {
          const grown = new Uint8Array(Math.max(end, numeric.bytes.length * 2));
          grown.set(numeric.bytes.subarray(0, item * byteLength));
          numeric.bytes = grown;
        }
        const data = sectionDataOffset(view, section);
        numeric.bytes.set(ring.bytes.subarray(data, data + byteLength), item * byteLength);
      } else if (!readStrings(ring.bytes, view, section, this.itemElements(index), this.strings[index]!)) {
        return this.undoStrings();
      }
    }
    return true;
  }

  /** Drops the strings a failed copy appended; always false (copyInputs' answer). */
  private undoStrings(): false {
    for (let index = 0; index < this.strings.length; index++) {
      const strings = this.strings[index];
      if (strings) strings.length = this.stringMarks[index]!;
    }
    return false;
  }

  itemElements(inputIndex: number): number {
    const dims = this.itemDims[inputIndex]!;
    let elements = 1;
    for (let axis = 0; axis < dims.length; axis++) elements *= dims[axis]!;
    return elements;
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
