/**
 * Writes admitted requests into the request rings of their slot: ring-wide request ids, one record per
 * request, and the doorbell rung at most twice per event-loop turn and slot.
 */
import type { BoundRequest, Priority } from '../../libs/protocol';
import { writeRequestRecord } from '../../libs/protocol';
import type { Doorbell, RingBuffer } from '../../libs/ring';

export class RingWriter {
  private nextRequestId = 1;
  private readonly ringsToNotify = new Set<Doorbell>();
  private readonly rungThisTurn = new Set<Doorbell>();
  private notifyScheduled = false;

  /** The id of the next ring record (never 0, wraps before 2^32 - 1). */
  takeRequestId(): number {
    const requestId = this.nextRequestId;
    this.nextRequestId = requestId >= 0xfffffffe ? 1 : requestId + 1;
    return requestId;
  }

  /** Encodes one reserved record and commits it, whatever happens: a reservation must always be committed. */
  write(
    ring: RingBuffer,
    offset: number,
    doorbell: Doorbell,
    header: { requestId: number; slot: number; priority: Priority; enqueuedAt: number; deadlineAt: number },
    bound: BoundRequest,
  ): void {
    try {
      writeRequestRecord(ring.view, ring.bytes, offset, header, bound);
    } finally {
      // A record that failed to encode is still well-framed.
      ring.commit(undefined, false);
      this.scheduleNotify(doorbell);
    }
  }

  /**
   * Waking a worker costs a cross-thread notify, so it happens at most twice per event-loop turn and slot:
   * at the first request of the turn (the worker starts at once, in parallel with the rest of the turn) and,
   * if more requests followed, once at the end of the turn (the worker claims them as one batch).
   */
  private scheduleNotify(doorbell: Doorbell): void {
    if (!this.rungThisTurn.has(doorbell)) {
      this.rungThisTurn.add(doorbell);
      doorbell.ring();
    } else {
      this.ringsToNotify.add(doorbell);
    }
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(this.flushNotifies);
  }

  private readonly flushNotifies = (): void => {
    this.notifyScheduled = false;
    for (const doorbell of this.ringsToNotify) doorbell.ring();
    this.ringsToNotify.clear();
    this.rungThisTurn.clear();
  };
}
