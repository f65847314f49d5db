/**
 * Whose limits a request is charged to: the client address (behind trusted proxies, the rightmost untrusted
 * X-Forwarded-For hop), the per-address client table (every HTTP client, and WebSocket connections with
 * rateLimitKey `ip`), and the limits each client gets from the node's backpressure settings.
 */
import type * as uWS from 'uWebSockets.js';
import { clientKey, ProxyTrust } from '../../libs/address';
import {
  ClientState,
  ClientTable,
  type ResolvedBackpressureOptions,
  validateBackpressureOptions,
} from '../../libs/backpressure';
import type { NodeStartOptions } from './ipc';
import type { Connection } from './request';

/** Clients by address (HTTP, and WebSocket with rateLimitKey `ip`) whose limits are remembered; idle ones are forgotten after this long. */
const ADDRESS_CLIENTS_MAX = 100_000;
const ADDRESS_CLIENT_IDLE_MS = 60_000;

export class ClientLimits {
  private limits: ResolvedBackpressureOptions;
  /** Limits by client address: every HTTP client, and WebSocket connections with rateLimitKey `ip`. */
  private readonly addressClients: ClientTable<string>;
  /** Who may speak for another address (X-Forwarded-For), from trustedProxies / trustForwardedFor. */
  private proxies: ProxyTrust;

  constructor(
    private readonly options: NodeStartOptions,
    private readonly peers: { peerAddress(res: uWS.HttpResponse): string },
  ) {
    this.limits = clientLimits(options.backpressure);
    this.addressClients = new ClientTable<string>(
      ADDRESS_CLIENTS_MAX,
      ADDRESS_CLIENT_IDLE_MS,
      (now) => new ClientState(this.limits, now),
    );
    this.proxies = proxyTrustOf(options.backpressure);
  }

  /** A new WebSocket connection's own client state (its slow-consumer state, and its limits by default). */
  newClient(now: number): ClientState {
    return new ClientState(this.limits, now);
  }

  /** The client's address as limits key it: behind trusted proxies, the rightmost untrusted XFF hop. */
  addressOf(res: uWS.HttpResponse, req: uWS.HttpRequest): string {
    return clientKey(
      this.proxies.clientAddress(this.peers.peerAddress(res), req.getHeader('x-forwarded-for')),
    );
  }

  /** The client of an address (every HTTP request's). */
  ofAddress(address: string, now: number): ClientState {
    return this.addressClients.get(address, now);
  }

  /** Whose limits a frame is charged to: its connection's, or its address's (rateLimitKey `ip`). */
  of(connection: Connection, now: number): ClientState {
    return this.options.backpressure.rateLimitKey === 'ip'
      ? this.addressClients.get(connection.address, now)
      : connection.client;
  }

  /**
   * A configuration reload (the node updated its options): new limits and trusted proxies; every client by
   * address takes the new limits now. Returns the limits, for the connections' own clients.
   */
  reconfigure(now: number): ResolvedBackpressureOptions {
    this.limits = clientLimits(this.options.backpressure);
    this.proxies = proxyTrustOf(this.options.backpressure);
    this.addressClients.forEachState((client) => client.reconfigure(this.limits, now));
    return this.limits;
  }
}

/** trustedProxies when set; else the deprecated trustForwardedFor (any peer is the one proxy); else no one. */
function proxyTrustOf(backpressure: NodeStartOptions['backpressure']): ProxyTrust {
  if (backpressure.trustedProxies !== undefined) return ProxyTrust.fromText(backpressure.trustedProxies);
  return backpressure.trustForwardedFor ? ProxyTrust.anyPeer() : ProxyTrust.none();
}

/** A client's limits (rate, in-flight cap, slow consumer) from the node's backpressure settings. */
function clientLimits(backpressure: NodeStartOptions['backpressure']): ResolvedBackpressureOptions {
  return validateBackpressureOptions({
    rateLimitRps: backpressure.rateLimitRps,
    rateLimitBurst: backpressure.rateLimitBurst,
    modelErrorPenalty: backpressure.modelErrorPenalty,
    maxInflightPerClient: backpressure.maxInflightPerClient,
    maxModelQueue: backpressure.maxModelQueue,
    slowConsumerWarnBytes: backpressure.slowConsumerWarnBytes,
    slowConsumerCloseBytes: backpressure.slowConsumerCloseBytes,
  });
}
