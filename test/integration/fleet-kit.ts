/**
 * A fleet of `streaminfer serve` hosts for tests: each in its own network namespace (netns-kit.ts) with its own
 * address, all joined to one fleet on a nats-server of the kit's own; admin calls with a token on each host's
 * admin listener (its own address, port 8001: off loopback a token is required) and WebSocket clients from the
 * root namespace.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { digits } from '../models/data';
import { CLI, modelsSubset } from './harness';
import type { FleetNet } from './netns-kit';

export const FLEET_TOKEN = 'fleet-test-token-0123456789';

export interface FleetHost {
  index: number;
  id: string;
  url: string;
  wsUrl: string;
  /** The host's admin listener (/api/*, /metrics). */
  adminUrl: string;
  modelsDir: string;
  /** STREAMINFER_STATE_DIR: versions pulled from the fleet are in its `models` (pulledFile). */
  stateDir: string;
  child: ChildProcess;
  logs(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface FleetHostOptions {
  fleet: string;
  /** The NATS URL(s) to join (default: the net's own nats-server). */
  cluster?: string;
  modelsDir?: string;
  env?: Record<string, string>;
  args?: string[];
}

/** Where a host keeps a version it pulled from the fleet: its state dir's pull cache. */
export function pulledFile(host: FleetHost, model: string, version: string): string {
  return path.join(host.stateDir, 'models', model, version, 'model.onnx');
}

export function pixels(row: number): number[] {
  return Array.from(digits().pixels.subarray((row % 1797) * 64, (row % 1797) * 64 + 64));
}

/** Starts host `i` in its namespace; resolves once its /health says ready (a host is ready once it joined). */
export async function startFleetHost(
  net: FleetNet,
  i: number,
  options: FleetHostOptions,
): Promise<FleetHost> {
  const id = `h${i}`;
  const modelsDir = options.modelsDir ?? modelsSubset([], ['digits']);
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-fleet-state-'));
  const args = [
    CLI,
    'serve',
    '--host',
    net.address(i),
    '--port',
    String(net.port(i)),
    '--nodes',
    '1',
    '--workers',
    '1',
    '--models-dir',
    modelsDir,
    '--model',
    'digits',
    '--cluster',
    options.cluster ?? net.natsUrl,
    '--fleet',
    options.fleet,
    '--host-id',
    id,
    '--admin-host',
    net.address(i),
    '--admin-port',
    String(net.adminPort(i)),
    ...(options.args ?? []),
  ];
  const child = net.spawnIn(i, process.execPath, args, {
    env: {
      ...(process.env as Record<string, string>),
      STREAMINFER_TEST_HOOKS: '1',
      STREAMINFER_RATE_LIMIT_RPS: '0',
      STREAMINFER_STATE_DIR: stateDir,
      STREAMINFER_LOG_LEVEL: 'info',
      STREAMINFER_ADMIN_TOKEN: FLEET_TOKEN,
      ...options.env,
    },
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const host: FleetHost = {
    index: i,
    id,
    url: net.url(i),
    wsUrl: `${net.url(i).replace('http', 'ws')}/ws`,
    adminUrl: `http://${net.address(i)}:${net.adminPort(i)}`,
    modelsDir,
    stateDir,
    child,
    logs: () => output,
    exited,
  };
  await waitFor(
    async () => (await health(host.url))?.status === 200,
    60_000,
    () => `host ${id} not ready; output:\n${output.slice(-3000)}`,
    exited,
  );
  return host;
}

export async function health(
  url: string,
): Promise<{ status: number; body: Record<string, unknown> } | undefined> {
  try {
    const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  } catch {
    return undefined;
  }
}

/** An admin call with the fleet's token; never throws for an HTTP answer (status 0: no answer). */
export async function admin(
  url: string,
  method: 'GET' | 'POST',
  route: string,
  body?: unknown,
  timeoutMs = 60_000,
): Promise<{ status: number; body: Record<string, unknown> }> {
  try {
    const response = await fetch(`${url}${route}`, {
      method,
      headers: { authorization: `Bearer ${FLEET_TOKEN}`, 'content-type': 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  } catch (error) {
    return { status: 0, body: { error: (error as Error).message } };
  }
}

export async function waitFor(
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
  what: () => string,
  abort?: Promise<unknown>,
): Promise<void> {
  let aborted = false;
  void abort?.then(() => (aborted = true));
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (aborted || Date.now() > until) throw new Error(what());
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export async function stopHost(host: FleetHost, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (host.child.exitCode !== null || host.child.signalCode !== null) return;
  // The host runs under `ip netns exec`, which execs it: the pid is the supervisor's.
  try {
    process.kill(-host.child.pid!, signal);
  } catch {
    host.child.kill(signal);
  }
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([host.exited, new Promise((resolve) => (timer = setTimeout(resolve, 20_000)))]);
  clearTimeout(timer);
}

/**
 * From inside host i's namespace (a partitioned host is out of the test's reach): its /health status and the
 * error code of one prediction, printed by a node one-liner.
 */
export async function probeFromInside(
  net: FleetNet,
  host: FleetHost,
): Promise<{ health: number; code: string }> {
  const script = `(async () => {
    const h = await fetch('${host.url}/health');
    const p = await fetch('${host.url}/predict', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 1, model: 'digits', input: new Array(64).fill(0) }) });
    const body = await p.json();
    console.log(JSON.stringify({ health: h.status, code: body.code ?? 'ok' }));
  })().catch((e) => { console.log(JSON.stringify({ health: 0, code: e.message })); });`;
  const child = net.spawnIn(host.index, process.execPath, ['-e', script]);
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  await new Promise((resolve) => child.on('exit', resolve));
  return JSON.parse(out.trim()) as { health: number; code: string };
}
