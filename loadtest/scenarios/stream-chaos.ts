/**
 * stream-chaos: `streaminfer pipeline` with checkpoints and key partitions under kill -9. One live simulation is
 * published to two pipelines' own event streams (same records, same order, same partition of each key): a
 * reference — one instance working all partitions, left alone — and a victim whose partitions are shared by
 * two instances (leases in NATS KV). Every killEveryS, alternating between the two victim instances, one is
 * killed: its pipeline process (SIGKILL of the pid from its supervisor's "pipeline ready" line; the
 * supervisor restarts it under the same instance id and it takes its leases back at once), and once the whole
 * instance, supervisor included (its partitions move to the survivor after the lease TTL; a fresh instance
 * then joins and takes its share). Per kill: each killed partition's time since its last checkpoint, the
 * replay against (that time × the partition's rate), recovery time (kill → every partition owned, none
 * replaying, lag back to normal), freshness during recovery; checkpoint duration and size per partition; and
 * at the end the victim's output against the reference's, decision id by decision id: duplicates, losses and
 * value mismatches must all be 0.
 *
 * The phases: stream-chaos/plan.ts (sizes, pipelines), drive.ts (setup, then the feed and the kills),
 * analyse.ts (per kill, freshness, checkpoints, correctness), report.ts (Markdown, charts, runs, data).
 */

import { errText } from '../harness/scenario-kit';
import type { Chart, Ratio, RunRecord, Scenario } from '../harness/types';
import { connectNats, natsUrl } from '../pipeline/broker';
import { leftovers } from '../pipeline/chaos-broker';
import { cleanupRun } from '../pipeline/instances';
import { killAllStreamProcs } from '../pipeline/procs';
import { analyseChaos } from './stream-chaos/analyse';
import { driveChaos, setupChaos } from './stream-chaos/drive';
import { type ChaosResources, FULL, PARTITIONS, QUICK, WORKLOAD } from './stream-chaos/plan';
import { chaosCharts, chaosData, chaosMarkdown, chaosRatios, chaosRuns } from './stream-chaos/report';

async function connectChaos(): Promise<ChaosResources> {
  try {
    const nats = await connectNats({ servers: natsUrl(), name: 'streaminfer-bench-chaos' });
    return { nats, pipelines: [], samplers: [] };
  } catch (e) {
    throw new Error(`the stream-chaos scenario needs NATS JetStream at ${natsUrl()}: ${errText(e)}`);
  }
}

/** Whatever happened: samplers stopped, instances stopped (their unclean exits noted), broker state deleted. */
async function cleanupChaos(res: ChaosResources, notes: string[]): Promise<void> {
  const { nats } = res;
  for (const s of res.samplers) s.stop();
  for (const p of res.pipelines)
    for (const i of p.instances) {
      if (i.dead) continue;
      const exit = await i.handle.stop().catch(() => undefined);
      if (exit && (exit.killed || exit.code !== 0))
        notes.push(
          `${i.label}: supervisor exit code ${exit.code}, signal ${exit.signal}, killed ${exit.killed}`,
        );
    }
  killAllStreamProcs();
  for (const p of res.pipelines) {
    await cleanupRun(nats, p.names, { lease: p.leaseBucket, checkpoint: p.bucket });
    const left = await leftovers(nats, p.names.tag).catch(() => []);
    if (left.length) notes.push(`left on the broker: ${left.join(', ')}`);
  }
  await res.feedNats?.close().catch(() => undefined);
  await nats.close().catch(() => undefined);
}

export const streamChaos: Scenario = {
  name: 'stream-chaos',
  description:
    '`streaminfer pipeline` with checkpoints and key partitions under kill -9: one live simulation published to a ' +
    `reference (one instance, ${PARTITIONS} partitions) and a victim (two instances sharing ${PARTITIONS} partitions ` +
    'through KV leases); a victim instance’s process is SIGKILLed at a fixed period, alternating, and once the ' +
    'whole instance (a fresh one joins after the survivor took its partitions). Per kill and partition: time ' +
    'since checkpoint, replay vs (that time × rate), recovery, freshness during recovery; checkpoint duration and ' +
    'size per partition; duplicates, losses and value mismatches against the reference, decision id by decision id.',
  async run(ctx) {
    const plan = ctx.quick ? QUICK : FULL;
    const runs: RunRecord[] = [];
    const notes: string[] = [];
    const charts: Chart[] = [];
    const ratios: Ratio[] = [];
    const md: string[] = [];
    const data: Record<string, unknown> = { plan, partitions: PARTITIONS, workload: WORKLOAD };
    const res = await connectChaos();
    try {
      const setup = await setupChaos(ctx, plan, res);
      const run = await driveChaos(ctx, plan, res, setup);
      const figures = await analyseChaos(plan, res.nats, run);
      const report = chaosMarkdown(plan, run, figures, res.pipelines);
      md.push(...report.md);
      notes.push(report.meaning);
      notes.push(
        `This host has ${ctx.cores} cores shared by the feed, nats-server and three pipeline processes: recovery ` +
          'times are the shared machine’s; the replay arithmetic and the correctness figures do not depend on it.',
      );
      charts.push(...chaosCharts(plan, run, figures));
      ratios.push(...chaosRatios(run, figures));
      runs.push(...chaosRuns(plan, run, figures, res.pipelines));
      Object.assign(data, chaosData(run, figures));
    } finally {
      await cleanupChaos(res, notes);
    }
    return {
      params: {
        rate: plan.rate,
        durationS: plan.durationS,
        killEveryS: plan.killEveryS,
        wholeInstanceKill: plan.wholeKill,
        checkpointIntervalMs: plan.intervalMs,
        leaseTtlMs: plan.leaseTtlMs,
        partitions: PARTITIONS,
        instances: 'reference 1, victim 2 (+1 fresh after the whole-instance kill)',
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
