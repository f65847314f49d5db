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

export class TimerHeap {
  private readonly items: Timer[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): Timer | undefined {
    return this.items[0];
  }

  push(timer: Timer): void {
    const items = this.items;
    items.push(timer);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (compareTimers(items[parent]!, timer) <= 0) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = timer;
  }

  pop(): Timer | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    const n = items.length;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && compareTimers(items[right]!, items[left]!) < 0 ? right : left;
      if (compareTimers(items[child]!, last) >= 0) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = last;
    return top;
  }

  clear(): void {
    this.items.length = 0;
  }
}
