/**
 * What the noisy-neighbour suite shares: a victim client that sends a steady load from its own loopback address
 * and measures its latency and checks every answer, bounded attackers run in their own process
 * (noisy-attacker.ts, so their sending never delays the victim's event loop). The poison attack's model is
 * lookup-model.ts's.
 */
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import WebSocket from 'ws';
import type { AttackSpec, Outcome } from './noisy-attacker';

/** p-th percentile (0..100) of `values`, nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** One victim request: the frame to send and the check of its answer (a message when wrong). */
export interface VictimWork {
  body: (seq: number) => Record<string, unknown>;
  check: (seq: number, answer: Record<string, unknown>) => string | undefined;
}

export interface VictimPhase {
  latencies: number[];
  errors: string[];
  sent: number;
}

/**
 * A well-behaved client: one WebSocket connection from its own loopback address, one request every
 * `intervalMs` (open loop: the schedule does not wait for answers, so a stalled server shows as latency), each
 * answer checked. Latency is taken from the send to the answer.
 */
export class Victim {
  private seq = 0;
  private readonly waiting = new Map<number, { sentAt: number; timer: NodeJS.Timeout }>();
  private phase: VictimPhase = { latencies: [], errors: [], sent: 0 };

  private constructor(
    private readonly socket: WebSocket,
    private work: VictimWork,
    private readonly timeoutMs: number,
  ) {
    socket.on('message', (data) => {
      const answer = JSON.parse(data.toString()) as Record<string, unknown>;
      const seq = typeof answer.id === 'number' ? answer.id : -1;
      const entry = this.waiting.get(seq);
      if (!entry) {
        this.phase.errors.push(`unmatched answer ${data.toString().slice(0, 200)}`);
        return;
      }
      this.waiting.delete(seq);
      clearTimeout(entry.timer);
      this.phase.latencies.push(performance.now() - entry.sentAt);
      const wrong =
        answer.type === 'error'
          ? `error ${String(answer.code)}: ${String(answer.message)}`
          : this.work.check(seq, answer);
      if (wrong) this.phase.errors.push(`#${seq}: ${wrong}`);
    });
    socket.on('close', (code) => this.phase.errors.push(`victim connection closed ${code}`));
  }

  static connect(wsUrl: string, localAddress: string, work: VictimWork, timeoutMs = 5000): Promise<Victim> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(wsUrl, { localAddress });
      socket.once('open', () => resolve(new Victim(socket, work, timeoutMs)));
      socket.once('error', reject);
    });
  }

  /** Sends at a steady rate for `ms` (or until `until` resolves, at most `ms`), then waits for every answer. */
  async run(
    ms: number,
    intervalMs: number,
    work?: VictimWork,
    until?: Promise<unknown>,
  ): Promise<VictimPhase> {
    if (work) this.work = work;
    this.phase = { latencies: [], errors: [], sent: 0 };
    const phase = this.phase;
    const started = performance.now();
    let stop = false;
    void until?.then(() => {
      stop = true;
    });
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        if (stop || performance.now() - started >= ms) {
          clearInterval(timer);
          resolve();
          return;
        }
        this.send(phase);
      }, intervalMs);
    });
    const deadline = performance.now() + this.timeoutMs + 500;
    while (this.waiting.size > 0 && performance.now() < deadline) await sleep(20);
    return phase;
  }

  private send(phase: VictimPhase): void {
    const seq = this.seq++;
    const sentAt = performance.now();
    const timer = setTimeout(() => {
      this.waiting.delete(seq);
      phase.errors.push(`#${seq}: no answer within ${this.timeoutMs} ms`);
    }, this.timeoutMs);
    this.waiting.set(seq, { sentAt, timer });
    phase.sent++;
    this.socket.send(JSON.stringify({ id: seq, ...this.work.body(seq) }));
  }

  close(): void {
    this.socket.close();
  }
}

/** An attacker process: started and idle until `go()`, then `done` gives what it saw. */
export interface Attacker {
  ready: Promise<void>;
  go: () => void;
  done: Promise<Outcome>;
}

/**
 * Starts one attack in its own process (compiled noisy-attacker.js): its start-up (a node process, connections)
 * happens before `go`, out of the measured window.
 */
export function startAttacker(spec: AttackSpec): Attacker {
  const child = spawn(process.execPath, [path.join(__dirname, 'noisy-attacker.js'), JSON.stringify(spec)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let onReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (onReady = resolve));
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    if (out.startsWith('ready\n')) onReady();
  });
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const done = new Promise<Outcome>((resolve, reject) => {
    child.on('exit', (code) => {
      onReady();
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0) reject(new Error(`attacker exited ${code}: ${err.slice(-2000)}`));
      else resolve(JSON.parse(line) as Outcome);
    });
  });
  return { ready, go: () => child.stdin.write('go\n'), done };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
