/**
 * A request bound to its model's signature: what the decoders (JSON, the JSON scanner, binary, KServe v2)
 * produce and the ring record writer consumes. Its own file so the decoders share it without importing
 * each other.
 */
import type { TensorSpec } from './signature';

/** One validated input of one request, measured so its record can be written in a single reserve. */
export interface BoundInput {
  spec: TensorSpec;
  index: number;
  /** Per-item dims with dynamic dims resolved. */
  dims: number[];
  value: unknown;
  /** Payload bytes of this input in the record. */
  byteLength: number;
  /** Binary frames: the tensor's bytes exactly as they go into the record (a view into the frame). */
  raw?: Uint8Array;
}

export interface BoundRequest {
  inputs: BoundInput[];
  inputMask: number;
  /** Total payload bytes of all inputs including their per-input headers. */
  byteLength: number;
}

export interface BindLimits {
  maxElements: number;
}
