/**
 * The processes of the `stream` scenario: the supervised pipeline (`streaminfer pipeline --config F`),
 * the simulator (`streaminfer simulate ... --json`), the broker's CPU, and the pipeline's admin API.
 * Every child runs in its own process group and is killed on the bench's exit, whatever happens.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { processTreeCpuMs, TailBuffer } from '../harness/server-process';
import type { LagSample } from './analysis';

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function killGroup(c: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (c.pid) process.kill(-c.pid, signal);
  } catch {
    c.kill(signal);
  }
}

/** Kill every child this module started and that is still running (abort paths). */
export function killAllStreamProcs(): void {
  for (const c of live) killGroup(c, 'SIGKILL');
  live.clear();
}

function cli(repoRoot: string): string {
  const main = path.join(repoRoot, 'dist', 'apps', 'cli', 'main.js');
  if (!fs.existsSync(main)) throw new Error(`${main} not found: build first (npm run build)`);
  return main;
}

function spawnCli(repoRoot: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawnTracked(repoRoot, [cli(repoRoot), ...args], env);
}

/** `node <argv>` in its own process group, killed on the bench's exit. */
function spawnTracked(repoRoot: string, argv: string[], env: Record<string, string> = {}): ChildProcess {
  if (!exitHookInstalled) {
    // bench's SIGINT handler ends in process.exit: nothing this module started may outlive it
    process.once('exit', killAllStreamProcs);
    exitHookInstalled = true;
  }
  const c = spawn(process.execPath, argv, {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  live.add(c);
  c.once('exit', () => live.delete(c));
  return c;
}

const exitedOf = (c: ChildProcess): boolean => c.exitCode !== null || c.signalCode !== null;

export interface PipelineHandle {
  label: string;
  /** the supervisor's pid (its process tree holds the pipeline process and its workers) */
  pid: number;
  adminPort: number;
  command: string[];
  cpuMs(): number | undefined;
  exited(): boolean;
  outputTail(): string;
  stop(graceMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; killed: boolean }>;
}

/** Start `streaminfer pipeline --config <file>` and wait for the supervisor's "pipeline ready" line. */
export function startPipeline(
  repoRoot: string,
  label: string,
  configFile: string,
  timeoutMs = 90_000,
  /** every stdout line of the supervisor and its pipeline processes (restarts, restores: the chaos bench) */
  onLine?: (line: string) => void,
): Promise<PipelineHandle> {
  const args = ['pipeline', '--config', configFile];
  return awaitReady(
    label,
    spawnCli(repoRoot, args),
    ['node', 'dist/apps/cli/main.js', ...args],
    (l) => l.includes('"pipeline ready"') && l.includes('stream-supervisor'),
    timeoutMs,
    onLine,
  );
}

/** Start the null pipeline (null-pipeline.ts) on the same config file; ready once it prints its admin port. */
export function startNullPipeline(
  repoRoot: string,
  label: string,
  configFile: string,
): Promise<PipelineHandle> {
  const script = path.join(repoRoot, 'dist', 'loadtest', 'pipeline', 'null-pipeline.js');
  if (!fs.existsSync(script)) throw new Error(`${script} not found: build first (npm run build)`);
  const args = ['--config', configFile];
  return awaitReady(
    label,
    spawnTracked(repoRoot, [script, ...args]),
    ['node', 'dist/loadtest/pipeline/null-pipeline.js', ...args],
    (l) => l.includes('"null pipeline ready"'),
    30_000,
  );
}

/** A started child as a PipelineHandle, once a stdout line `isReady` says so carries its `admin` port. */
async function awaitReady(
  label: string,
  c: ChildProcess,
  command: string[],
  isReady: (line: string) => boolean,
  timeoutMs: number,
  onLine?: (line: string) => void,
): Promise<PipelineHandle> {
  const out = new TailBuffer();
  let lineBuf = '';
  const ready = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no ready line within ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
    c.stdout!.setEncoding('utf8');
    c.stdout!.on('data', (s: string) => {
      out.push(s);
      lineBuf += s;
      const lines = lineBuf.split('\n');
      lineBuf = lines.pop() ?? '';
      for (const l of lines) {
        onLine?.(l);
        if (!isReady(l)) continue;
        try {
          const admin = (JSON.parse(l) as { admin?: number }).admin;
          if (typeof admin === 'number') {
            clearTimeout(timer);
            resolve(admin);
          }
        } catch {
          // not JSON after all: keep waiting
        }
      }
    });
    c.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`exited before ready (code ${code}, signal ${signal})`));
    });
  });
  c.stderr!.setEncoding('utf8');
  c.stderr!.on('data', (s: string) => out.push(s));
  const stop: PipelineHandle['stop'] = async (graceMs = 20_000) => {
    let killed = false;
    if (!exitedOf(c)) {
      c.kill('SIGTERM');
      const timer = setTimeout(() => {
        killed = true;
        killGroup(c, 'SIGKILL');
      }, graceMs);
      await new Promise<void>((r) => (exitedOf(c) ? r() : c.once('exit', () => r())));
      clearTimeout(timer);
    }
    return { code: c.exitCode, signal: c.signalCode, killed };
  };
  let adminPort: number;
  try {
    adminPort = await ready;
  } catch (e) {
    await stop(3000);
    throw new Error(`${label}: ${(e as Error).message}\n--- output (tail) ---\n${out.text(30)}`);
  }
  return {
    label,
    pid: c.pid!,
    adminPort,
    command,
    cpuMs: () => processTreeCpuMs(c.pid!),
    exited: () => exitedOf(c),
    outputTail: () => out.text(40),
    stop,
  };
}

/** The JSON summary `streaminfer simulate --json` prints (the fields the bench uses). */
export interface SimulatorSummary {
  sent: number;
  stored: number;
  failed: number;
  broker_duplicates: number;
  elapsed_s: number;
  rate_target: number;
  rate_actual: number;
  concurrent_deliveries: number;
  puback_ms: { p50: number; p95: number; p99: number; max: number } | null;
}

export interface SimulatorRun {
  summary: SimulatorSummary;
  /** wall-clock start of its event times (≈ exit − elapsed), epoch ms */
  startMs: number;
  endMs: number;
  /** CPU of the simulator process over its run, ms (last /proc reading before it exited) */
  cpuMs: number | undefined;
  args: string[];
}

export interface SimulatorOptions {
  nats: string;
  rate: number;
  durationS: number;
  rampS: number;
  subjectRoot: string;
  eventsStream: string;
  seed: number;
}

/** Start the simulator; `done` resolves with its summary once it exits 0 (rejects otherwise). */
export function startSimulator(
  repoRoot: string,
  o: SimulatorOptions,
): { pid: number; done: Promise<SimulatorRun> } {
  const args = [
    'simulate',
    '--nats',
    o.nats,
    '--rate',
    String(o.rate),
    '--duration',
    String(o.durationS),
    '--ramp-s',
    String(o.rampS),
    '--sub-second',
    '--subject-root',
    o.subjectRoot,
    '--events-stream',
    o.eventsStream,
    '--seed',
    String(o.seed),
    '--json',
    '--progress-s',
    '0',
  ];
  const c = spawnCli(repoRoot, args);
  const out = new TailBuffer();
  const err = new TailBuffer();
  c.stdout!.setEncoding('utf8');
  c.stderr!.setEncoding('utf8');
  c.stdout!.on('data', (s: string) => out.push(s));
  c.stderr!.on('data', (s: string) => err.push(s));
  let cpu: number | undefined;
  const poll = setInterval(() => {
    cpu = processTreeCpuMs(c.pid!) ?? cpu;
  }, 250);
  const done = new Promise<SimulatorRun>((resolve, reject) => {
    c.once('exit', (code, signal) => {
      clearInterval(poll);
      const endMs = Date.now();
      const line = out
        .text()
        .trim()
        .split('\n')
        .reverse()
        .find((l) => l.startsWith('{'));
      if (code !== 0 || !line) {
        reject(
          new Error(`simulator exited with code ${code}, signal ${signal}\n${err.text(20)}\n${out.text(5)}`),
        );
        return;
      }
      const summary = JSON.parse(line) as SimulatorSummary;
      resolve({ summary, startMs: endMs - summary.elapsed_s * 1000, endMs, cpuMs: cpu, args });
    });
  });
  return { pid: c.pid!, done };
}

/** Pid of the local nats-server (by /proc comm), for its CPU; undefined when not found or off Linux. */
export function brokerPid(): number | undefined {
  if (process.platform !== 'linux') return undefined;
  try {
    for (const e of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(e)) continue;
      try {
        if (fs.readFileSync(`/proc/${e}/comm`, 'utf8').trim() === 'nats-server') return Number(e);
      } catch {
        // vanished
      }
    }
  } catch {
    return undefined;
  }
  return undefined;
}

/** What the bench reads from the pipeline's GET /health. */
export interface PipelineHealth {
  state: string;
  consuming: boolean;
  paused: boolean;
  consumer: { pending: number; ack_pending: number; unprocessed?: number; oldest_unprocessed_age_s: number };
  freshness: { p50_ms: number; p95_ms: number; p99_ms: number };
  counts: Record<string, number>;
  state_keys: number;
  state_bytes: number;
  /** Checkpoint mode: acks held for the next checkpoint (their events are processed). */
  checkpoint?: { held_acks: number };
}

/** GET /health (200 or 503 both carry the status). */
export async function getHealth(port: number): Promise<PipelineHealth> {
  const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5000) });
  const body = (await res.json()) as PipelineHealth;
  if (!body.consumer || !body.counts) throw new Error(`GET /health: unexpected answer ${res.status}`);
  return body;
}

/** POST /api/pause or /api/resume; throws unless 200. */
export async function postAdmin(port: number, route: '/api/pause' | '/api/resume'): Promise<unknown> {
  const res = await fetch(`http://127.0.0.1:${port}${route}`, {
    method: 'POST',
    // The admin endpoint takes JSON only (415 otherwise), even with no body.
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`POST ${route}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text) as unknown;
}

/** `streaminfer_stream_not_ready_events_total` summed over its labels, from GET /metrics. */
export async function notReadyTotal(port: number): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
  let total = 0;
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('streaminfer_stream_not_ready_events_total')) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) total += v;
  }
  return total;
}

export const toSample = (h: PipelineHealth, tMs: number): LagSample => ({
  tMs,
  pending: h.consumer.pending,
  ackPending: h.consumer.ack_pending,
  // The acks the pipeline counted as held when it read the broker's figures (same instant).
  held:
    h.consumer.unprocessed !== undefined
      ? h.consumer.pending + h.consumer.ack_pending - h.consumer.unprocessed
      : (h.checkpoint?.held_acks ?? 0),
  received: h.counts['received'] ?? 0,
  predictions: h.counts['predictions'] ?? 0,
  paused: h.paused,
});

/** Samples /health every `intervalMs` into `samples` until stopped (a failed GET is skipped). */
export function startSampler(port: number, intervalMs = 500): { samples: LagSample[]; stop(): void } {
  const samples: LagSample[] = [];
  let stopped = false;
  let busy = false;
  const timer = setInterval(() => {
    if (stopped || busy) return;
    busy = true;
    getHealth(port)
      .then((h) => {
        if (!stopped) samples.push(toSample(h, Date.now()));
      })
      .catch(() => undefined)
      .finally(() => {
        busy = false;
      });
  }, intervalMs);
  return {
    samples,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}
