/**
 * The data port of a node: the uWS app taking new connections, its listen socket, a certificate reload (a fresh
 * app on the same port), and with a client CA the mutual-TLS relay in front of it. Stops and resumes for rolls
 * and drains.
 */
import * as uWS from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { NodeTls } from '../../libs/registry';
import { remoteAddress } from './http-exchange';
import type { NodeStartOptions } from './ipc';
import { TlsRelay } from './tls-relay';
import type { TransportGuard } from './transport-guard';

/** With a client CA the port is node:tls relaying to a plain app (tls-relay.ts): uWS cannot require one. */
export function isMutual(tls: NodeTls | undefined): boolean {
  return tls?.clientCaFile !== undefined;
}

export class Listener {
  /** The app taking new connections: plain, or TLS with the certificate last loaded (see useTls). */
  private app: uWS.TemplatedApp;
  private tls: NodeTls | undefined;
  /**
   * Apps replaced by a certificate reload: their listen sockets are closed, their open connections still
   * served. Kept referenced for as long as the node lives (one per certificate reload).
   */
  private readonly retiredApps: uWS.TemplatedApp[] = [];
  private listenSocket: uWS.us_listen_socket | undefined;
  private listenPort = 0;
  /** Mutual TLS: node:tls on the host's port, relaying to this node's plain app on 127.0.0.1 (made at first listen). */
  private relay: TlsRelay | undefined;
  /** Counts stops (rolls, drains): a listen that waited for the shared handle across one does not accept. */
  private listenGeneration = 0;

  /**
   * `makeApp` builds an app with every route (plain, or TLS on the given files); `listenHandle` is the host's
   * listening socket from the supervisor (mutual TLS only); `draining` tells that the node stopped accepting.
   */
  constructor(
    tls: NodeTls | undefined,
    private readonly options: Pick<NodeStartOptions, 'host'>,
    private readonly makeApp: (tls: NodeTls | undefined) => uWS.TemplatedApp,
    private readonly guard: TransportGuard,
    private readonly logger: Logger,
    private readonly listenHandle: () => Promise<unknown>,
    private readonly draining: () => boolean,
  ) {
    this.tls = tls;
    this.app = makeApp(tls);
  }

  listen(host: string, port: number): Promise<number> {
    if (isMutual(this.tls)) return this.listenMutual(port);
    try {
      this.listenSocket = bind(this.app, host, port);
      this.listenPort = uWS.us_socket_local_port(this.listenSocket);
      return Promise.resolve(this.listenPort);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Mutual TLS: the plain app listens on 127.0.0.1 at a port of its own, once, for the node's life; node:tls
   * takes the host's port (the shared handle) and relays there. From then on every request and upgrade must
   * come through the relay (the guard's admit check): the inner port is reachable by anyone on the host.
   */
  private async listenMutual(port: number): Promise<number> {
    if (!this.relay) {
      const inner = bind(this.app, '127.0.0.1', 0);
      const innerPort = uWS.us_socket_local_port(inner);
      const relay = new TlsRelay(this.tls!, innerPort, this.logger);
      this.relay = relay;
      this.guard.admit = (res) => relay.admit(res);
      this.logger.info({ innerPort }, 'mutual TLS: node:tls on the data port, relaying to the inner port');
    }
    this.listenPort = port;
    if (this.relay.accepting) return port;
    const generation = this.listenGeneration;
    const handle = await this.listenHandle();
    // A roll or a drain that began while the handle was on its way: this node must not accept now.
    if (generation !== this.listenGeneration || this.draining() || this.relay.accepting) {
      (handle as { close?: () => void } | undefined)?.close?.();
      return port;
    }
    await this.relay.listen(handle);
    return port;
  }

  /** Takes new connections now (not during a roll, a drain, or before the first listen). */
  private get listening(): boolean {
    return this.relay ? this.relay.accepting : this.listenSocket !== undefined;
  }

  /** The TLS files this node serves now (undefined: plain). */
  get tlsInUse(): NodeTls | undefined {
    return this.tls;
  }

  /**
   * A certificate reload: a fresh app on the new files, with the same routes, listens on the same port
   * (SO_REUSEPORT) before the old listen socket closes, so no connection attempt finds the port closed;
   * connections the old app holds stay open and keep being served, new ones get the new certificate.
   * While the node does not listen (a roll, a drain, not started yet) only the app is replaced: the next
   * listen uses it. The caller has checked the files; should the new listen fail, the old app stays.
   * Mutual TLS: the node:tls server takes the new files (setSecureContext): same effect, same port.
   */
  useTls(tls: NodeTls | undefined): void {
    if (isMutual(tls) !== isMutual(this.tls))
      throw new Error('turning mutual TLS (tlsClientCa) on or off needs a restart');
    if (isMutual(tls)) {
      this.relay?.setFiles(tls!);
      this.tls = tls;
      return;
    }
    const fresh = this.makeApp(tls);
    const oldSocket = this.listenSocket;
    if (oldSocket) {
      this.listenSocket = bind(fresh, this.options.host, this.listenPort);
      uWS.us_listen_socket_close(oldSocket);
    }
    this.retiredApps.push(this.app);
    this.app = fresh;
    this.tls = tls;
  }

  /** No new connections (a roll or a drain): the listen socket or the relay stops accepting. */
  stop(): void {
    this.listenGeneration++;
    this.relay?.stopAccepting();
    if (this.listenSocket) {
      uWS.us_listen_socket_close(this.listenSocket);
      this.listenSocket = undefined;
    }
  }

  /** Listens again on the same port after a roll (not while draining, nor when already listening). */
  async resume(): Promise<void> {
    if (this.listening || this.draining()) return;
    await this.listen(this.options.host, this.listenPort);
  }

  /** The peer's address: the TCP peer's, or behind the mutual-TLS relay the real client's. */
  peerAddress(res: uWS.HttpResponse): string {
    return this.relay ? this.relay.peerOf(res) : remoteAddress(res);
  }
}

/** Listens (uWS calls back at once); throws when the port cannot be bound. */
function bind(app: uWS.TemplatedApp, host: string, port: number): uWS.us_listen_socket {
  const bound: { socket?: uWS.us_listen_socket } = {};
  app.listen(host, port, (socket) => {
    if (socket) bound.socket = socket;
  });
  if (!bound.socket)
    throw new Error(
      `could not listen on ${host}:${port} (port in use by a non-reusable socket, or permission denied)`,
    );
  return bound.socket;
}
