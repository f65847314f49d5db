/**
 * stream's backlog drain: at half the sustained rate, pause consuming (POST /api/pause) while the simulator
 * keeps producing, resume, time the catch-up against backlog ÷ (capacity − rate); then a backlog-only drain.
 */

import type { ScenarioContext } from '../../harness/types';
import { lagOf, perSecondP95, receivedRate, recoveredAt, settledAt } from '../../pipeline/analysis';
import { FRESHNESS_TARGET_MS, measureRun, type Pipe, type RunMeasure } from '../../pipeline/measure';
import { getHealth, postAdmin } from '../../pipeline/procs';
import type { Plan } from './plan';

export interface DrainFigures {
  rate: number;
  pauseS: number;
  pauseAtMs: number;
  resumeAtMs: number;
  /** lag (pending + unacked) on the last sample before resume */
  backlogAtResume: number;
  /** rate × pause: the arithmetic backlog */
  backlogArithmetic: number;
  /** ms from resume until lag < rate × 0.5 s (two samples in a row) */
  caughtUpMs: number | undefined;
  /** ms from resume until per-second freshness p95 stays < 500 ms for 3 s */
  freshRecoveredMs: number | undefined;
  /** events/s the pipeline processed during the catch-up (slope of `received`), simulator running */
  catchUpRate: number | undefined;
  /** events/s of a backlog-only drain (no simulator): 95 % of the backlog ÷ the time `received` took to cover it */
  pureDrainRate: number | undefined;
  pureDrainBacklog: number | undefined;
  pureDrainMs: number | undefined;
  pureDrainZeroLoss: boolean;
  /** backlog ÷ (capacity − rate) for each capacity figure, ms */
  arithmetic: { catchUp?: number; pureDrain?: number; sustained?: number };
  measure: RunMeasure;
  timeline: { lag: [number, number][]; p95: [number, number][] };
}

export async function drainPhase(
  ctx: ScenarioContext,
  pipe: Pipe,
  plan: Plan,
  rate: number,
  sustained: number | undefined,
  broker: number | undefined,
): Promise<DrainFigures> {
  let pauseAtMs = 0;
  let resumeAtMs = 0;
  let backlogAtResume = 0;
  const port = pipe.handle.adminPort;
  const total = plan.drain.steadyS + plan.drain.pauseS + plan.drain.afterS;
  ctx.log(`drain: ${rate} ev/s for ${total} s, pause at ${plan.drain.steadyS} s for ${plan.drain.pauseS} s`);
  const m = await measureRun(
    pipe,
    {
      label: `drain ${rate} ev/s, pause ${plan.drain.pauseS} s`,
      rate,
      durationS: total,
      rampS: plan.rampS,
      settleS: plan.settleS,
      seed: 7,
      brokerPid: broker,
      drainTimeoutMs: plan.drainTimeoutMs,
      judge: false,
    },
    {
      during: async (spawned) => {
        await sleepUntil(spawned + plan.drain.steadyS * 1000);
        pauseAtMs = Date.now();
        await postAdmin(port, '/api/pause');
        await sleepUntil(pauseAtMs + plan.drain.pauseS * 1000);
        const h = await getHealth(port);
        backlogAtResume = h.consumer.pending + h.consumer.ack_pending;
        resumeAtMs = Date.now();
        await postAdmin(port, '/api/resume');
        ctx.log(`drain: resumed with a backlog of ${backlogAtResume}`);
      },
    },
  );
  const threshold = rate * 0.5;
  const caught = settledAt(pipe.samples, resumeAtMs, threshold);
  const caughtUpMs = caught === undefined ? undefined : caught - resumeAtMs;
  const t0 = m.startMs;
  const p95 = perSecondP95(m.first, t0);
  const resumeS = (resumeAtMs - t0) / 1000;
  const rec = recoveredAt(p95, Math.floor(resumeS), FRESHNESS_TARGET_MS);
  const freshRecoveredMs = rec === undefined ? undefined : Math.max(0, (rec - resumeS) * 1000);
  // the lag is refreshed each second, so `caught` can be up to 1 s late: the slope leaves that second out
  const catchUpRate =
    caught === undefined
      ? undefined
      : receivedRate(pipe.samples, resumeAtMs, Math.max(caught - 1000, resumeAtMs + 1500));

  // the drain run's own timeline, before the backlog-only drain adds to the samples
  const lagTimeline = pipe.samples
    .filter((s) => s.tMs >= m.startMs)
    .map((s): [number, number] => [(s.tMs - m.startMs) / 1000, lagOf(s)]);

  // A backlog-only drain: producing while paused, then resuming with nothing else running.
  const pureRate = sustained ?? rate * 2;
  ctx.log(`drain: backlog-only drain, ${pureRate} ev/s × ${plan.backlogOnlyS} s produced while paused`);
  await postAdmin(port, '/api/pause');
  let pureBacklog = 0;
  // ms until `received` (a live counter, polled each 100 ms) covered 95 % of the backlog
  let pure95Ms: number | undefined;
  const pure = await measureRun(
    pipe,
    {
      label: `backlog-only drain (${pureRate} ev/s × ${plan.backlogOnlyS} s while paused)`,
      rate: pureRate,
      durationS: plan.backlogOnlyS,
      rampS: 1,
      seed: 11,
      brokerPid: broker,
      drainTimeoutMs: plan.drainTimeoutMs,
      judge: false,
    },
    {
      afterSim: async () => {
        await new Promise((r) => setTimeout(r, 1500));
        const h = await getHealth(port);
        pureBacklog = h.consumer.pending + h.consumer.ack_pending;
        const r0 = h.counts['received'] ?? 0;
        const resumed = Date.now();
        await postAdmin(port, '/api/resume');
        while (Date.now() - resumed < plan.drainTimeoutMs) {
          const now = await getHealth(port);
          if ((now.counts['received'] ?? 0) - r0 >= pureBacklog * 0.95) {
            pure95Ms = Date.now() - resumed;
            break;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      },
    },
  );
  const pureDrainMs = pure95Ms;
  const pureDrainRate =
    pure95Ms === undefined || pure95Ms <= 0 ? undefined : (pureBacklog * 0.95) / (pure95Ms / 1000);
  const backlog = backlogAtResume;
  const arith = (cap: number | undefined): number | undefined =>
    cap === undefined || cap <= rate ? undefined : (backlog / (cap - rate)) * 1000;
  return {
    rate,
    pauseS: plan.drain.pauseS,
    pauseAtMs,
    resumeAtMs,
    backlogAtResume,
    backlogArithmetic: rate * plan.drain.pauseS,
    caughtUpMs,
    freshRecoveredMs,
    catchUpRate,
    pureDrainRate,
    pureDrainBacklog: pureBacklog,
    pureDrainMs,
    arithmetic: {
      catchUp: arith(catchUpRate),
      pureDrain: arith(pureDrainRate),
      sustained: arith(sustained),
    },
    pureDrainZeroLoss: pure.zeroLoss.ok,
    measure: m,
    timeline: {
      lag: lagTimeline,
      p95,
    },
  };
}

function sleepUntil(t: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));
}
