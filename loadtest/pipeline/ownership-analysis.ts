/**
 * The figures of the `stream-ownership` bench from what its workers said (ownership-worker.ts lines) and
 * what the bench published: failover after a kill, effects by a deposed owner, duplicates, losses,
 * throughput and how partitions spread over instances. Pure: no I/O.
 */

export interface WorkerRecord {
  instance: string;
  /** E: effect; F: fenced (no effect, nak); G / L: ownership gained / lost (seq 0). */
  kind: 'E' | 'F' | 'G' | 'L';
  partition: number;
  seq: number;
  atMs: number;
}

/** Parses one worker stdout line into a record (E, F and O lines; others are undefined). */
export function parseWorkerLine(instance: string, text: string): WorkerRecord | undefined {
  const o = /^O (\d+) (\d+) ([+-])$/.exec(text.trim());
  if (o)
    return {
      instance,
      kind: o[3] === '+' ? 'G' : 'L',
      partition: Number(o[1]),
      seq: 0,
      atMs: Number(o[2]),
    };
  const m = /^([EF]) (\d+) (\d+) (\d+)$/.exec(text.trim());
  if (!m) return undefined;
  return {
    instance,
    kind: m[1] as 'E' | 'F',
    partition: Number(m[2]),
    seq: Number(m[3]),
    atMs: Number(m[4]),
  };
}

export interface PartitionFailover {
  partition: number;
  newOwner: string | null;
  /** The victim's last effect on the partition. */
  lastOldMs: number;
  /** A survivor's first effect on it after the fault (null: none came). */
  firstNewMs: number | null;
  /** firstNew − lastOld: the partition's gap in effects. */
  failoverMs: number | null;
  /** firstNew − the fault. */
  sinceFaultMs: number | null;
  /**
   * Effects the victim emitted on the partition after the new owner's first and before it gained the
   * partition again (a deposed owner not fenced; a lease it takes back later is ownership again).
   */
  deposedEffects: number;
  /** Messages the victim refused (fenced) on it after the fault. */
  fenced: number;
}

/** The partitions the victim worked when the fault hit (its effects in the second before it). */
export function victimPartitions(
  records: readonly WorkerRecord[],
  victim: string,
  faultMs: number,
): number[] {
  const ps = new Set<number>();
  for (const r of records)
    if (r.instance === victim && r.kind === 'E' && r.atMs <= faultMs && r.atMs > faultMs - 1000)
      ps.add(r.partition);
  return [...ps].sort((a, b) => a - b);
}

/** The instance whose effect on `partition` came last before `atMs`. */
export function ownerAt(records: readonly WorkerRecord[], partition: number, atMs: number): string | null {
  let best: WorkerRecord | undefined;
  for (const r of records)
    if (r.kind === 'E' && r.partition === partition && r.atMs <= atMs && (!best || r.atMs > best.atMs))
      best = r;
  return best?.instance ?? null;
}

export function failoverOf(
  records: readonly WorkerRecord[],
  victim: string,
  faultMs: number,
): PartitionFailover[] {
  return victimPartitions(records, victim, faultMs).map((partition) => {
    let lastOldMs = 0;
    let first: WorkerRecord | undefined;
    for (const r of records) {
      if (r.partition !== partition || r.kind !== 'E') continue;
      if (r.instance === victim && r.atMs <= faultMs) lastOldMs = Math.max(lastOldMs, r.atMs);
      if (r.instance !== victim && r.atMs > faultMs && (!first || r.atMs < first.atMs)) first = r;
    }
    const firstNewMs = first?.atMs ?? null;
    let regainedMs = Number.POSITIVE_INFINITY;
    for (const r of records)
      if (r.partition === partition && r.instance === victim && r.kind === 'G' && r.atMs > faultMs)
        regainedMs = Math.min(regainedMs, r.atMs);
    let deposedEffects = 0;
    let fenced = 0;
    for (const r of records) {
      if (r.partition !== partition || r.instance !== victim || r.atMs <= faultMs) continue;
      if (r.kind === 'F') fenced++;
      else if (r.kind === 'E' && firstNewMs !== null && r.atMs > firstNewMs && r.atMs < regainedMs)
        deposedEffects++;
    }
    return {
      partition,
      newOwner: first?.instance ?? null,
      lastOldMs,
      firstNewMs,
      failoverMs: firstNewMs === null ? null : firstNewMs - lastOldMs,
      sinceFaultMs: firstNewMs === null ? null : firstNewMs - faultMs,
      deposedEffects,
      fenced,
    };
  });
}

export interface EffectCounts {
  published: number;
  /** Published sequences with at least one effect. */
  effected: number;
  /** Published, never effected. */
  lost: number;
  /** Sequences effected by two or more instances. */
  duplicatesAcrossInstances: number;
  /** Effects beyond the first of a sequence (any instance). */
  repeatedEffects: number;
}

export function effectCounts(records: readonly WorkerRecord[], published: Iterable<number>): EffectCounts {
  const by = new Map<number, { instances: Set<string>; n: number }>();
  for (const r of records) {
    if (r.kind !== 'E') continue;
    const e = by.get(r.seq) ?? { instances: new Set<string>(), n: 0 };
    e.instances.add(r.instance);
    e.n++;
    by.set(r.seq, e);
  }
  let count = 0;
  let effected = 0;
  for (const seq of published) {
    count++;
    if (by.has(seq)) effected++;
  }
  let dup = 0;
  let repeated = 0;
  for (const e of by.values()) {
    if (e.instances.size > 1) dup++;
    repeated += e.n - 1;
  }
  return {
    published: count,
    effected,
    lost: count - effected,
    duplicatesAcrossInstances: dup,
    repeatedEffects: repeated,
  };
}

/** Effects per second from `fromMs` to the last effect (null without effects after it). */
export function throughputOf(records: readonly WorkerRecord[], fromMs: number): number | null {
  let n = 0;
  let last = fromMs;
  for (const r of records)
    if (r.kind === 'E' && r.atMs >= fromMs) {
      n++;
      last = Math.max(last, r.atMs);
    }
  if (n === 0 || last === fromMs) return null;
  return (n * 1000) / (last - fromMs);
}

/** Partitions per instance: each partition counted for the instance with most effects on it. */
export function spreadOf(records: readonly WorkerRecord[]): Record<string, number> {
  const per = new Map<number, Map<string, number>>();
  for (const r of records) {
    if (r.kind !== 'E') continue;
    const m = per.get(r.partition) ?? new Map<string, number>();
    m.set(r.instance, (m.get(r.instance) ?? 0) + 1);
    per.set(r.partition, m);
  }
  const out: Record<string, number> = {};
  for (const m of per.values()) {
    const top = [...m].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))[0]!;
    out[top[0]] = (out[top[0]] ?? 0) + 1;
  }
  return out;
}
