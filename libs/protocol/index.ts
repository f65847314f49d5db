export type { BinaryRequest, BinaryTensor, DecodedBinaryResponse } from './binary';
export {
  bindBinaryRequest,
  decodeBinaryRequest,
  decodeBinaryResponse,
  encodeBinaryAnswer,
  encodeBinaryFrame,
  encodeBinaryRequest,
} from './binary';
export type { BindLimits, BoundInput, BoundRequest } from './bound';
export type { ErrorCode, RequestId } from './errors';
export {
  ERROR_CODES,
  errorCodeFromIndex,
  errorCodeIndex,
  httpStatusLine,
  httpStatusOf,
  modelUnavailable,
  ProtocolError,
  RequestError,
  unknownModel,
} from './errors';
export { float32Text, writeFloat32 } from './float32-text';
export { encodeResultRecord, encodeResultText } from './json-answer';
export type { V2Output } from './kserve';
export {
  decodePathSegment,
  decodeV2Request,
  encodeV2Error,
  encodeV2Response,
  v2ModelMetadata,
} from './kserve';
export type { InferenceRequest, Priority } from './request';
export {
  bindRequest,
  decodeJsonRequest,
  decodeRequest,
  PRIORITIES,
  utf8Length,
} from './request';
export {
  encodeError,
  encodeResult,
  encodeResultHead,
  encodeResultWithHead,
  encodeWarning,
} from './responses';
export type { ShadowOutput } from './shadow';
export { outputsAgree, readFirstOutput } from './shadow';
export type { DType, ModelSignature, TensorSpec } from './signature';
export { argmax, bytesPerElement, checkDims, MAX_DIM, parseSignature } from './signature';
export * from './wire';
