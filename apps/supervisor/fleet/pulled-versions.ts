/**
 * The model versions a fleet table names, on this host: checked before a record naming them is written, and
 * fetched from the fleet's object store (checksum, and signature with --trusted-keys, verified by
 * ModelArtifacts) before the host loads a table that names them.
 */
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { FleetError, type FleetTable, type ModelArtifacts } from './';

/**
 * Every version the table names is in `modelsDir` or pushed to the fleet (checked before a record is written;
 * names are the record parser's to check). Throws naming the first one that is neither.
 */
export async function checkLoadable(
  artifacts: ModelArtifacts,
  modelsDir: string,
  table: FleetTable,
): Promise<void> {
  for (const model of table.models)
    for (const version of model.versions) {
      if (existsSync(path.join(modelsDir, model.name, version, 'model.onnx'))) continue;
      if ((await artifacts.digest(model.name, version)) !== undefined) continue;
      throw new Error(
        `version ${version} of model ${model.name} is neither in ${modelsDir} nor pushed to the fleet (streaminfer models push): not written to the registry`,
      );
    }
}

/**
 * Every version the table names is here, and is the one pushed to the fleet (fetched and verified when not):
 * before a host prepares, rolls or catches up to a table, and at join, before the nodes start.
 */
export async function ensureArtifacts(
  artifacts: ModelArtifacts,
  modelsDir: string,
  table: FleetTable,
  logger: Logger,
): Promise<void> {
  for (const model of table.models) {
    for (const version of model.versions) {
      const got = await fetchPushed(artifacts, modelsDir, model.name, version);
      if (got === undefined) {
        if (!existsSync(path.join(modelsDir, model.name, version, 'model.onnx')))
          throw new Error(
            `version ${version} of model ${model.name} is neither in ${modelsDir} nor pushed to the fleet (streaminfer models push)`,
          );
        continue;
      }
      if (got.fetched)
        logger.info(
          { model: model.name, version, sha256: got.sha256, bytes: got.bytes, keyId: got.keyId },
          got.keyId === undefined
            ? 'fleet: fetched a model version from the fleet store (checksum verified)'
            : 'fleet: fetched a model version from the fleet store (signature and checksum verified)',
        );
    }
  }
}

/** fetchInto, one store lookup: undefined when the version was never pushed (the local file, if any, stands). */
export async function fetchPushed(
  artifacts: ModelArtifacts,
  modelsDir: string,
  model: string,
  version: string,
): Promise<Awaited<ReturnType<ModelArtifacts['fetchInto']>> | undefined> {
  try {
    return await artifacts.fetchInto(modelsDir, model, version);
  } catch (error) {
    if (error instanceof FleetError && error.code === 'artifact_missing') return undefined;
    throw error;
  }
}
