/**
 * stream-chaos: `streaminfer stream` with checkpoints under kill -9. One live simulation is published to two
 * pipelines' own event streams (same records, same order): a reference left alone and a victim whose pipeline
 * process is killed with SIGKILL every killEveryS while events flow; its supervisor restarts it, it restores
 * the last completed checkpoint and replays from there. Per kill: time since the last checkpoint, the replay
 * span against (that time × rate), recovery time, freshness during recovery; checkpoint duration and size;
 * and at the end the victim's output against the reference's, decision id by decision id: duplicates, losses
 * and value mismatches must all be 0.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fmt, markdownTable } from '../report';
import { errText } from '../scenario-kit';
import type { FirstPrediction, FreshnessSummary } from '../stream/analysis';
import { freshnessOf, perSecondP95, slope } from '../stream/analysis';
import {
  connectNats,
  deleteRunStreams,
  lastSeq,
  type NatsHandle,
  natsUrl,
  type RunNames,
  runNames,
  writeRunConfig,
} from '../stream/broker';
import {
  compareOutputs,
  firstBelow,
  histogramDelta,
  histogramQuantile,
  type OutputComparison,
  type OutputRecord,
  type PromHistogram,
  parseProm,
  processedCount,
  promHistogram,
  promValue,
  type ReplayArithmetic,
  replayArithmetic,
  splitByWindows,
  unprocessedLag,
} from '../stream/chaos-analysis';
import { ackFloor, deleteCheckpointBuckets, leftovers, readOutputs } from '../stream/chaos-broker';
import { startChaosFeed } from '../stream/chaos-feed';
import { killAllStreamProcs, type PipelineHandle, startPipeline } from '../stream/procs';
import { lineChart } from '../svg-chart';
import type { Chart, Ratio, RunRecord, Scenario, ScenarioContext } from '../types';

interface Plan {
  rate: number;
  durationS: number;
  rampS: number;
  killEveryS: number;
  intervalMs: number;
  /** no kill closer than this to the feed's end (the last restart must still see events) */
  lastKillBeforeEndS: number;
  catchUpTimeoutMs: number;
}

// 1,200 ev/s × 95 s ≈ 114,000 events: two pipelines, the feed and the broker share this host's cores, and a
// victim needs headroom above the rate to catch up between kills.
const FULL: Plan = {
  rate: 1200,
  durationS: 95,
  rampS: 5,
  killEveryS: 30,
  intervalMs: 10_000,
  lastKillBeforeEndS: 5,
  catchUpTimeoutMs: 180_000,
};

const QUICK: Plan = {
  rate: 1000,
  durationS: 18,
  rampS: 3,
  killEveryS: 8,
  intervalMs: 2_000,
  lastKillBeforeEndS: 1,
  catchUpTimeoutMs: 90_000,
};

const WORKLOAD = { seed: 31, disorderMs: 2_000, duplicateFraction: 0.02 };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** The shipped deploy/pipeline.json with this run's names and the checkpoint settings. */
function writeConfig(repoRoot: string, names: RunNames, bucket: string, plan: Plan): string {
  return writeRunConfig(
    repoRoot,
    names,
    {
      // one source partition: idleness (processing time) cannot make a replay's watermark differ
      partitions: 1,
      checkpoint: { enabled: true, intervalMs: plan.intervalMs, bucket },
      // info: the pipeline logs "restored from checkpoint" with the restored position and the replay's end
      logLevel: 'info',
    },
    {
      // Shorter than any replay: a replayed effect the pipeline published again would be stored again, so
      // "no duplicates" is the pipeline's read-back at work, not the broker's Msg-Id window.
      streams: { duplicateWindowMs: 1000 },
      // acks are held until a checkpoint covers them: room for two intervals at the rate, and an ack wait
      // that outlasts three intervals (the config refuses less)
      consumer: {
        maxAckPending: Math.max(100_000, plan.rate * (plan.intervalMs / 1000) * 2),
        ackWaitMs: Math.max(30_000, plan.intervalMs * 3),
      },
    },
  );
}

/** A supervised pipeline and what its stdout said: every (re)start's pid and admin port, every restore. */
interface Tracked {
  label: string;
  names: RunNames;
  bucket: string;
  handle: PipelineHandle;
  readies: { atMs: number; pid: number; admin: number }[];
  restores: { atMs: number; checkpoint: number; position: number; replayUntil: number }[];
  /** the pipeline's warnings and errors, and its "caught up after restore" lines, with their arrival time */
  events: { atMs: number; line: string }[];
  current(): { pid: number; admin: number };
}

async function startTracked(
  ctx: ScenarioContext,
  label: string,
  prefix: string,
  plan: Plan,
): Promise<Tracked> {
  const names = runNames(prefix);
  const bucket = `${names.tag}_ckpt`;
  const file = writeConfig(ctx.repoRoot, names, bucket, plan);
  const readies: Tracked['readies'] = [];
  const restores: Tracked['restores'] = [];
  const events: Tracked['events'] = [];
  const onLine = (l: string): void => {
    if (!l.startsWith('{')) return;
    if (/"level":(4|5|6)\d/.test(l) || l.includes('"caught up after restore"'))
      events.push({ atMs: Date.now(), line: l.slice(0, 400) });
    if (!l.includes('"pipeline ready"') && !l.includes('"restored from checkpoint"')) return;
    try {
      const j = JSON.parse(l) as Record<string, unknown>;
      if (j['msg'] === 'pipeline ready' && j['component'] === 'stream-supervisor')
        readies.push({ atMs: Date.now(), pid: Number(j['pid']), admin: Number(j['admin']) });
      else if (j['msg'] === 'restored from checkpoint')
        restores.push({
          atMs: Date.now(),
          checkpoint: Number(j['checkpoint']),
          position: Number(j['position']),
          replayUntil: Number(j['replayUntil']),
        });
    } catch {
      // a line that only looked like JSON
    }
  };
  ctx.log(`${label}: starting pipeline (${names.tag}, checkpoint every ${plan.intervalMs} ms)`);
  const handle = await startPipeline(ctx.repoRoot, label, file, 90_000, onLine);
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
  // the ready line that resolved startPipeline went through onLine first
  return {
    label,
    names,
    bucket,
    handle,
    readies,
    restores,
    events,
    current: () => {
      const r = readies[readies.length - 1]!;
      return { pid: r.pid, admin: r.admin };
    },
  };
}

interface ChaosHealth {
  consumer: { pending: number; ack_pending: number };
  checkpoint?: { last_id: number | null; position: number | null; age_s: number | null; held_acks: number };
  counts: Record<string, number>;
}

async function health(port: number, timeoutMs = 3000): Promise<ChaosHealth> {
  const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(timeoutMs) });
  return (await res.json()) as ChaosHealth;
}

async function metrics(port: number): Promise<Map<string, number>> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(3000) });
  return parseProm(await res.text());
}

interface LagPoint {
  tMs: number;
  /** stored − processed (checkpoint position + held acks); while down: stored − ack floor */
  value: number;
  up: boolean;
  /** checkpoint position + held acks (only while up) */
  processed?: number;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * Samples one pipeline's unprocessed lag every `everyMs`, and its checkpoint sizes (by position). Processed
 * is kept monotone per process: while a checkpoint is being written its held acks are handed to it and the
 * completed position has not moved yet, so position + held dips for that moment.
 */
function sampleLag(
  nats: NatsHandle,
  t: Tracked,
  everyMs: number,
): { points: LagPoint[]; sizes: Map<number, number>; stalls: () => number; stop(): void } {
  const points: LagPoint[] = [];
  const sizes = new Map<number, number>();
  let stopped = false;
  let busy = false;
  let tick = 0;
  let stalls = 0;
  let seen = { pid: 0, processed: 0 };
  const timer = setInterval(() => {
    if (stopped || busy) return;
    busy = true;
    tick++;
    void (async () => {
      const seq = await lastSeq(nats, t.names.events);
      const tMs = Date.now();
      const { admin, pid } = t.current();
      const h = await health(admin, 1500).catch(() => undefined);
      if (h?.checkpoint) {
        const processed = processedCount(
          h.checkpoint.position ?? 0,
          h.checkpoint.held_acks,
          seen.pid === pid ? seen.processed : undefined,
        );
        seen = { pid, processed };
        points.push({ tMs, value: unprocessedLag(seq, processed), up: true, processed });
      } else {
        // down (killed, restarting) or not answering /health within 1.5 s: what the broker still holds unacked
        if (alive(pid)) stalls++;
        const floor = await ackFloor(nats, t.names.events, t.names.durable);
        if (floor !== undefined) points.push({ tMs, value: Math.max(0, seq - floor), up: false });
      }
      if (h && tick % 2 === 0) {
        const m = await metrics(admin).catch(() => undefined);
        const pos = m && promValue(m, 'streaminfer_stream_checkpoint_position');
        const bytes = m && promValue(m, 'streaminfer_stream_checkpoint_bytes');
        if (pos !== undefined && bytes !== undefined && bytes > 0) sizes.set(pos, bytes);
      }
    })()
      .catch(() => undefined)
      .finally(() => {
        busy = false;
      });
  }, everyMs);
  return {
    points,
    sizes,
    stalls: () => stalls,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}

interface KillRecord {
  n: number;
  killAtMs: number;
  pid: number;
  /** from /health just before the kill */
  sinceCheckpointS: number | undefined;
  checkpointPositionAtKill: number | undefined;
  heldAtKill: number | undefined;
  /** messages the killed process received (its counts.received: started, including those in flight) */
  receivedByProcess: number | undefined;
  /** checkpoint position + held acks: what the killed process had processed */
  processedAtKill: number | undefined;
  storedAtKill: number;
  readyAtMs?: number;
  restore?: { checkpoint: number; position: number; replayUntil: number };
  replay?: ReplayArithmetic;
  /** events/s the killed process processed over the last (up to) 5 s before the kill, and the replay expected at it */
  processingRate?: number;
  /** when the killed process became ready */
  upSinceMs?: number;
  expectedAtProcessingRate?: number;
  /** the new process's counters, scraped before the next kill or at the end */
  replayedEventsTotal?: number;
  replayDeduplicated?: number;
  pipelineRecoveryS?: number;
  restoreS?: number;
  /** first time after the restart the unprocessed lag stayed below rate × 0.5 s */
  caughtUpAtMs?: number;
  freshnessRecovery?: FreshnessSummary;
  referenceFreshnessRecovery?: FreshnessSummary;
}

/** Wait until the pipeline's last completed checkpoint covers every stored event. */
async function waitCovered(nats: NatsHandle, t: Tracked, timeoutMs: number): Promise<boolean> {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    const seq = await lastSeq(nats, t.names.events);
    const h = await health(t.current().admin).catch(() => undefined);
    if (h?.checkpoint && (h.checkpoint.position ?? 0) >= seq && seq > 0) return true;
    await sleep(500);
  }
  return false;
}

const ms = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : fmt(Math.round(v));
const s1 = (v: number | undefined): string => (v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(1));
const fr = (f: FreshnessSummary | undefined): string =>
  !f || f.count === 0 ? '–' : `${ms(f.p50)} / ${ms(f.p95)} / ${ms(f.p99)} (${fmt(f.count)})`;

function firstPredictions(list: readonly OutputRecord[]): FirstPrediction[] {
  return list
    .filter((p) => p.revision === 0 && Number.isFinite(p.eventMs))
    .map((p) => ({ storedMs: p.storedMs, eventMs: p.eventMs }));
}

export const streamChaos: Scenario = {
  name: 'stream-chaos',
  description:
    '`streaminfer stream` with checkpoints under kill -9: one live simulation published to a reference and a ' +
    'victim pipeline (their own streams, checkpoints on, one partition); the victim’s pipeline process is ' +
    'SIGKILLed at a fixed period and restarted by its supervisor. Replay span vs (time since checkpoint × rate), ' +
    'recovery time, freshness during recovery, checkpoint duration and size; duplicates, losses and value ' +
    'mismatches against the reference, decision id by decision id.',
  async run(ctx) {
    const plan = ctx.quick ? QUICK : FULL;
    const runs: RunRecord[] = [];
    const notes: string[] = [];
    const charts: Chart[] = [];
    const ratios: Ratio[] = [];
    const md: string[] = [];
    const data: Record<string, unknown> = { plan, workload: WORKLOAD };
    let nats: NatsHandle;
    try {
      nats = await connectNats({ servers: natsUrl(), name: 'streaminfer-bench-chaos' });
    } catch (e) {
      throw new Error(`the stream-chaos scenario needs NATS JetStream at ${natsUrl()}: ${errText(e)}`);
    }
    const tracked: Tracked[] = [];
    const samplers: ReturnType<typeof sampleLag>[] = [];
    try {
      const ref = await startTracked(ctx, 'reference', 'cr', plan);
      tracked.push(ref);
      const victim = await startTracked(ctx, 'victim', 'cv', plan);
      tracked.push(victim);
      const refLag = sampleLag(nats, ref, 500);
      const vicLag = sampleLag(nats, victim, 500);
      samplers.push(refLag, vicLag);

      ctx.log(
        `feed: ${plan.rate} ev/s for ${plan.durationS} s to both; kill -9 the victim every ${plan.killEveryS} s`,
      );
      const feed = startChaosFeed(nats, {
        rate: plan.rate,
        durationMs: plan.durationS * 1000,
        rampMs: plan.rampS * 1000,
        seed: WORKLOAD.seed,
        prefixes: [`${ref.names.tag}.delivery.events`, `${victim.names.tag}.delivery.events`],
        partitions: 1,
        disorderMs: WORKLOAD.disorderMs,
        duplicateFraction: WORKLOAD.duplicateFraction,
      });
      const feedStart = Date.now();
      const feedEnd = feedStart + plan.durationS * 1000;
      const kills: KillRecord[] = [];
      // the checkpoint-duration histograms of every victim process (each restart starts from zero)
      const victimHists: PromHistogram[] = [];
      const scrapeVictim = async (): Promise<Map<string, number> | undefined> =>
        metrics(victim.current().admin).catch(() => undefined);
      const absorb = (m: Map<string, number> | undefined, k: KillRecord | undefined): void => {
        if (!m) return;
        const h = promHistogram(m, 'streaminfer_stream_checkpoint_duration_seconds');
        if (h) victimHists.push(h);
        if (k) {
          k.replayedEventsTotal = promValue(m, 'streaminfer_stream_replayed_events_total');
          k.replayDeduplicated = promValue(m, 'streaminfer_stream_replay_deduplicated_effects_total');
          const rec = promValue(m, 'streaminfer_stream_recovery_seconds');
          if (rec !== undefined && rec > 0) k.pipelineRecoveryS = rec;
          k.restoreS = promValue(m, 'streaminfer_stream_restore_duration_seconds');
        }
      };

      for (let n = 1; ; n++) {
        const at = feedStart + n * plan.killEveryS * 1000;
        if (at > feedEnd - plan.lastKillBeforeEndS * 1000) break;
        await sleep(at - Date.now());
        // the previous restart must be up (ready and answering) before the next kill
        const readyBefore = victim.readies.length;
        const h = await health(victim.current().admin).catch(() => undefined);
        absorb(await scrapeVictim(), kills[kills.length - 1]);
        const stored = await lastSeq(nats, victim.names.events);
        const { pid } = victim.current();
        const getAt = Date.now();
        try {
          process.kill(pid, 'SIGKILL');
        } catch (e) {
          ctx.log(`kill ${n}: pid ${pid} ${errText(e)}`);
          continue;
        }
        const killAtMs = Date.now();
        const ck = h?.checkpoint;
        const k: KillRecord = {
          n,
          killAtMs,
          pid,
          sinceCheckpointS: ck?.age_s == null ? undefined : ck.age_s + (killAtMs - getAt) / 1000,
          checkpointPositionAtKill: ck?.position ?? undefined,
          heldAtKill: ck?.held_acks,
          // the larger of: the checkpoint's position + held acks (low while a checkpoint is being written: its
          // acks are handed over before its position counts) and where this process started + what it received
          processedAtKill: ck
            ? Math.max(
                (ck.position ?? 0) + ck.held_acks,
                (kills[kills.length - 1]?.restore?.position ?? 0) + (h?.counts['received'] ?? 0),
              )
            : undefined,
          receivedByProcess: h?.counts['received'],
          storedAtKill: stored,
          upSinceMs: victim.readies[victim.readies.length - 1]!.atMs,
        };
        kills.push(k);
        ctx.log(
          `kill ${n}: pid ${pid} at ${((killAtMs - feedStart) / 1000).toFixed(1)} s, ` +
            `${s1(k.sinceCheckpointS)} s after checkpoint ${ck?.last_id ?? '–'} (position ${ck?.position ?? '–'}, ${ck?.held_acks ?? '–'} held)`,
        );
        const t0 = Date.now();
        while (victim.readies.length === readyBefore && Date.now() - t0 < 60_000) await sleep(50);
        if (victim.readies.length === readyBefore) throw new Error(`kill ${n}: no restart within 60 s`);
        k.readyAtMs = victim.readies[victim.readies.length - 1]!.atMs;
        const restore = victim.restores[victim.restores.length - 1];
        if (restore && restore.atMs >= killAtMs) {
          k.restore = {
            checkpoint: restore.checkpoint,
            position: restore.position,
            replayUntil: restore.replayUntil,
          };
          if (k.processedAtKill !== undefined && k.sinceCheckpointS !== undefined)
            k.replay = replayArithmetic(k.sinceCheckpointS, plan.rate, k.processedAtKill, restore.position);
        }
        ctx.log(
          `kill ${n}: restarted in ${((k.readyAtMs - killAtMs) / 1000).toFixed(2)} s, restored position ` +
            `${k.restore?.position ?? '–'} (replay until ${k.restore?.replayUntil ?? '–'})`,
        );
      }
      const fed = await feed.done;
      ctx.log(
        `feed: ${fmt(fed.records)} records at ${fed.rateActual} ev/s; stored ${fed.stored.join(' / ')}, failed ${fed.failed}`,
      );
      ctx.log('waiting for both pipelines to checkpoint every stored event');
      const [refCovered, vicCovered] = await Promise.all([
        waitCovered(nats, ref, plan.catchUpTimeoutMs),
        waitCovered(nats, victim, plan.catchUpTimeoutMs),
      ]);
      absorb(await scrapeVictim(), kills[kills.length - 1]);
      const refMetrics = await metrics(ref.current().admin).catch(() => undefined);
      refLag.stop();
      vicLag.stop();

      // ---- read back and compare ----
      const refOut = await readOutputs(
        nats,
        ref.names.predictions,
        `${ref.names.tag}.delivery.predictions.>`,
      );
      const vicOut = await readOutputs(
        nats,
        victim.names.predictions,
        `${victim.names.tag}.delivery.predictions.>`,
      );
      const cmp: OutputComparison = compareOutputs(refOut, vicOut);
      const vicFirst = firstPredictions(vicOut);
      const refFirst = firstPredictions(refOut);
      const threshold = plan.rate * 0.5;
      for (const k of kills) {
        const from = k.killAtMs - Math.min(5, Math.max(1, k.sinceCheckpointS ?? 5)) * 1000;
        const w = vicLag.points.filter(
          (p) => p.up && p.processed !== undefined && p.tMs >= from && p.tMs < k.killAtMs,
        );
        const r = w.length >= 2 ? slope(w.map((p) => [p.tMs / 1000, p.processed!] as const)) : undefined;
        if (r !== undefined && r >= 0) {
          k.processingRate = r;
          // only when the killed process took that checkpoint itself (else the span also holds the previous
          // process's replay and the downtime)
          const up = (k.killAtMs - (k.upSinceMs ?? 0)) / 1000;
          if (k.sinceCheckpointS !== undefined && k.sinceCheckpointS <= up)
            k.expectedAtProcessingRate = r * k.sinceCheckpointS;
        }
      }
      const windows: [number, number][] = [];
      for (const [i, k] of kills.entries()) {
        const next = kills[i + 1]?.killAtMs ?? Number.POSITIVE_INFINITY;
        const caught = firstBelow(
          vicLag.points.filter((p) => p.up),
          k.readyAtMs ?? k.killAtMs,
          threshold,
        );
        if (caught !== undefined && caught < next) k.caughtUpAtMs = caught;
        const end = k.caughtUpAtMs ?? Math.min(next, feedEnd);
        windows.push([k.killAtMs, end]);
        k.freshnessRecovery = freshnessOf(vicFirst.filter((p) => p.eventMs >= k.killAtMs && p.eventMs < end));
        k.referenceFreshnessRecovery = freshnessOf(
          refFirst.filter((p) => p.eventMs >= k.killAtMs && p.eventMs < end),
        );
      }
      const steadyFrom = feedStart + (plan.rampS + 4) * 1000;
      const vSplit = splitByWindows(vicFirst, windows, steadyFrom, feedEnd);
      const rSplit = splitByWindows(refFirst, windows, steadyFrom, feedEnd);
      const fresh = {
        victimSteady: freshnessOf(vSplit.outside),
        victimRecovery: freshnessOf(vSplit.inside),
        referenceSteady: freshnessOf(rSplit.outside),
        referenceRecovery: freshnessOf(rSplit.inside),
      };

      // checkpoint duration (all victim processes' histograms) and size (sampled gauges)
      const victimHist = victimHists.reduce<PromHistogram | undefined>(
        (acc, h) =>
          acc
            ? {
                buckets: acc.buckets.map(([le, c], i) => [le, c + (h.buckets[i]?.[1] ?? 0)]),
                count: acc.count + h.count,
                sum: acc.sum + h.sum,
              }
            : h,
        undefined,
      );
      const refHist = refMetrics
        ? histogramDelta(
            promHistogram(refMetrics, 'streaminfer_stream_checkpoint_duration_seconds')!,
            undefined,
          )
        : undefined;
      const sizeStats = (m: Map<number, number>) => {
        const xs = [...m.values()].sort((a, b) => a - b);
        return {
          count: xs.length,
          p50: xs.length ? xs[Math.ceil(xs.length / 2) - 1]! : Number.NaN,
          max: xs.length ? xs[xs.length - 1]! : Number.NaN,
        };
      };
      const ckpt = {
        victim: {
          count: victimHist?.count ?? 0,
          meanMs: victimHist && victimHist.count ? (victimHist.sum / victimHist.count) * 1000 : Number.NaN,
          p50: victimHist ? histogramQuantile(victimHist, 0.5) : undefined,
          p99: victimHist ? histogramQuantile(victimHist, 0.99) : undefined,
          max: victimHist ? histogramQuantile(victimHist, 1) : undefined,
          size: sizeStats(vicLag.sizes),
        },
        reference: {
          count: refHist?.count ?? 0,
          meanMs: refHist && refHist.count ? (refHist.sum / refHist.count) * 1000 : Number.NaN,
          p50: refHist ? histogramQuantile(refHist, 0.5) : undefined,
          p99: refHist ? histogramQuantile(refHist, 0.99) : undefined,
          max: refHist ? histogramQuantile(refHist, 1) : undefined,
          size: sizeStats(refLag.sizes),
          failures: refMetrics
            ? promValue(refMetrics, 'streaminfer_stream_checkpoint_failures_total')
            : undefined,
        },
      };
      const correct =
        cmp.duplicates.length === 0 &&
        cmp.lost.length === 0 &&
        cmp.extra.length === 0 &&
        cmp.mismatches.length === 0 &&
        cmp.msgIdMismatches === 0 &&
        cmp.referenceDuplicates.length === 0 &&
        cmp.referenceCount > 0;

      // ---- the report ----
      const rel = (t: number): number => (t - feedStart) / 1000;
      md.push(
        '### Setup',
        '',
        `${fmt(fed.records)} records (${fmt(fed.stored[0])} stored in each event stream; seed ${WORKLOAD.seed}, ` +
          `disorder ${WORKLOAD.disorderMs / 1000} s, ${WORKLOAD.duplicateFraction * 100} % duplicates) published live at ` +
          `${fmt(plan.rate)} ev/s (actual ${fmt(fed.rateActual)}) for ${plan.durationS} s to two pipelines on their own ` +
          `streams, the same records in the same order. Both: shipped deploy/pipeline.json, one partition, checkpoint ` +
          `every ${plan.intervalMs / 1000} s, maxAckPending ${fmt(Math.max(100_000, plan.rate * (plan.intervalMs / 1000) * 2))}, ` +
          'output duplicate window 1 s (shorter than any replay: the broker cannot hide a republished effect). ' +
          `The victim's pipeline process gets SIGKILL every ${plan.killEveryS} s (${kills.length} kills); its supervisor restarts it.`,
        '',
      );
      md.push('### Per kill', '');
      md.push(
        markdownTable(
          [
            '#',
            'kill at s',
            'kill → ready s',
            'since checkpoint s',
            'restored position',
            'processed at kill',
            'replayed (processed − restored)',
            'expected (since × rate)',
            'measured / expected',
            'processing ev/s before the kill',
            'expected at that rate',
            '_replayed_events_total (incl. downtime)',
            'backlog of the downtime',
            'effects not republished',
            'ready → caught up s',
            'kill → caught up s',
            'pipeline _recovery_seconds',
            'restore s',
            'fresh p50 / p95 / p99 ms in recovery (victim)',
            'same events, reference',
          ],
          kills.map((k) => [
            k.n,
            s1(rel(k.killAtMs)),
            k.readyAtMs === undefined ? '–' : ((k.readyAtMs - k.killAtMs) / 1000).toFixed(2),
            s1(k.sinceCheckpointS),
            fmt(k.restore?.position),
            fmt(k.processedAtKill),
            fmt(k.replay?.measured),
            fmt(k.replay && Math.round(k.replay.expected)),
            k.replay?.ratio === undefined ? '–' : k.replay.ratio.toFixed(2),
            fmt(k.processingRate && Math.round(k.processingRate)),
            fmt(k.expectedAtProcessingRate && Math.round(k.expectedAtProcessingRate)),
            fmt(k.replayedEventsTotal),
            k.restore ? fmt(Math.max(0, k.restore.replayUntil - k.storedAtKill)) : '–',
            fmt(k.replayDeduplicated),
            k.caughtUpAtMs === undefined || k.readyAtMs === undefined
              ? '–'
              : ((k.caughtUpAtMs - k.readyAtMs) / 1000).toFixed(1),
            k.caughtUpAtMs === undefined ? '–' : ((k.caughtUpAtMs - k.killAtMs) / 1000).toFixed(1),
            k.pipelineRecoveryS === undefined ? '–' : k.pipelineRecoveryS.toFixed(1),
            k.restoreS === undefined ? '–' : k.restoreS.toFixed(2),
            fr(k.freshnessRecovery),
            fr(k.referenceFreshnessRecovery),
          ]),
        ),
        '',
        'Replayed = what the killed process had processed (the larger of its last checkpoint’s position + the acks it ' +
          'held, and its start position + the messages it received — the first is low while a checkpoint is being ' +
          'written) − the position the new process restored: the events done twice. The arithmetic: the replay is the time since the ' +
          `last completed checkpoint × the rate (${fmt(plan.rate)} ev/s), at most interval × rate = ` +
          `${fmt((plan.intervalMs / 1000) * plan.rate)} — when the pipeline keeps up with the feed; a pipeline still behind ` +
          '(catching up after the previous kill) processes at its capacity instead, so the replay is also given at the ' +
          'processing rate measured over the seconds before the kill (slope of processed, /health every 0.5 s). ' +
          'A time since checkpoint above the interval means the process completed no checkpoint since its restart. ' +
          'The pipeline’s `checkpoint.age_s` counts from a checkpoint’s completion (from its barrier for a restored ' +
          'one), but its position is taken at the barrier: the replay also covers that checkpoint’s own duration, and ' +
          'a checkpoint already under way at the kill (its held acks handed over, not yet covered) is replayed too — ' +
          'so with checkpoints as long as the interval, measured exceeds (age × rate). ' +
          `\`_replayed_events_total\` counts every message up to the ` +
          'stream’s end at the restore, so it adds what was published while the process was down. Caught up = the ' +
          `unprocessed lag (stored − processed) below rate × 0.5 s = ${fmt(threshold)} on two samples 0.5 s apart; ` +
          'the pipeline’s own `_recovery_seconds` runs from its process start to its replay done and nothing pending. ' +
          'Freshness in recovery: first predictions of events whose event time lies between the kill and caught up.',
        '',
      );
      md.push(
        '### Checkpoints',
        '',
        markdownTable(
          [
            'pipeline',
            'checkpoints',
            'duration p50 (bucket ≤)',
            'p99 (bucket ≤)',
            'max (bucket ≤)',
            'mean ms',
            'size p50',
            'size max',
            'sizes seen',
          ],
          (['victim', 'reference'] as const).map((who) => {
            const c = ckpt[who];
            const b = (q: { value: number; beyond: boolean } | undefined): string =>
              !q || !Number.isFinite(q.value)
                ? '–'
                : `${q.beyond ? '>' : ''}${fmt(Math.round(q.value * 1000))} ms`;
            return [
              who,
              fmt(c.count),
              b(c.p50),
              b(c.p99),
              b(c.max),
              ms(c.meanMs),
              `${fmt(Math.round(c.size.p50 / 1024))} KiB`,
              `${fmt(Math.round(c.size.max / 1024))} KiB`,
              fmt(c.size.count),
            ];
          }),
        ),
        '',
        'Duration from `streaminfer_stream_checkpoint_duration_seconds` (barrier closed → pointer written; the ' +
          'histogram’s buckets bound it), summed over every victim process; sizes from `_checkpoint_bytes`, sampled each second.',
        '',
      );
      md.push(
        '### Correctness: victim vs reference, decision by decision',
        '',
        markdownTable(
          ['figure', 'value', 'must be'],
          [
            [
              'predictions in the reference / victim output',
              `${fmt(cmp.referenceCount)} / ${fmt(cmp.victimCount)}`,
              'equal',
            ],
            ['duplicates (a decision id twice in the victim)', fmt(cmp.duplicates.length), '0'],
            ['lost (reference decision ids missing in the victim)', fmt(cmp.lost.length), '0'],
            ['extra (victim decision ids the reference lacks)', fmt(cmp.extra.length), '0'],
            ['value mismatches (same decision id, other risk)', fmt(cmp.mismatches.length), '0'],
            ['Msg-Id ≠ decision id', fmt(cmp.msgIdMismatches), '0'],
            ['duplicates in the reference itself', fmt(cmp.referenceDuplicates.length), '0'],
            [
              'both checkpoints cover every stored event at the end',
              `${refCovered && vicCovered ? 'yes' : 'NO'}`,
              'yes',
            ],
          ],
        ),
        '',
        correct
          ? '**Exactly once under kill -9: PASS.**'
          : `**FAIL**: ${[
              cmp.duplicates.length ? `duplicates e.g. ${cmp.duplicates.slice(0, 3).join(', ')}` : '',
              cmp.lost.length ? `lost e.g. ${cmp.lost.slice(0, 3).join(', ')}` : '',
              cmp.extra.length ? `extra e.g. ${cmp.extra.slice(0, 3).join(', ')}` : '',
              cmp.mismatches.length
                ? `mismatches e.g. ${cmp.mismatches
                    .slice(0, 3)
                    .map((x) => `${x.id} ${x.reference}≠${x.victim}`)
                    .join(', ')}`
                : '',
            ]
              .filter(Boolean)
              .join('; ')}`,
        '',
      );
      md.push(
        '### Freshness: steady vs recovery',
        '',
        markdownTable(
          ['pipeline', 'steady p50 / p95 / p99 ms (events)', 'recovery windows p50 / p95 / p99 ms (events)'],
          [
            ['victim', fr(fresh.victimSteady), fr(fresh.victimRecovery)],
            ['reference (never killed)', fr(fresh.referenceSteady), fr(fresh.referenceRecovery)],
          ],
        ),
        '',
        'Freshness = a first prediction’s broker-stored time − its event time, for events after the ramp + 4 s. ' +
          'A replayed event’s prediction is not published again, so its stored time is the first one: recovery ' +
          'freshness is that of the events that arrived while the victim was down or catching up.',
        '',
      );
      // What the pipelines logged at warn/error (and each "caught up after restore"), times from the feed start.
      const logOf = (t: Tracked) =>
        t.events.map((e) => ({ atS: Math.round(rel(e.atMs) * 10) / 10, line: e.line }));
      const vicLog = logOf(victim);
      const refLog = logOf(ref);
      const shown = (list: { atS: number; line: string }[]): string[] => {
        // one line per distinct message, with how often it came
        const byMsg = new Map<string, { first: number; n: number; line: string }>();
        for (const e of list) {
          const msg = /"msg":"([^"]*)"/.exec(e.line)?.[1] ?? e.line.slice(0, 80);
          const b = byMsg.get(msg);
          if (b) b.n++;
          else byMsg.set(msg, { first: e.atS, n: 1, line: e.line });
        }
        return [...byMsg.values()].map(
          (b) => `- ×${b.n}, first at ${b.first} s: \`${b.line.slice(0, 300)}\``,
        );
      };
      md.push(
        '### What the pipelines logged (warn and above, and recoveries)',
        '',
        `/health samples (every 0.5 s, 1.5 s timeout) a live pipeline process did not answer: victim ` +
          `${vicLag.stalls()}, reference ${refLag.stalls()} — its event loop was busy (a checkpoint serialising its ` +
          'state, a replay at full speed); the lag chart shows stored − ack floor for those samples.',
        '',
        `victim (${vicLog.length} lines):`,
        '',
        ...(vicLog.length ? shown(vicLog) : ['- nothing']),
        '',
        `reference (${refLog.length} lines):`,
        '',
        ...(refLog.length ? shown(refLog) : ['- nothing']),
        '',
      );
      data['healthStalls'] = { victim: vicLag.stalls(), reference: refLag.stalls() };
      data['pipelineLog'] = { victim: vicLog.slice(0, 200), reference: refLog.slice(0, 200) };
      const m = meaning(plan, kills, cmp, correct, fresh, {
        ...ckpt.reference,
        sizes: [...refLag.sizes.entries()],
      });
      md.push('### What it means', '', m, '');
      notes.push(m);
      notes.push(
        `This host has ${ctx.cores} cores shared by the feed, nats-server and two pipelines: recovery times are the ` +
          'shared machine’s; the replay arithmetic and the correctness figures do not depend on it.',
      );

      const markers = kills.map((k) => ({ x: rel(k.killAtMs), label: `kill ${k.n}` }));
      charts.push({
        file: 'stream-chaos-lag.svg',
        title: 'stream-chaos: unprocessed lag over time, kills marked',
        svg: lineChart({
          title: `stream-chaos: stored − processed events, ${fmt(plan.rate)} ev/s, kill -9 every ${plan.killEveryS} s`,
          xLabel: 'seconds since the feed started',
          yLabel: 'events',
          series: [
            { name: 'victim', points: vicLag.points.map((p) => [rel(p.tMs), p.value] as [number, number]) },
            {
              name: 'reference',
              points: refLag.points.map((p) => [rel(p.tMs), p.value] as [number, number]),
            },
          ],
          markers,
        }),
      });
      charts.push({
        file: 'stream-chaos-freshness.svg',
        title: 'stream-chaos: freshness p95 per second, kills marked',
        svg: lineChart({
          title: 'stream-chaos: freshness p95 per second of stored time (ms)',
          xLabel: 'seconds since the feed started',
          yLabel: 'ms',
          series: [
            {
              name: 'victim',
              points: perSecondP95(vicFirst, feedStart).filter(([s]) => s >= 0),
            },
            {
              name: 'reference',
              points: perSecondP95(refFirst, feedStart).filter(([s]) => s >= 0),
            },
          ],
          markers,
        }),
      });
      ratios.push({
        name: 'replay measured / (time since checkpoint × rate), mean over kills',
        value: (() => {
          const rs = kills.map((k) => k.replay?.ratio).filter((r): r is number => r !== undefined);
          return rs.length ? rs.reduce((a, b) => a + b, 0) / rs.length : undefined;
        })(),
        note: 'about 1 expected (the rate is the feed’s, the ramp aside)',
      });
      ratios.push({
        name: 'freshness p95 recovery / steady (victim)',
        value:
          fresh.victimSteady.count && fresh.victimRecovery.count
            ? fresh.victimRecovery.p95 / Math.max(1, fresh.victimSteady.p95)
            : undefined,
      });
      for (const [who, t] of [
        ['reference', ref],
        ['victim', victim],
      ] as const)
        runs.push({
          label: who,
          target: 'pipeline-checkpointed',
          server: { command: t.handle.command, env: {} },
          metrics: {
            rate_target: plan.rate,
            rate_actual: fed.rateActual,
            stored: fed.stored[who === 'reference' ? 0 : 1],
            predictions: who === 'reference' ? cmp.referenceCount : cmp.victimCount,
            restarts: t.readies.length - 1,
            ...(who === 'victim'
              ? {
                  kills: kills.length,
                  duplicates: cmp.duplicates.length,
                  lost: cmp.lost.length,
                  extra: cmp.extra.length,
                  mismatches: cmp.mismatches.length,
                  fresh_steady_p95_ms: fresh.victimSteady.p95,
                  fresh_recovery_p95_ms: fresh.victimRecovery.p95,
                  checkpoint_mean_ms: ckpt.victim.meanMs,
                  checkpoint_size_max_bytes: ckpt.victim.size.max,
                }
              : { fresh_steady_p95_ms: fresh.referenceSteady.p95 }),
          },
          ...(correct
            ? {}
            : { error: 'victim output differs from the reference (see the correctness table)' }),
        });
      data['feed'] = { ...fed, publishedAt: undefined };
      data['kills'] = kills.map((k) => ({ ...k, atS: rel(k.killAtMs) }));
      data['comparison'] = {
        ...cmp,
        duplicates: cmp.duplicates.slice(0, 50),
        lost: cmp.lost.slice(0, 50),
        extra: cmp.extra.slice(0, 50),
        mismatches: cmp.mismatches.slice(0, 50),
        referenceDuplicates: cmp.referenceDuplicates.slice(0, 50),
        counts: {
          duplicates: cmp.duplicates.length,
          lost: cmp.lost.length,
          extra: cmp.extra.length,
          mismatches: cmp.mismatches.length,
        },
      };
      data['correct'] = correct;
      data['freshness'] = fresh;
      data['checkpoints'] = {
        ...ckpt,
        sizesByPosition: { victim: [...vicLag.sizes.entries()], reference: [...refLag.sizes.entries()] },
      };
      data['covered'] = { reference: refCovered, victim: vicCovered };
      data['lag'] = {
        victim: vicLag.points.map((p) => [rel(p.tMs), p.value, p.up ? 1 : 0]),
        reference: refLag.points.map((p) => [rel(p.tMs), p.value]),
      };
    } finally {
      for (const s of samplers) s.stop();
      for (const t of tracked) {
        const exit = await t.handle.stop().catch(() => undefined);
        if (exit && (exit.killed || exit.code !== 0))
          notes.push(
            `${t.label}: supervisor exit code ${exit.code}, signal ${exit.signal}, killed ${exit.killed}`,
          );
      }
      killAllStreamProcs();
      for (const t of tracked) {
        await deleteRunStreams(nats, t.names);
        await deleteCheckpointBuckets(nats, t.bucket);
        const left = await leftovers(nats, t.names.tag).catch(() => []);
        if (left.length) notes.push(`left on the broker: ${left.join(', ')}`);
      }
      await nats.close().catch(() => undefined);
    }
    return {
      params: {
        rate: plan.rate,
        durationS: plan.durationS,
        killEveryS: plan.killEveryS,
        checkpointIntervalMs: plan.intervalMs,
        partitions: 1,
        config: 'deploy/pipeline.json (own names, admin port 0, checkpoint on, output duplicate window 1 s)',
        nats: natsUrl(),
      },
      runs,
      ratios,
      charts,
      notes,
      markdown: md.join('\n'),
      data,
    };
  },
};

function meaning(
  plan: Plan,
  kills: readonly KillRecord[],
  cmp: OutputComparison,
  correct: boolean,
  fresh: { victimSteady: FreshnessSummary; victimRecovery: FreshnessSummary },
  ck: { meanMs: number; size: { max: number }; sizes: [number, number][] },
): string {
  const parts: string[] = [];
  const intervalS = plan.intervalMs / 1000;
  parts.push(
    correct
      ? `${kills.length} kill -9 of the pipeline process left its output exactly equal to the failure-free run's: ` +
          `${fmt(cmp.victimCount)} predictions, none twice, none missing, every risk the same.`
      : `The victim's output is NOT the reference's: ${cmp.duplicates.length} duplicates, ${cmp.lost.length} lost, ` +
          `${cmp.extra.length} extra, ${cmp.mismatches.length} value mismatches.`,
  );
  // a kill whose process had completed a checkpoint of its own: the arithmetic applies as stated
  const own = kills.filter(
    (k) => k.replay && k.sinceCheckpointS !== undefined && k.sinceCheckpointS <= intervalS * 1.5,
  );
  const stale = kills.filter((k) => k.sinceCheckpointS !== undefined && k.sinceCheckpointS > intervalS * 1.5);
  if (own.length)
    parts.push(
      'Where the killed process had its own recent checkpoint, the replay was ' +
        own
          .map(
            (k) =>
              `${fmt(k.replay!.measured)} events for ${s1(k.replay!.sinceCheckpointS)} s since it (× ${fmt(plan.rate)} ev/s = ` +
              `${fmt(Math.round(k.replay!.expected))}; at the ${fmt(k.processingRate && Math.round(k.processingRate))} ev/s it ` +
              `was processing then: ${fmt(k.expectedAtProcessingRate && Math.round(k.expectedAtProcessingRate))})`,
          )
          .join('; ') +
        ': the replay is (time since the checkpoint) × the rate the pipeline was processing at — the feed rate when ' +
        `it keeps up — bounded by interval × rate (${fmt(intervalS * plan.rate)}) only while checkpoints complete within the interval.`,
    );
  if (stale.length)
    parts.push(
      `${stale.length} kill${stale.length > 1 ? 's' : ''} (${stale.map((k) => `#${k.n}`).join(', ')}) found no checkpoint ` +
        `completed since the restart before it (${stale.map((k) => `${s1(k.sinceCheckpointS)} s`).join(', ')} since the ` +
        `last one, interval ${intervalS} s): the restarted process, catching up at full speed, did not finish its first ` +
        'checkpoint before the next kill, so every restart went back to the same checkpoint ' +
        `(position ${fmt(stale[stale.length - 1]!.restore?.position)}) and the replay compounded ` +
        `(\`_replayed_events_total\` ${stale.map((k) => fmt(k.replayedEventsTotal)).join(' → ')}). Crashes more often than ` +
        '(restart + catch-up + one checkpoint) would commit no progress at all.',
    );
  const caught = kills.filter((k) => k.caughtUpAtMs !== undefined);
  const last = kills[kills.length - 1];
  if (caught.length)
    parts.push(
      `From kill to caught up took ${caught.map((k) => s1((k.caughtUpAtMs! - k.killAtMs) / 1000)).join(', ')} s ` +
        '(the supervisor’s backoff, the restart and restore, then the replay and the downtime’s backlog worked off ' +
        'at capacity − rate).',
    );
  else if (last?.pipelineRecoveryS !== undefined)
    parts.push(
      `No restart caught up before the next kill; the last one caught up ${s1(last.pipelineRecoveryS)} s after its ` +
        `process start (\`_recovery_seconds\`, ${fmt(last.replayedEventsTotal)} events replayed).`,
    );
  if (fresh.victimRecovery.count && fresh.victimSteady.count)
    parts.push(
      `Freshness p95 was ${ms(fresh.victimSteady.p95)} ms outside the recoveries and ${ms(fresh.victimRecovery.p95)} ms for ` +
        'events that arrived between a kill and its catch-up: a crash shows up as freshness, not as loss.',
    );
  if (Number.isFinite(ck.meanMs)) {
    const sorted = [...ck.sizes].sort((a, b) => a[0] - b[0]);
    const growth =
      sorted.length >= 2
        ? (sorted[sorted.length - 1]![1] - sorted[0]![1]) /
          Math.max(1, sorted[sorted.length - 1]![0] - sorted[0]![0])
        : undefined;
    parts.push(
      `A checkpoint of the never-killed reference took ${ms(ck.meanMs)} ms on average against a ${intervalS} s interval, and the state it writes ` +
        `(one JSON object, whole each time) reached ${fmt(Math.round(ck.size.max / 1024))} KiB` +
        (growth !== undefined && growth > 0
          ? `, growing about ${fmt(Math.round(growth))} bytes per input event (windows, histories and dedupe ids until ` +
            'their TTLs): the checkpoint cost grows with the state, not with the interval'
          : '') +
        '. Serialising it blocks the event loop (the /health stalls above), which is where the freshness p95 of ' +
        'the never-killed reference goes.',
    );
  }
  return parts.join(' ');
}
