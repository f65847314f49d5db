/**
 * Assignment passes, debounced and serialised: a burst of triggers (a graceful stop deletes several keys) is one
 * pass, passes never overlap, and a trigger during a pass causes one more.
 */
export class PassScheduler {
  private debounce: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly pass: () => Promise<void>,
    private readonly onError: (err: unknown) => void,
    /** No more passes after this one (stopped). */
    private readonly done: () => boolean,
  ) {}

  schedule(delayMs: number): void {
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.debounce) return;
    this.debounce = setTimeout(() => {
      this.debounce = null;
      this.running = this.loop().finally(() => {
        this.running = null;
      });
    }, delayMs);
  }

  /** The pass in progress (with the ones it queued), or null. */
  get current(): Promise<void> | null {
    return this.running;
  }

  /** Drops a pass not begun yet; one in progress finishes. */
  cancel(): void {
    if (this.debounce) clearTimeout(this.debounce);
    this.debounce = null;
  }

  private async loop(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.pass();
      } catch (err) {
        this.onError(err);
      }
    } while (this.again && !this.done());
  }
}
