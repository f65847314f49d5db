/**
 * A WebSocket client that sends requests and never reads the answers — the slow consumer of
 * the `slow-consumer` scenario. `ws.pause()` pauses the underlying `net.Socket`: Node stops
 * reading once its small stream buffer is full (`readStop` on the handle), so the answers pile
 * up in the kernel (this socket's receive queue, then the server's send queue) and then in the
 * server's own user-space buffer, which is what the server's slow-consumer limit watches.
 *
 * Lifecycle: `open()` (paused from the first byte on), `startFlood()`, then — once the caller
 * sees the server closed it (its /metrics) or the run is over — `stopFlood()` and
 * `resumeAndDrain()`, which reads everything that was waiting and reports the close code the
 * server sent (1013 expected) and what came before it.
 */
import * as fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';

export interface SlowClientResult {
  /** requests sent while flooding */
  sent: number;
  bytesSent: number;
  /** flood duration, ms */
  floodMs: number;
  /** answers / messages / bytes read after resuming */
  answersRead: number;
  errorAnswers: Record<string, number>;
  warnings: Record<string, number>;
  messagesRead: number;
  bytesRead: number;
  /** close code and reason seen after resuming; undefined when it did not close within the timeout */
  closeCode?: number;
  closeReason?: string;
  /** ms from resume to the close */
  drainMs?: number;
  /**
   * the client ended the connection itself: `close` once nothing more arrived (`quietMs`), or
   * `terminate` when it was still open `timeoutMs` after resuming
   */
  endedByClient?: 'close' | 'terminate';
  /** socket errors (e.g. EPIPE while flooding a connection the server had dropped) */
  socketErrors: string[];
  /** the kernel's queues for this connection when the flood stopped (bytes), when readable */
  kernel?: KernelQueues;
}

export interface KernelQueues {
  /** unread bytes in this client's receive queue */
  clientRecvQ: number;
  /** bytes the server's kernel has not delivered yet (its send queue) */
  serverSendQ?: number;
}

/** Parse /proc/net/tcp{,6} for the connection between local port `clientPort` and `serverPort`. */
export function readKernelQueues(
  clientPort: number,
  serverPort: number,
  files?: string[],
): KernelQueues | undefined {
  const texts = (files ?? ['/proc/net/tcp', '/proc/net/tcp6']).map((f) => {
    try {
      return fs.readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  });
  return parseKernelQueues(texts.join('\n'), clientPort, serverPort);
}

/** The pure part of `readKernelQueues`: `text` holds /proc/net/tcp lines. */
export function parseKernelQueues(
  text: string,
  clientPort: number,
  serverPort: number,
): KernelQueues | undefined {
  let clientRecvQ: number | undefined;
  let serverSendQ: number | undefined;
  for (const line of text.split('\n')) {
    const cols = line.trim().split(/\s+/);
    // sl local_address rem_address st tx_queue:rx_queue ...
    if (cols.length < 5 || !cols[0]?.endsWith(':')) continue;
    const port = (addr: string | undefined): number => Number.parseInt(addr?.split(':').at(-1) ?? '', 16);
    const local = port(cols[1]);
    const remote = port(cols[2]);
    const [tx, rx] = (cols[4] ?? '').split(':').map((h) => Number.parseInt(h, 16));
    if (local === clientPort && remote === serverPort && rx !== undefined) clientRecvQ = rx;
    if (local === serverPort && remote === clientPort && tx !== undefined) serverSendQ = tx;
  }
  if (clientRecvQ === undefined) return undefined;
  return { clientRecvQ, ...(serverSendQ !== undefined ? { serverSendQ } : {}) };
}

export class SlowClient {
  private ws: WebSocket | undefined;
  private timer: NodeJS.Timeout | undefined;
  private seq: number;
  private floodStart = 0;
  private floodEnd = 0;
  private nextDue = 0;
  private closed: { code: number; reason: string; at: number } | undefined;
  private resumedAt = 0;
  private readonly result: SlowClientResult = {
    sent: 0,
    bytesSent: 0,
    floodMs: 0,
    answersRead: 0,
    errorAnswers: {},
    warnings: {},
    messagesRead: 0,
    bytesRead: 0,
    socketErrors: [],
  };
  private closeWaiters: (() => void)[] = [];

  constructor(
    private readonly url: string,
    /** request text for id */
    private readonly body: (id: number) => string,
    private readonly ratePerSec: number,
    index = 0,
    /** read the answers as they come (a normal client with the same traffic, for a warm-up) */
    private readonly reading = false,
  ) {
    this.seq = 900_000_000 + index * 1_000_000;
  }

  /** Answers and bytes read so far. */
  readSoFar(): { messages: number; bytes: number } {
    return { messages: this.result.messagesRead, bytes: this.result.bytesRead };
  }

  /** Local and remote ports of the connection (for the kernel queues). */
  ports(): { local: number; remote: number } | undefined {
    const s = (this.ws as unknown as { _socket?: { localPort?: number; remotePort?: number } })?._socket;
    return s?.localPort && s.remotePort ? { local: s.localPort, remote: s.remotePort } : undefined;
  }

  /** Whether the connection is known to be closed (only visible while reading, or on a socket error). */
  isClosed(): boolean {
    return this.closed !== undefined;
  }

  open(timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url, { perMessageDeflate: false, handshakeTimeout: timeoutMs });
      this.ws = ws;
      let settled = false;
      ws.once('open', () => {
        settled = true;
        if (!this.reading) ws.pause(); // stop reading: answers stay in the kernel and in the server
        resolve();
      });
      ws.on('error', (err) => {
        if (!settled) {
          settled = true;
          reject(err);
          return;
        }
        if (this.result.socketErrors.length < 5) this.result.socketErrors.push(err.message);
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(data, isBinary));
      ws.on('close', (code: number, reason: Buffer) => {
        if (!settled) {
          settled = true;
          reject(new Error(`closed during the handshake (code ${code})`));
        }
        this.closed ??= { code, reason: reason.toString(), at: performance.now() };
        this.stopFlood();
        for (const w of this.closeWaiters.splice(0)) w();
      });
    });
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    this.result.messagesRead++;
    this.result.bytesRead += data.length;
    if (isBinary) return;
    // answers start with {"id":…; only small messages (errors, warnings) are worth parsing
    if (data.length > 512) {
      this.result.answersRead++;
      return;
    }
    try {
      const m = JSON.parse(data.toString()) as { type?: unknown; code?: unknown };
      const code = typeof m.code === 'string' ? m.code : 'unknown';
      if (m.type === 'warning') this.result.warnings[code] = (this.result.warnings[code] ?? 0) + 1;
      else if (m.type === 'error') this.result.errorAnswers[code] = (this.result.errorAnswers[code] ?? 0) + 1;
      else this.result.answersRead++;
    } catch {
      this.result.answersRead++;
    }
  }

  /** Send at `ratePerSec` (a 10 ms tick sends what is due) until `stopFlood()` or the socket closes. */
  startFlood(): void {
    const ws = this.ws;
    if (!ws || this.timer) return;
    this.floodStart = performance.now();
    this.nextDue = this.floodStart;
    const interval = 1000 / this.ratePerSec;
    this.timer = setInterval(() => {
      if (ws.readyState !== WebSocket.OPEN || this.closed) {
        this.stopFlood();
        return;
      }
      const now = performance.now();
      // never more than 100 ms of backlog at once (a stalled event loop must not cause a burst)
      if (now - this.nextDue > 100) this.nextDue = now - 100;
      while (this.nextDue <= now) {
        const text = this.body(++this.seq);
        ws.send(text);
        this.result.sent++;
        this.result.bytesSent += text.length;
        this.nextDue += interval;
      }
    }, 10);
  }

  stopFlood(): void {
    if (this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.floodEnd = performance.now();
      this.result.floodMs = Math.round(this.floodEnd - this.floodStart);
    }
  }

  /**
   * Resume reading; resolves once the connection closed. With `quietMs`, the client closes it
   * itself (1000) once nothing has arrived for that long (the server did not close it); in any case
   * it is terminated `timeoutMs` after resuming.
   */
  async resumeAndDrain(
    opts: { timeoutMs?: number; serverPort?: number; quietMs?: number } = {},
  ): Promise<SlowClientResult> {
    const timeoutMs = opts.timeoutMs ?? 15_000;
    this.stopFlood();
    const ports = this.ports();
    if (ports && opts.serverPort !== undefined) {
      const k = readKernelQueues(ports.local, opts.serverPort);
      if (k) this.result.kernel = k;
    }
    const ws = this.ws;
    this.resumedAt = performance.now();
    let ended: SlowClientResult['endedByClient'];
    if (ws && !this.closed) {
      const closed = new Promise<void>((r) => this.closeWaiters.push(r));
      ws.resume();
      const until = this.resumedAt + timeoutMs;
      let lastBytes = -1;
      let quietSince = performance.now();
      while (!this.closed && performance.now() < until) {
        await Promise.race([closed, sleepMs(100)]);
        if (this.closed || opts.quietMs === undefined) continue;
        const now = performance.now();
        if (this.result.bytesRead !== lastBytes) {
          lastBytes = this.result.bytesRead;
          quietSince = now;
        } else if (now - quietSince >= opts.quietMs) {
          ended = 'close';
          ws.close(1000, 'done');
          await Promise.race([closed, sleepMs(2000)]);
          break;
        }
      }
      if (!this.closed) {
        ended = 'terminate';
        ws.terminate();
        await Promise.race([closed, sleepMs(1000)]);
      }
    }
    const c = ended ? undefined : this.closed;
    if (c && c.at >= this.resumedAt) this.result.drainMs = Math.round(c.at - this.resumedAt);
    return {
      ...this.result,
      ...(c ? { closeCode: c.code, closeReason: c.reason } : {}),
      ...(ended ? { endedByClient: ended } : {}),
    };
  }
}

function sleepMs(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
