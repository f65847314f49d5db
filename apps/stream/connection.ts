/** One NATS connection for the pipeline; an unreachable server is a typed error that names the URL. */
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { requirePositiveInt, StreamIoError } from './errors';

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

// transport-node's typings re-export nats-core through a subpath TypeScript's node10 resolution cannot see.
export type NatsConnection = Awaited<ReturnType<typeof connect>>;

export interface NatsOptions {
  servers?: string;
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
}

export interface NatsHandle {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  close(): Promise<void>;
}

export async function connectNats(options: NatsOptions = {}): Promise<NatsHandle> {
  const servers = options.servers ?? DEFAULT_NATS_URL;
  const connectTimeoutMs = requirePositiveInt('connectTimeoutMs', options.connectTimeoutMs ?? 5000);
  const apiTimeoutMs = requirePositiveInt('apiTimeoutMs', options.apiTimeoutMs ?? 5000);
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers,
      name: options.name ?? 'streaminfer-stream',
      timeout: connectTimeoutMs,
      noAsyncTraces: !(options.asyncTraces ?? false),
    });
  } catch (err) {
    throw new StreamIoError('nats_unreachable', `NATS is not reachable at ${servers}: ${String(err)}`, {
      cause: err,
    });
  }
  try {
    // jetstreamManager() checks that JetStream is enabled: a plain nats-server fails here, not later.
    const jsm = await jetstreamManager(nc, { timeout: apiTimeoutMs });
    const js = jetstream(nc, { timeout: apiTimeoutMs });
    return { nc, js, jsm, close: () => nc.close() };
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw new StreamIoError('nats_unreachable', `JetStream is not enabled at ${servers}: ${String(err)}`, {
      cause: err,
    });
  }
}
