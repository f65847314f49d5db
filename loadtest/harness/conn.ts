/**
 * One load-generator WebSocket connection: opens, runs a phase of requests (closed loop, or
 * open loop on a schedule, within an in-flight cap and an optional shared budget), matches
 * answers by id into `LoadStats`, and accounts for what a close or a stop leaves unanswered.
 */
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { sharedClock } from '../../libs/ring';
import { readBinaryAnswerHeader, readJsonAnswerHeader } from './bodies';
import type { EarlyClose, LoadStats } from './stats';

/** Codes the client itself assigns (not answers from the server). */
export const CLIENT_CODES = { closed: 'connection_closed', timeout: 'client_timeout' } as const;

interface WireMessage {
  id?: unknown;
  type?: unknown;
  code?: unknown;
  version?: unknown;
  retry_after_ms?: unknown;
}

/** A request budget shared by the connections of one process. */
export interface Budget {
  left: number;
}

export type AnyBodyFn = (id: number) => string | Buffer;

/**
 * Connections that got an answer in this event-loop turn. Their next requests go out together
 * once the turn's reads are done (`setImmediate`), not from inside each message handler: a send is
 * a socket write, and doing it inline would delay — and inflate the measured latency of — every
 * answer still waiting to be read in the same turn.
 */
const toPump = new Set<Conn>();
let pumpScheduled = false;

function schedulePump(c: Conn): void {
  toPump.add(c);
  if (pumpScheduled) return;
  pumpScheduled = true;
  setImmediate(() => {
    pumpScheduled = false;
    const batch = [...toPump];
    toPump.clear();
    for (const conn of batch) conn.kick();
  });
}

export class Conn {
  ws: WebSocket | undefined;
  seq: number;
  readonly pending = new Map<number, number>();
  measureFrom = Number.POSITIVE_INFINITY;
  measuring = false;
  toSend = 0;
  cap = 1;
  intervalMs = 0;
  nextDue = 0;
  timer: NodeJS.Timeout | undefined;
  /** performance.now() before which no request goes out (a server's retry_after_ms) */
  pausedUntil = 0;
  budget: Budget | undefined;
  closed = false;
  openedOk = false;
  stopping = false;
  phaseDone: (() => void) | undefined;

  constructor(
    readonly index: number,
    private readonly body: AnyBodyFn,
    private readonly stats: LoadStats,
    private readonly onEarlyClose: (c: EarlyClose) => void,
    private readonly maxRetryPauseMs = 0,
  ) {
    this.seq = index * 10_000_000;
  }

  open(url: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, {
        perMessageDeflate: false,
        skipUTF8Validation: true,
        handshakeTimeout: timeoutMs,
      });
      this.ws = ws;
      let settled = false;
      ws.on('unexpected-response', (_req, res) => {
        settled = true;
        reject(new Error(`unexpected HTTP ${res.statusCode} on upgrade`));
        ws.terminate();
      });
      ws.once('open', () => {
        settled = true;
        this.openedOk = true;
        resolve();
      });
      ws.on('error', (err) => {
        if (!settled) {
          settled = true;
          reject(err);
        }
      });
      ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(data, isBinary));
      ws.on('close', (code: number, reason: Buffer) => {
        if (!settled) {
          settled = true;
          reject(new Error(`closed during handshake (code ${code})`));
        }
        this.onClose(code, reason.toString());
      });
    });
  }

  /**
   * Start a phase of `count` requests (or, with `budget`, as many as the shared budget allows);
   * resolves when all are answered or the connection is gone.
   */
  startPhase(
    count: number,
    measuring: boolean,
    cap: number,
    ratePerSec: number | null,
    budget?: Budget,
  ): Promise<void> {
    return new Promise((resolve) => {
      this.measuring = measuring;
      if (measuring) this.measureFrom = this.seq + 1;
      this.budget = budget;
      this.toSend = budget ? Number.POSITIVE_INFINITY : count;
      // a retry pause from the warm-up does not delay the measured phase
      this.pausedUntil = 0;
      this.cap = cap;
      this.phaseDone = resolve;
      if (this.closed) {
        if (measuring && !budget) this.stats.notSent += count;
        this.toSend = 0;
        this.finishPhase();
        return;
      }
      if (ratePerSec && ratePerSec > 0) {
        this.intervalMs = 1000 / ratePerSec;
        // spread connections over one interval so they do not fire in lockstep
        this.nextDue = performance.now() + Math.random() * this.intervalMs;
      } else {
        this.intervalMs = 0;
      }
      this.pump();
    });
  }

  private finishPhase(): void {
    const done = this.phaseDone;
    this.phaseDone = undefined;
    done?.();
  }

  /** Requests this connection may still send in the current phase. */
  private canSend(): boolean {
    return this.toSend > 0 && (this.budget === undefined || this.budget.left > 0);
  }

  /** Requests planned but not sent, for `notSent` (a shared budget is counted once, by the process). */
  private unsent(): number {
    return this.budget ? 0 : this.toSend;
  }

  private sendOne(): void {
    const id = ++this.seq;
    this.toSend--;
    if (this.budget) this.budget.left--;
    this.pending.set(id, performance.now());
    if (this.measuring) this.stats.sent++;
    this.ws!.send(this.body(id));
  }

  /** Send what is due now (called by `schedulePump`). */
  kick(): void {
    this.pump();
  }

  private schedule(delayMs: number): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.pump();
      },
      Math.max(0, delayMs),
    );
  }

  private pump(): void {
    if (this.closed || this.stopping) return;
    if (this.pausedUntil > 0 && this.canSend()) {
      const now = performance.now();
      if (now < this.pausedUntil) {
        this.schedule(this.pausedUntil - now);
        return;
      }
      this.pausedUntil = 0;
      // an open loop resumes its schedule from now, it does not fire the paused backlog at once
      if (this.intervalMs > 0 && this.nextDue < now) this.nextDue = now;
    }
    if (this.intervalMs > 0) {
      const now = performance.now();
      while (this.canSend() && this.nextDue <= now && this.pending.size < this.cap) {
        this.sendOne();
        this.nextDue += this.intervalMs;
      }
      if (this.canSend() && this.timer === undefined && this.pending.size < this.cap) {
        this.timer = setTimeout(
          () => {
            this.timer = undefined;
            this.pump();
          },
          Math.max(0, this.nextDue - now),
        );
      }
    } else {
      while (this.canSend() && this.pending.size < this.cap) this.sendOne();
    }
    if (!this.canSend() && this.pending.size === 0) this.finishPhase();
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (this.stopping) return;
    let msg: WireMessage | undefined;
    if (isBinary) {
      // a binary answer: its header only (id, version), never the tensor data
      msg = readBinaryAnswerHeader(data);
      if (msg === undefined) {
        this.stats.unmatched++;
        return;
      }
    } else {
      // likewise the text before the result only (errors and warnings whole)
      msg = readJsonAnswerHeader(data);
      if (msg === undefined) {
        this.stats.unmatched++;
        return;
      }
    }
    if (msg === null || typeof msg !== 'object') {
      this.stats.unmatched++;
      return;
    }
    if (msg.type === 'warning') {
      if (this.measuring) this.stats.recordWarning(typeof msg.code === 'string' ? msg.code : 'warning');
      return;
    }
    const id = typeof msg.id === 'number' ? msg.id : Number(msg.id);
    const sentAt = this.pending.get(id);
    const isError = msg.type === 'error';
    const code = typeof msg.code === 'string' ? msg.code : 'unknown';
    const retryAfter =
      isError && typeof msg.retry_after_ms === 'number' && Number.isFinite(msg.retry_after_ms)
        ? msg.retry_after_ms
        : undefined;
    if (sentAt === undefined) {
      // an answer for nothing we sent (or an id-less error): count it, it is a server bug signal
      this.stats.unmatched++;
      if (isError && this.measuring) this.stats.recordError(code, sharedClock());
      return;
    }
    this.pending.delete(id);
    const now = performance.now();
    if (id >= this.measureFrom) {
      const at = performance.timeOrigin + now;
      if (isError) this.stats.recordError(code, at, (now - sentAt) * 1000, retryAfter);
      else
        this.stats.recordOk((now - sentAt) * 1000, msg.version === undefined ? '?' : String(msg.version), at);
    } else if (isError) {
      this.stats.warmupErrors++;
    }
    if (retryAfter !== undefined && this.maxRetryPauseMs > 0 && retryAfter > 0) {
      this.pausedUntil = Math.max(this.pausedUntil, now + Math.min(retryAfter, this.maxRetryPauseMs));
    }
    // the next request goes out after every answer read in this turn was timestamped
    schedulePump(this);
  }

  private onClose(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.stopping) return;
    if (this.openedOk) {
      this.onEarlyClose({ conn: this.index, code, reason, atMs: 0, pending: this.pending.size });
    }
    const at = sharedClock();
    if (this.measuring) {
      for (const id of this.pending.keys()) {
        if (id >= this.measureFrom) this.stats.recordError(CLIENT_CODES.closed, at);
      }
      this.stats.notSent += this.unsent();
    }
    this.pending.clear();
    this.toSend = 0;
    this.finishPhase();
  }

  /** Send nothing more in this phase; the phase ends once what is outstanding is answered. */
  stopSending(): void {
    this.toSend = 0;
    this.budget = undefined;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.size === 0) this.finishPhase();
  }

  /** Stop sending; count what is still outstanding. */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.measuring && !this.closed) {
      const at = sharedClock();
      for (const id of this.pending.keys()) {
        if (id >= this.measureFrom) this.stats.recordError(CLIENT_CODES.timeout, at);
      }
      this.stats.notSent += this.unsent();
    }
    this.pending.clear();
    this.toSend = 0;
    this.finishPhase();
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      const ws = this.ws;
      if (!ws || ws.readyState === WebSocket.CLOSED) return resolve();
      const t = setTimeout(() => {
        ws.terminate();
        resolve();
      }, 1000);
      ws.once('close', () => {
        clearTimeout(t);
        resolve();
      });
      if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
      else ws.close(1000, 'done');
    });
  }
}
