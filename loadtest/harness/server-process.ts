/**
 * Start and stop the servers a scenario measures: the real StreamInfer server
 * (`node dist/apps/cli/main.js serve ...`) and the bare uWS echo server (the ceiling).
 * Both run as child processes; stdout/stderr tails are kept for error messages; CPU time
 * of the whole process tree is readable from /proc (Linux) to tell who was saturated.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as net from 'node:net';
import * as path from 'node:path';

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** ms from SIGTERM to exit */
  stopMs: number;
  /** had to be SIGKILLed after the grace period */
  killed: boolean;
}

export interface ServerHandle {
  kind: 'streaminfer' | 'bare-echo';
  label: string;
  pid: number;
  port: number;
  /** http://127.0.0.1:PORT (https:// with TLS) */
  baseUrl: string;
  /** ws://127.0.0.1:PORT/ws (wss:// with TLS) */
  wsUrl: string;
  /** StreamInfer: its admin listener (/api/*, /metrics), http://127.0.0.1:ADMIN_PORT; bare echo: baseUrl. */
  adminUrl: string;
  /** argv used to start it (for the report) */
  command: string[];
  /** environment overrides passed to it */
  env: Record<string, string>;
  stdoutTail(): string;
  stderrTail(): string;
  /** CPU ms used so far by the process and its descendants (undefined off Linux) */
  cpuMs(): number | undefined;
  exited(): boolean;
  stop(graceMs?: number): Promise<ExitInfo>;
}

/** A free TCP port on 127.0.0.1 (bind port 0, read it, close). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('could not get a free port'))));
    });
  });
}

export interface HttpAnswer {
  status: number;
  body: string;
  headers: http.IncomingHttpHeaders;
}

/** `ca`: the PEM CA an https:// server's certificate must chain to. */
export function httpGet(url: string, timeoutMs = 5000, ca?: Buffer): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const get = url.startsWith('https:') ? https.get : http.get;
    const req = get(url, { agent: false, timeout: timeoutMs, ...(ca ? { ca } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString('utf8'),
          headers: res.headers,
        }),
      );
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

/** Keeps the last `max` characters written to it. */
export class TailBuffer {
  private chunks: string[] = [];
  private size = 0;
  constructor(private readonly max = 64 * 1024) {}
  push(s: string): void {
    this.chunks.push(s);
    this.size += s.length;
    while (this.size > this.max && this.chunks.length > 1) this.size -= this.chunks.shift()!.length;
  }
  text(lines?: number): string {
    const all = this.chunks.join('').slice(-this.max);
    if (lines === undefined) return all;
    return all
      .split('\n')
      .slice(-lines - 1)
      .join('\n');
  }
}

const CLK_TCK = 100;

/** CPU ms (user+system) of `pid` and all its living descendants, from /proc. */
export function processTreeCpuMs(rootPid: number): number | undefined {
  if (process.platform !== 'linux') return undefined;
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return undefined;
  }
  const parent = new Map<number, number>();
  const ticks = new Map<number, number>();
  for (const e of entries) {
    try {
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // rest[0] = state (field 3), rest[1] = ppid, rest[11] = utime (14), rest[12] = stime (15)
      parent.set(Number(e), Number(rest[1]));
      ticks.set(Number(e), Number(rest[11]) + Number(rest[12]));
    } catch {
      // process vanished meanwhile
    }
  }
  if (!ticks.has(rootPid)) return undefined;
  let total = 0;
  for (const [pid, t] of ticks) {
    let p: number | undefined = pid;
    for (let depth = 0; p !== undefined && p > 1 && depth < 32; depth++) {
      if (p === rootPid) {
        total += t;
        break;
      }
      p = parent.get(p);
    }
  }
  return (total * 1000) / CLK_TCK;
}

/** Pids of `rootPid` and all its living descendants, from /proc (empty off Linux or when it is gone). */
export function processTreePids(rootPid: number): number[] {
  if (process.platform !== 'linux') return [];
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return [];
  }
  const parent = new Map<number, number>();
  for (const e of entries) {
    try {
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      parent.set(Number(e), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // process vanished meanwhile
    }
  }
  if (!parent.has(rootPid)) return [];
  const out: number[] = [];
  for (const pid of parent.keys()) {
    let p: number | undefined = pid;
    for (let depth = 0; p !== undefined && p > 1 && depth < 32; depth++) {
      if (p === rootPid) {
        out.push(pid);
        break;
      }
      p = parent.get(p);
    }
  }
  return out;
}

/** Resident set size of one process in bytes (`VmRSS` of /proc/PID/status), undefined when gone. */
export function processRssBytes(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+)\s*kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Sum of the resident set sizes of `rootPid` and its descendants, in bytes (undefined off Linux
 * or when the process is gone). Shared pages are counted once per process that maps them, so the
 * absolute figure overstates a little; growth over time is what it is good for.
 */
export function processTreeRssBytes(rootPid: number): number | undefined {
  const pids = processTreePids(rootPid);
  if (pids.length === 0) return undefined;
  let total = 0;
  for (const pid of pids) total += processRssBytes(pid) ?? 0;
  return total;
}

/** running server processes → whether each leads its own process group */
const children = new Map<ChildProcess, boolean>();

/** Kill every server still running (process groups), for abort paths. */
export function killAllServers(): void {
  for (const [c, group] of children) {
    try {
      if (group && c.pid) process.kill(-c.pid, 'SIGKILL');
      else c.kill('SIGKILL');
    } catch {
      c.kill('SIGKILL');
    }
  }
  children.clear();
}

function track(proc: ChildProcess, out: TailBuffer, err: TailBuffer, group: boolean): void {
  children.set(proc, group);
  proc.stdout?.setEncoding('utf8');
  proc.stderr?.setEncoding('utf8');
  proc.stdout?.on('data', (s: string) => out.push(s));
  proc.stderr?.on('data', (s: string) => err.push(s));
  proc.once('exit', () => children.delete(proc));
}

function exitPromise(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((r) => proc.once('exit', () => r()));
}

function makeStop(proc: ChildProcess, group: boolean): (graceMs?: number) => Promise<ExitInfo> {
  let stopping: Promise<ExitInfo> | undefined;
  return (graceMs = 20_000) => {
    stopping ??= (async () => {
      const t0 = Date.now();
      let killed = false;
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => {
          killed = true;
          try {
            if (group && proc.pid) process.kill(-proc.pid, 'SIGKILL');
            else proc.kill('SIGKILL');
          } catch {
            proc.kill('SIGKILL');
          }
        }, graceMs);
        await exitPromise(proc);
        clearTimeout(timer);
      }
      return { code: proc.exitCode, signal: proc.signalCode, stopMs: Date.now() - t0, killed };
    })();
    return stopping;
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function tailForError(err: TailBuffer, out: TailBuffer): string {
  const e = err.text(30).trim();
  const o = out.text(15).trim();
  return (
    `\n--- server stderr (tail) ---\n${e || '(empty)'}` + (o ? `\n--- server stdout (tail) ---\n${o}` : '')
  );
}

/** Poll `GET url` until it answers 200; fail fast if the process exits. */
async function waitHealthy(url: string, proc: ChildProcess, timeoutMs: number, ca?: Buffer): Promise<void> {
  const until = Date.now() + timeoutMs;
  let last = 'no answer yet';
  while (Date.now() < until) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(
        `server exited before becoming healthy (code ${proc.exitCode}, signal ${proc.signalCode})`,
      );
    }
    try {
      const r = await httpGet(url, 2000, ca);
      if (r.status === 200) return;
      last = `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
    } catch (e) {
      last = e instanceof Error ? e.message : String(e);
    }
    await sleep(250);
  }
  throw new Error(`GET ${url} did not return 200 within ${Math.round(timeoutMs / 1000)} s (last: ${last})`);
}

export interface StreamInferOptions {
  repoRoot: string;
  label?: string;
  port?: number;
  nodes?: number;
  workers?: number;
  /** extra CLI flags after `serve --port P --nodes N --workers W` */
  args?: string[];
  /** environment overrides (e.g. STREAMINFER_BATCH_SIZE) */
  env?: Record<string, string>;
  healthTimeoutMs?: number;
  /** Serve TLS (https, wss) with these PEM files; `ca` is what the health probe trusts. */
  tls?: TlsFiles;
}

/** A server's certificate and key, and the CA that signed it (PEM files). */
export interface TlsFiles {
  cert: string;
  key: string;
  ca: string;
}

/** Start `node dist/apps/cli/main.js serve ...` and wait for `GET /health` = 200. */
export async function startStreamInfer(o: StreamInferOptions): Promise<ServerHandle> {
  const main = path.join(o.repoRoot, 'dist', 'apps', 'cli', 'main.js');
  if (!fs.existsSync(main)) throw new Error(`${main} not found: the server is not built (npm run build)`);
  const port = o.port ?? (await freePort());
  const adminPort = await freePort();
  const args = [
    main,
    'serve',
    '--port',
    String(port),
    '--admin-port',
    String(adminPort),
    '--nodes',
    String(o.nodes ?? 1),
    '--workers',
    String(o.workers ?? 1),
    ...(o.tls ? ['--tls-cert', o.tls.cert, '--tls-key', o.tls.key] : []),
    ...(o.args ?? []),
  ];
  const env = o.env ?? {};
  // own process group, so a SIGKILL fallback also reaches forked node processes
  const proc = spawn(process.execPath, args, {
    cwd: o.repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const out = new TailBuffer();
  const err = new TailBuffer();
  track(proc, out, err, true);
  const stop = makeStop(proc, true);
  const scheme = o.tls ? 's' : '';
  const baseUrl = `http${scheme}://127.0.0.1:${port}`;
  const ca = o.tls ? fs.readFileSync(o.tls.ca) : undefined;
  try {
    await waitHealthy(`${baseUrl}/health`, proc, o.healthTimeoutMs ?? 60_000, ca);
  } catch (e) {
    await stop(3000);
    const msg = e instanceof Error ? e.message : String(e);
    throw new Error(`StreamInfer (node ${args.join(' ')}) failed to start: ${msg}${tailForError(err, out)}`);
  }
  return {
    kind: 'streaminfer',
    label: o.label ?? 'streaminfer',
    pid: proc.pid!,
    port,
    baseUrl,
    wsUrl: `ws${scheme}://127.0.0.1:${port}/ws`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    command: ['node', path.relative(o.repoRoot, main), ...args.slice(1)],
    env,
    stdoutTail: () => out.text(),
    stderrTail: () => err.text(),
    cpuMs: () => processTreeCpuMs(proc.pid!),
    exited: () => proc.exitCode !== null || proc.signalCode !== null,
    stop,
  };
}

export interface BareEchoOptions {
  label?: string;
  port?: number;
  /** compiled bare-echo-server.js (default: next to this file) */
  script?: string;
  timeoutMs?: number;
  /** Serve TLS (uWS SSLApp) with these PEM files. */
  tls?: TlsFiles;
}

/** Fork the bare uWS echo server and wait until it listens and answers /health. */
export async function startBareEcho(o: BareEchoOptions = {}): Promise<ServerHandle> {
  const script = o.script ?? path.join(__dirname, 'bare-echo-server.js');
  const port = o.port ?? (await freePort());
  const tlsArgs = o.tls ? [o.tls.cert, o.tls.key] : [];
  const proc = fork(script, [String(port), ...tlsArgs], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  const out = new TailBuffer();
  const err = new TailBuffer();
  track(proc, out, err, false);
  const stop = makeStop(proc, false);
  const timeoutMs = o.timeoutMs ?? 15_000;
  try {
    const listening = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`bare echo server did not listen within ${timeoutMs} ms`)),
        timeoutMs,
      );
      proc.on('message', (m: { type?: string; port?: number }) => {
        if (m.type === 'listening' && typeof m.port === 'number') {
          clearTimeout(timer);
          resolve(m.port);
        }
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`bare echo server exited (code ${code})`));
      });
    });
    const ca = o.tls ? fs.readFileSync(o.tls.ca) : undefined;
    await waitHealthy(`http${o.tls ? 's' : ''}://127.0.0.1:${listening}/health`, proc, timeoutMs, ca);
  } catch (e) {
    await stop(2000);
    const msg = e instanceof Error ? e.message : String(e);
    throw new Error(`bare echo server failed to start: ${msg}${tailForError(err, out)}`);
  }
  return {
    kind: 'bare-echo',
    label: o.label ?? 'bare uWS echo',
    pid: proc.pid!,
    port,
    baseUrl: `http${o.tls ? 's' : ''}://127.0.0.1:${port}`,
    wsUrl: `ws${o.tls ? 's' : ''}://127.0.0.1:${port}/ws`,
    adminUrl: `http://127.0.0.1:${port}`,
    command: ['node', path.relative(process.cwd(), script), String(port), ...tlsArgs],
    env: {},
    stdoutTail: () => out.text(),
    stderrTail: () => err.text(),
    cpuMs: () => processTreeCpuMs(proc.pid!),
    exited: () => proc.exitCode !== null || proc.signalCode !== null,
    stop,
  };
}
