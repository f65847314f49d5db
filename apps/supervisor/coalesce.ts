/**
 * Scrape coalescing: /health and /metrics ask every node, so a storm of scrapes would multiply into a storm
 * of node requests. Callers share fan-outs instead: at most one fan-out per kind in flight, at most one queued
 * behind it (every caller arriving meanwhile joins that one), and fan-outs start at least `minIntervalMs`
 * apart. An answer is never older than the call: each caller gets a fan-out that started after it arrived,
 * so "do something, then scrape" always sees the something.
 */
export interface CoalesceClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: CoalesceClock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

export class Coalescer<T> {
  private running: Promise<T> | undefined;
  private queued: Promise<T> | undefined;
  private lastStart = Number.NEGATIVE_INFINITY;
  /** Fan-outs started so far. */
  fanOuts = 0;

  constructor(
    private readonly fanOut: () => Promise<T>,
    private readonly minIntervalMs: number,
    private readonly clock: CoalesceClock = realClock,
  ) {}

  /** The answer of a fan-out that starts after this call (shared with every other caller waiting for it). */
  get(): Promise<T> {
    if (this.queued) return this.queued;
    if (!this.running && this.clock.now() - this.lastStart >= this.minIntervalMs) return this.launch();
    this.queued = this.afterCurrent();
    return this.queued;
  }

  private async afterCurrent(): Promise<T> {
    if (this.running) await this.running.then(settled, settled);
    const wait = this.lastStart + this.minIntervalMs - this.clock.now();
    if (wait > 0) await this.clock.sleep(wait);
    // From here on, new callers arrived after this fan-out starts: they queue the next one.
    this.queued = undefined;
    return this.launch();
  }

  private launch(): Promise<T> {
    this.lastStart = this.clock.now();
    this.fanOuts++;
    const run = this.fanOut();
    this.running = run;
    const clear = (): void => {
      if (this.running === run) this.running = undefined;
    };
    run.then(clear, clear);
    return run;
  }
}

function settled(): void {}
