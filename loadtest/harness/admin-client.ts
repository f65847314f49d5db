/**
 * Admin-API calls for the `hot-swap` and `registry` scenarios, timed on the bench's clock
 * (`performance.now()`, the same clock the stream clients stamp answers with), and a temporary
 * model repository / state directory for a server the scenario may change.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';

export interface TimedCall {
  /** HTTP status (0 when the request itself failed) */
  status: number;
  body: Record<string, unknown>;
  /** when the call started / when its whole answer had arrived */
  calledMs: number;
  returnedMs: number;
  /** transport error, when status is 0 */
  error?: string;
}

/** POST `body` as JSON to `url`; never throws. */
export function postTimed(url: string, body: unknown, timeoutMs = 60_000): Promise<TimedCall> {
  return timedCall(
    url,
    { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
    timeoutMs,
  );
}

/** GET `url`; never throws. */
export function getTimed(url: string, timeoutMs = 10_000): Promise<TimedCall> {
  return timedCall(url, { method: 'GET' }, timeoutMs);
}

async function timedCall(url: string, init: RequestInit, timeoutMs: number): Promise<TimedCall> {
  const calledMs = performance.now();
  try {
    const r = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const text = await r.text();
    const returnedMs = performance.now();
    let parsed: Record<string, unknown>;
    try {
      const v = JSON.parse(text) as unknown;
      parsed = typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : { value: v };
    } catch {
      parsed = { text: text.slice(0, 500) };
    }
    return { status: r.status, body: parsed, calledMs, returnedMs };
  } catch (e) {
    return {
      status: 0,
      body: {},
      calledMs,
      returnedMs: performance.now(),
      error: e instanceof Error ? e.message : String(e),
    };
  }
}

/** One-line description of a failed call, for errors and notes. */
export function callText(c: TimedCall): string {
  if (c.status === 0) return `no answer (${c.error ?? 'unknown error'})`;
  const code = c.body['code'];
  const msg = c.body['message'];
  return `HTTP ${c.status}${code ? ` ${String(code)}` : ''}${msg ? `: ${String(msg)}` : ''}`;
}

/**
 * A scratch model repository holding a COPY of `models/<name>` for each name (so versions
 * can be added to it) and an empty state directory. `cleanup()` removes both.
 */
export function scratchRepository(
  repoRoot: string,
  names: readonly string[],
  prefix: string,
): { modelsDir: string; stateDir: string; cleanup(): void } {
  const modelsDir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-models-`));
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-state-`));
  for (const name of names)
    fs.cpSync(path.join(repoRoot, 'models', name), path.join(modelsDir, name), { recursive: true });
  return {
    modelsDir,
    stateDir,
    cleanup(): void {
      fs.rmSync(modelsDir, { recursive: true, force: true });
      fs.rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
