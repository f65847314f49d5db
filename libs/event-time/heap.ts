/**
 * Event-time timers. Ties are broken by kind, key, window and start, so the order timers fire in is a
 * function of the state alone: a heap rebuilt from a snapshot fires exactly as the original would.
 */
/** Kinds in the order they fire at equal times: a window fires before it closes, keys expire after both. */
export const TimerKind = { Fire: 0, Close: 1, Expire: 2, Forget: 3 } as const;
export type TimerKind = (typeof TimerKind)[keyof typeof TimerKind];

export interface Timer {
  readonly at: number;
  readonly kind: TimerKind;
  /** Key (Fire/Close/Expire) or event id (Forget). */
  readonly key: string;
  readonly window: string;
  readonly start: number;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function compareTimers(a: Timer, b: Timer): number {
  return (
    a.at - b.at ||
    a.kind - b.kind ||
    compareStrings(a.key, b.key) ||
    compareStrings(a.window, b.window) ||
    a.start - b.start
  );
}

/**
 * A binary min-heap ordered by `less` (ties in any order: give a total order where pop order matters). The
 * engine's timers and the simulator's event merge both run on it.
 */
export class MinHeap<T> {
  private readonly items: T[] = [];

  constructor(private readonly less: (x: T, y: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(value: T): void {
    const items = this.items;
    items.push(value);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(value, items[parent]!)) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = value;
  }

  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    this.siftDown(last);
    return top;
  }

  /** pop() then push(value) in one sift (the top's key grew, or it is replaced): half the work of the two. */
  replaceTop(value: T): void {
    if (this.items.length === 0) this.items.push(value);
    else this.siftDown(value);
  }

  clear(): void {
    this.items.length = 0;
  }

  /** Places `value` from the root down (the root's slot is free). */
  private siftDown(value: T): void {
    const items = this.items;
    const n = items.length;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.less(items[right]!, items[left]!) ? right : left;
      if (!this.less(items[child]!, value)) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = value;
  }
}

/** The engine's timers, in compareTimers order. */
export class TimerHeap extends MinHeap<Timer> {
  constructor() {
    super((a, b) => compareTimers(a, b) < 0);
  }
}
