/**
 * Per-partition watermarks, in event time only: the watermark is a function of the events seen, in the order
 * they were seen, never of when they were processed. So a replay of the same input (after a restore, on a
 * slower host, with a stall in the middle) meets the same watermark at every event.
 */

/** "No watermark yet": every event is on time. JSON-able, unlike -Infinity. */
export const NO_WATERMARK = Number.MIN_SAFE_INTEGER;

export interface PartitionState {
  partition: string;
  maxEventTime: number;
  /**
   * The engine's event clock (the highest event time seen on any partition) at this partition's last
   * non-duplicate event: the partition is idle once that clock has moved idleTimeoutMs past it.
   */
  lastSeenAt: number;
}

export class PartitionWatermarks {
  private readonly partitions = new Map<string, PartitionState>();
  /** Highest event time seen on any partition. */
  private clock = NO_WATERMARK;

  constructor(
    private readonly outOfOrdernessMs: number,
    private readonly idleTimeoutMs: number,
  ) {}

  get size(): number {
    return this.partitions.size;
  }

  /** Records that `partition` delivered an event of time `eventTime`. */
  observe(partition: string, eventTime: number): void {
    if (eventTime > this.clock) this.clock = eventTime;
    const state = this.partitions.get(partition);
    if (state === undefined) {
      this.partitions.set(partition, { partition, maxEventTime: eventTime, lastSeenAt: this.clock });
      return;
    }
    if (eventTime > state.maxEventTime) state.maxEventTime = eventTime;
    state.lastSeenAt = this.clock;
  }

  /** Silent while the other partitions' events moved idleTimeoutMs of event time on: no longer holds back. */
  isActive(state: PartitionState): boolean {
    return this.clock - state.lastSeenAt < this.idleTimeoutMs;
  }

  activeCount(): number {
    let n = 0;
    for (const state of this.partitions.values()) if (this.isActive(state)) n++;
    return n;
  }

  /**
   * Min over active partitions of (max event time − bound). The partition that set the event clock is
   * active; should none be (a snapshot written when lastSeenAt was processing time), the highest stands.
   */
  current(): number {
    let minActive = Number.POSITIVE_INFINITY;
    let maxAll = NO_WATERMARK;
    for (const state of this.partitions.values()) {
      const w = state.maxEventTime - this.outOfOrdernessMs;
      if (w > maxAll) maxAll = w;
      if (this.isActive(state) && w < minActive) minActive = w;
    }
    return minActive === Number.POSITIVE_INFINITY ? maxAll : minActive;
  }

  /** Sorted by partition name so snapshots are byte-identical for identical state. */
  snapshot(): PartitionState[] {
    return [...this.partitions.values()]
      .map((s) => ({ ...s }))
      .sort((a, b) => (a.partition < b.partition ? -1 : a.partition > b.partition ? 1 : 0));
  }

  restore(states: readonly PartitionState[]): void {
    this.partitions.clear();
    this.clock = NO_WATERMARK;
    for (const s of states) if (s.maxEventTime > this.clock) this.clock = s.maxEventTime;
    // Not ahead of the event clock (snapshots of before, when it was processing time): just seen.
    for (const s of states)
      this.partitions.set(s.partition, { ...s, lastSeenAt: Math.min(s.lastSeenAt, this.clock) });
  }
}
