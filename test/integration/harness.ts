/** Starts the real server as a separate process and talks to it with real WebSocket/HTTP clients. */
import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, symlinkSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import WebSocket from 'ws';

export const REPO_ROOT = path.resolve(__dirname, '../../..');
export const CLI = path.join(REPO_ROOT, 'dist/apps/cli/main.js');
export const MODELS_DIR = path.join(REPO_ROOT, 'models');

export interface ServerHandle {
  /** The data port: inference, /health, readiness. */
  port: number;
  url: string;
  wsUrl: string;
  /** The admin listener (/api/*, /metrics, /health): its port (0 on a unix socket) and URL (`unix:/…` there). */
  adminPort: number;
  adminUrl: string;
  pid: number;
  nodePids: number[];
  child: ChildProcess;
  logs: () => string;
  stop: (signal?: NodeJS.Signals) => Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface StartOptions {
  args?: string[];
  env?: Record<string, string>;
  /** Serve only these shipped models (a temporary repository of symlinks), to keep start-up fast. */
  models?: string[];
  /** Like `models`, but copied, so the test may change them. */
  copyModels?: string[];
  /** Use this repository as is. */
  modelsDir?: string;
  timeoutMs?: number;
  /**
   * The config file (in `args`) names host and port: no `--port 0 --host 127.0.0.1 --admin-port 0` flags of
   * our own.
   */
  addressFromConfig?: boolean;
  /** The data port speaks TLS (`--tls-cert` in `args`): the handle's URLs are https:// and wss://. */
  tls?: boolean;
}

export function modelsSubset(models: string[], copy: string[] = []): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-models-'));
  for (const model of models) symlinkSync(path.join(MODELS_DIR, model), path.join(dir, model));
  // Copies can be changed by a test (new versions, corrupt files) without touching the shipped models.
  for (const model of copy) cpSync(path.join(MODELS_DIR, model), path.join(dir, model), { recursive: true });
  return dir;
}

export function runCli(args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Runs the CLI to its exit and returns its exit code and everything it printed (stdout and stderr). */
export function runCliToExit(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = runCli(args, env);
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

export async function startServer(options: StartOptions = {}): Promise<ServerHandle> {
  const address = options.addressFromConfig
    ? []
    : ['--port', '0', '--host', '127.0.0.1', '--admin-port', '0'];
  const args = ['serve', ...address, ...(options.args ?? [])];
  if (options.modelsDir) args.push('--models-dir', options.modelsDir);
  else if (options.models || options.copyModels)
    args.push('--models-dir', modelsSubset(options.models ?? [], options.copyModels ?? []));
  // Tests that blast one connection opt out of the default per-client rate limit unless they test it.
  // Each server keeps its registry state in its own directory unless the test shares one on purpose.
  const stateDir =
    options.env?.STREAMINFER_STATE_DIR ?? mkdtempSync(path.join(os.tmpdir(), 'streaminfer-state-'));
  const child = runCli(args, {
    STREAMINFER_TEST_HOOKS: '1',
    STREAMINFER_RATE_LIMIT_RPS: '0',
    STREAMINFER_STATE_DIR: stateDir,
    ...options.env,
  });
  let output = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  const ready = new Promise<{ port: number; admin: string; adminPort: number; nodePids: number[] }>(
    (resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`server not ready in time; output:\n${output.slice(-4000)}`)),
        options.timeoutMs ?? 60000,
      );
      const onData = (chunk: Buffer): void => {
        output += chunk.toString();
        for (const line of output.split('\n')) {
          if (!line.includes('streaminfer ready')) continue;
          try {
            const parsed = JSON.parse(line) as {
              port: number;
              admin: string;
              admin_port?: number;
              node_pids: number[];
            };
            clearTimeout(timer);
            resolve({
              port: parsed.port,
              admin: parsed.admin,
              adminPort: parsed.admin_port ?? 0,
              nodePids: parsed.node_pids,
            });
            return;
          } catch {
            // partial line
          }
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
      });
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        reject(
          new Error(
            `server exited before ready (code ${code}, signal ${signal}); output:\n${output.slice(-4000)}`,
          ),
        );
      });
    },
  );
  const { port, admin, adminPort, nodePids } = await ready;
  return {
    port,
    url: `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    wsUrl: `${options.tls ? 'wss' : 'ws'}://127.0.0.1:${port}/ws`,
    adminPort,
    adminUrl: admin,
    pid: child.pid!,
    nodePids,
    child,
    logs: () => output,
    exited,
    stop: async (signal: NodeJS.Signals = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 45000);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

export interface Answer {
  id?: unknown;
  type?: string;
  code?: string;
  message?: string;
  model?: string;
  version?: string;
  epoch?: number;
  result?: unknown;
  latency_ms?: number;
  retry_after_ms?: number;
}

/** A WebSocket client with many requests in flight, matched by id. */
export class WsClient {
  private readonly waiting = new Map<string, (answer: Answer) => void>();
  readonly unmatched: Answer[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data, isBinary) => {
      const answer = JSON.parse(isBinary ? '{}' : data.toString()) as Answer;
      const key = JSON.stringify(answer.id ?? null);
      const waiter = this.waiting.get(key);
      if (waiter && answer.id !== undefined) {
        this.waiting.delete(key);
        waiter(answer);
      } else {
        this.unmatched.push(answer);
        const anyWaiter = this.waiting.get('null');
        if (anyWaiter) {
          this.waiting.delete('null');
          anyWaiter(answer);
        }
      }
    });
    this.closed = new Promise((resolve) =>
      socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  /** `options`: more ws client options (a CA, a client certificate for wss://). */
  static connect(url: string, options: WebSocket.ClientOptions = {}): Promise<WsClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, { maxPayload: 64 * 1024 * 1024, ...options });
      socket.once('open', () => resolve(new WsClient(socket)));
      socket.once('error', reject);
    });
  }

  request(body: Record<string, unknown>, timeoutMs = 20000): Promise<Answer> {
    const key = JSON.stringify(body.id ?? null);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no answer for id ${key} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiting.set(key, (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      this.socket.send(JSON.stringify(body));
    });
  }

  /** Sends raw data and waits for the next answer without an id match (for garbage frames). */
  sendRaw(data: string | Buffer, binary = false, timeoutMs = 20000): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no answer to raw frame')), timeoutMs);
      this.waiting.set('null', (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      this.socket.send(data, { binary });
    });
  }

  close(): void {
    this.socket.close();
  }
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Answer & Record<string, unknown>; headers: Headers }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as Answer & Record<string, unknown>,
    headers: response.headers,
  };
}

/**
 * digits v1 stable, v2 its candidate on a 50% canary and mirrored in shadow (the registry's series need all
 * three). The status of each admin call, in order: reload, candidate, canary, shadow. `url`: the admin
 * listener's.
 */
export async function digitsCanaryAndShadow(url: string): Promise<number[]> {
  const statuses = [(await postJson(`${url}/api/reload`, { model: 'digits', version: '1' })).status];
  for (const [action, body] of [
    ['candidate', { version: '2' }],
    ['canary', { percent: 50 }],
    ['shadow', { enabled: true }],
  ] as const)
    statuses.push((await postJson(`${url}/api/models/digits/${action}`, body)).status);
  return statuses;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
