/**
 * WebSocket load generator. Runs as its own process so its CPU use does not mix with the
 * bench's (or the server's):
 *
 *   forked by the bench   argv[2] = JSON LoadgenOptions; IPC: → {type:'ready'}, ← {type:'go'},
 *                         → {type:'result', result: PartialResult} (or {type:'error'})
 *   standalone            node dist/loadtest/harness/loadgen.js --url ws://127.0.0.1:8000/ws -c 10 -n 100
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
import { type BodyOptions, binaryBodyFactory, bodyFactory } from './bodies';
import { type AnyBodyFn, type Budget, Conn } from './conn';
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
