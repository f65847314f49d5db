/**
 * WebSocket load generator. Runs as its own process so its CPU use does not mix with the
 * bench's (or the server's):
 *
 *   forked by the bench   argv[2] = JSON LoadgenOptions; IPC: → {type:'ready'}, ← {type:'go'},
 *                         → {type:'result', result: PartialResult} (or {type:'error'})
 *   standalone            node dist/loadtest/loadgen.js --url ws://127.0.0.1:8000/ws -c 10 -n 100
 *                         prints the merged LoadResult as JSON on stdout
 *
 * Every connection is opened (and warmed up) before the clock starts. Per connection, at
 * most `inFlightPerConnection` requests are outstanding; the next one goes out when an
 * answer arrives (closed loop), or, with `ratePerConnection`, on a fixed schedule (open
 * loop, capped by the in-flight limit when one is given). Answers are matched by `id`.
 * The measured phase stops by itself after `timeLimitMs`; what is still outstanding is
 * counted as `client_timeout`, what a closed connection still owed as `connection_closed`.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { type BodyOptions, binaryBodyFactory, bodyFactory, readBinaryAnswerHeader } from './bodies';
import {
  type ConnectFailure,
  type EarlyClose,
  LoadStats,
  mergePartials,
  type PartialResult,
  type StopReason,
} from './stats';

export interface LoadgenOptions {
  /** ws://127.0.0.1:PORT/ws */
  url: string;
  connections: number;
  requestsPerConnection: number;
  /** outstanding requests per connection; default 1 (unlimited when a rate is set and this is unset) */
  inFlightPerConnection?: number;
  /** requests per second per connection (open loop); unset = closed loop */
  ratePerConnection?: number | null;
  /** body kind: 'echo-floats' | 'digits' | 'bench-model' | 'text' */
  body: string;
  bodyOptions?: BodyOptions;
  /**
   * send binary tensor frames (libs/protocol/binary.ts) instead of JSON text frames; binary answers
   * are read by their header only (id, version), JSON answers (errors, warnings) as usual
   */
  binary?: boolean;
  /**
   * a request budget shared by all connections of this process for the measured phase, instead of
   * `requestsPerConnection` each: connections keep sending (within their in-flight cap) until this
   * many requests were sent in total
   */
  totalRequests?: number;
  /**
   * after an error answer carrying `retry_after_ms`, the connection waits that long (at most
   * `maxRetryPauseMs`, default 5000) before its next request; default: it sends at once
   */
  honorRetryAfter?: boolean;
  maxRetryPauseMs?: number;
  /** requests per connection sent before the clock starts, not counted */
  warmupPerConnection?: number;
  /** hard limit of the measured phase; the loop stops by itself */
  timeLimitMs: number;
  /** limit for opening connections plus warm-up (default 30 s) */
  connectTimeoutMs?: number;
  /** timeline bucket width (default 1000 ms) */
  bucketMs?: number;
  /** keep every (timestamp, version) answer for timelines */
  recordSamples?: boolean;
  /** global index of this process's first connection (ids stay unique across processes) */
  connOffset?: number;
  /** wait for {type:'go'} over IPC after 'ready' (set by the bench's runner) */
  waitForGo?: boolean;
}

/** `stop`: the parent no longer wants a result; `finish`: end the measured phase now and report. */
export type ParentMessage = { type: 'go' } | { type: 'stop' } | { type: 'finish' };
export type ChildMessage =
  | { type: 'ready'; opened: number; failed: number }
  | { type: 'measured' }
  | { type: 'result'; result: PartialResult }
  | { type: 'error'; message: string };

const epochNow = (): number => performance.timeOrigin + performance.now();

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
interface Budget {
  left: number;
}

type AnyBodyFn = (id: number) => string | Buffer;

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

class Conn {
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
      try {
        msg = JSON.parse(data.toString()) as WireMessage;
      } catch {
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
      if (isError && this.measuring) this.stats.recordError(code, epochNow());
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
    const at = epochNow();
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
      const at = epochNow();
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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** After a stop request, how long requests already sent may take to be answered. */
const STOP_GRACE_MS = 2000;

async function withLimit<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<'timeout'>((r) => {
    timer = setTimeout(() => r('timeout'), ms);
  });
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Run one load-generator process's share of the load. `waitGo` is awaited between the
 * warm-up and the measured phase (the IPC barrier when several processes share a run);
 * `finishEarly`, when it resolves, ends the measured phase (`stoppedBy: 'stop_request'`).
 */
export async function generate(
  opts: LoadgenOptions,
  waitGo: (ready: { opened: number; failed: number }) => Promise<void> = async () => {},
  onMeasured: () => void = () => {},
  finishEarly?: Promise<void>,
): Promise<PartialResult> {
  const connectTimeoutMs = opts.connectTimeoutMs ?? 30_000;
  const stats = new LoadStats(opts.bucketMs ?? 1000, opts.recordSamples ?? false);
  const closes: EarlyClose[] = [];
  const connectFailures: ConnectFailure[] = [];
  const offset = opts.connOffset ?? 0;
  const rate = opts.ratePerConnection ?? null;
  const cap = opts.inFlightPerConnection ?? (rate ? Number.POSITIVE_INFINITY : 1);
  let startPerf = Number.NaN;
  const conns: Conn[] = [];
  const retryPause = opts.honorRetryAfter ? (opts.maxRetryPauseMs ?? 5000) : 0;
  for (let i = 0; i < opts.connections; i++) {
    const index = offset + i;
    const body: AnyBodyFn = opts.binary
      ? binaryBodyFactory(opts.body, index, opts.bodyOptions)
      : bodyFactory(opts.body, index, opts.bodyOptions);
    conns.push(
      new Conn(
        index,
        body,
        stats,
        (c) => {
          closes.push({ ...c, atMs: Number.isNaN(startPerf) ? -1 : performance.now() - startPerf });
        },
        retryPause,
      ),
    );
  }

  // 1. open every connection (bounded concurrency) before the clock starts
  const openDeadline = performance.now() + connectTimeoutMs;
  const opened: Conn[] = [];
  const OPEN_CONCURRENCY = 128;
  for (let i = 0; i < conns.length; i += OPEN_CONCURRENCY) {
    const slice = conns.slice(i, i + OPEN_CONCURRENCY);
    const left = Math.max(1, openDeadline - performance.now());
    const results = await Promise.allSettled(slice.map((c) => c.open(opts.url, left)));
    results.forEach((r, j) => {
      const c = slice[j]!;
      if (r.status === 'fulfilled') opened.push(c);
      else {
        connectFailures.push({
          conn: c.index,
          message: r.reason instanceof Error ? r.reason.message : String(r.reason),
        });
        c.closed = true;
      }
    });
  }

  // 2. warm-up (not counted)
  const warmup = opts.warmupPerConnection ?? 0;
  if (warmup > 0 && opened.length > 0) {
    const warmCap = Number.isFinite(cap) ? cap : 8;
    await withLimit(
      Promise.all(opened.map((c) => c.startPhase(warmup, false, warmCap, null))),
      Math.max(1000, openDeadline - performance.now()),
    );
  }
  const live = opened.filter((c) => !c.closed);

  // 3. barrier, then the measured phase
  await waitGo({ opened: live.length, failed: conns.length - live.length });
  const cpu0 = process.cpuUsage();
  startPerf = performance.now();
  const startEpochMs = performance.timeOrigin + startPerf;
  stats.startEpochMs = startEpochMs;
  let stoppedBy: StopReason = live.length === 0 ? 'no_connections' : 'completed';
  let limitTimer: NodeJS.Timeout | undefined;
  const limit = new Promise<void>((resolve) => {
    limitTimer = setTimeout(() => {
      stoppedBy = 'time_limit';
      resolve();
    }, opts.timeLimitMs);
  });
  const budget: Budget | undefined =
    opts.totalRequests !== undefined ? { left: Math.max(0, Math.floor(opts.totalRequests)) } : undefined;
  const all = Promise.all(live.map((c) => c.startPhase(opts.requestsPerConnection, true, cap, rate, budget)));
  // connections that never opened owe their whole share (a shared budget is counted below)
  if (!budget) stats.notSent += (conns.length - live.length) * opts.requestsPerConnection;
  let finishing = false;
  const early = finishEarly?.then(async () => {
    if (finishing) return;
    finishing = true;
    stoppedBy = 'stop_request';
    // stop sending, give what is in flight a moment to be answered (else it counts as client_timeout)
    // the plan ends here: what it did not send yet is not counted as `notSent`
    if (budget) budget.left = 0;
    for (const c of live) c.stopSending();
    await withLimit(all, STOP_GRACE_MS);
  });
  await Promise.race(early ? [all, limit, early] : [all, limit]);
  finishing = true;
  clearTimeout(limitTimer);
  const endPerf = performance.now();
  for (const c of live) c.stop();
  if (budget) stats.notSent += budget.left;
  const cpu = process.cpuUsage(cpu0);
  onMeasured();
  const wallUs = Math.max(1, (endPerf - startPerf) * 1000);

  // 4. close politely (bounded)
  await withLimit(Promise.all(conns.map((c) => c.close())), 3000);

  return stats.toPartial({
    connections: conns.length,
    connectionsOpened: live.length,
    connectFailures,
    closes,
    startEpochMs,
    endEpochMs: performance.timeOrigin + endPerf,
    stoppedBy,
    cpuPct: ((cpu.user + cpu.system) / wallUs) * 100,
  });
}

function parseCli(argv: string[]): LoadgenOptions {
  const first = argv[0];
  if (first?.trim().startsWith('{')) return JSON.parse(first) as LoadgenOptions;
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string', default: 'ws://127.0.0.1:8000/ws' },
      connections: { type: 'string', short: 'c', default: '10' },
      requests: { type: 'string', short: 'n', default: '100' },
      'in-flight': { type: 'string' },
      rate: { type: 'string' },
      body: { type: 'string', default: 'echo-floats' },
      model: { type: 'string' },
      version: { type: 'string' },
      warmup: { type: 'string', default: '0' },
      'time-limit': { type: 'string', default: '60000' },
      samples: { type: 'boolean', default: false },
      binary: { type: 'boolean', default: false },
      total: { type: 'string' },
      'honor-retry-after': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: loadgen [--url ws://host:port/ws] [-c connections] [-n requests/conn] [--in-flight k]\n' +
        '               [--rate rps/conn] [--body echo-floats|digits|bench-model|text] [--model m]\n' +
        '               [--version v] [--warmup k] [--time-limit ms] [--samples] [--binary]\n' +
        '               [--total N (shared request budget)] [--honor-retry-after]\n',
    );
    process.exit(0);
  }
  const int = (s: string | undefined, name: string): number | undefined => {
    if (s === undefined) return undefined;
    const n = Number(s);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name}: not a non-negative number: ${s}`);
    return n;
  };
  return {
    url: values.url!,
    connections: int(values.connections, 'connections')!,
    requestsPerConnection: int(values.requests, 'requests')!,
    inFlightPerConnection: int(values['in-flight'], 'in-flight'),
    ratePerConnection: int(values.rate, 'rate') ?? null,
    body: values.body!,
    bodyOptions: { model: values.model, version: values.version, repoRoot: process.cwd() },
    warmupPerConnection: int(values.warmup, 'warmup'),
    timeLimitMs: int(values['time-limit'], 'time-limit')!,
    recordSamples: values.samples,
    binary: values.binary,
    totalRequests: int(values.total, 'total'),
    honorRetryAfter: values['honor-retry-after'],
  };
}

async function main(): Promise<void> {
  const opts = parseCli(process.argv.slice(2));
  const ipc = typeof process.send === 'function';
  if (ipc && opts.waitForGo) {
    let stopRequested = false;
    let goResolve: (() => void) | undefined;
    let finishResolve!: () => void;
    const finish = new Promise<void>((r) => {
      finishResolve = r;
    });
    process.on('message', (m: ParentMessage) => {
      if (m.type === 'go') goResolve?.();
      if (m.type === 'stop') stopRequested = true;
      if (m.type === 'finish') finishResolve();
    });
    // a vanished parent means nobody wants the result
    process.on('disconnect', () => process.exit(2));
    const result = await generate(
      opts,
      (ready) => {
        const go = new Promise<void>((r) => {
          goResolve = r;
        });
        process.send!({ type: 'ready', ...ready } satisfies ChildMessage);
        return go;
      },
      () => process.send!({ type: 'measured' } satisfies ChildMessage),
      finish,
    );
    if (stopRequested) process.exit(0);
    process.send!({ type: 'result', result } satisfies ChildMessage, () => process.exit(0));
    return;
  }
  const part = await generate(opts);
  const merged = mergePartials([part], {
    url: opts.url,
    body: opts.body,
    requestsPerConnection: opts.requestsPerConnection,
    inFlightPerConnection:
      opts.inFlightPerConnection ?? (opts.ratePerConnection ? Number.POSITIVE_INFINITY : 1),
    ratePerConnection: opts.ratePerConnection ?? null,
    warmupPerConnection: opts.warmupPerConnection ?? 0,
    binary: opts.binary,
    totalRequests: opts.totalRequests,
  });
  if (ipc) process.send!({ type: 'result', result: part } satisfies ChildMessage, () => process.exit(0));
  else {
    process.stdout.write(JSON.stringify(merged, null, 2) + '\n');
    await sleep(10);
    process.exit(0);
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    if (typeof process.send === 'function') {
      process.send({ type: 'error', message } satisfies ChildMessage, () => process.exit(1));
    } else {
      process.stderr.write(`loadgen: ${message}\n`);
      process.exit(1);
    }
  });
}
