/**
 * Admin-API calls made from a child process, for scenarios whose stream clients live in the bench
 * process (`hot-swap`, `registry`). A `fetch` in the bench process holds its event loop for
 * milliseconds (undici's request and body machinery; ~50 ms for the first one), so the answers that
 * arrive meanwhile get late receive stamps — exactly while a reload or a rollback runs, which is what
 * those scenarios measure. Here the bench process only sends and receives one small IPC message per call.
 *
 * Times come back on the caller's `performance.now()` clock: the child stamps wall-clock milliseconds
 * (`performance.timeOrigin + performance.now()`), the parent subtracts its own `timeOrigin`.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { getTimed, postTimed, type TimedCall } from './admin-client';

interface CallRequest {
  seq: number;
  url: string;
  body: unknown;
  timeoutMs: number;
}

interface CallAnswer {
  seq: number;
  call: TimedCall;
}

export class AdminCaller {
  private readonly waiting = new Map<number, (call: TimedCall) => void>();
  private seq = 0;
  private exited = false;

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (message: CallAnswer) => {
      const resolve = this.waiting.get(message.seq);
      if (!resolve) return;
      this.waiting.delete(message.seq);
      const origin = performance.timeOrigin;
      resolve({
        ...message.call,
        calledMs: message.call.calledMs - origin,
        returnedMs: message.call.returnedMs - origin,
      });
    });
    child.on('exit', (code, signal) => {
      this.exited = true;
      for (const resolve of this.waiting.values())
        resolve(noAnswer(`admin caller exited (${signal ?? `code ${code}`})`));
      this.waiting.clear();
    });
  }

  /** Forks the caller and waits until it has made one request (so its own first `fetch` is behind it). */
  static async start(warmUrl?: string): Promise<AdminCaller> {
    const child = fork(__filename, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
    const caller = new AdminCaller(child);
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    if (warmUrl) await caller.get(warmUrl);
    return caller;
  }

  /** POST `body` as JSON; never throws (transport failures come back with status 0). */
  post(url: string, body: unknown, timeoutMs = 60_000): Promise<TimedCall> {
    return this.send({ url, body, timeoutMs });
  }

  /** GET, for warming the child's HTTP client; answered like `post`. */
  get(url: string, timeoutMs = 10_000): Promise<TimedCall> {
    return this.send({ url, body: undefined, timeoutMs });
  }

  close(): void {
    if (!this.exited) this.child.kill();
  }

  private send(request: Omit<CallRequest, 'seq'>): Promise<TimedCall> {
    if (this.exited) {
      const now = performance.now();
      return Promise.resolve({
        status: 0,
        body: {},
        calledMs: now,
        returnedMs: now,
        error: 'admin caller exited',
      });
    }
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.waiting.set(seq, resolve);
      this.child.send({ seq, ...request } satisfies CallRequest);
    });
  }
}

function noAnswer(error: string): TimedCall {
  const now = performance.now();
  return { status: 0, body: {}, calledMs: now, returnedMs: now, error };
}

async function answer(request: CallRequest): Promise<CallAnswer> {
  const call =
    request.body === undefined
      ? await getTimed(request.url, request.timeoutMs)
      : await postTimed(request.url, request.body, request.timeoutMs);
  // wall-clock stamps: the parent moves them onto its own clock
  const origin = performance.timeOrigin;
  return {
    seq: request.seq,
    call: { ...call, calledMs: origin + call.calledMs, returnedMs: origin + call.returnedMs },
  };
}

if (require.main === module && process.send) {
  process.on('message', (request: CallRequest) => {
    void answer(request).then((reply) => process.send?.(reply));
  });
  process.on('disconnect', () => process.exit(0));
}
