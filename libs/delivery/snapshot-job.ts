/**
 * An incremental (copy-on-write) snapshot of the decider, as JSON text. A full snapshot of a large state
 * costs seconds of one thread; taken at a checkpoint barrier, it stalls every partition of the process for
 * that long. A job instead fixes everything but the keys when it starts (the engine's head, the key list),
 * then captures each key either just before the key next changes (the decider calls capture() from the
 * engine's onKeyChange) or when step() reaches it — so what it writes is the state as of its start, while
 * events go on being processed between steps. Keys unchanged since an earlier job come from that job's text.
 *
 * Hand-written: Flink's heap state backend does the same with copy-on-write state tables; no library does
 * it for plain objects.
 */
import type { EngineSnapshotHead } from '../event-time';

/** A key's JSON parts: its engine state and its delivery state (either may be absent). */
export interface KeyText {
  readonly engine: string | undefined;
  readonly delivery: string | undefined;
}

export class SnapshotJob {
  private readonly texts: (KeyText | undefined)[];
  private readonly slot = new Map<string, number>();
  private readonly headText: { before: string; after: string };
  private readonly tail: string;
  private next = 0;
  private left: number;
  private released = false;

  constructor(
    version: number,
    head: EngineSnapshotHead,
    prunedBefore: number | null,
    /** Every key of the snapshot, sorted. */
    private readonly keys: readonly string[],
    private readonly captureKey: (key: string) => KeyText,
    private readonly release: () => void,
  ) {
    this.texts = new Array<KeyText | undefined>(keys.length);
    for (let i = 0; i < keys.length; i++) this.slot.set(keys[i]!, i);
    this.left = keys.length;
    // Serialised now: the head's arrays are the engine's copies, but the job owns its text from the start.
    this.headText = {
      before: `{"version":${version},"engine":{"version":${head.version},"watermark":${JSON.stringify(head.watermark)},"partitions":${JSON.stringify(head.partitions)},"keys":[`,
      after: `],"dedupe":${JSON.stringify(head.dedupe)},"counters":${JSON.stringify(head.counters)}},"deliveries":[`,
    };
    this.tail = `],"prunedBefore":${JSON.stringify(prunedBefore)}}`;
  }

  /** Keys not captured yet. */
  get remaining(): number {
    return this.left;
  }

  /** Captures `key` as it is now, unless the job has it already (or it is not one of the job's keys). */
  capture(key: string): void {
    const i = this.slot.get(key);
    if (i === undefined || this.texts[i] !== undefined) return;
    this.texts[i] = this.captureKey(key);
    this.left--;
  }

  /** Captures up to `maxKeys` more keys in order; true when every key is captured. */
  step(maxKeys: number): boolean {
    let budget = maxKeys;
    while (budget > 0 && this.next < this.keys.length) {
      const i = this.next++;
      if (this.texts[i] !== undefined) continue;
      this.texts[i] = this.captureKey(this.keys[i]!);
      this.left--;
      budget--;
    }
    return this.left === 0;
  }

  /** Captures what is left, ends the job and returns the snapshot's JSON text. */
  finish(): string {
    this.step(Number.POSITIVE_INFINITY);
    this.cancel();
    const engine: string[] = [];
    const deliveries: string[] = [];
    for (const text of this.texts) {
      if (text?.engine !== undefined) engine.push(text.engine);
      if (text?.delivery !== undefined) deliveries.push(text.delivery);
    }
    return `${this.headText.before}${engine.join(',')}${this.headText.after}${deliveries.join(',')}${this.tail}`;
  }

  /** Ends the job without a result: the decider stops capturing for it. */
  cancel(): void {
    if (this.released) return;
    this.released = true;
    this.release();
  }
}
