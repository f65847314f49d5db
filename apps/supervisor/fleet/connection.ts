/**
 * The host's connection to the fleet's NATS: reconnects forever, and knows when it is down so that every
 * fleet call fails fast with `cluster_unavailable` instead of waiting out a request timeout (nats.js buffers
 * publishes and requests while reconnecting; they would only fail after their own timeouts).
 */
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import {
  describeRefusal,
  describeStatusProblem,
  loadNatsAuth,
  type NatsAuth,
  natsConnectionOptions,
  natsRefusal,
  redactNatsUrls,
  replicasProblem,
} from '../../../libs/nats-auth';
import { ClusterError, requirePositiveInt } from './errors';
import { type FleetNames, fleetNames, requireFleetName, requireHostId } from './records';

// transport-node's typings re-export nats-core through a subpath TypeScript's node10 resolution cannot see.
export type NatsConnection = Awaited<ReturnType<typeof connect>>;

export interface ClusterOptions {
  /** nats://host:port, or several (no credentials); `auth` instead for an identity and TLS. */
  servers?: string | string[];
  /** The loaded NATS settings (libs/nats-auth): servers, identity, TLS. Wins over `servers`. */
  auth?: NatsAuth;
  /** A live-connection problem an operator must see (a permissions violation, expired credentials). */
  onProblem?: (message: string) => void;
  /** Connection name as the server's monitoring shows it (default `streaminfer-<fleet>-<hostId>`). */
  name?: string;
  fleet: string;
  hostId: string;
  connectTimeoutMs?: number;
  /** How long a JetStream API request or PubAck may take while connected. */
  apiTimeoutMs?: number;
  /** Between reconnect attempts (forever). */
  reconnectWaitMs?: number;
  /**
   * Between PINGs to the server; 3 unanswered count as a disconnect. A server partitioned away is a black
   * hole (no reset): nats.js's default (2 min, 2 outstanding) left a host on it for ~4 min, deaf to its fleet.
   */
  pingIntervalMs?: number;
  /** Copies JetStream keeps of each bucket and object store this host creates (default 1; 3 on a cluster). */
  replicas?: number;
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
  // server lost its quorum). At connect it means JetStream is off, which open() says itself.
  'JetStreamNotEnabled',
]);

export function isTransportError(err: unknown): boolean {
  return err instanceof Error && TRANSPORT_ERRORS.has(err.name);
}

export class ClusterConnection {
  readonly names: FleetNames;
  private up = true;
  private closed = false;
  private readonly listeners = new Set<(available: boolean) => void>();
  /** Rejects the calls in flight when the connection drops. */
  private readonly downWaiters = new Set<(err: ClusterError) => void>();

  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly fleet: string,
    readonly hostId: string,
    /** The servers as messages show them (userinfo redacted). */
    readonly servers: string,
    private readonly onProblem: ((message: string) => void) | undefined,
    /** The replica count every bucket and object store is created with (checked at open). */
    readonly replicas: number,
  ) {
    this.names = fleetNames(fleet);
    void this.followStatus();
  }

  static async open(options: ClusterOptions): Promise<ClusterConnection> {
    const fleet = requireFleetName(options.fleet);
    const hostId = requireHostId(options.hostId);
    const connectTimeoutMs = requirePositiveInt('connectTimeoutMs', options.connectTimeoutMs ?? 5000);
    const apiTimeoutMs = requirePositiveInt('apiTimeoutMs', options.apiTimeoutMs ?? 5000);
    const reconnectWaitMs = requirePositiveInt('reconnectWaitMs', options.reconnectWaitMs ?? 250);
    const pingIntervalMs = requirePositiveInt('pingIntervalMs', options.pingIntervalMs ?? 2000);
    const replicas = options.replicas ?? 1;
    const badCount = replicasProblem(replicas, { cluster: 'unchecked' }, '');
    if (badCount) throw new ClusterError('invalid_options', badCount);
    let auth: NatsAuth;
    try {
      auth = options.auth ?? loadNatsAuth({ servers: options.servers ?? '' });
    } catch (err) {
      throw new ClusterError('invalid_options', (err as Error).message, { cause: err });
    }
    const servers = auth.shown;
    let nc: NatsConnection;
    try {
      nc = await connect({
        ...natsConnectionOptions(auth),
        name: options.name ?? `streaminfer-${fleet}-${hostId}`,
        timeout: connectTimeoutMs,
        maxReconnectAttempts: -1,
        reconnectTimeWait: reconnectWaitMs,
        reconnectJitter: Math.floor(reconnectWaitMs / 2),
        pingInterval: pingIntervalMs,
        maxPingOut: 3,
        noAsyncTraces: true,
      });
    } catch (err) {
      const refusal = natsRefusal(err);
      // A refusal is an answer: retrying with the same credentials or TLS settings cannot succeed.
      if (refusal)
        throw new ClusterError('nats_refused', describeRefusal(refusal, servers, err), { cause: err });
      throw new ClusterError(
        'cluster_unavailable',
        `NATS is not reachable at ${servers}: ${redactNatsUrls(String(err))}`,
        { cause: err },
      );
    }
    try {
      // Checks that JetStream is enabled: a plain nats-server fails here, not on the first fleet call.
      const jsm = await jetstreamManager(nc, { timeout: apiTimeoutMs });
      const js = jetstream(nc, { timeout: apiTimeoutMs });
      // A count a lone server cannot hold is refused here, not on the first bucket.
      const problem = replicasProblem(replicas, nc.info, servers);
      if (problem) throw new ClusterError('invalid_options', problem);
      return new ClusterConnection(nc, js, jsm, fleet, hostId, servers, options.onProblem, replicas);
    } catch (err) {
      await nc.close().catch(() => undefined);
      if (err instanceof ClusterError) throw err;
      if ((err as Error).message.includes('Permissions Violation'))
        throw new ClusterError(
          'nats_refused',
          `NATS at ${servers} refused this user the JetStream API ($JS.API.>): ${(err as Error).message}`,
          { cause: err },
        );
      throw new ClusterError(
        'cluster_unavailable',
        `JetStream is not enabled at ${servers}: ${String(err)}`,
        {
          cause: err,
        },
      );
    }
  }

  /** False from a disconnect until the reconnect (and for good after close()). */
  get available(): boolean {
    return this.up && !this.closed;
  }

  /** Called on every change of `available`; returns the unsubscribe. A throwing listener is ignored. */
  onAvailability(listener: (available: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Runs one NATS operation: at once `cluster_unavailable` when the connection is known down, also when it
   * drops while the operation waits; a transport error (timeout, no responders) is `cluster_unavailable` too.
   * Errors the operation throws itself (ClusterError, a JetStream API answer) pass through.
   */
  async call<T>(what: string, op: () => Promise<T>): Promise<T> {
    if (!this.available) throw this.unavailable(what);
    let onDown: ((err: ClusterError) => void) | undefined;
    const down = new Promise<never>((_, reject) => {
      onDown = (err) => reject(err);
    });
    const waiter = (err: ClusterError) => onDown?.(new ClusterError(err.code, `${what}: ${err.message}`));
    this.downWaiters.add(waiter);
    const running = op();
    // The loser of the race below must not become an unhandled rejection.
    running.catch(() => undefined);
    try {
      return await Promise.race([running, down]);
    } catch (err) {
      if (err instanceof ClusterError) throw err;
      if (isTransportError(err) || !this.available)
        throw new ClusterError('cluster_unavailable', `${what}: ${String(err)}`, { cause: err });
      throw err;
    } finally {
      this.downWaiters.delete(waiter);
    }
  }

  unavailable(what: string): ClusterError {
    return new ClusterError(
      'cluster_unavailable',
      `${what}: NATS at ${this.servers} is ${this.closed ? 'closed' : 'not connected'}`,
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.setUp(false);
    await this.nc.close().catch(() => undefined);
  }

  private async followStatus(): Promise<void> {
    for await (const status of this.nc.status()) {
      if (status.type === 'disconnect') this.setUp(false);
      else if (status.type === 'reconnect') this.setUp(true);
      else {
        const problem = describeStatusProblem(status);
        if (problem) this.onProblem?.(`${problem} (NATS at ${this.servers})`);
      }
    }
  }

  private setUp(up: boolean): void {
    const before = this.available;
    this.up = up;
    if (this.available === before) return;
    if (!this.available)
      for (const waiter of [...this.downWaiters]) waiter(this.unavailable('connection lost'));
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
 * Connects to the fleet's NATS (docs/operations/fleet.md); NATS unreachable at start is `cluster_unavailable`, a refusal
 * of the credentials or the TLS handshake `nats_refused`.
 */
export function connectCluster(options: ClusterOptions): Promise<ClusterConnection> {
  return ClusterConnection.open(options);
}
