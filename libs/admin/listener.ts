/**
 * The admin listener: node:http on a TCP address or a unix socket, node:https when it has a certificate. The
 * control plane needs no uWS: it answers operators and scrapers, not clients.
 */
import { chmodSync, lstatSync, unlinkSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as net from 'node:net';
import { AdminSetupError } from './errors';
import type { TlsPair } from './files';

export interface AdminEndpoint {
  host: string;
  port: number;
  /** A unix socket path: takes the place of host and port. */
  socket?: string | undefined;
}

export interface AdminAddress {
  /** How a client reaches it: http(s)://host:port, or unix:/path. */
  url: string;
  /** The bound TCP port (0 asked for any free port); undefined on a unix socket. */
  port?: number;
  socket?: string;
  tls: boolean;
}

export type AdminHandler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/** A socket file left by a process that is gone is removed; a live one, or anything that is not a socket, is not. */
async function clearStaleSocket(file: string): Promise<void> {
  let stat: ReturnType<typeof lstatSync>;
  try {
    stat = lstatSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new AdminSetupError(
      `cannot use ${file} as the admin socket: ${(error as NodeJS.ErrnoException).code}`,
    );
  }
  if (!stat.isSocket())
    throw new AdminSetupError(`cannot use ${file} as the admin socket: it exists and is not a socket`);
  const live = await new Promise<boolean>((resolve) => {
    const probe = net.connect(file);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new AdminSetupError(`the admin socket ${file} is in use by another process`);
  unlinkSync(file);
}

export class AdminListener {
  private readonly server: http.Server | https.Server;
  private readonly sockets = new Set<net.Socket>();

  constructor(
    private readonly endpoint: AdminEndpoint,
    handler: AdminHandler,
    private readonly tls?: TlsPair,
  ) {
    this.server = tls
      ? https.createServer({ cert: tls.cert, key: tls.key }, handler)
      : http.createServer(handler);
    this.server.on('connection', (socket: net.Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
  }

  /** Binds; a unix socket is created with mode 0600 (only this user may connect) before it accepts anyone. */
  async listen(): Promise<AdminAddress> {
    const server = this.server;
    const scheme = this.tls ? 'https' : 'http';
    const listening = new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) =>
        reject(
          new AdminSetupError(
            `the admin listener cannot listen on ${this.describe()}: ${error.code ?? error.message}`,
          ),
        ),
      );
      server.once('listening', () => resolve());
    });
    const socket = this.endpoint.socket;
    if (socket !== undefined) {
      await clearStaleSocket(socket);
      // The file is made by bind(), inside listen(): the umask decides its mode before any connect.
      const previous = process.umask(0o177);
      try {
        server.listen(socket);
      } finally {
        process.umask(previous);
      }
      await listening;
      chmodSync(socket, 0o600);
      return { url: `unix:${socket}`, socket, tls: this.tls !== undefined };
    }
    server.listen(this.endpoint.port, this.endpoint.host);
    await listening;
    const port = (server.address() as net.AddressInfo).port;
    const host = this.endpoint.host.includes(':') ? `[${this.endpoint.host}]` : this.endpoint.host;
    return { url: `${scheme}://${host}:${port}`, port, tls: this.tls !== undefined };
  }

  /** A new certificate and key for new connections; open ones keep theirs. */
  useTls(pair: TlsPair): void {
    if (!(this.server instanceof https.Server))
      throw new AdminSetupError('the admin listener was started without TLS: restart to turn it on');
    this.server.setSecureContext({ cert: pair.cert, key: pair.key });
  }

  get tlsEnabled(): boolean {
    return this.tls !== undefined;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server.listening) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  private describe(): string {
    return this.endpoint.socket ?? `${this.endpoint.host}:${this.endpoint.port}`;
  }
}
