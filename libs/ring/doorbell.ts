/**
 * A doorbell: one shared counter that producers bump after writing to any of several rings, so a consumer
 * that serves several rings (one per priority) waits on one word instead of one wait per ring. Rings are
 * committed without their own notify; the producer rings the bell once per batch of writes.
 */
import { types } from 'node:util';
import { RingTypeError } from './errors';

const SEQUENCE = 0;
const WAITERS = 1;
const CELLS = 2;

type WaitAsyncResult =
  | { async: false; value: 'not-equal' | 'timed-out' }
  | { async: true; value: Promise<'ok' | 'timed-out'> };
const waitAsync = (
  Atomics as unknown as { waitAsync: (ta: Int32Array, i: number, v: number, t?: number) => WaitAsyncResult }
).waitAsync;
const noop = (): void => {};

export class Doorbell {
  readonly buffer: SharedArrayBuffer;
  private readonly cells: Int32Array;

  private constructor(buffer: SharedArrayBuffer) {
    this.buffer = buffer;
    this.cells = new Int32Array(buffer, 0, CELLS);
  }

  static create(): Doorbell {
    return new Doorbell(new SharedArrayBuffer(CELLS * 4));
  }

  static from(buffer: SharedArrayBuffer): Doorbell {
    if (!types.isSharedArrayBuffer(buffer) || buffer.byteLength < CELLS * 4) {
      throw new RingTypeError('ring_bad_buffer', 'Doorbell.from() needs the SharedArrayBuffer of a Doorbell');
    }
    return new Doorbell(buffer);
  }

  sequence(): number {
    return Atomics.load(this.cells, SEQUENCE);
  }

  /** Bumps the sequence; wakes waiters only when someone waits (no syscall otherwise). */
  ring(): void {
    Atomics.add(this.cells, SEQUENCE, 1);
    if (Atomics.load(this.cells, WAITERS) !== 0) Atomics.notify(this.cells, SEQUENCE);
  }

  /**
   * Resolves when the sequence differs from `seen` (at once if it already does) or after timeoutMs.
   * `keepAlive` false: the caller's thread is kept alive by something else (a MessagePort, a server), so no
   * timer is armed per wait.
   */
  async wait(seen: number, timeoutMs: number, keepAlive = true): Promise<'ok' | 'timed-out'> {
    if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs)) {
      throw new RingTypeError(
        'ring_invalid_argument',
        `Doorbell.wait(): timeoutMs must be a number, got ${String(timeoutMs)}`,
      );
    }
    if (Atomics.load(this.cells, SEQUENCE) !== seen) return 'ok';
    if (!(timeoutMs > 0)) return 'timed-out';
    Atomics.add(this.cells, WAITERS, 1);
    try {
      const result = waitAsync(this.cells, SEQUENCE, seen, timeoutMs);
      if (!result.async) return result.value === 'timed-out' ? 'timed-out' : 'ok';
      // A pending waitAsync alone does not keep a Node event loop alive.
      if (!keepAlive) return await result.value;
      const timer = setTimeout(noop, Math.min(timeoutMs, 2 ** 30));
      const value = await result.value;
      clearTimeout(timer);
      return value;
    } finally {
      Atomics.sub(this.cells, WAITERS, 1);
    }
  }
}
