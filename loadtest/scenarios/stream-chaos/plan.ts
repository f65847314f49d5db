/** stream-chaos setup: the plan (sizes), the workload, and the two pipelines with their instances. */

import type { ScenarioContext } from '../../harness/types';
import type { NatsHandle, RunNames } from '../../pipeline/broker';
import { runNames, writeRunConfig } from '../../pipeline/broker';
import type { CoverageSample } from '../../pipeline/chaos-analysis';
import { type InstanceHealth, type StreamInstance, startInstance } from '../../pipeline/instances';

/** One sample: the broker's per-partition backlog, and the partitions as the live instances report them. */
export interface Sample extends CoverageSample {
  pendingBy: (number | undefined)[];
  /** per live instance label: partitions it owns (undefined: did not answer) */
  owners: Record<string, number[] | undefined>;
}

export interface Sampler {
  samples: Sample[];
  last: Map<string, { tMs: number; pid: number; h: InstanceHealth }>;
  stalls: () => number;
  stop(): void;
}

export interface Plan {
  rate: number;
  durationS: number;
  rampS: number;
  killEveryS: number;
  /** which kill (1-based) takes the whole instance, supervisor included */
  wholeKill: number;
  intervalMs: number;
  leaseTtlMs: number;
  /** no kill closer than this to the feed's end (the last restart must still see events) */
  lastKillBeforeEndS: number;
  catchUpTimeoutMs: number;
}

export const PARTITIONS = 4;

// 450 ev/s × 240 s = 108,000 events, seven kills. Two pipelines (three instances), the feed and the broker
// share this host's two cores: the victim needs headroom above the rate to catch up between kills. At 750
// ev/s (1,500 published per second to the two pipelines) the feed reached 340 ev/s with 11,929 failed
// publishes and nats-server sat at 100% CPU: the host, not the pipeline, set the pace.
export const FULL: Plan = {
  rate: 450,
  durationS: 240,
  rampS: 5,
  killEveryS: 30,
  wholeKill: 2,
  intervalMs: 10_000,
  leaseTtlMs: 10_000,
  lastKillBeforeEndS: 5,
  catchUpTimeoutMs: 180_000,
};

// The lease TTL stays the shipped 10 s: an instance whose event loop a loaded host starves for longer than
// a short TTL loses its leases while alive (and the partitions thrash between instances).
export const QUICK: Plan = {
  rate: 400,
  durationS: 40,
  rampS: 3,
  killEveryS: 10,
  wholeKill: 2,
  intervalMs: 4_000,
  leaseTtlMs: 10_000,
  lastKillBeforeEndS: 1,
  catchUpTimeoutMs: 150_000,
};

export const WORKLOAD = { seed: 31, disorderMs: 2_000, duplicateFraction: 0.02 };

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** A pipeline: its names and buckets, and the instances that work its partitions. */
export interface Pipeline {
  label: string;
  names: RunNames;
  bucket: string;
  leaseBucket: string;
  instances: StreamInstance[];
}

function configFor(ctx: ScenarioContext, p: Pipeline, id: string, plan: Plan): string {
  return writeRunConfig(
    ctx.repoRoot,
    p.names,
    {
      partitions: PARTITIONS,
      instance: { id, leaseBucket: p.leaseBucket, leaseTtlMs: plan.leaseTtlMs },
      checkpoint: { enabled: true, intervalMs: plan.intervalMs, bucket: p.bucket },
      // info: restores, catch-ups and completed checkpoints (partition, position, bytes, ms) are logged
      logLevel: 'info',
    },
    {
      // Shorter than any replay: a replayed effect the pipeline published again would be stored again, so
      // "no duplicates" is the pipeline's read-back at work, not the broker's Msg-Id window.
      streams: { duplicateWindowMs: 1000 },
      // acks are held until a checkpoint covers them: room for two intervals of the whole rate on each
      // partition's durable, and an ack wait that outlasts three intervals (the config refuses less)
      consumer: {
        maxAckPending: Math.max(100_000, plan.rate * (plan.intervalMs / 1000) * 2),
        ackWaitMs: Math.max(30_000, plan.intervalMs * 3),
      },
    },
  );
}

export async function addInstance(
  ctx: ScenarioContext,
  p: Pipeline,
  id: string,
  plan: Plan,
): Promise<StreamInstance> {
  ctx.log(`${p.label}: starting instance ${id} (${p.names.tag}, ${PARTITIONS} partitions)`);
  const inst = await startInstance(ctx.repoRoot, `${p.label}-${id}`, id, configFor(ctx, p, id, plan));
  p.instances.push(inst);
  return inst;
}

export const live = (p: Pipeline): StreamInstance[] => p.instances.filter((i) => !i.dead);

/** What the run holds open: stopped, killed and deleted by `cleanupChaos` whatever happened. */
export interface ChaosResources {
  nats: NatsHandle;
  /** the feed's own connection, once opened */
  feedNats?: NatsHandle;
  pipelines: Pipeline[];
  samplers: Sampler[];
}

/** A pipeline of its own names (`prefix`) and buckets, no instance yet; the resources keep it for the cleanup. */
export function newPipeline(res: ChaosResources, label: string, prefix: string): Pipeline {
  const names = runNames(prefix);
  const p = {
    label,
    names,
    bucket: `${names.tag}_ckpt`,
    leaseBucket: `${names.tag}_leases`,
    instances: [],
  };
  res.pipelines.push(p);
  return p;
}
