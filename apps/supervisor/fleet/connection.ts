/**
 * The host's connection to the fleet's NATS: reconnects forever, and knows when it is down so that every
 * fleet call fails fast with `cluster_unavailable` instead of waiting out a request timeout (nats.js buffers
 * publishes and requests while reconnecting; they would only fail after their own timeouts).
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { requirePositiveInt } from '../../../libs/config';
import {
  type FailWith,
  isTransportError,
  type JetStreamConnection,
  type NatsConnection,
  openJetStream,
} from '../../../libs/jetstream';
import { loadNatsAuth, type NatsAuth, replicasProblem } from '../../../libs/nats-auth';
import { FleetError, invalidOptions } from './errors';
import { type FleetNames, fleetNames, requireFleetName, requireHostId } from './records';

export interface FleetConnectionOptions {
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

/** The fleet's codes for what libs/jetstream reports: NATS down or silent is `cluster_unavailable`. */
export const failFleet: FailWith = (failure, message, options) =>
  new FleetError(
    failure === 'unreachable'
      ? 'cluster_unavailable'
      : failure === 'refused'
        ? 'nats_refused'
        : 'invalid_options',
    message,
    options,
  );

export class FleetConnection {
  readonly names: FleetNames;
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  /** The servers as messages show them (userinfo redacted). */
  readonly servers: string;
  /** The replica count every bucket and object store is created with (checked at open). */
  readonly replicas: number;
  /** Rejects the calls in flight when the connection drops. */
  private readonly downWaiters = new Set<(err: FleetError) => void>();
  private closed = false;

  private constructor(
    private readonly link: JetStreamConnection,
    readonly fleet: string,
    readonly hostId: string,
  ) {
    this.names = fleetNames(fleet);
    this.nc = link.nc;
    this.js = link.js;
    this.jsm = link.jsm;
    this.servers = link.servers;
    this.replicas = link.replicas;
    // First listener: the calls in flight fail before anyone else hears of the drop.
    link.onAvailability((available) => {
      if (!available) for (const waiter of [...this.downWaiters]) waiter(this.unavailable('connection lost'));
    });
  }

  static async open(options: FleetConnectionOptions): Promise<FleetConnection> {
    const fleet = requireFleetName(options.fleet);
    const hostId = requireHostId(options.hostId);
    const connectTimeoutMs = requirePositiveInt(
      'connectTimeoutMs',
      options.connectTimeoutMs ?? 5000,
      1,
      invalidOptions,
    );
    const apiTimeoutMs = requirePositiveInt('apiTimeoutMs', options.apiTimeoutMs ?? 5000, 1, invalidOptions);
    const reconnectWaitMs = requirePositiveInt(
      'reconnectWaitMs',
      options.reconnectWaitMs ?? 250,
      1,
      invalidOptions,
    );
    const pingIntervalMs = requirePositiveInt(
      'pingIntervalMs',
      options.pingIntervalMs ?? 2000,
      1,
      invalidOptions,
    );
    const replicas = options.replicas ?? 1;
    const badCount = replicasProblem(replicas, { cluster: 'unchecked' }, '');
    if (badCount) throw new FleetError('invalid_options', badCount);
    let auth: NatsAuth;
    try {
      auth = options.auth ?? loadNatsAuth({ servers: options.servers ?? '' });
    } catch (err) {
      throw new FleetError('invalid_options', (err as Error).message, { cause: err });
    }
    const link = await openJetStream({
      auth,
      name: options.name ?? `streaminfer-${fleet}-${hostId}`,
      connectTimeoutMs,
      apiTimeoutMs,
      replicas,
      reconnect: { waitMs: reconnectWaitMs, pingIntervalMs },
      ...(options.onProblem ? { onProblem: options.onProblem } : {}),
      fail: failFleet,
    });
    return new FleetConnection(link, fleet, hostId);
  }

  /** False from a disconnect until the reconnect (and for good after close()). */
  get available(): boolean {
    return this.link.available;
  }

  /** Called on every change of `available`; returns the unsubscribe. A throwing listener is ignored. */
  onAvailability(listener: (available: boolean) => void): () => void {
    return this.link.onAvailability(listener);
  }

  /**
   * Runs one NATS operation: at once `cluster_unavailable` when the connection is known down, also when it
   * drops while the operation waits; a transport error (timeout, no responders) is `cluster_unavailable` too.
   * Errors the operation throws itself (FleetError, a JetStream API answer) pass through.
   */
  async call<T>(what: string, op: () => Promise<T>): Promise<T> {
    if (!this.available) throw this.unavailable(what);
    let onDown: ((err: FleetError) => void) | undefined;
    const down = new Promise<never>((_, reject) => {
      onDown = (err) => reject(err);
    });
    const waiter = (err: FleetError) => onDown?.(new FleetError(err.code, `${what}: ${err.message}`));
    this.downWaiters.add(waiter);
    const running = op();
    // The loser of the race below must not become an unhandled rejection.
    running.catch(() => undefined);
    try {
      return await Promise.race([running, down]);
    } catch (err) {
      if (err instanceof FleetError) throw err;
      if (isTransportError(err) || !this.available)
        throw new FleetError('cluster_unavailable', `${what}: ${String(err)}`, { cause: err });
      throw err;
    } finally {
      this.downWaiters.delete(waiter);
    }
  }

  unavailable(what: string): FleetError {
    return new FleetError(
      'cluster_unavailable',
      `${what}: NATS at ${this.servers} is ${this.closed ? 'closed' : 'not connected'}`,
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.link.close();
  }
}

/**
 * Connects to the fleet's NATS (docs/operations/fleet.md); NATS unreachable at start is `cluster_unavailable`, a refusal
 * of the credentials or the TLS handshake `nats_refused`.
 */
export function connectFleet(options: FleetConnectionOptions): Promise<FleetConnection> {
  return FleetConnection.open(options);
}
