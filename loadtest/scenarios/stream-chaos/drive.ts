/**
 * stream-chaos drive: both pipelines up (setup), then the live feed with a kill every killEveryS (drive):
 * each kill's record (partitions, time since their checkpoint, held acks), the restart or the takeover and a
 * fresh instance, and at the end both outputs read back.
 */

import { fmt } from '../../../scripts/markdown';
import { errText } from '../../harness/scenario-kit';
import type { ScenarioContext } from '../../harness/types';
import type { FreshnessSummary } from '../../pipeline/analysis';
import { connectNats, lastSeq, natsUrl } from '../../pipeline/broker';
import {
  counterDelta,
  type OutputRecord,
  promValue,
  type recoveryAfter,
} from '../../pipeline/chaos-analysis';
import { readOutputs } from '../../pipeline/chaos-broker';
import { type ChaosFeedSummary, startChaosFeed } from '../../pipeline/chaos-feed';
import {
  drained,
  instanceHealth,
  killProcess,
  killWhole,
  type StreamInstance,
  scrape,
} from '../../pipeline/instances';
import {
  addInstance,
  type ChaosResources,
  live,
  newPipeline,
  PARTITIONS,
  type Pipeline,
  type Plan,
  type Sampler,
  sleep,
  WORKLOAD,
} from './plan';
import { sampler } from './sampler';

/** A killed partition: where its checkpoint stood at the kill, and what the restore after it said. */
export interface KilledPartition {
  partition: number;
  sinceCheckpointS: number | undefined;
  checkpointId: number | undefined;
  checkpointPosition: number | undefined;
  /** acks held since that checkpoint: events processed and not yet covered — what a restore must replay */
  heldAtKill: number | undefined;
  /** the partition's share of the feed × the rate × sinceCheckpointS */
  expected: number | undefined;
  restore?: { atMs: number; by: string; position: number; replayUntil: number; checkpoint: number };
  caughtUp?: { atMs: number; by: string; seconds: number };
}

export interface KillRecord {
  n: number;
  kind: 'process' | 'instance';
  instance: string;
  pid: number;
  killAtMs: number;
  storedAtKill: number;
  partitions: KilledPartition[];
  /** process kill: the supervisor's next "pipeline ready" */
  readyAtMs?: number;
  /** whole instance: the survivor owns every partition; then a fresh instance joined and the shares balanced */
  takeoverAtMs?: number;
  freshStartedAtMs?: number;
  rebalancedAtMs?: number;
  freshInstance?: string;
  /** Σ over the victim's processes of `_replayed_events_total` from this kill to the next (or the end) */
  replayedEvents?: number;
  replayDeduplicated?: number;
  /** Σ over the killed partitions */
  heldTotal?: number;
  expectedTotal?: number;
  recovery?: ReturnType<typeof recoveryAfter>;
  freshnessRecovery?: FreshnessSummary;
  referenceFreshnessRecovery?: FreshnessSummary;
}

/** Every victim process's counters, by pid (each restarted process starts from zero). */
async function countersByPid(
  p: Pipeline,
): Promise<{ replayed: Map<number, number>; dedup: Map<number, number> }> {
  const replayed = new Map<number, number>();
  const dedup = new Map<number, number>();
  await Promise.all(
    live(p).map(async (inst) => {
      const { pid, admin } = inst.current();
      const m = await scrape(admin);
      if (!m) return;
      replayed.set(pid, promValue(m, 'streaminfer_stream_replayed_events_total') ?? 0);
      dedup.set(pid, promValue(m, 'streaminfer_stream_replay_deduplicated_effects_total') ?? 0);
    }),
  );
  return { replayed, dedup };
}

export async function waitFor(
  what: string,
  cond: () => Promise<boolean> | boolean,
  timeoutMs: number,
  p?: Pipeline,
): Promise<number> {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    if (await cond()) return Date.now();
    await sleep(250);
  }
  const state = p
    ? await Promise.all(
        live(p).map(async (i) => {
          const h = await instanceHealth(i.current().admin, 5000);
          const tail = i.handle
            .outputTail()
            .split('\n')
            .filter((l) => !l.includes('"checkpoint completed"'))
            .slice(-12)
            .join('\n');
          return `--- ${i.label} owned ${JSON.stringify(h?.instance)} partitions ${JSON.stringify(h?.partitions.map((x) => [x.partition, x.replaying, x.pending]))}\n${tail}`;
        }),
      )
    : [];
  throw new Error(`${what}: not within ${timeoutMs / 1000} s\n${state.join('\n')}`);
}

const owns = async (inst: StreamInstance, n: number): Promise<boolean> =>
  (await instanceHealth(inst.current().admin, 3000))?.instance.owned.length === n;

export const s1 = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(1);

/** The reference's and the victim's instances up, their partitions shared out, their samplers running. */
export interface ChaosSetup {
  ref: Pipeline;
  victim: Pipeline;
  /** the reference's one instance */
  refA: StreamInstance;
  /** the victim's two instances, killed in turn; a fresh instance takes the slot of one killed whole */
  slots: StreamInstance[];
  refS: Sampler;
  vicS: Sampler;
}

export async function setupChaos(ctx: ScenarioContext, plan: Plan, res: ChaosResources): Promise<ChaosSetup> {
  const ref = newPipeline(res, 'reference', 'cr');
  const victim = newPipeline(res, 'victim', 'cv');
  const [refA] = await Promise.all([
    addInstance(ctx, ref, 'ra', plan),
    addInstance(ctx, victim, 'va', plan),
    addInstance(ctx, victim, 'vb', plan),
  ]);
  const slots: StreamInstance[] = [victim.instances[0]!, victim.instances[1]!];
  await waitFor('the reference owns every partition', () => owns(refA!, PARTITIONS), 60_000);
  await waitFor(
    'the victim instances share the partitions 2/2',
    async () => (await owns(slots[0]!, 2)) && (await owns(slots[1]!, 2)),
    60_000,
    victim,
  );
  const refS = sampler(res.nats, ref, 1000);
  const vicS = sampler(res.nats, victim, 1000);
  res.samplers.push(refS, vicS);
  return { ref, victim, refA: refA!, slots, refS, vicS };
}

/** What the drive leaves for the analysis: the feed, the kills, and both outputs as the broker holds them. */
export interface ChaosRun extends ChaosSetup {
  fed: ChaosFeedSummary;
  feedStart: number;
  feedEnd: number;
  kills: KillRecord[];
  /** every partition durable drained at the end */
  refCovered: boolean;
  vicCovered: boolean;
  refMetrics: Map<string, number> | undefined;
  refOut: OutputRecord[];
  vicOut: OutputRecord[];
}

/** Seconds since the feed started. */
export const relS = (feedStart: number, t: number): number => (t - feedStart) / 1000;

/**
 * `_replayed_events_total` and `_replay_deduplicated_effects_total` per kill: the returned call closes the
 * latest kill's figures (the victim's counters' growth since the previous call) and starts the next.
 */
async function replayCounters(victim: Pipeline, kills: readonly KillRecord[]): Promise<() => Promise<void>> {
  let countersBefore = await countersByPid(victim);
  return async (): Promise<void> => {
    const now = await countersByPid(victim);
    const k = kills[kills.length - 1];
    if (k) {
      k.replayedEvents = counterDelta(countersBefore.replayed, now.replayed);
      k.replayDeduplicated = counterDelta(countersBefore.dedup, now.dedup);
    }
    countersBefore = now;
  };
}

/** What one kill needs from the drive. */
interface KillContext {
  ctx: ScenarioContext;
  plan: Plan;
  res: ChaosResources;
  s: ChaosSetup;
  feed: ReturnType<typeof startChaosFeed>;
  feedStart: number;
  closePrevious: () => Promise<void>;
  /** the next fresh instance's letter */
  nextId: number;
}

/** Kill n: the record of what it hit (undefined when the kill itself failed). */
async function killOne(
  kc: KillContext,
  n: number,
): Promise<{ k: KillRecord; slot: number; inst: StreamInstance; readiesBefore: number } | undefined> {
  const { ctx, plan, s } = kc;
  const slot = (n - 1) % 2;
  const inst = s.slots[slot]!;
  const whole = n === plan.wholeKill;
  const hAt = Date.now();
  const h = (await instanceHealth(inst.current().admin, 3000)) ?? s.vicS.last.get(inst.label)?.h;
  const readiesBefore = inst.readies.length;
  let pid: number;
  try {
    pid = whole ? killWhole(inst) : killProcess(inst);
  } catch (e) {
    ctx.log(`kill ${n}: ${inst.label} ${errText(e)}`);
    return undefined;
  }
  const killAtMs = Date.now();
  const stored = await lastSeq(kc.res.nats, s.victim.names.events);
  // the killed pid's counters are gone; the others' growth counts from here
  await kc.closePrevious();
  const published = kc.feed.perPartition();
  const total = published.reduce((a, b) => a + b, 0);
  const k: KillRecord = {
    n,
    kind: whole ? 'instance' : 'process',
    instance: inst.id,
    pid,
    killAtMs,
    storedAtKill: stored,
    partitions: (h?.instance.owned ?? []).map((partition) => {
      const ph = h!.partitions.find((x) => x.partition === partition);
      const ck = ph?.checkpoint;
      const since = ck?.age_s == null ? undefined : ck.age_s + (killAtMs - hAt) / 1000;
      const share = total > 0 ? published[partition]! / total : 1 / PARTITIONS;
      return {
        partition,
        sinceCheckpointS: since,
        checkpointId: ck?.last_id ?? undefined,
        checkpointPosition: ck?.position ?? undefined,
        heldAtKill: ck?.held_acks,
        expected: since === undefined ? undefined : since * plan.rate * share,
      };
    }),
  };
  return { k, slot, inst, readiesBefore };
}

/** After kill k: the supervisor's restart, or (whole instance) the survivor's takeover and a fresh instance. */
async function awaitRecovery(
  kc: KillContext,
  k: KillRecord,
  slot: number,
  inst: StreamInstance,
  readiesBefore: number,
): Promise<void> {
  const { ctx, plan, s } = kc;
  const { n, killAtMs } = k;
  if (k.kind === 'process') {
    k.readyAtMs = await waitFor(
      `kill ${n}: restart`,
      () => inst.readies.length > readiesBefore,
      60_000,
      s.victim,
    );
    ctx.log(`kill ${n}: restarted in ${((k.readyAtMs - killAtMs) / 1000).toFixed(2)} s`);
    return;
  }
  const survivor = s.slots[1 - slot]!;
  k.takeoverAtMs = await waitFor(
    'the survivor owns every partition',
    () => owns(survivor, PARTITIONS),
    plan.catchUpTimeoutMs,
    s.victim,
  );
  ctx.log(
    `kill ${n}: ${survivor.id} owns all ${PARTITIONS} partitions ${s1((k.takeoverAtMs - killAtMs) / 1000)} s after the kill`,
  );
  const id = `v${String.fromCharCode(kc.nextId++)}`;
  const fresh = await addInstance(ctx, s.victim, id, plan);
  k.freshInstance = id;
  k.freshStartedAtMs = fresh.readies[0]!.atMs;
  s.slots[slot] = fresh;
  k.rebalancedAtMs = await waitFor(
    'the fresh instance takes its share',
    async () => (await owns(fresh, 2)) && (await owns(survivor, 2)),
    plan.catchUpTimeoutMs,
    s.victim,
  );
  ctx.log(
    `kill ${n}: fresh instance ${id} owns 2 partitions ${s1((k.rebalancedAtMs - killAtMs) / 1000)} s after the kill`,
  );
}

/** The feed to both pipelines, a kill every killEveryS, then both drained and their outputs read back. */
export async function driveChaos(
  ctx: ScenarioContext,
  plan: Plan,
  res: ChaosResources,
  s: ChaosSetup,
): Promise<ChaosRun> {
  const { ref, victim } = s;
  const nats = res.nats;
  ctx.log(
    `feed: ${plan.rate} ev/s for ${plan.durationS} s to both; kill -9 a victim instance every ${plan.killEveryS} s ` +
      `(kill ${plan.wholeKill}: the whole instance)`,
  );
  // its own connection: the kill loop's and the samplers' requests must not queue behind its publishes
  res.feedNats = await connectNats({ servers: natsUrl(), name: 'streaminfer-bench-chaos-feed' });
  const feed = startChaosFeed(res.feedNats, {
    rate: plan.rate,
    durationMs: plan.durationS * 1000,
    rampMs: plan.rampS * 1000,
    seed: WORKLOAD.seed,
    prefixes: [`${ref.names.tag}.delivery.events`, `${victim.names.tag}.delivery.events`],
    partitions: PARTITIONS,
    disorderMs: WORKLOAD.disorderMs,
    duplicateFraction: WORKLOAD.duplicateFraction,
  });
  const feedStart = Date.now();
  const feedEnd = feedStart + plan.durationS * 1000;
  const kills: KillRecord[] = [];
  const closePrevious = await replayCounters(victim, kills);
  const kc: KillContext = { ctx, plan, res, s, feed, feedStart, closePrevious, nextId: 'c'.charCodeAt(0) };

  for (let n = 1; ; n++) {
    const at = feedStart + n * plan.killEveryS * 1000;
    if (at > feedEnd - plan.lastKillBeforeEndS * 1000) break;
    await sleep(at - Date.now());
    // a starved host runs the schedule late: no kill once the feed is (nearly) over
    if (Date.now() > feedEnd - plan.lastKillBeforeEndS * 1000) break;
    const hit = await killOne(kc, n);
    if (!hit) continue;
    const { k } = hit;
    kills.push(k);
    ctx.log(
      `kill ${n}: ${k.kind === 'instance' ? 'whole instance' : 'process'} ${k.instance} (pid ${k.pid}) at ${s1(relS(feedStart, k.killAtMs))} s, ` +
        `partitions ${k.partitions.map((x) => `p${x.partition} ${s1(x.sinceCheckpointS)} s after checkpoint ${x.checkpointId ?? '–'} (${x.heldAtKill ?? '–'} held)`).join(', ')}`,
    );
    await awaitRecovery(kc, k, hit.slot, hit.inst, hit.readiesBefore);
  }
  const fed = await feed.done;
  ctx.log(
    `feed: ${fmt(fed.records)} records at ${fed.rateActual} ev/s; stored ${fed.stored.join(' / ')}, failed ${fed.failed}`,
  );
  ctx.log('waiting for both pipelines to checkpoint every stored event (every partition durable drained)');
  const covered = await Promise.all(
    [ref, victim].map((p) =>
      waitFor(`${p.label} drained`, () => drained(nats, p.names, PARTITIONS), plan.catchUpTimeoutMs).then(
        () => true,
        () => false,
      ),
    ),
  );
  const [refCovered, vicCovered] = covered as [boolean, boolean];
  await closePrevious();
  const refMetrics = await scrape(s.refA.current().admin);
  s.refS.stop();
  s.vicS.stop();
  const refOut = await readOutputs(nats, ref.names.predictions, `${ref.names.tag}.delivery.predictions.>`);
  const vicOut = await readOutputs(
    nats,
    victim.names.predictions,
    `${victim.names.tag}.delivery.predictions.>`,
  );
  return { ...s, fed, feedStart, feedEnd, kills, refCovered, vicCovered, refMetrics, refOut, vicOut };
}
