/**
 * In-process WebSocket clients for scenarios that need every answer, not only a histogram:
 * the `hot-swap` and `registry` scenarios record (send time, receive time, version, epoch,
 * label) per answer, per connection. Closed loop: each connection keeps one request in
 * flight (optionally pausing `gapMs` between an answer and the next request) until stopped
 * or until a total request budget is spent. Nothing is ever dropped silently: a request
 * unanswered after `timeoutMs` is recorded as `client_timeout`, one a closed connection
 * still owed as `connection_closed`.
 */
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import type { AnswerRecord } from './swap-analysis';

/** The digits rows the clients send (64 pixel counts each). */
export interface RowSource {
  /** number of rows */
  n: number;
  /** the JSON text of row `i`'s input array, e.g. "[0,0,5,…]" */
  inputJson(i: number): string;
}

/** A RowSource over a row-major Float64Array/number array of [n, width] values. */
export function rowSource(values: ArrayLike<number>, width: number): RowSource {
  const n = Math.floor(values.length / width);
  const cache: string[] = [];
  return {
    n,
    inputJson(i: number): string {
      const r = ((i % n) + n) % n;
      let s = cache[r];
      if (s === undefined) {
        const row: number[] = [];
        for (let c = 0; c < width; c++) row.push(values[r * width + c]!);
        s = cache[r] = JSON.stringify(row);
      }
      return s;
    },
  };
}

interface Pending {
  id: number;
  row: number;
  sentMs: number;
  resolve(a: AnswerRecord): void;
  timer: NodeJS.Timeout;
}

/** One WebSocket connection that matches answers to requests by id. */
export class StreamClient {
  private readonly pending = new Map<number, Pending>();
  private closed = false;
  private closedByUs = false;
  /** set when the server (or the network) closed the connection, not close() */
  closeInfo: { code: number; reason: string } | undefined;
  /** answers for ids nobody waits for (late answers after a client timeout included) */
  unmatched = 0;

  private constructor(
    readonly conn: number,
    private readonly ws: WebSocket,
    private readonly timeoutMs: number,
  ) {
    ws.on('message', (data: WebSocket.RawData, isBinary: boolean) => {
      if (isBinary) return;
      this.onMessage(data.toString());
    });
    ws.on('close', (code: number, reason: Buffer) => {
      this.closed = true;
      if (!this.closedByUs) this.closeInfo = { code, reason: reason.toString() };
      for (const p of [...this.pending.values()]) this.settle(p, { error: 'connection_closed' });
    });
    ws.on('error', () => {
      // 'close' follows and settles what is pending
    });
  }

  static connect(url: string, conn: number, timeoutMs = 10_000): Promise<StreamClient> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      const timer = setTimeout(() => {
        ws.terminate();
        reject(new Error(`connection ${conn} to ${url} did not open within 10 s`));
      }, 10_000);
      ws.once('open', () => {
        clearTimeout(timer);
        resolve(new StreamClient(conn, ws, timeoutMs));
      });
      ws.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
  }

  get isOpen(): boolean {
    return !this.closed && this.ws.readyState === WebSocket.OPEN;
  }

  private settle(p: Pending, fields: Partial<AnswerRecord>): void {
    if (!this.pending.delete(p.id)) return;
    clearTimeout(p.timer);
    p.resolve({
      conn: this.conn,
      id: p.id,
      row: p.row,
      sentMs: p.sentMs,
      recvMs: performance.now(),
      ...fields,
    });
  }

  private onMessage(text: string): void {
    const recvMs = performance.now();
    let m: Record<string, unknown>;
    try {
      m = JSON.parse(text) as Record<string, unknown>;
    } catch {
      this.unmatched++;
      return;
    }
    if (m['type'] === 'warning') return;
    const p = typeof m['id'] === 'number' ? this.pending.get(m['id']) : undefined;
    if (!p) {
      this.unmatched++;
      return;
    }
    this.pending.delete(p.id);
    clearTimeout(p.timer);
    const base = { conn: this.conn, id: p.id, row: p.row, sentMs: p.sentMs, recvMs };
    if (m['type'] === 'error') {
      p.resolve({ ...base, error: String(m['code'] ?? 'error'), message: String(m['message'] ?? '') });
      return;
    }
    const result = m['result'] as { label?: unknown } | undefined;
    p.resolve({
      ...base,
      version: String(m['version']),
      ...(typeof m['epoch'] === 'number' ? { epoch: m['epoch'] } : {}),
      ...(result && result.label !== undefined ? { label: String(result.label) } : {}),
    });
  }

  /**
   * Send one request (`{"id","model","input"}` plus `extra` fields, already JSON) and resolve
   * with its record; never rejects.
   */
  request(id: number, row: number, model: string, inputJson: string, extraJson = ''): Promise<AnswerRecord> {
    return new Promise((resolve) => {
      const sentMs = performance.now();
      const p: Pending = {
        id,
        row,
        sentMs,
        resolve,
        timer: setTimeout(() => this.settle(p, { error: 'client_timeout' }), this.timeoutMs),
      };
      if (!this.isOpen) {
        clearTimeout(p.timer);
        resolve({ conn: this.conn, id, row, sentMs, recvMs: sentMs, error: 'connection_closed' });
        return;
      }
      this.pending.set(id, p);
      this.ws.send(`{"id":${id},"model":${JSON.stringify(model)}${extraJson},"input":${inputJson}}`);
    });
  }

  close(): void {
    this.closedByUs = true;
    this.closed = true;
    this.ws.close(1000);
  }
}

export interface ClosedLoopOptions {
  url: string;
  connections: number;
  model: string;
  rows: RowSource;
  /** row for request `seq` of connection `conn` (default: spread the rows over the connections) */
  rowFor?: (conn: number, seq: number) => number;
  /** stop after this many requests in total (default: until stop()) */
  maxRequests?: number;
  /** pause between an answer and the next request on a connection, ms (default 0) */
  gapMs?: number;
  /** per-request client timeout, ms (default 10 s) */
  timeoutMs?: number;
  /** requests per connection sent and awaited before the clock starts (not recorded) */
  warmupPerConnection?: number;
  /** extra JSON fields, e.g. `,"routing_key":"a"` */
  extraJson?: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * N connections, one request in flight each, recording every answer. `open()` connects and
 * warms up; `start()` begins the measured loop; `stop()` stops sending, waits for what is
 * still in flight (bounded by the client timeout) and closes the connections.
 */
export class ClosedLoop {
  readonly answers: AnswerRecord[] = [];
  /** the warm-up answers (before the clock started), kept apart */
  readonly warmupAnswers: AnswerRecord[] = [];
  private clients: StreamClient[] = [];
  private stopping = false;
  private sent = 0;
  private loops: Promise<void>[] = [];
  private doneResolve: (() => void) | undefined;
  /** resolves when `maxRequests` have all been answered (or stop() was called) */
  readonly done: Promise<void>;

  constructor(private readonly o: ClosedLoopOptions) {
    this.done = new Promise((r) => (this.doneResolve = r));
  }

  get unmatched(): number {
    return this.clients.reduce((a, c) => a + c.unmatched, 0);
  }

  get closes(): { conn: number; code: number; reason: string }[] {
    return this.clients.filter((c) => c.closeInfo).map((c) => ({ conn: c.conn, ...c.closeInfo! }));
  }

  /** requests sent so far (measured phase only) */
  get requestsSent(): number {
    return this.sent;
  }

  private rowFor(conn: number, seq: number): number {
    return this.o.rowFor ? this.o.rowFor(conn, seq) : (conn * 997 + seq * 31) % this.o.rows.n;
  }

  async open(): Promise<void> {
    this.clients = await Promise.all(
      Array.from({ length: this.o.connections }, (_, c) =>
        StreamClient.connect(this.o.url, c, this.o.timeoutMs),
      ),
    );
    const warm = this.o.warmupPerConnection ?? 0;
    const failures: string[] = [];
    await Promise.all(
      this.clients.map(async (c) => {
        for (let i = 0; i < warm; i++) {
          const row = this.rowFor(c.conn, i);
          const a = await c.request(-1 - i, row, this.o.model, this.o.rows.inputJson(row), this.o.extraJson);
          this.warmupAnswers.push(a);
          if (a.error) failures.push(`${a.error}: ${a.message ?? ''}`);
        }
      }),
    );
    if (failures.length) throw new Error(`warm-up failed: ${failures.length} errors, e.g. ${failures[0]}`);
  }

  start(): void {
    this.loops = this.clients.map((c) => this.loop(c));
    void Promise.all(this.loops).then(() => this.doneResolve?.());
  }

  private async loop(c: StreamClient): Promise<void> {
    const max = this.o.maxRequests ?? Number.POSITIVE_INFINITY;
    for (let seq = 0; !this.stopping && this.sent < max; seq++) {
      this.sent++;
      const row = this.rowFor(c.conn, seq);
      this.answers.push(
        await c.request(seq, row, this.o.model, this.o.rows.inputJson(row), this.o.extraJson),
      );
      if (this.o.gapMs) await sleep(this.o.gapMs);
    }
  }

  /** Stop sending, wait for the requests in flight, close the connections. */
  async stop(): Promise<AnswerRecord[]> {
    this.stopping = true;
    await Promise.all(this.loops);
    this.doneResolve?.();
    for (const c of this.clients) c.close();
    return this.answers;
  }
}
