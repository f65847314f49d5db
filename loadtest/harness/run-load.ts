/**
 * Parent side of the load generator: forks one or more `loadgen.js` processes, splits the
 * connections between them, holds them at a ready/go barrier (so every connection is open
 * and warmed up before any clock starts), then merges their partial results.
 */
import { type ChildProcess, fork } from 'node:child_process';
import * as path from 'node:path';
import type { ChildMessage, LoadgenOptions, ParentMessage } from './loadgen';
import { type LoadResult, mergePartials, type PartialResult } from './stats';

export interface RunLoadOptions extends LoadgenOptions {
  /** number of load-generator processes (default 1) */
  processes?: number;
  /** path of the compiled loadgen script (default: next to this file) */
  script?: string;
  /** called right after 'go' is sent (the measured phase starts) */
  onGo?: () => void;
  /** called when every load generator has finished its measured phase */
  onDone?: () => void;
  /**
   * when this resolves (after the measured phase started), the load generators end their
   * measured phase and report (`stoppedBy: 'stop_request'`): for a background load that should
   * last exactly as long as another one
   */
  stopWhen?: Promise<unknown>;
}

/** Split `total` into `parts` near-equal non-negative shares. */
export function splitEvenly(total: number, parts: number): number[] {
  const n = Math.max(1, Math.floor(parts));
  const base = Math.floor(total / n);
  const rest = total % n;
  return Array.from({ length: n }, (_, i) => base + (i < rest ? 1 : 0));
}

/**
 * Split `total` into integer parts proportional to `weights` (largest remainders get the
 * leftovers), e.g. a shared request budget over processes holding different connection counts.
 */
export function splitByWeight(total: number, weights: readonly number[]): number[] {
  const t = Math.max(0, Math.floor(total));
  const sum = weights.reduce((a, w) => a + Math.max(0, w), 0);
  if (weights.length === 0) return [];
  if (sum <= 0) return splitEvenly(t, weights.length);
  const exact = weights.map((w) => (t * Math.max(0, w)) / sum);
  const out = exact.map((x) => Math.floor(x));
  let rest = t - out.reduce((a, b) => a + b, 0);
  const order = exact.map((x, i) => [x - Math.floor(x), i] as const).sort((a, b) => b[0] - a[0]);
  for (let k = 0; rest > 0; k = (k + 1) % order.length, rest--) out[order[k]![1]]!++;
  return out;
}

const live = new Set<ChildProcess>();

/** Kill every load generator still running (used by the bench on abort). */
export function killAllLoadgens(): void {
  for (const c of live) c.kill('SIGKILL');
  live.clear();
}

interface Child {
  proc: ChildProcess;
  ready: Promise<void>;
  /** the measured phase is over (resolves before the result, which waits for closes) */
  measured: Promise<void>;
  result: Promise<PartialResult>;
}

function spawnChild(script: string, opts: LoadgenOptions): Child {
  const proc = fork(script, [JSON.stringify({ ...opts, waitForGo: true })], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  live.add(proc);
  let measuredResolve!: () => void;
  const measured = new Promise<void>((res) => {
    measuredResolve = res;
  });
  let readyResolve!: () => void;
  let readyReject!: (e: Error) => void;
  const ready = new Promise<void>((res, rej) => {
    readyResolve = res;
    readyReject = rej;
  });
  const result = new Promise<PartialResult>((resolve, reject) => {
    let done = false;
    proc.on('message', (m: ChildMessage) => {
      if (m.type === 'ready') readyResolve();
      else if (m.type === 'measured') measuredResolve();
      else if (m.type === 'result') {
        done = true;
        measuredResolve();
        resolve(m.result);
      } else if (m.type === 'error') {
        done = true;
        const e = new Error(`loadgen failed: ${m.message}`);
        readyReject(e);
        reject(e);
      }
    });
    proc.on('exit', (code, signal) => {
      live.delete(proc);
      measuredResolve();
      if (!done) {
        const e = new Error(`loadgen exited without a result (code ${code}, signal ${signal})`);
        readyReject(e);
        reject(e);
      }
    });
    proc.on('error', (err) => {
      readyReject(err);
      reject(err);
    });
  });
  // avoid unhandled-rejection noise: callers await these explicitly
  ready.catch(() => {});
  result.catch(() => {});
  return { proc, ready, measured, result };
}

async function deadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<T>((_, rej) => {
        timer = setTimeout(
          () => rej(new Error(`${what} did not finish within ${Math.round(ms / 1000)} s`)),
          ms,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Run a load against `opts.url` from `opts.processes` forked load generators. */
export async function runLoad(opts: RunLoadOptions): Promise<LoadResult> {
  const {
    processes = 1,
    script = path.join(__dirname, 'loadgen.js'),
    onGo,
    onDone,
    stopWhen,
    ...base
  } = opts;
  const shares = splitEvenly(base.connections, Math.min(processes, Math.max(1, base.connections))).filter(
    (n) => n > 0,
  );
  const budgets = base.totalRequests === undefined ? undefined : splitByWeight(base.totalRequests, shares);
  const children: Child[] = [];
  let offset = base.connOffset ?? 0;
  shares.forEach((share, i) => {
    children.push(
      spawnChild(script, {
        ...base,
        connections: share,
        connOffset: offset,
        ...(budgets ? { totalRequests: budgets[i]! } : {}),
      }),
    );
    offset += share;
  });
  const connectTimeoutMs = base.connectTimeoutMs ?? 30_000;
  try {
    await deadline(
      Promise.all(children.map((c) => c.ready)),
      connectTimeoutMs + 15_000,
      'opening connections and warm-up',
    );
    for (const c of children) c.proc.send({ type: 'go' } satisfies ParentMessage);
    onGo?.();
    void stopWhen?.then(() => {
      for (const c of children) {
        if (c.proc.connected) c.proc.send({ type: 'finish' } satisfies ParentMessage, () => {});
      }
    });
    void Promise.all(children.map((c) => c.measured)).then(() => onDone?.());
    const parts = await deadline(
      Promise.all(children.map((c) => c.result)),
      base.timeLimitMs + 20_000,
      'the load generator',
    );
    const rate = base.ratePerConnection ?? null;
    const inFlight = base.inFlightPerConnection ?? (rate ? Number.POSITIVE_INFINITY : 1);
    return mergePartials(parts, {
      url: base.url,
      body: base.body,
      requestsPerConnection: base.requestsPerConnection,
      inFlightPerConnection: inFlight,
      ratePerConnection: rate,
      warmupPerConnection: base.warmupPerConnection ?? 0,
      binary: base.binary,
      totalRequests: base.totalRequests,
    });
  } finally {
    for (const c of children) {
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
      live.delete(c.proc);
    }
  }
}
