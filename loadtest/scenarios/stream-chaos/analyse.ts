/**
 * stream-chaos analysis: each kill's restore, catch-up, recovery and freshness; freshness steady vs in
 * recovery; checkpoint duration and size per partition; the victim's output against the reference's.
 */
import { partitionOfKey } from '../../../apps/pipeline';
import { type FirstPrediction, type FreshnessSummary, freshnessOf } from '../../pipeline/analysis';
import type { NatsHandle } from '../../pipeline/broker';
import {
  type CheckpointRecord,
  checkpointsByPartition,
  compareOutputs,
  type OutputComparison,
  type OutputRecord,
  type PartitionCheckpoints,
  type PromHistogram,
  partitionOfSubject,
  promHistogram,
  recoveryAfter,
  splitByWindows,
} from '../../pipeline/chaos-analysis';
import type { ChaosRun } from './drive';
import { PARTITIONS, type Pipeline, type Plan } from './plan';

export function firstPredictions(list: readonly OutputRecord[]): FirstPrediction[] {
  return list
    .filter((p) => p.revision === 0 && Number.isFinite(p.eventMs))
    .map((p) => ({ storedMs: p.storedMs, eventMs: p.eventMs }));
}

/** Completed checkpoints of a pipeline's instances, each attributed to its partition by its position's subject. */
export async function checkpointRecords(nats: NatsHandle, p: Pipeline): Promise<CheckpointRecord[]> {
  const prefix = `${p.names.tag}.delivery.events`;
  const all = p.instances.flatMap((i) => i.checkpoints).sort((a, b) => a.atMs - b.atMs);
  const bySeq = new Map<number, number | undefined>();
  const out: CheckpointRecord[] = [];
  for (const c of all) {
    if (!(c.position > 0)) continue;
    if (!bySeq.has(c.position)) {
      const m = await nats.jsm.streams.getMessage(p.names.events, { seq: c.position }).catch(() => null);
      bySeq.set(c.position, m ? partitionOfSubject(m.subject, prefix) : undefined);
    }
    const partition = bySeq.get(c.position);
    if (partition !== undefined) out.push({ partition, bytes: c.bytes, ms: c.ms });
  }
  return out;
}

export interface ChaosFigures {
  cmp: OutputComparison;
  vicFirst: FirstPrediction[];
  refFirst: FirstPrediction[];
  /** recovered: the undelivered backlog below this (rate × 0.5 s) */
  lagLimit: number;
  fresh: {
    victimSteady: FreshnessSummary;
    victimRecovery: FreshnessSummary;
    referenceSteady: FreshnessSummary;
    referenceRecovery: FreshnessSummary;
  };
  ckpt: { victim: PartitionCheckpoints[]; reference: PartitionCheckpoints[] };
  refHist: PromHistogram | undefined;
  /** where the duplicates are: their key's partition and when the second copy was stored */
  dupInfo: Map<number, { n: number; firstS: number; lastS: number }>;
  /** exactly once: no duplicate, loss, extra or mismatch, and a reference to compare with */
  correct: boolean;
}

/**
 * Fills each kill's restore, catch-up, recovery and freshness figures in; returns the recovery windows
 * (kill → recovered, or the next kill, or the feed's end).
 */
function attributeKills(
  run: ChaosRun,
  vicFirst: readonly FirstPrediction[],
  refFirst: readonly FirstPrediction[],
  lagLimit: number,
): [number, number][] {
  const { kills, victim } = run;
  const restores = victim.instances.flatMap((i) => i.restores.map((r) => ({ ...r, by: i.id })));
  const caughtUps = victim.instances.flatMap((i) => i.caughtUps.map((c) => ({ ...c, by: i.id })));
  const windows: [number, number][] = [];
  for (const [i, k] of kills.entries()) {
    const next = kills[i + 1]?.killAtMs ?? Number.POSITIVE_INFINITY;
    for (const kp of k.partitions) {
      const r = restores
        .filter((x) => x.partition === kp.partition && x.atMs >= k.killAtMs && x.atMs < next)
        .sort((a, b) => a.atMs - b.atMs)[0];
      if (r)
        kp.restore = {
          atMs: r.atMs,
          by: r.by,
          position: r.position,
          replayUntil: r.replayUntil,
          checkpoint: r.checkpoint,
        };
      const c = caughtUps
        .filter((x) => x.partition === kp.partition && x.atMs >= (r?.atMs ?? k.killAtMs) && x.atMs < next)
        .sort((a, b) => a.atMs - b.atMs)[0];
      if (c) kp.caughtUp = { atMs: c.atMs, by: c.by, seconds: c.seconds };
    }
    k.heldTotal = k.partitions.reduce((a, x) => a + (x.heldAtKill ?? 0), 0);
    k.expectedTotal = k.partitions.reduce((a, x) => a + (x.expected ?? 0), 0);
    // a /health answer in flight at the kill may still arrive: look from its timeout on
    k.recovery = recoveryAfter(run.vicS.samples, k.killAtMs + 1600, PARTITIONS, lagLimit);
    const end = Math.min(k.recovery.recoveredAt ?? next, next, run.feedEnd);
    windows.push([k.killAtMs, end]);
    k.freshnessRecovery = freshnessOf(vicFirst.filter((p) => p.eventMs >= k.killAtMs && p.eventMs < end));
    k.referenceFreshnessRecovery = freshnessOf(
      refFirst.filter((p) => p.eventMs >= k.killAtMs && p.eventMs < end),
    );
  }
  return windows;
}

/** The duplicates in the victim's output by their key's partition, with when their second copies were stored. */
function duplicatesByPartition(run: ChaosRun): ChaosFigures['dupInfo'] {
  const dupInfo: ChaosFigures['dupInfo'] = new Map();
  const seen = new Set<string>();
  for (const o of run.vicOut) {
    if (!seen.has(o.decisionId)) {
      seen.add(o.decisionId);
      continue;
    }
    const k = partitionOfKey(o.decisionId.split(':')[0] ?? '', PARTITIONS);
    const at = (o.storedMs - run.feedStart) / 1000;
    const d = dupInfo.get(k);
    if (d) {
      d.n++;
      d.firstS = Math.min(d.firstS, at);
      d.lastS = Math.max(d.lastS, at);
    } else dupInfo.set(k, { n: 1, firstS: at, lastS: at });
  }
  return dupInfo;
}

export async function analyseChaos(plan: Plan, nats: NatsHandle, run: ChaosRun): Promise<ChaosFigures> {
  const cmp: OutputComparison = compareOutputs(run.refOut, run.vicOut);
  const vicFirst = firstPredictions(run.vicOut);
  const refFirst = firstPredictions(run.refOut);
  const lagLimit = plan.rate * 0.5;
  const windows = attributeKills(run, vicFirst, refFirst, lagLimit);
  const steadyFrom = run.feedStart + (plan.rampS + 4) * 1000;
  const vSplit = splitByWindows(vicFirst, windows, steadyFrom, run.feedEnd);
  const rSplit = splitByWindows(refFirst, windows, steadyFrom, run.feedEnd);
  const fresh = {
    victimSteady: freshnessOf(vSplit.outside),
    victimRecovery: freshnessOf(vSplit.inside),
    referenceSteady: freshnessOf(rSplit.outside),
    referenceRecovery: freshnessOf(rSplit.inside),
  };
  const ckpt = {
    victim: checkpointsByPartition(await checkpointRecords(nats, run.victim)),
    reference: checkpointsByPartition(await checkpointRecords(nats, run.ref)),
  };
  const refHist =
    run.refMetrics && promHistogram(run.refMetrics, 'streaminfer_stream_checkpoint_duration_seconds');
  const dupInfo = duplicatesByPartition(run);
  const correct =
    cmp.duplicates.length === 0 &&
    cmp.lost.length === 0 &&
    cmp.extra.length === 0 &&
    cmp.mismatches.length === 0 &&
    cmp.msgIdMismatches === 0 &&
    cmp.referenceDuplicates.length === 0 &&
    cmp.referenceCount > 0;
  return { cmp, vicFirst, refFirst, lagLimit, fresh, ckpt, refHist, dupInfo, correct };
}
