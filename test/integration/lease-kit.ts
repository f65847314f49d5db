/** What the partition-lease tests share: handler timelines, bucket names, a tight poll. */
import type { ReleaseReason } from '../../apps/pipeline';

export interface LeaseEvent {
  at: number;
  instance: string;
  partition: number;
  kind: 'acquire' | 'release';
  reason?: ReleaseReason;
  /** When the handler returned. */
  doneAt?: number;
}

/** Records every handler call and whether two instances' handlers ever worked one partition at once. */
export class Timeline {
  readonly events: LeaseEvent[] = [];
  readonly violations: string[] = [];
  private readonly holder = new Map<number, string>();
  /** How long an instance's next acquire handler takes (then 30 ms again). */
  readonly acquireMs = new Map<string, number>();
  /** The token of each instance's latest acquisition of each partition. */
  private readonly tokens = new Map<string, number>();

  handlers(instance: string) {
    return {
      acquire: async (partition: number, token: number) => {
        this.tokens.set(`${instance}/${partition}`, token);
        const other = this.holder.get(partition);
        if (other !== undefined && other !== instance)
          this.violations.push(`${instance} acquired ${partition} while ${other} held it`);
        this.holder.set(partition, instance);
        this.events.push({ at: Date.now(), instance, partition, kind: 'acquire' });
        // Like restoring a checkpoint: renewals must go on meanwhile.
        const ms = this.acquireMs.get(instance) ?? 30;
        this.acquireMs.delete(instance);
        await new Promise((resolve) => setTimeout(resolve, ms));
      },
      release: async (partition: number, reason: ReleaseReason) => {
        const event: LeaseEvent = { at: Date.now(), instance, partition, kind: 'release', reason };
        this.events.push(event);
        await new Promise((resolve) => setTimeout(resolve, 30));
        if (this.holder.get(partition) === instance) this.holder.delete(partition);
        event.doneAt = Date.now();
      },
    };
  }

  /** A crash: the process is gone, so its partitions are no longer worked (nothing was called). */
  crashed(instance: string): void {
    for (const [p, who] of [...this.holder]) if (who === instance) this.holder.delete(p);
  }

  /** The fencing token `instance`'s latest acquire of `partition` was called with (-1: none). */
  token(instance: string, partition: number): number {
    return this.tokens.get(`${instance}/${partition}`) ?? -1;
  }

  of(instance: string, kind: LeaseEvent['kind']): LeaseEvent[] {
    return this.events.filter((e) => e.instance === instance && e.kind === kind);
  }
}

/** Unique bucket names with `prefix`, remembered for cleanup. */
export function bucketNames(prefix: string): { next(): string; readonly all: string[] } {
  const all: string[] = [];
  let counter = 0;
  return {
    all,
    next() {
      const name = `${prefix}${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
      all.push(name);
      return name;
    },
  };
}

/** Polls every 10 ms (the lease tests time hand-overs in tens of milliseconds). */
export async function pollUntil(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
