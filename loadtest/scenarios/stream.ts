/**
 * stream: the event-stream pipeline (`streaminfer pipeline`) on NATS JetStream, with the simulator, the
 * broker and the pipeline all on this host. Three questions:
 *   1. sustained rate — step the simulator's rate up against one running pipeline and find the highest
 *      rate with freshness p95 < 500 ms, zero loss and a lag that does not grow; figures at 50/80/100 %;
 *   2. backlog drain — at 50 % of it, pause consuming (POST /api/pause) while the simulator keeps
 *      producing, resume, time the catch-up against backlog ÷ (capacity − rate);
 *   3. embedded vs external inference — two fresh pipelines, same workload and rate.
 * Freshness is measured from the broker's side: a first prediction's stored timestamp − its event_time.
 *
 * The phases: stream/plan.ts (sizes), drive.ts (the measured runs; kit.ts starts a pipeline and turns a run
 * into a record; drain.ts is the drain phase), report.ts (Markdown, charts, ratios, data).
 */

import { errText } from '../harness/scenario-kit';
import type { Chart, Ratio, RunRecord, Scenario } from '../harness/types';
import { connectNats, type NatsHandle, natsUrl } from '../pipeline/broker';
import { brokerPid, killAllStreamProcs } from '../pipeline/procs';
import { modesPhase, nullPhase, sustainedPhase } from './stream/drive';
import { planFor } from './stream/plan';
import {
  closingSection,
  drainSection,
  modesFigures,
  modesSection,
  nullSection,
  planningMeasure,
  planningSection,
  type StreamReport,
  stagesSection,
  streamData,
  sustainedChart,
  sustainedSection,
} from './stream/report';

export const stream: Scenario = {
  name: 'stream',
  description:
    'Event-stream pipeline (`streaminfer pipeline`, shipped deploy/pipeline.json, embedded delay-risk, 1 worker) ' +
    'on NATS JetStream with `streaminfer simulate` (reference workload, GPS every ~4 s) and the broker on the ' +
    'same host: sustained rate (freshness p95 < 500 ms, zero loss, lag not growing), backlog drain after a ' +
    'pause, embedded vs external inference. Freshness = the first prediction’s broker-stored time − its event_time.',
  async run(ctx) {
    const plan = planFor(ctx);
    const runs: RunRecord[] = [];
    const notes: string[] = [];
    const charts: Chart[] = [];
    const ratios: Ratio[] = [];
    const md: string[] = [];
    const data: Record<string, unknown> = { plan };
    let nats: NatsHandle;
    try {
      nats = await connectNats({ servers: natsUrl(), name: 'streaminfer-bench' });
    } catch (e) {
      throw new Error(`the stream scenario needs NATS JetStream at ${natsUrl()}: ${errText(e)}`);
    }
    const broker = brokerPid();
    try {
      const sustained = await sustainedPhase(ctx, nats, plan, broker);
      const s = sustained.s;
      runs.push(...sustained.runs);
      const reference = await nullPhase(ctx, nats, plan, broker, s.sustained);
      runs.push(...reference.runs);
      const { modeRate, modes } = await modesPhase(ctx, nats, plan, broker, s.sustained, runs);

      const report: StreamReport = { md, notes, charts, ratios };
      const at3000 = planningMeasure(s);
      sustainedSection(report, plan, s);
      planningSection(report, ctx, plan, s, at3000);
      sustainedChart(report, s);
      nullSection(report, plan, s, reference.s, reference.error);
      stagesSection(report, s);
      if (s.drain) drainSection(report, s.drain, s.sustained);
      modesSection(report, plan, modeRate, modes);
      modesFigures(report, modeRate, modes);
      closingSection(report, ctx, s, at3000, modes);
      Object.assign(data, streamData(s, at3000, modeRate, modes));
      if (s.profiled)
        data['profile'] = {
          rate: s.profiled.m.rate,
          seconds: s.profiled.seconds,
          events: s.profiled.events,
          stages: s.profiled.stages,
          ...(s.profiled.error ? { error: s.profiled.error } : {}),
        };
      data['nullPipeline'] = {
        sustained: reference.s.sustained,
        steps: reference.s.steps.map((m) => ({ rate: m.rate, pass: m.pass, freshness: m.freshness })),
      };
    } finally {
      killAllStreamProcs();
      await nats.close().catch(() => undefined);
    }
    return {
      params: {
        steps: plan.steps,
        stepS: plan.stepS,
        rampS: plan.rampS,
        settleS: plan.settleS,
        pauseS: plan.drain.pauseS,
        config: 'deploy/pipeline.json (own names, admin port 0)',
        simulator: 'simulate --sub-second --ramp-s R (deliveries ⌈rate × 4⌉, GPS ~4 s)',
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
