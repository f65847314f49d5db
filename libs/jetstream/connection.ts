/**
 * One NATS connection with JetStream, for the fleet and the pipeline alike: connects with the loaded NATS
 * settings (libs/nats-auth), checks at connect that JetStream is enabled and that the replica count can be
 * held, and follows the connection's status: whether it is up (and since when it is down), and the problems an
 * operator must see (a permissions violation, expired credentials).
 */
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import {
  describeRefusal,
  describeStatusProblem,
  type NatsAuth,
  natsConnectionOptions,
  natsRefusal,
  redactNatsUrls,
  replicasProblem,
} from '../nats-auth';
import type { FailWith } from './errors';

// transport-node's typings re-export nats-core through a subpath TypeScript's node10 resolution cannot see.
export type NatsConnection = Awaited<ReturnType<typeof connect>>;

export interface JetStreamConnectOptions {
  /** The loaded NATS settings: servers, identity, TLS. */
  auth: NatsAuth;
  /** Connection name as the server's monitoring shows it. */
  name: string;
  connectTimeoutMs: number;
  /** How long a JetStream API request or PubAck may take. */
  apiTimeoutMs: number;
  /** Copies JetStream keeps of each stream, bucket and store created through this connection (checked). */
  replicas: number;
  /**
   * Reconnect forever, waiting this long between attempts (with half of it as jitter), and PING every
   * `pingIntervalMs` with 3 unanswered counting as a disconnect. Absent: nats.js's defaults.
   */
  reconnect?: { waitMs: number; pingIntervalMs: number };
  /** Capture a stack trace for every request (default off: see the pipeline's NatsOptions.asyncTraces). */
  asyncTraces?: boolean;
  /** A live-connection problem an operator must see. */
  onProblem?: (message: string) => void;
  /** The caller's typed error for each failure. */
  fail: FailWith;
}

/** nats.js errors that say "the server did not answer", not "it answered no". */
const TRANSPORT_ERRORS = new Set([
  'TimeoutError',
  'ClosedConnectionError',
  'ConnectionError',
  'DrainingConnectionError',
  'NoResponders',
  'RequestError',
  // No responder for the JetStream API on a live connection: the cluster is electing a meta leader (or this
  // server lost its quorum). At connect it means JetStream is off, which openJetStream() says itself.
  'JetStreamNotEnabled',
]);

export function isTransportError(err: unknown): boolean {
  return err instanceof Error && TRANSPORT_ERRORS.has(err.name);
}

export class JetStreamConnection {
  private up = true;
  private closed = false;
  /** Since when (ms since epoch) the connection is down; null while connected. */
  private downSince: number | null = null;
  private readonly listeners = new Set<(available: boolean) => void>();

  constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    /** The servers as messages show them (userinfo redacted). */
    readonly servers: string,
    /** The replica count what this connection creates gets (checked at connect). */
    readonly replicas: number,
    private readonly onProblem: ((message: string) => void) | undefined,
  ) {
    void this.followStatus();
  }

  /** False from a disconnect until the reconnect (and for good after close()). */
  get available(): boolean {
    return this.up && !this.closed;
  }

  /** Since when (ms since epoch) the connection is down, reconnecting; null while connected. */
  disconnectedSince(): number | null {
    return this.nc.isClosed() ? (this.downSince ?? Date.now()) : this.downSince;
  }

  /**
   * Called on every change of `available`, in the order they were added; returns the unsubscribe. A throwing
   * listener is ignored.
   */
  onAvailability(listener: (available: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.setUp(false);
    await this.nc.close().catch(() => undefined);
  }

  private async followStatus(): Promise<void> {
    for await (const status of this.nc.status()) {
      if (status.type === 'disconnect') {
        this.downSince = Date.now();
        this.setUp(false);
      } else if (status.type === 'reconnect') {
        this.downSince = null;
        this.setUp(true);
      } else {
        const problem = describeStatusProblem(status);
        if (problem) this.onProblem?.(`${problem} (NATS at ${this.servers})`);
      }
    }
  }

  private setUp(up: boolean): void {
    const before = this.available;
    this.up = up;
    if (this.available === before) return;
    for (const listener of [...this.listeners]) {
      try {
        listener(this.available);
      } catch {
        // A listener's failure is its own.
      }
    }
  }
}

/**
 * Connects: NATS unreachable is `unreachable`, a refusal of the credentials or the TLS handshake `refused`
 * (retrying with the same settings cannot succeed), a replica count the server cannot hold `invalid_options`.
 */
export async function openJetStream(options: JetStreamConnectOptions): Promise<JetStreamConnection> {
  const { auth, fail, replicas } = options;
  const servers = auth.shown;
  let nc: NatsConnection;
  try {
    nc = await connect({
      ...natsConnectionOptions(auth),
      name: options.name,
      timeout: options.connectTimeoutMs,
      ...(options.reconnect
        ? {
            maxReconnectAttempts: -1,
            reconnectTimeWait: options.reconnect.waitMs,
            reconnectJitter: Math.floor(options.reconnect.waitMs / 2),
            pingInterval: options.reconnect.pingIntervalMs,
            maxPingOut: 3,
          }
        : {}),
      noAsyncTraces: !(options.asyncTraces ?? false),
    });
  } catch (err) {
    const refusal = natsRefusal(err);
    if (refusal) throw fail('refused', describeRefusal(refusal, servers, err), { cause: err });
    throw fail('unreachable', `NATS is not reachable at ${servers}: ${redactNatsUrls(String(err))}`, {
      cause: err,
    });
  }
  let jsm: JetStreamManager;
  let js: JetStreamClient;
  try {
    // jetstreamManager() checks that JetStream is enabled: a plain nats-server fails here, not later.
    jsm = await jetstreamManager(nc, { timeout: options.apiTimeoutMs });
    js = jetstream(nc, { timeout: options.apiTimeoutMs });
  } catch (err) {
    await nc.close().catch(() => undefined);
    if ((err as Error).message.includes('Permissions Violation'))
      throw fail(
        'refused',
        `NATS at ${servers} refused this user the JetStream API ($JS.API.>): ${(err as Error).message}`,
        { cause: err },
      );
    throw fail('unreachable', `JetStream is not enabled at ${servers}: ${String(err)}`, { cause: err });
  }
  // A count a lone server cannot hold is refused here, not on the first stream or bucket.
  const problem = replicasProblem(replicas, nc.info, servers);
  if (problem) {
    await nc.close().catch(() => undefined);
    throw fail('invalid_options', problem);
  }
  return new JetStreamConnection(nc, js, jsm, servers, replicas, options.onProblem);
}
