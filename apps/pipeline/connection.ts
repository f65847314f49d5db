/**
 * One NATS connection for the pipeline; an unreachable server is a typed error that names the URL (its
 * credentials redacted), a refusal of the credentials or the TLS handshake another (`nats_refused`).
 */
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import {
  describeRefusal,
  describeStatusProblem,
  flagNames,
  loadNatsAuth,
  NATS_ENV,
  type NatsAuth,
  type NatsAuthSettings,
  natsConnectionOptions,
  natsRefusal,
  redactNatsUrls,
  replicasProblem,
} from '../../libs/nats-auth';
import type { PipelineNats } from './config';
import { requirePositiveInt, StreamIoError } from './errors';

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

// transport-node's typings re-export nats-core through a subpath TypeScript's node10 resolution cannot see.
export type NatsConnection = Awaited<ReturnType<typeof connect>>;

export interface NatsOptions {
  /** nats:// URL(s) without an identity; `auth` instead for credentials and TLS. */
  servers?: string;
  /** The loaded NATS settings (libs/nats-auth): servers, identity, TLS. Wins over `servers`. */
  auth?: NatsAuth;
  /** A live-connection problem an operator must see (a permissions violation, expired credentials). */
  onProblem?: (message: string) => void;
  /** Connection name as the server's monitoring shows it. */
  name?: string;
  connectTimeoutMs?: number;
  /** How long a JetStream API request or PubAck may take. */
  apiTimeoutMs?: number;
  /**
   * Capture a stack trace for every request (each publish awaiting its PubAck is one). Off by default: it
   * cost a fifth of the pipeline's CPU at 3,000 events/s (profiled), and error messages stay complete.
   */
  asyncTraces?: boolean;
  /**
   * Copies JetStream keeps of each stream, KV bucket and object store created through this connection (default
   * 1; 3 on a cluster): checked against the server at connect.
   */
  replicas?: number;
}

const PIPELINE_KEYS: Record<string, string> = {
  tlsCa: 'tls.ca',
  tlsCert: 'tls.cert',
  tlsKey: 'tls.key',
  tlsFirst: 'tls.handshakeFirst',
};

/**
 * The pipeline's NATS settings loaded (files read and checked; throws NatsAuthError naming the key): the
 * config's `nats` section, and the password or token from the environment (never from the config).
 */
export function pipelineNatsAuth(
  nats: PipelineNats,
  env: Readonly<Record<string, string | undefined>> = process.env,
): NatsAuth {
  const settings: NatsAuthSettings = { ...nats };
  const password = env[NATS_ENV.password];
  const token = env[NATS_ENV.token];
  if (password !== undefined && password !== '') settings.password = password;
  if (token !== undefined && token !== '') settings.token = token;
  const names = flagNames('nats.servers (--nats)', (name) =>
    name === 'password' || name === 'token' ? undefined : `nats.${PIPELINE_KEYS[name] ?? name}`,
  );
  return loadNatsAuth(settings, names);
}

export interface NatsHandle {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** The replica count what this connection creates gets (checked at connect). */
  replicas: number;
  /** Since when (ms since epoch) the connection is down, reconnecting; null while connected. */
  disconnectedSince(): number | null;
  close(): Promise<void>;
}

export async function connectNats(options: NatsOptions = {}): Promise<NatsHandle> {
  let auth: NatsAuth;
  try {
    auth = options.auth ?? loadNatsAuth({ servers: options.servers ?? DEFAULT_NATS_URL });
  } catch (err) {
    throw new StreamIoError('invalid_options', (err as Error).message, { cause: err });
  }
  const servers = auth.shown;
  const connectTimeoutMs = requirePositiveInt('connectTimeoutMs', options.connectTimeoutMs ?? 5000);
  const apiTimeoutMs = requirePositiveInt('apiTimeoutMs', options.apiTimeoutMs ?? 5000);
  const replicas = options.replicas ?? 1;
  const badCount = replicasProblem(replicas, { cluster: 'unchecked' }, '');
  if (badCount) throw new StreamIoError('invalid_options', badCount);
  let nc: NatsConnection;
  try {
    nc = await connect({
      ...natsConnectionOptions(auth),
      name: options.name ?? 'streaminfer-stream',
      timeout: connectTimeoutMs,
      noAsyncTraces: !(options.asyncTraces ?? false),
    });
  } catch (err) {
    const refusal = natsRefusal(err);
    if (refusal)
      throw new StreamIoError('nats_refused', describeRefusal(refusal, servers, err), { cause: err });
    throw new StreamIoError(
      'nats_unreachable',
      `NATS is not reachable at ${servers}: ${redactNatsUrls(String(err))}`,
      { cause: err },
    );
  }
  if (options.onProblem) void followProblems(nc, servers, options.onProblem);
  let down: number | null = null;
  void followConnected(nc, (since) => {
    down = since;
  });
  try {
    // jetstreamManager() checks that JetStream is enabled: a plain nats-server fails here, not later.
    const jsm = await jetstreamManager(nc, { timeout: apiTimeoutMs });
    const js = jetstream(nc, { timeout: apiTimeoutMs });
    // A count a lone server cannot hold is refused here, not on the first stream.
    const problem = replicasProblem(replicas, nc.info, servers);
    if (problem) throw new StreamIoError('invalid_options', problem);
    return {
      nc,
      js,
      jsm,
      replicas,
      disconnectedSince: () => (nc.isClosed() ? (down ?? Date.now()) : down),
      close: () => nc.close(),
    };
  } catch (err) {
    await nc.close().catch(() => undefined);
    if (err instanceof StreamIoError) throw err;
    if ((err as Error).message.includes('Permissions Violation'))
      throw new StreamIoError(
        'nats_refused',
        `NATS at ${servers} refused this user the JetStream API ($JS.API.>): ${(err as Error).message}`,
        { cause: err },
      );
    throw new StreamIoError('nats_unreachable', `JetStream is not enabled at ${servers}: ${String(err)}`, {
      cause: err,
    });
  }
}

async function followProblems(nc: NatsConnection, servers: string, report: (message: string) => void) {
  for await (const status of nc.status()) {
    const problem = describeStatusProblem(status);
    if (problem) report(`${problem} (NATS at ${servers})`);
  }
}

/** Tracks the connection: the client reconnects by itself, and a consumer loop never ends meanwhile. */
async function followConnected(nc: NatsConnection, set: (since: number | null) => void) {
  for await (const status of nc.status()) {
    if (status.type === 'disconnect') set(Date.now());
    else if (status.type === 'reconnect') set(null);
  }
}
