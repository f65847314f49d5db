export type { BinaryRequest, BinaryTensor, DecodedBinaryResponse } from './binary';
export {
  bindBinaryRequest,
  decodeBinaryRequest,
  decodeBinaryResponse,
  encodeBinaryAnswer,
  encodeBinaryFrame,
  encodeBinaryRequest,
  isBinaryFrame,
} from './binary';
export type { ErrorCode } from './errors';
export {
  ERROR_CODES,
  errorCodeFromIndex,
  errorCodeIndex,
  httpStatusLine,
  httpStatusOf,
  ProtocolError,
} from './errors';
export type { BindLimits, BoundInput, BoundRequest, InferenceRequest, Priority, RequestId } from './request';
export { bindRequest, decodeRequest, PRIORITIES, RequestError, utf8Length } from './request';
export { encodeError, encodeResult, encodeWarning } from './responses';
export type { DType, ModelSignature, TensorSpec } from './signature';
export { bytesPerElement, DTYPES, isDType, MAX_INPUTS, parseSignature } from './signature';
export * from './wire';
