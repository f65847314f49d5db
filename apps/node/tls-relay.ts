/**
 * Mutual TLS on the data port (`--tls-client-ca`). uWebSockets.js verifies a client certificate that is
 * presented but cannot require one (uWS #589, #1058), so with a client CA node:tls terminates TLS instead
 * (`requestCert` + `rejectUnauthorized`: no certificate, or one the CA did not sign, is refused at the
 * handshake) and relays each accepted connection byte for byte to the node's own plain uWS app on an
 * ephemeral 127.0.0.1 port, behind a PROXY protocol v2 header.
 *
 * Anyone on the host can connect to that inner port, so it must not be a way around the handshake: the
 * header's source address is a fresh 128-bit random nonce per connection, mapped here (same process) to the
 * real client address for as long as the TLS connection lives. The gateway serves a request on the inner
 * port only when uWS reports a proxied address that is a live nonce (`peerOf`); anything else (no header,
 * a forged one) is closed unanswered.
 *
 * The listening socket is the host's, shared by every node: the supervisor binds it once and hands each node
 * its handle (Node 20 has no `reusePort`); a node stops and resumes accepting on it for rolls and drains.
 */

import type * as uWS from 'uWebSockets.js';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as net from 'node:net';
import * as tls from 'node:tls';
import type { Logger } from 'pino';
import type { NodeTls } from '../../libs/registry';

/** PROXY v2: signature, version 2 + PROXY command, TCP over IPv6, 36 bytes of addresses. */
const PROXY_V2_SIGNATURE = Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1');
const PROXY_V2_HEADER_BYTES = 16 + 36;
const NONCE_BYTES = 16;
/** After uWS closed a connection, its client has this long to read what is left before it is cut. */
const FLUSH_ON_CLOSE_MS = 10_000;
const HANDSHAKE_TIMEOUT_MS = 10_000;

/** The secure context options of a node:tls server on these files: a client certificate is required. */
export function mutualTlsOptions(files: NodeTls): tls.SecureContextOptions {
  if (files.clientCaFile === undefined) throw new Error('mutual TLS needs a client CA file');
  return {
    cert: readFileSync(files.certFile),
    key: readFileSync(files.keyFile),
    ca: readFileSync(files.clientCaFile),
  };
}

/** A PROXY v2 header whose source is the 16-byte nonce (IPv6 form); the destination says nothing. */
export function proxyV2Header(nonce: Buffer): Buffer {
  const header = Buffer.alloc(PROXY_V2_HEADER_BYTES);
  PROXY_V2_SIGNATURE.copy(header, 0);
  header[12] = 0x21; // version 2, command PROXY
  header[13] = 0x21; // AF_INET6, SOCK_STREAM
  header.writeUInt16BE(36, 14);
  nonce.copy(header, 16);
  return header;
}

export class TlsRelay {
  private readonly server: tls.Server;
  /** Nonce (hex) → the real client address, while its TLS connection is open. */
  private readonly peers = new Map<string, string>();
  /** Accepts on the shared handle while this node takes connections (undefined: it does not). */
  private acceptor: net.Server | undefined;
  /** The last response checked (`admit`) and its client: the address lookup that follows costs nothing. */
  private lastRes: uWS.HttpResponse | undefined;
  private lastAddress = '';

  constructor(
    files: NodeTls,
    private readonly innerPort: number,
    private readonly logger: Logger,
  ) {
    this.server = tls.createServer({
      ...mutualTlsOptions(files),
      requestCert: true,
      rejectUnauthorized: true,
      // A connection that does not finish its handshake soon holds a socket for nothing (default 120 s).
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
    });
    this.server.on('secureConnection', (socket) => this.relay(socket));
    // A refused handshake (no certificate, another CA, not TLS at all) is the client's business: debug only.
    this.server.on('tlsClientError', (error, socket) => {
      this.logger.debug({ err: error.message, address: socket.remoteAddress }, 'TLS handshake refused');
      socket.destroy();
    });
  }

  /** Starts accepting on the shared listening handle (from the supervisor). */
  listen(handle: unknown): Promise<void> {
    if (this.acceptor) return Promise.resolve();
    // Answers are small and each is awaited: no Nagle delay on either hop.
    const acceptor = net.createServer({ noDelay: true }, (socket) => this.server.emit('connection', socket));
    this.acceptor = acceptor;
    return new Promise((resolve, reject) => {
      const failed = (error: Error): void => {
        this.acceptor = undefined;
        reject(error);
      };
      acceptor.once('error', failed);
      acceptor.listen(handle as net.ListenOptions, () => {
        acceptor.off('error', failed);
        acceptor.on('error', (error) => this.logger.error({ err: error.message }, 'TLS acceptor error'));
        resolve();
      });
    });
  }

  /** No new connections here (the other nodes take them); open ones are relayed on. */
  stopAccepting(): void {
    this.acceptor?.close();
    this.acceptor = undefined;
  }

  get accepting(): boolean {
    return this.acceptor !== undefined;
  }

  /** A certificate reload: new handshakes use the new files, open connections keep theirs. Throws on bad files. */
  setFiles(files: NodeTls): void {
    this.server.setSecureContext(mutualTlsOptions(files));
  }

  /**
   * Whether a request on the inner port came through this relay: its PROXY v2 source is a live nonce. A
   * request that did not is closed unanswered (it is someone on the host connecting to 127.0.0.1).
   */
  admit(res: uWS.HttpResponse): boolean {
    const address = this.peers.get(Buffer.from(res.getProxiedRemoteAddress()).toString('hex'));
    if (address === undefined) {
      this.lastRes = undefined;
      res.close();
      return false;
    }
    this.lastRes = res;
    this.lastAddress = address;
    return true;
  }

  /** The real client address of an admitted request ('' for one that was not). */
  peerOf(res: uWS.HttpResponse): string {
    if (res === this.lastRes) return this.lastAddress;
    return this.peers.get(Buffer.from(res.getProxiedRemoteAddress()).toString('hex')) ?? '';
  }

  private relay(outer: tls.TLSSocket): void {
    const nonce = randomBytes(NONCE_BYTES);
    const key = nonce.toString('hex');
    this.peers.set(key, outer.remoteAddress ?? '');
    const inner = net.connect(this.innerPort, '127.0.0.1');
    inner.setNoDelay(true);
    inner.write(proxyV2Header(nonce));
    let flushTimer: NodeJS.Timeout | undefined;
    outer.on('close', () => {
      // The client is gone: nothing left to deliver, and its nonce admits nothing from now on.
      this.peers.delete(key);
      clearTimeout(flushTimer);
      inner.destroy();
    });
    inner.on('close', () => {
      if (outer.destroyed) return;
      // uWS closed the connection (after an answer with Connection: close, say): flush it to the client first.
      outer.end(() => outer.destroy());
      flushTimer = setTimeout(() => outer.destroy(), FLUSH_ON_CLOSE_MS);
    });
    const failed = (error: Error): void => {
      this.logger.debug({ err: error.message }, 'relayed connection failed');
      outer.destroy();
      inner.destroy();
    };
    outer.on('error', failed);
    inner.on('error', failed);
    // pipe() applies backpressure both ways; the client's half-close is passed on to uWS.
    outer.pipe(inner);
    inner.pipe(outer, { end: false });
  }
}
