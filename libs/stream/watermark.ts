/** Per-partition watermarks. Holds no timers: idleness is judged against the clock each time it is asked. */

/** "No watermark yet": every event is on time. JSON-able, unlike -Infinity. */
export const NO_WATERMARK = Number.MIN_SAFE_INTEGER;

export interface PartitionState {
  partition: string;
  maxEventTime: number;
  /** Processing time (the injected clock) of the partition's last non-duplicate event. */
  lastSeenAt: number;
}

export class PartitionWatermarks {
  private readonly partitions = new Map<string, PartitionState>();

  constructor(
    private readonly outOfOrdernessMs: number,
    private readonly idleTimeoutMs: number,
  ) {}

  get size(): number {
    return this.partitions.size;
  }

  /** Records that `partition` delivered an event of time `eventTime` at processing time `now`. */
  observe(partition: string, eventTime: number, now: number): void {
    const state = this.partitions.get(partition);
    if (state === undefined) {
      this.partitions.set(partition, { partition, maxEventTime: eventTime, lastSeenAt: now });
      return;
    }
    if (eventTime > state.maxEventTime) state.maxEventTime = eventTime;
    if (now > state.lastSeenAt) state.lastSeenAt = now;
  }

  isActive(state: PartitionState, now: number): boolean {
    return now - state.lastSeenAt < this.idleTimeoutMs;
  }

  activeCount(now: number): number {
    let n = 0;
    for (const state of this.partitions.values()) if (this.isActive(state, now)) n++;
    return n;
  }

  /**
   * Min over active partitions of (max event time − bound). Idle partitions do not hold it back; when every
   * partition is idle, the highest partition watermark stands (an idle partition has nothing older to send).
   */
  current(now: number): number {
    let minActive = Number.POSITIVE_INFINITY;
    let maxAll = NO_WATERMARK;
    for (const state of this.partitions.values()) {
      const w = state.maxEventTime - this.outOfOrdernessMs;
      if (w > maxAll) maxAll = w;
      if (this.isActive(state, now) && w < minActive) minActive = w;
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
    for (const s of states) this.partitions.set(s.partition, { ...s });
  }
}
