/**
 * The trusted-keys file (`--trusted-keys`): the Ed25519 public keys a fleet host accepts signatures of
 * on model artifacts it pulls from NATS. Read at start (a bad file stops the start, naming it) and again on
 * every configuration reload (SIGHUP, `reload --config`): key rotation.
 */
import { readFileSync, statSync } from 'node:fs';
import { parseTrustedKeys, SigningKeyError, type TrustedKeys } from '../../libs/signing';

const MAX_FILE_BYTES = 1024 * 1024;

export function readTrustedKeys(file: string): TrustedKeys {
  const source = `trusted keys file ${file}`;
  let text: string;
  try {
    if (statSync(file).size > MAX_FILE_BYTES)
      throw new SigningKeyError(`${source}: larger than ${MAX_FILE_BYTES} bytes`);
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if (error instanceof SigningKeyError) throw error;
    throw new SigningKeyError(
      `${source}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  return parseTrustedKeys(text, source);
}
