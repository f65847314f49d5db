import { ConsumerSignal } from './codes';

/**
 * Slow-consumer detector for one WebSocket connection, fed the unsent bytes (uWS getBufferedAmount()) after
 * each send.
 *
 * - bytes > closeBytes → `close`, and every later call answers `close` too (the connection is condemned).
 * - bytes > warnBytes → `warn` on the first crossing of an episode, then `ok` while it stays above.
 * - bytes <= resetBytes ends the episode (resetBytes < warnBytes: hysteresis), so a buffer that drained and
 *   fills up again is warned again.
 * "Warned, then disconnected if it keeps growing": a buffer that goes on growing after the warning reaches
 * closeBytes; memory per connection never exceeds closeBytes plus one message.
 */
export class SlowConsumerMonitor {
  private warned = false;
  private closed = false;

  constructor(
    readonly warnBytes: number,
    readonly closeBytes: number,
    readonly resetBytes: number,
  ) {}

  /** True while a warning episode is open. */
  get warning(): boolean {
    return this.warned;
  }

  get closing(): boolean {
    return this.closed;
  }

  observe(bytes: number): ConsumerSignal {
    if (this.closed) return ConsumerSignal.Close;
    if (bytes > this.closeBytes) {
      this.closed = true;
      return ConsumerSignal.Close;
    }
    if (bytes > this.warnBytes) {
      if (this.warned) return ConsumerSignal.Ok;
      this.warned = true;
      return ConsumerSignal.Warn;
    }
    if (this.warned && bytes <= this.resetBytes) this.warned = false;
    return ConsumerSignal.Ok;
  }

  reset(): void {
    this.warned = false;
    this.closed = false;
  }
}
