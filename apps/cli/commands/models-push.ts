/**
 * `streaminfer models push <name> <version>`: uploads a version's model.onnx (and the model's config.json) to the
 * fleet's model store, where a host that lacks it fetches it — checksum verified — before it prepares a reload
 * that loads it. Talks to NATS directly: no host needs to be running. With `--signing-key` the version's
 * manifest is signed (Ed25519): hosts started with `--trusted-keys` pull only what a trusted key signed.
 */
import type { KeyObject } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Command } from 'commander';
import { type NatsAuth, NatsAuthError } from '../../../libs/nats-auth';
import { parseSigningKey } from '../../../libs/signing';
import { connectFleet, FleetError, ModelArtifacts } from '../../supervisor/fleet';
import { addNatsOptions, loadCommandNats, type NatsFlags } from '../nats-options';

interface PushFlags extends NatsFlags {
  cluster?: string;
  fleet?: string;
  clusterReplicas?: string;
  modelsDir?: string;
  file?: string;
  signingKey?: string;
  json?: boolean;
}

/** The Ed25519 private key to sign with; a bad file is a bad option (exit 2), named, its content never shown. */
function readSigningKey(file: string, fail: (message: string) => never): KeyObject {
  const source = `signing key file ${file}`;
  let text: string;
  let mode: number;
  try {
    const stats = statSync(file);
    if (stats.size > 64 * 1024) fail(`${source}: larger than 64 KiB; not a key`);
    mode = stats.mode;
    text = readFileSync(file, 'utf8');
  } catch (error) {
    fail(`${source}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let key: KeyObject;
  try {
    key = parseSigningKey(text, source);
  } catch (error) {
    fail((error as Error).message);
  }
  if ((mode & 0o077) !== 0)
    console.error(`streaminfer models push: warning: ${source} is readable by others (chmod 600 it)`);
  return key;
}

export function registerModelsPush(models: Command, fail: (message: string) => never): void {
  addNatsOptions(models.command('push <name> <version>'))
    .description("upload a version to the fleet's model store (hosts lacking it fetch it, checksum verified)")
    .option('--cluster <urls>', 'NATS URL(s) of the fleet (default: STREAMINFER_CLUSTER)')
    .option('--fleet <name>', 'the fleet (default: STREAMINFER_FLEET, else "default")')
    .option(
      '--cluster-replicas <n>',
      'replicas of the object store when this push creates it (default: STREAMINFER_CLUSTER_REPLICAS, else 1)',
    )
    .option(
      '--models-dir <dir>',
      'model repository holding <name>/config.json and <name>/<version>/model.onnx',
      './models',
    )
    .option('--file <model.onnx>', 'the model file (default: <models-dir>/<name>/<version>/model.onnx)')
    .option(
      '--signing-key <file>',
      'sign the version with this Ed25519 private key, PEM PKCS#8 (default: STREAMINFER_SIGNING_KEY)',
    )
    .option('--json', 'machine-readable output')
    .action(async (name: string, version: string, flags: PushFlags) => {
      const cluster = flags.cluster ?? process.env.STREAMINFER_CLUSTER;
      if (!cluster) fail('give the fleet with --cluster nats://… (or STREAMINFER_CLUSTER)');
      let auth: NatsAuth;
      try {
        auth = loadCommandNats(cluster, '--cluster (STREAMINFER_CLUSTER)', flags);
      } catch (error) {
        if (error instanceof NatsAuthError) fail(error.message);
        throw error;
      }
      const fleet = flags.fleet ?? process.env.STREAMINFER_FLEET ?? 'default';
      const replicasText = flags.clusterReplicas ?? process.env.STREAMINFER_CLUSTER_REPLICAS ?? '1';
      if (!/^[1-5]$/.test(replicasText.trim()))
        fail(
          `--cluster-replicas (STREAMINFER_CLUSTER_REPLICAS): an integer from 1 to 5, not ${JSON.stringify(replicasText)}`,
        );
      const replicas = Number(replicasText.trim());
      const modelDir = path.resolve(flags.modelsDir ?? './models', name);
      const onnx = path.resolve(flags.file ?? path.join(modelDir, version, 'model.onnx'));
      const config = path.join(modelDir, 'config.json');
      const keyFile = flags.signingKey ?? (process.env.STREAMINFER_SIGNING_KEY?.trim() || undefined);
      const signingKey = keyFile === undefined ? undefined : readSigningKey(keyFile, fail);
      const hostId = `push-${os
        .hostname()
        .replace(/[^A-Za-z0-9_-]/g, '-')
        .slice(0, 40)}-${process.pid}`;
      try {
        const connection = await connectFleet({ auth, fleet, hostId, replicas });
        try {
          const artifacts = await ModelArtifacts.open(connection);
          const pushed = await artifacts.push(name, version, onnx, config, signingKey);
          if (flags.json) console.log(JSON.stringify({ fleet, model: name, version, ...pushed }));
          else
            console.log(
              `pushed ${name} ${version} to fleet ${fleet}: ${pushed.bytes} bytes, sha256 ${pushed.sha256}, ${
                pushed.keyId ? `signed by key ${pushed.keyId}` : 'unsigned'
              }`,
            );
        } finally {
          await connection.close();
        }
      } catch (error) {
        // A missing file or an unreachable fleet: a runtime failure (1), not a bad option (2).
        if (!(error instanceof FleetError) && (error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        console.error(`streaminfer models push: ${(error as Error).message}`);
        // NATS refused the credentials or TLS settings: a setting to fix (2), like a bad flag.
        process.exitCode = error instanceof FleetError && error.code === 'nats_refused' ? 2 : 1;
      }
    });
}
