/**
 * Open-loop Poisson load generator, run as its own process (forked by `runPoisson`; argv[2] = JSON
 * PoissonOptions; IPC → {type:'result'}). Requests go out at exponential inter-arrival times over
 * `connections` WebSockets (round robin), whatever the answers do: there is no in-flight cap, so a slow
 * server meets its whole offered load. A request's latency is its answer time − its *scheduled* send
 * time, so a generator that falls behind its schedule (or a server that stalls it) shows up as latency
 * instead of being hidden (coordinated omission). Phases run back to back on one schedule (a step
 * change is two phases); a phase with `measured: false` warms up. Requests are attributed to the phase,
 * and to the second, of their scheduled send time.
 */
import { fork } from 'node:child_process';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { Rng } from '../../libs/rng';
import { type BodyOptions, binaryBodyFactory, readBinaryAnswerHeader, readJsonAnswerHeader } from './bodies';
import { quantileSorted } from './quantile';

export interface PoissonPhase {
  label: string;
  /** offered requests per second (mean of the Poisson process) */
  rate: number;
  durationMs: number;
  /** false: warm-up, not reported */
  measured?: boolean;
}

export interface PoissonOptions {
  url: string;
  connections: number;
  body: string;
  bodyOptions?: BodyOptions;
  phases: PoissonPhase[];
  /** after the last phase, how long outstanding requests may still be answered (then `client_timeout`) */
  drainMs?: number;
  seed?: number;
}

export interface PhaseResult {
  label: string;
  rate: number;
  durationMs: number;
  /** requests scheduled in the phase (all were sent, late or not) */
  sent: number;
  ok: number;
  /** error answers by code, plus `client_timeout` / `connection_closed` */
  errors: Record<string, number>;
  /** ok answers received during the phase's window ÷ its duration */
  achievedRps: number;
  /** latency of ok answers, scheduled send → answer, ms */
  p50: number;
  p99: number;
  max: number;
  /** per second of scheduled time: p99 of ok answers (NaN when none), ok and error counts */
  perSecond: { p99: number; ok: number; errors: number }[];
  /** how far behind its schedule the generator sent, ms (p99): a client-side limit when large */
  sendLagP99Ms: number;
}

export interface PoissonResult {
  phases: PhaseResult[];
  /** epoch ms when the schedule started */
  startEpochMs: number;
  cpuPct: number;
}

/** Reproducible arrivals for a given seed (the repository's one mulberry32). */
function uniform(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

/** Scheduled send times (ms from start) and their phase, for the whole plan. */
export function poissonSchedule(
  phases: readonly PoissonPhase[],
  seed: number,
): { at: number[]; phase: number[] } {
  const rnd = uniform(seed);
  const at: number[] = [];
  const phase: number[] = [];
  let t0 = 0;
  phases.forEach((p, k) => {
    let t = t0;
    for (;;) {
      t += (-Math.log(1 - rnd()) * 1000) / p.rate;
      if (t >= t0 + p.durationMs) break;
      at.push(t);
      phase.push(k);
    }
    t0 += p.durationMs;
  });
  return { at, phase };
}

interface Outstanding {
  scheduled: number;
  phase: number;
}

async function generate(opts: PoissonOptions): Promise<PoissonResult> {
  const { at, phase } = poissonSchedule(opts.phases, opts.seed ?? 1);
  const n = at.length;
  const latency = new Float64Array(n).fill(Number.NaN);
  const answeredAt = new Float64Array(n).fill(Number.NaN);
  const sentLag = new Float64Array(n).fill(Number.NaN);
  const errCode: (string | undefined)[] = new Array(n);
  const pending = new Map<number, Outstanding>();
  const bodies = Array.from({ length: opts.connections }, (_, i) =>
    binaryBodyFactory(opts.body, i, opts.bodyOptions),
  );
  let start = Number.NaN;

  const onAnswer = (data: Buffer, isBinary: boolean): void => {
    const now = performance.now();
    const msg = isBinary ? readBinaryAnswerHeader(data) : readJsonAnswerHeader(data);
    if (!msg || msg.type === 'warning') return;
    const id = Number(msg.id);
    if (!pending.delete(id)) return;
    answeredAt[id] = now - start;
    latency[id] = now - start - at[id]!;
    if (msg.type === 'error') errCode[id] = typeof msg.code === 'string' ? msg.code : 'unknown';
  };

  const sockets = await Promise.all(
    bodies.map(
      (_, i) =>
        new Promise<WebSocket>((resolve, reject) => {
          const ws = new WebSocket(opts.url, { perMessageDeflate: false, skipUTF8Validation: true });
          ws.once('open', () => resolve(ws));
          ws.once('error', reject);
          ws.on('message', onAnswer);
          ws.on('close', () => {
            for (const id of pending.keys()) {
              if (id % opts.connections === i) {
                errCode[id] = 'connection_closed';
                pending.delete(id);
              }
            }
          });
        }),
    ),
  );

  const cpu0 = process.cpuUsage();
  start = performance.now();
  const startEpochMs = performance.timeOrigin + start;
  process.send?.({ type: 'started', startEpochMs });
  let next = 0;
  await new Promise<void>((done) => {
    const tick = (): void => {
      const now = performance.now() - start;
      // everything due is sent now, however late: its latency still counts from the schedule
      while (next < n && at[next]! <= now) {
        const id = next++;
        const ws = sockets[id % opts.connections]!;
        if (ws.readyState !== WebSocket.OPEN) {
          errCode[id] = 'connection_closed';
          continue;
        }
        pending.set(id, { scheduled: at[id]!, phase: phase[id]! });
        sentLag[id] = now - at[id]!;
        ws.send(bodies[id % opts.connections]!(id));
      }
      if (next >= n) {
        done();
        return;
      }
      setTimeout(tick, Math.max(0, at[next]! - (performance.now() - start) - 0.5));
    };
    tick();
  });
  const drainUntil = performance.now() + (opts.drainMs ?? 5000);
  while (pending.size > 0 && performance.now() < drainUntil) await new Promise((r) => setTimeout(r, 20));
  for (const id of pending.keys()) errCode[id] = 'client_timeout';
  pending.clear();
  const cpu = process.cpuUsage(cpu0);
  const wallUs = Math.max(1, (performance.now() - start) * 1000);
  for (const ws of sockets) ws.terminate();

  const phases: PhaseResult[] = [];
  let from = 0;
  let t0 = 0;
  opts.phases.forEach((p, k) => {
    let to = from;
    while (to < n && phase[to] === k) to++;
    const lat: number[] = [];
    const lags: number[] = [];
    const errors: Record<string, number> = {};
    const seconds = Math.ceil(p.durationMs / 1000);
    const perSecLat: number[][] = Array.from({ length: seconds }, () => []);
    const perSecErr = new Array<number>(seconds).fill(0);
    let okInWindow = 0;
    for (let id = from; id < to; id++) {
      const s = Math.min(seconds - 1, Math.floor((at[id]! - t0) / 1000));
      if (Number.isFinite(sentLag[id]!)) lags.push(sentLag[id]!);
      const code = errCode[id];
      if (code !== undefined) {
        errors[code] = (errors[code] ?? 0) + 1;
        perSecErr[s]!++;
        continue;
      }
      lat.push(latency[id]!);
      perSecLat[s]!.push(latency[id]!);
    }
    // achieved throughput: ok answers that arrived inside the phase's window, whichever phase sent them
    for (let id = 0; id < n; id++) {
      const a = answeredAt[id]!;
      if (errCode[id] === undefined && a >= t0 && a < t0 + p.durationMs) okInWindow++;
    }
    lat.sort((a, b) => a - b);
    lags.sort((a, b) => a - b);
    if (p.measured !== false) {
      phases.push({
        label: p.label,
        rate: p.rate,
        durationMs: p.durationMs,
        sent: to - from,
        ok: lat.length,
        errors,
        achievedRps: okInWindow / (p.durationMs / 1000),
        p50: quantileSorted(lat, 0.5),
        p99: quantileSorted(lat, 0.99),
        max: lat.at(-1) ?? Number.NaN,
        perSecond: perSecLat.map((xs, s) => {
          xs.sort((a, b) => a - b);
          return { p99: quantileSorted(xs, 0.99), ok: xs.length, errors: perSecErr[s]! };
        }),
        sendLagP99Ms: quantileSorted(lags, 0.99),
      });
    }
    from = to;
    t0 += p.durationMs;
  });
  return { phases, startEpochMs, cpuPct: ((cpu.user + cpu.system) / wallUs) * 100 };
}

/**
 * Fork a Poisson generator and wait for its result. `onStart` runs when the child reports that its
 * schedule started (e.g. to begin sampling `/metrics` on the same clock).
 */
export function runPoisson(
  opts: PoissonOptions,
  onStart?: (startEpochMs: number) => void,
): Promise<PoissonResult> {
  const total = opts.phases.reduce((a, p) => a + p.durationMs, 0) + (opts.drainMs ?? 5000) + 30_000;
  return new Promise((resolve, reject) => {
    const child = fork(path.join(__dirname, 'poisson.js'), [JSON.stringify(opts)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let settled = false;
    const timer = setTimeout(() => child.kill('SIGKILL'), total);
    child.on(
      'message',
      (m: { type: string; startEpochMs?: number; result?: PoissonResult; message?: string }) => {
        if (m.type === 'started') onStart?.(m.startEpochMs!);
        else if (m.type === 'result') {
          settled = true;
          resolve(m.result!);
        } else if (m.type === 'error') {
          settled = true;
          reject(new Error(`poisson generator failed: ${m.message}`));
        }
      },
    );
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (!settled)
        reject(new Error(`poisson generator exited without a result (code ${code}, signal ${signal})`));
    });
  });
}

if (require.main === module) {
  const opts = JSON.parse(process.argv[2] ?? '{}') as PoissonOptions;
  const send = (m: unknown): void => {
    process.send?.(m, () => process.exit(0));
  };
  generate(opts)
    .then((result) => send({ type: 'result', result }))
    .catch((e: unknown) =>
      send({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
    );
}
