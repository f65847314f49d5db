/**
 * A pinned model version the backend cannot serve: not in the model repository (embedded, ProtocolError) or
 * not served by the server (external, ExternalInferenceError `not_served` with the server's code). At start
 * it is a refused setting (exit 2); on a reload, a 404 with the code.
 */
import { ProtocolError } from '../../../libs/protocol';
import { ExternalInferenceError } from './errors';

export type UnservedPinCode = 'unknown_model' | 'unknown_version';

/** The code when `err` says the pinned model or version does not exist; undefined for any other failure. */
export function unservedPinCode(err: unknown): UnservedPinCode | undefined {
  const code =
    err instanceof ProtocolError
      ? err.code
      : err instanceof ExternalInferenceError && err.code === 'not_served'
        ? (err.serverCode ?? 'unknown_version')
        : undefined;
  return code === 'unknown_model' || code === 'unknown_version' ? code : undefined;
}
