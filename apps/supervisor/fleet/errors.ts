/** Typed errors of the fleet's NATS I/O: a stable code, so callers branch on it, never on message text. */
import { ProtocolError } from '../../../libs/protocol';
import type { RefusalReason } from '../../../libs/signing';
import type { FleetRecord, RegistryEntry } from './record-shapes';

export type FleetErrorCode =
  /** NATS is down or did not answer: the caller keeps serving what it has and retries later. */
  | 'cluster_unavailable'
  /** NATS answered no: bad or expired credentials, a TLS mismatch, no JetStream permission. Not retried. */
  | 'nats_refused'
  /** A compare-and-set lost: `current` holds what is there now (registry writes). */
  | 'conflict'
  /** The bytes fetched do not hash to the store's digest: nothing was put in place. */
  | 'checksum_mismatch'
  | 'artifact_missing'
  /** A pulled file cannot be written (EROFS, EACCES): the message names the directory and the setting. */
  | 'artifact_unwritable'
  /** A pulled version is not signed by a trusted key for this fleet, model and version (ArtifactRefusedError). */
  | 'artifact_refused'
  /** A record read back (or about to be written) does not have the shape this build expects. */
  | 'invalid_record'
  | 'invalid_options';

export class FleetError extends Error {
  readonly code: FleetErrorCode;
  /** conflict on the registry: the record that won (undefined when the key is gone). */
  readonly current?: RegistryEntry;
  /** invalid_record read from the registry: the bad entry's revision, so a repair can replace it by CAS. */
  readonly revision?: number;

  constructor(
    code: FleetErrorCode,
    message: string,
    options?: ErrorOptions & { current?: RegistryEntry; revision?: number },
  ) {
    super(message, options);
    this.name = 'FleetError';
    this.code = code;
    if (options?.current) this.current = options.current;
    if (options?.revision !== undefined) this.revision = options.revision;
  }
}

/** An option refused before any I/O (libs/config requirePositiveInt and the like). */
export function invalidOptions(message: string): FleetError {
  return new FleetError('invalid_options', message);
}

/** A pulled version that is not signed as it must be: refused by name, nothing written. */
export class ArtifactRefusedError extends FleetError {
  constructor(
    readonly model: string,
    readonly version: string,
    readonly reason: RefusalReason,
    readonly detail: string,
  ) {
    super('artifact_refused', `model ${model} version ${version} refused: ${reason}: ${detail}`);
  }
}

/** 409 conflict, carrying the fleet's current record so the loser sees what won. */
export class FleetConflictError extends ProtocolError {
  constructor(
    message: string,
    readonly current: { record: FleetRecord; revision: number } | undefined,
  ) {
    super('conflict', message);
  }
}
