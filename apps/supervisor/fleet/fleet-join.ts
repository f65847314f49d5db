/**
 * Joining a fleet at start: connect to its NATS (waiting while it is unreachable: the host is not ready until it
 * knows the fleet's table), read the registry record — or found the fleet with this host's table when there is
 * none — and fetch the artifacts it names. The nodes then start on the record's table at its epoch.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ServerConfig } from '../../../libs/config';
import {
  flagNames,
  loadNatsAuth,
  type NatsAuth,
  type NatsAuthSettings,
  natsSettingsFromKeys,
} from '../../../libs/nats-auth';
import { REFUSAL_REASONS, type TrustedKeys } from '../../../libs/signing';
import {
  type ArtifactTrust,
  CoordinatorLease,
  connectFleet,
  FleetError,
  type FleetRecord,
  type FleetTable,
  HostBoard,
  hostStepClient,
  ModelArtifacts,
  pullCacheDir,
  REGISTRY_RECORD_FORMAT,
  RegistryStore,
} from './';
import { FleetMember } from './fleet-member';
import type { FleetHost } from './member-state';
import { ensureArtifacts } from './pulled-versions';

const CONNECT_RETRY_MS = 1000;

export interface JoinOptions {
  config: ServerConfig;
  /** The fleet's NATS settings, loaded (files read) at start; default: loaded here from `config`. */
  nats?: NatsAuth;
  /** This host's own table: the fleet's first record when the fleet is new. */
  initial: FleetTable;
  host: FleetHost;
  logger: Logger;
  testHooks: boolean;
  registry: Registry;
  /** The keys pulled artifacts must be signed by, as read now (--trusted-keys; they rotate on SIGHUP). */
  trustedKeys: () => TrustedKeys | undefined;
}

/** The server settings' NATS part (cluster, natsUser, natsPasswordFile, …) as the shared option set. */
export function clusterNatsSettings(config: ServerConfig): NatsAuthSettings {
  return { servers: config.cluster ?? '', ...natsSettingsFromKeys(config) };
}

/**
 * Loads (and checks) the fleet's NATS settings: files read now, a bad one a NatsAuthError naming the flag,
 * its environment variable and config key.
 */
export function loadClusterNats(config: ServerConfig): NatsAuth {
  const names = flagNames(
    '--cluster (STREAMINFER_CLUSTER, cluster)',
    (name) => `nats${name[0]!.toUpperCase()}${name.slice(1)}`,
  );
  return loadNatsAuth(clusterNatsSettings(config), names);
}

export function hostIdOf(config: ServerConfig): string {
  return (
    config.hostId ??
    `${os
      .hostname()
      .replace(/[^A-Za-z0-9_-]/g, '-')
      .slice(0, 56)}-${config.port}`
  );
}

export function advertisedUrl(config: ServerConfig): string {
  if (config.advertiseUrl) return config.advertiseUrl;
  const wildcard = config.host === '0.0.0.0' || config.host === '::';
  return `http://${wildcard ? os.hostname() : config.host}:${config.port}`;
}

/**
 * The member, and the table and epoch the host's nodes start on: the record's — or, when this host cannot load
 * the record's table (a version neither here nor pushed) or cannot read the record (invalid_record), its own
 * table at epoch 0, serving degraded (`behind`) until the record is one it can reach.
 */
export async function joinFleet(
  options: JoinOptions,
): Promise<{ member: FleetMember; start: { table: FleetTable; epoch: number } }> {
  const { config, logger } = options;
  const fleet = config.fleet;
  const hostId = hostIdOf(config);
  const connection = await connectWaiting(
    options.nats ?? loadClusterNats(config),
    fleet,
    hostId,
    config.clusterReplicas,
    logger,
  );
  // A JetStream cluster electing its leaders answers bucket calls with timeouts for a few seconds: wait them out.
  const store = await whileUnavailable('registry bucket', logger, () => RegistryStore.open(connection));
  const board = await whileUnavailable('hosts bucket', logger, () =>
    HostBoard.open(connection, {
      onError: (error, what) => logger.warn({ err: (error as Error).message }, `fleet: ${what} failed`),
    }),
  );
  // Which mechanism drops a silent host's heartbeat: per-key TTL with limit markers (2.11+) or max_age.
  (board.expiry.warn ? logger.warn : logger.info).call(
    logger,
    { bucket: connection.names.hostsBucket, expiry: board.mode },
    `fleet: ${board.expiry.why}`,
  );
  let base: { record: FleetRecord; revision: number } | undefined;
  let behind: string | undefined;
  try {
    base = await store.read();
  } catch (error) {
    if (!(error instanceof FleetError && error.code === 'invalid_record')) throw error;
    behind = `the fleet's registry record cannot be read (${error.message}); POST /api/reload {} rewrites it`;
  }
  if (!base && behind === undefined) {
    // No record: a new fleet, or one whose registry bucket was lost. Hosts still heartbeating know the epoch it
    // had; the fleet epoch never goes backwards, so the new record goes above every one of them.
    const beats = await board.list().catch(() => []);
    const epoch = beats.length > 0 ? Math.max(...beats.map((beat) => beat.epoch)) + 1 : 0;
    const record: FleetRecord = {
      format: REGISTRY_RECORD_FORMAT,
      epoch,
      members: [hostId],
      table: options.initial,
      reloadId: 'founded',
      reason: `fleet founded by ${hostId}`,
      strategy: 'atomic',
      committedBy: hostId,
      committedAt: new Date().toISOString(),
    };
    try {
      base = { record, revision: await store.create(record) };
      logger.info({ fleet, host: hostId, epoch }, 'fleet: founded with this host’s table');
    } catch (error) {
      // Another host founded it first: its table wins.
      if (!(error instanceof FleetError && error.code === 'conflict')) throw error;
      base = await store.read();
      if (!base) throw error;
    }
  }
  const modelsDir = path.resolve(config.modelsDir);
  // Pulled versions go to the state dir's cache: the models dir may be read-only (ProtectSystem=strict).
  const trust = artifactTrust(options);
  const artifacts = await whileUnavailable('model store', logger, () =>
    ModelArtifacts.open(connection, trust, pullCacheDir(config.stateDir)),
  );
  if (options.trustedKeys() === undefined)
    logger.warn(
      { fleet },
      'fleet: model artifacts pulled from the fleet store are not signature-verified (no --trusted-keys): checksum only',
    );
  let start = { table: options.initial, epoch: 0 };
  if (base) {
    try {
      await ensureArtifacts(artifacts, modelsDir, base.record.table, logger);
      start = { table: base.record.table, epoch: base.record.epoch };
    } catch (error) {
      // NATS gone meanwhile: wait as at the connect; anything else is a record this host cannot load.
      if (error instanceof FleetError && error.code === 'cluster_unavailable') throw error;
      behind = `cannot reach fleet epoch ${base.record.epoch}: ${(error as Error).message}; serving this host's own table`;
    }
  }
  if (behind !== undefined)
    logger.error(
      { fleet, host: hostId, reason: behind },
      'fleet: starting on this host’s own table, behind the fleet',
    );
  const member = new FleetMember({
    fleet,
    hostId,
    address: advertisedUrl(config),
    modelsDir,
    connection,
    store,
    board,
    lease: await CoordinatorLease.open(connection, {
      onLost: (holder, why) =>
        logger.error({ reloadId: holder.reloadId, why }, 'fleet: coordinator lease lost'),
    }),
    steps: hostStepClient(connection, config.reloadStepTimeoutMs),
    artifacts,
    host: options.host,
    logger,
    // A coordinator waits up to a step timeout for the slowest PREPARE, then commits: past that, in doubt.
    commitTimeoutMs: config.reloadStepTimeoutMs + 2000,
    testHooks: options.testHooks,
    registry: options.registry,
    ...(behind !== undefined ? { behind } : {}),
  });
  logger.info(
    { fleet, host: hostId, epoch: start.epoch, revision: base?.revision },
    'fleet: joined; starting on the fleet’s table',
  );
  return { member, start };
}

/** Verification of pulled artifacts: a refusal is logged and counted by reason. */
function artifactTrust(options: JoinOptions): ArtifactTrust {
  const registers = [options.registry];
  const refusals = new Counter({
    name: 'streaminfer_fleet_artifacts_refused_total',
    help: 'Model versions pulled from the fleet store and refused (unsigned, untrusted key, bad signature, tampered…), by reason.',
    labelNames: ['reason'],
    registers,
  });
  for (const reason of REFUSAL_REASONS) refusals.inc({ reason }, 0);
  new Gauge({
    name: 'streaminfer_fleet_trusted_keys',
    help: 'Public keys this host trusts for model artifacts pulled from the fleet (0: not verified, checksum only).',
    registers,
    collect() {
      this.set(options.trustedKeys()?.size ?? 0);
    },
  });
  return {
    keys: options.trustedKeys,
    refused: (error) => {
      refusals.inc({ reason: error.reason });
      options.logger.error(
        { model: error.model, version: error.version, reason: error.reason, detail: error.detail },
        'fleet: artifact refused',
      );
    },
  };
}

/** Waits while NATS is unreachable; a refusal (credentials, TLS) ends the start at once (`nats_refused`). */
/** Runs `open` until it does not fail with `cluster_unavailable` (NATS reachable but not answering yet). */
async function whileUnavailable<T>(what: string, logger: Logger, open: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await open();
    } catch (error) {
      if (!(error instanceof FleetError && error.code === 'cluster_unavailable')) throw error;
      if (attempt === 1 || attempt % 30 === 0)
        logger.warn({ attempt, err: error.message }, `fleet: ${what} not answering; not ready, retrying`);
      await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_MS));
    }
  }
}

async function connectWaiting(
  auth: NatsAuth,
  fleet: string,
  hostId: string,
  replicas: number,
  logger: Logger,
) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await connectFleet({
        auth,
        fleet,
        hostId,
        replicas,
        name: `streaminfer-${fleet}-${hostId}`,
        onProblem: (message) => logger.error({ servers: auth.shown }, `fleet: ${message}`),
      });
    } catch (error) {
      if (!(error instanceof FleetError && error.code === 'cluster_unavailable')) throw error;
      if (attempt === 1 || attempt % 30 === 0)
        logger.warn(
          { servers: auth.shown, attempt, err: error.message },
          'fleet: NATS unreachable; not ready, retrying',
        );
      await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_MS));
    }
  }
}
