/**
 * Small typed helpers for emitting ONNX models with `onnx-proto`.
 *
 * Everything here is deterministic: the same arguments always encode to the same bytes
 * (no timestamps, no random names; numeric payloads are written little-endian into
 * `rawData` explicitly, independent of the host's byte order).
 */
import { onnx } from 'onnx-proto';
import type { DType } from '../../libs/protocol';

export const OPSET = 17;
export const IR_VERSION = 8;
export const PRODUCER_NAME = 'streaminfer-build-models';
export const PRODUCER_VERSION = '1';

/** The element types the model repository knows (libs/protocol DType), mapped to ONNX's TensorProto.DataType. */
const ELEM_TYPE: Record<DType, onnx.TensorProto.DataType> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float64: onnx.TensorProto.DataType.DOUBLE,
  int32: onnx.TensorProto.DataType.INT32,
  int64: onnx.TensorProto.DataType.INT64,
  uint8: onnx.TensorProto.DataType.UINT8,
  bool: onnx.TensorProto.DataType.BOOL,
  string: onnx.TensorProto.DataType.STRING,
};

export function elemType(dtype: DType): onnx.TensorProto.DataType {
  return ELEM_TYPE[dtype];
}

/** A dimension: a fixed size, or a symbolic name (e.g. `"batch"`). */
export type Dim = number | string;

/** Graph input/output description (`ValueInfoProto`) of a tensor. */
export function tensorValueInfo(name: string, dtype: DType, dims: readonly Dim[]): onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: elemType(dtype),
        shape: {
          dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })),
        },
      },
    },
  };
}

function checkSize(name: string, dims: readonly number[], length: number): void {
  const expected = dims.reduce((a, b) => a * b, 1);
  if (expected !== length) {
    throw new Error(`initializer ${name}: dims [${dims.join(', ')}] need ${expected} values, got ${length}`);
  }
}

/** A float32 initializer stored as little-endian `rawData`. */
export function floatInitializer(
  name: string,
  dims: readonly number[],
  values: ArrayLike<number>,
): onnx.ITensorProto {
  checkSize(name, dims, values.length);
  const bytes = new Uint8Array(values.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i]!, true);
  return { name, dims: [...dims], dataType: onnx.TensorProto.DataType.FLOAT, rawData: bytes };
}

/** An int8 initializer stored as `rawData` (one byte per value). */
export function int8Initializer(name: string, dims: readonly number[], values: Int8Array): onnx.ITensorProto {
  checkSize(name, dims, values.length);
  const bytes = new Uint8Array(values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength));
  return { name, dims: [...dims], dataType: onnx.TensorProto.DataType.INT8, rawData: bytes };
}

/** An int64 initializer stored as little-endian `rawData`. */
export function int64Initializer(
  name: string,
  dims: readonly number[],
  values: ArrayLike<number>,
): onnx.ITensorProto {
  checkSize(name, dims, values.length);
  const bytes = new Uint8Array(values.length * 8);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < values.length; i++) view.setBigInt64(i * 8, BigInt(values[i]!), true);
  return { name, dims: [...dims], dataType: onnx.TensorProto.DataType.INT64, rawData: bytes };
}

/** Attribute values accepted by {@link node}; the ONNX attribute type is inferred. */
export type AttrValue =
  | number
  | string
  | readonly number[]
  | readonly string[]
  | { int: number }
  | { float: number };

function attribute(name: string, value: AttrValue): onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  const utf8 = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));
  if (typeof value === 'string') return { name, type: T.STRING, s: utf8(value) };
  if (typeof value === 'number') {
    return Number.isInteger(value) ? { name, type: T.INT, i: value } : { name, type: T.FLOAT, f: value };
  }
  if ('int' in value) return { name, type: T.INT, i: value.int };
  if ('float' in value) return { name, type: T.FLOAT, f: value.float };
  if (value.length > 0 && typeof value[0] === 'string') {
    return { name, type: T.STRINGS, strings: (value as readonly string[]).map(utf8) };
  }
  const nums = value as readonly number[];
  return nums.every((v) => Number.isInteger(v))
    ? { name, type: T.INTS, ints: [...nums] }
    : { name, type: T.FLOATS, floats: [...nums] };
}

/**
 * A graph node. Attributes are emitted in the (sorted) key order so the encoding does not
 * depend on how the caller wrote the object literal.
 */
export function node(
  opType: string,
  inputs: readonly string[],
  outputs: readonly string[],
  attrs: Record<string, AttrValue> = {},
  name?: string,
): onnx.INodeProto {
  return {
    opType,
    input: [...inputs],
    output: [...outputs],
    name: name ?? `${opType}_${outputs[0] ?? ''}`,
    attribute: Object.keys(attrs)
      .sort()
      .map((k) => attribute(k, attrs[k]!)),
  };
}

export interface GraphSpec {
  name: string;
  inputs: onnx.IValueInfoProto[];
  outputs: onnx.IValueInfoProto[];
  nodes: onnx.INodeProto[];
  initializers?: onnx.ITensorProto[];
  docString?: string;
}

export interface ModelSpec {
  graph: GraphSpec;
  docString?: string;
  /** Deterministic metadata; emitted sorted by key. */
  metadata?: Record<string, string>;
  /** Extra opset imports, e.g. `{ 'ai.onnx.ml': 3 }`; the default domain is always OPSET. */
  extraOpsets?: Record<string, number>;
  modelVersion?: number;
}

/** Builds a `ModelProto` (opset 17, IR version 8). */
export function model(spec: ModelSpec): onnx.IModelProto {
  const opsetImport: onnx.IOperatorSetIdProto[] = [{ domain: '', version: OPSET }];
  for (const domain of Object.keys(spec.extraOpsets ?? {}).sort()) {
    opsetImport.push({ domain, version: spec.extraOpsets![domain]! });
  }
  const meta = spec.metadata ?? {};
  return {
    irVersion: IR_VERSION,
    opsetImport,
    producerName: PRODUCER_NAME,
    producerVersion: PRODUCER_VERSION,
    modelVersion: spec.modelVersion ?? 1,
    docString: spec.docString ?? '',
    graph: {
      name: spec.graph.name,
      node: spec.graph.nodes,
      initializer: spec.graph.initializers ?? [],
      input: spec.graph.inputs,
      output: spec.graph.outputs,
      docString: spec.graph.docString ?? '',
    },
    metadataProps: Object.keys(meta)
      .sort()
      .map((key) => ({ key, value: meta[key]! })),
  };
}

/** Serializes a model to bytes. protobufjs writes fields in schema order: stable output. */
export function encodeModel(m: onnx.IModelProto): Uint8Array {
  return onnx.ModelProto.encode(onnx.ModelProto.create(m)).finish();
}
