/**
 * One NATS connection for the pipeline; an unreachable server is a typed error that names the URL (its
 * credentials redacted), a refusal of the credentials or the TLS handshake another (`nats_refused`).
 */
import { requirePositiveInt } from '../../libs/config';
import { type FailWith, type JetStreamConnection, openJetStream } from '../../libs/jetstream';
import {
  flagNames,
  loadNatsAuth,
  NATS_ENV,
  type NatsAuth,
  type NatsAuthSettings,
  replicasProblem,
} from '../../libs/nats-auth';
import type { PipelineNats } from './config';
import { invalidOptions, PipelineIoError } from './errors';

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

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

/** The pipeline's connection: libs/jetstream's (nc, js, jsm, replicas, disconnectedSince, close). */
export type NatsHandle = JetStreamConnection;

/** The pipeline's codes for what libs/jetstream reports. */
export const failStreamIo: FailWith = (failure, message, options) =>
  new PipelineIoError(
    failure === 'unreachable'
      ? 'nats_unreachable'
      : failure === 'refused'
        ? 'nats_refused'
        : failure === 'mismatch'
          ? 'stream_mismatch'
          : 'invalid_options',
    message,
    options,
  );

export async function connectNats(options: NatsOptions = {}): Promise<NatsHandle> {
  let auth: NatsAuth;
  try {
    auth = options.auth ?? loadNatsAuth({ servers: options.servers ?? DEFAULT_NATS_URL });
  } catch (err) {
    throw new PipelineIoError('invalid_options', (err as Error).message, { cause: err });
  }
  const connectTimeoutMs = requirePositiveInt(
    'connectTimeoutMs',
    options.connectTimeoutMs ?? 5000,
    1,
    invalidOptions,
  );
  const apiTimeoutMs = requirePositiveInt('apiTimeoutMs', options.apiTimeoutMs ?? 5000, 1, invalidOptions);
  const replicas = options.replicas ?? 1;
  const badCount = replicasProblem(replicas, { cluster: 'unchecked' }, '');
  if (badCount) throw new PipelineIoError('invalid_options', badCount);
  return openJetStream({
    auth,
    name: options.name ?? 'streaminfer-stream',
    connectTimeoutMs,
    apiTimeoutMs,
    replicas,
    asyncTraces: options.asyncTraces ?? false,
    ...(options.onProblem ? { onProblem: options.onProblem } : {}),
    fail: failStreamIo,
  });
}
