/**
 * stream: the event-stream pipeline (`streaminfer stream`) on NATS JetStream, with the simulator, the
 * broker and the pipeline all on this host. Three questions:
 *   1. sustained rate — step the simulator's rate up against one running pipeline and find the highest
 *      rate with freshness p95 < 500 ms, zero loss and a lag that does not grow; figures at 50/80/100 %;
 *   2. backlog drain — at 50 % of it, pause consuming (POST /api/pause) while the simulator keeps
 *      producing, resume, time the catch-up against backlog ÷ (capacity − rate);
 *   3. embedded vs external inference — two fresh pipelines, same workload and rate.
 * Freshness is measured from the broker's side: a first prediction's stored timestamp − its event_time.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fmt, markdownTable } from '../../scripts/markdown';
import { lagOf, perSecondP95, receivedRate, recoveredAt, roundRate, settledAt } from '../pipeline/analysis';
import {
  connectNats,
  deleteRunStreams,
  type NatsHandle,
  natsUrl,
  runNames,
  writeRunConfig,
} from '../pipeline/broker';
import {
  FRESHNESS_TARGET_MS,
  measureRun,
  type Pipe,
  type RunMeasure,
  waitDrained,
} from '../pipeline/measure';
import {
  brokerPid,
  getHealth,
  killAllStreamProcs,
  postAdmin,
  startPipeline,
  startSampler,
} from '../pipeline/procs';
import { errText, modelsDirWith, serverRecord } from '../scenario-kit';
import type { ServerHandle } from '../server-process';
import { barChart, lineChart, PALETTE } from '../svg-chart';
import type { Chart, Ratio, RunRecord, Scenario, ScenarioContext } from '../types';

interface Plan {
  /** an unmeasured run first: model sessions, JIT and broker caches warm up */
  warmup: { rate: number; seconds: number };
  steps: number[];
  /** tried after the last step when every step passed */
  extraSteps: number[];
  stepS: number;
  rampS: number;
  /** left out after the ramp too (see measureRun's settleS) */
  settleS: number;
  /** runs at 50 % and 80 % of the sustained rate */
  fractionS: number;
  drain: { steadyS: number; pauseS: number; afterS: number };
  backlogOnlyS: number;
  modesS: number;
  drainTimeoutMs: number;
}

const FULL: Plan = {
  warmup: { rate: 1000, seconds: 10 },
  steps: [1000, 2000, 3000, 4000, 5000, 6000],
  extraSteps: [7000, 8000],
  stepS: 30,
  rampS: 5,
  settleS: 4,
  fractionS: 30,
  drain: { steadyS: 20, pauseS: 60, afterS: 70 },
  backlogOnlyS: 20,
  modesS: 30,
  drainTimeoutMs: 90_000,
};

const QUICK: Plan = {
  warmup: { rate: 1000, seconds: 4 },
  steps: [3000, 5000],
  extraSteps: [],
  stepS: 13,
  rampS: 5,
  settleS: 4,
  fractionS: 11,
  drain: { steadyS: 6, pauseS: 15, afterS: 8 },
  backlogOnlyS: 4,
  modesS: 11,
  drainTimeoutMs: 30_000,
};

/** The capacity-planning example of the issue: 3,000 GPS events/s against a p95 < 2 s SLO. */
const PLANNING = { rate: 3000, p95Ms: 2000 };

/** BENCH_STREAM_RATES=1000,2000,... overrides the steps (no extra steps then). */
function planFor(ctx: ScenarioContext): Plan {
  const base = ctx.quick ? QUICK : FULL;
  const env = process.env['BENCH_STREAM_RATES'];
  if (!env) return base;
  const steps = env.split(',').map((s) => Number(s.trim()));
  if (steps.length === 0 || steps.some((s) => !Number.isInteger(s) || s < 1))
    throw new Error(`BENCH_STREAM_RATES must be positive integers separated by commas (got "${env}")`);
  return { ...base, steps, extraSteps: [] };
}

/** Start a pipeline on its own names, run `body`, always stop it, delete its streams and config. */
async function withPipeline<T>(
  ctx: ScenarioContext,
  nats: NatsHandle,
  label: string,
  prefix: string,
  over: Record<string, unknown>,
  body: (pipe: Pipe) => Promise<T>,
  extraPids: number[] = [],
): Promise<{ value?: T; error?: string; record: NonNullable<RunRecord['server']> | undefined }> {
  const names = runNames(prefix);
  const file = writeRunConfig(ctx.repoRoot, names, over);
  ctx.log(`${label}: starting pipeline (${names.tag})`);
  let pipe: Pipe | undefined;
  let sampler: ReturnType<typeof startSampler> | undefined;
  try {
    const handle = await startPipeline(ctx.repoRoot, label, file);
    sampler = startSampler(handle.adminPort, 500);
    pipe = {
      repoRoot: ctx.repoRoot,
      natsUrl: natsUrl(),
      handle,
      names,
      nats,
      samples: sampler.samples,
      extraPids,
    };
    const value = await body(pipe);
    return { value, record: await stopPipe(pipe) };
  } catch (e) {
    const tail = pipe ? `\n--- pipeline output (tail) ---\n${pipe.handle.outputTail()}` : '';
    return { error: `${errText(e)}${tail}`, record: pipe ? await stopPipe(pipe) : undefined };
  } finally {
    sampler?.stop();
    await deleteRunStreams(nats, names);
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  }
}

async function stopPipe(pipe: Pipe): Promise<NonNullable<RunRecord['server']>> {
  const exit = await pipe.handle.stop();
  return {
    command: pipe.handle.command,
    env: {},
    exit: { code: exit.code, signal: exit.signal, killed: exit.killed, stopMs: 0 },
  };
}

const cpuText = (v: number | undefined): string => (v === undefined ? '–' : `${Math.round(v)}%`);

const ms = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : fmt(Math.round(v));

function runRecord(m: RunMeasure, target: string, server?: RunRecord['server']): RunRecord {
  return {
    label: m.label,
    target,
    ...(server ? { server } : {}),
    ...(m.cpu.pipelinePct !== undefined ? { serverCpuPct: m.cpu.pipelinePct } : {}),
    metrics: {
      rate_target: m.rate,
      rate_actual: m.sim.rate_actual,
      stored: m.sim.stored,
      fresh_p50_ms: m.freshness.p50,
      fresh_p95_ms: m.freshness.p95,
      fresh_p99_ms: m.freshness.p99,
      pipeline_in_out_p50_ms: m.parts.pipeline.p50,
      pipeline_in_out_p95_ms: m.parts.pipeline.p95,
      publisher_delay_p95_ms: m.parts.publisher.p95,
      max_lag: m.lag.maxLag,
      max_pending: m.lag.maxPending,
      lag_growth_per_s: m.lag.growthPerS,
      drain_tail_ms: m.drainTailMs,
      first_predictions: m.readBack.first,
      zero_loss: m.zeroLoss.ok ? 1 : 0,
      server_cpu_pct: m.cpu.serverPct,
      simulator_cpu_pct: m.cpu.simulatorPct,
      broker_cpu_pct: m.cpu.brokerPct,
    },
  };
}

/** The JSON a run contributes to report.json (no per-prediction arrays). */
function runData(m: RunMeasure): Record<string, unknown> {
  const { first: _first, ...rest } = m;
  return { ...rest, firstPredictions: m.first.length };
}

function stepRow(m: RunMeasure): (string | number)[] {
  return [
    fmt(m.rate),
    fmt(m.sim.rate_actual),
    ms(m.freshness.p50),
    ms(m.freshness.p95),
    ms(m.freshness.p99),
    `${ms(m.parts.pipeline.p50)} / ${ms(m.parts.pipeline.p95)}`,
    ms(m.parts.publisher.p95),
    fmt(m.lag.maxLag),
    fmt(m.lag.maxPending),
    m.lag.growthPerS === undefined ? '–' : fmt(Math.round(m.lag.growthPerS)),
    `${fmt(m.sim.stored)} / ${fmt(m.readBack.first)} / ${fmt(m.zeroLoss.unpredicted)} ≤ ${fmt(m.zeroLoss.accounted - m.readBack.first)}`,
    m.zeroLoss.ok ? 'yes' : 'NO',
    cpuText(m.cpu.pipelinePct),
    cpuText(m.cpu.simulatorPct),
    cpuText(m.cpu.brokerPct),
    m.pass ? 'PASS' : `FAIL: ${m.failures.join('; ')}`,
  ];
}

const STEP_HEADERS = [
  'offered ev/s',
  'actual ev/s',
  'fresh p50 ms',
  'fresh p95 ms',
  'fresh p99 ms',
  'pipeline in→out p50 / p95 ms',
  'publisher delay p95 ms',
  'max lag',
  'max pending',
  'lag growth /s',
  'stored / predicted / unpredicted ≤ not ready',
  'zero loss',
  'pipeline CPU',
  'simulator CPU',
  'broker CPU',
  'verdict',
];

interface DrainFigures {
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

async function drainPhase(
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

export const stream: Scenario = {
  name: 'stream',
  description:
    'Event-stream pipeline (`streaminfer stream`, shipped deploy/pipeline.json, embedded delay-risk, 1 worker) ' +
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
      // 1 + 2: sustained rate, 50/80 %, and the drain, on one pipeline.
      const steps: RunMeasure[] = [];
      const fractions: { fraction: number; m: RunMeasure }[] = [];
      let sustained: number | undefined;
      let drain: DrainFigures | undefined;
      let planningRun: RunMeasure | undefined;
      const a = await withPipeline(ctx, nats, 'pipeline (embedded)', 's', {}, async (pipe) => {
        ctx.log(`warm-up: ${plan.warmup.rate} ev/s for ${plan.warmup.seconds} s (not measured)`);
        await measureRun(pipe, {
          label: 'warm-up',
          rate: plan.warmup.rate,
          durationS: plan.warmup.seconds,
          rampS: 1,
          seed: 99,
          drainTimeoutMs: plan.drainTimeoutMs,
          judge: false,
        });
        let seed = 1;
        const rates = [...plan.steps];
        const extra = [...plan.extraSteps];
        let fellBack = false;
        for (let i = 0; i < rates.length; i++) {
          const rate = rates[i]!;
          ctx.log(`sustained: ${rate} ev/s for ${plan.stepS} s`);
          const m = await measureRun(pipe, {
            label: `sustained ${rate} ev/s`,
            rate,
            durationS: plan.stepS,
            rampS: plan.rampS,
            settleS: plan.settleS,
            seed: seed++,
            brokerPid: broker,
            drainTimeoutMs: plan.drainTimeoutMs,
          });
          steps.push(m);
          ctx.log(
            `sustained ${rate}: p50 ${ms(m.freshness.p50)} p95 ${ms(m.freshness.p95)} p99 ${ms(m.freshness.p99)} ms, ` +
              `max lag ${m.lag.maxLag}, ${m.pass ? 'PASS' : `FAIL (${m.failures.join('; ')})`}`,
          );
          if (!m.pass) {
            // nothing passed yet: one step at half the rate, so the report still has a sustained figure
            const half = roundRate(rate / 2);
            if (sustained === undefined && i === 0 && half < rate) {
              rates.splice(0, rates.length, rate, half);
              fellBack = true;
              continue;
            }
            break;
          }
          if (fellBack) {
            sustained = rate;
            break;
          }
          sustained = rate;
          if (i === rates.length - 1 && extra.length) rates.push(...extra.splice(0));
        }
        if (sustained !== undefined) {
          // A failed step can leave a backlog its own drain wait did not clear: the fractions start from an
          // empty consumer, or say they did not (their figures would measure the old backlog, not their rate).
          const drainMs = await waitDrained(pipe, 5 * 60_000);
          ctx.log(
            drainMs === undefined
              ? 'fractions: the backlog of the last step did not drain within 5 min; they start behind it'
              : `fractions: the last step's backlog drained in ${Math.round(drainMs / 1000)} s`,
          );
          for (const fraction of [0.5, 0.8]) {
            const rate = roundRate(sustained * fraction);
            ctx.log(`at ${fraction * 100} %: ${rate} ev/s for ${plan.fractionS} s`);
            const m = await measureRun(pipe, {
              label: `${fraction * 100} % of sustained (${rate} ev/s)`,
              rate,
              durationS: plan.fractionS,
              rampS: plan.rampS,
              settleS: plan.settleS,
              seed: seed++,
              brokerPid: broker,
              drainTimeoutMs: plan.drainTimeoutMs,
            });
            fractions.push({ fraction, m });
          }
        }
        // The capacity-planning example needs a measurement at its rate even when the search stopped below it.
        if (![...steps, ...fractions.map((f) => f.m)].some((m) => m.rate === PLANNING.rate)) {
          ctx.log(
            `planning: ${PLANNING.rate} ev/s for ${plan.stepS} s (against a ${PLANNING.p95Ms / 1000} s SLO)`,
          );
          planningRun = await measureRun(pipe, {
            label: `planning ${PLANNING.rate} ev/s`,
            rate: PLANNING.rate,
            durationS: plan.stepS,
            rampS: plan.rampS,
            settleS: plan.settleS,
            seed: seed++,
            brokerPid: broker,
            drainTimeoutMs: plan.drainTimeoutMs,
          });
        }
        const drainRate = roundRate((sustained ?? plan.steps[0]!) * 0.5);
        drain = await drainPhase(ctx, pipe, plan, drainRate, sustained, broker);
      });
      for (const m of steps) runs.push(runRecord(m, 'pipeline-embedded', a.record));
      for (const f of fractions) runs.push(runRecord(f.m, 'pipeline-embedded', a.record));
      if (planningRun) runs.push(runRecord(planningRun, 'pipeline-embedded', a.record));
      if (drain) runs.push(runRecord(drain.measure, 'pipeline-embedded', a.record));
      if (a.error) runs.push({ label: 'pipeline (embedded)', target: 'pipeline-embedded', error: a.error });

      // 3: embedded vs external, two fresh pipelines, same workload and rate.
      const modeRate = roundRate((sustained ?? plan.steps[0]!) * 0.65);
      const modes: { mode: string; m?: RunMeasure; error?: string; cpuNote?: string }[] = [];
      const modeRun = (label: string) => (pipe: Pipe) =>
        measureRun(pipe, {
          label,
          rate: modeRate,
          durationS: plan.modesS,
          rampS: plan.rampS,
          settleS: plan.settleS,
          seed: 21,
          brokerPid: broker,
          drainTimeoutMs: plan.drainTimeoutMs,
        });
      ctx.log(`modes: embedded at ${modeRate} ev/s`);
      const emb = await withPipeline(ctx, nats, 'embedded', 'e', {}, modeRun(`embedded ${modeRate} ev/s`));
      modes.push({
        mode: 'embedded',
        ...(emb.value ? { m: emb.value } : {}),
        ...(emb.error ? { error: emb.error } : {}),
      });
      if (emb.value) runs.push(runRecord(emb.value, 'pipeline-embedded', emb.record));
      else runs.push({ label: 'embedded', target: 'pipeline-embedded', error: emb.error });

      ctx.log(`modes: external at ${modeRate} ev/s (serve --nodes 1 --workers 1)`);
      const modelsDir = modelsDirWith(ctx.repoRoot, ['delay-risk'], 'bench-stream-models-');
      const serverEnv = { STREAMINFER_RATE_LIMIT_RPS: '0', STREAMINFER_MODEL_NAME: 'delay-risk' };
      let server: ServerHandle | undefined;
      try {
        server = await ctx.startStreamInfer({
          label: 'serving cluster',
          nodes: 1,
          workers: 1,
          args: ['--host', '127.0.0.1', '--models-dir', modelsDir],
          env: serverEnv,
        });
        const ext = await withPipeline(
          ctx,
          nats,
          'external',
          'x',
          { inference: { ...shippedInference(ctx.repoRoot), mode: 'external', url: server.wsUrl } },
          modeRun(`external ${modeRate} ev/s`),
          [server.pid],
        );
        const exit = await server.stop();
        modes.push({
          mode: 'external',
          ...(ext.value ? { m: ext.value } : {}),
          ...(ext.error ? { error: ext.error } : {}),
        });
        if (ext.value) {
          const r = runRecord(ext.value, 'pipeline-external', ext.record);
          r.metrics = { ...r.metrics, server_exit_code: exit.code ?? undefined };
          runs.push(r);
        } else runs.push({ label: 'external', target: 'pipeline-external', error: ext.error });
      } catch (e) {
        runs.push({ label: 'external', target: 'pipeline-external', error: errText(e) });
        modes.push({ mode: 'external', error: errText(e) });
        if (server) runs[runs.length - 1]!.server = serverRecord(server, await server.stop());
      } finally {
        fs.rmSync(modelsDir, { recursive: true, force: true });
      }

      // ---- the report ----
      const at3000 = [...steps, ...fractions.map((f) => f.m), ...(planningRun ? [planningRun] : [])].find(
        (m) => m.rate === PLANNING.rate,
      );
      md.push('### Sustained rate', '');
      md.push(
        `Steps of ${plan.stepS} s (the ramp of ${plan.rampS} s and ${plan.settleS} s after it are left out of the ` +
          'figures: the ramp starts every delivery at once, a burst above the rate, and one GPS interval later all ' +
          'report at their cadence), each a fresh simulator run against one ' +
          `running pipeline; a step passes with freshness p95 < ${FRESHNESS_TARGET_MS} ms, zero loss, a lag that grew by ` +
          'less than half a second of input over the step, the simulator within 10 % of its rate, and a drain once it stops.',
        '',
        markdownTable(STEP_HEADERS, steps.map(stepRow)),
        '',
      );
      md.push(
        sustained === undefined
          ? `**Sustained rate: none of the steps passed** (lowest ${plan.steps[0]} ev/s).`
          : `**Sustained rate: ${fmt(sustained)} events/s** (${
              steps.length >= 2 && steps[1]!.rate < steps[0]!.rate
                ? `the first step, ${fmt(steps[0]!.rate)} ev/s, failed and half of it passed: the limit lies between`
                : `the highest passing step${
                    steps[steps.length - 1]!.pass ? '; every step passed, so the true limit is higher' : ''
                  }`
            }).`,
        '',
      );
      if (sustained !== undefined) {
        const top = steps.find((m) => m.rate === sustained)!;
        const rows = [
          ...fractions.map((f) => ({ f: `${f.fraction * 100} %`, m: f.m })),
          { f: '100 %', m: top },
        ];
        md.push(
          markdownTable(
            [
              'of sustained',
              'ev/s',
              'fresh p50 ms',
              'fresh p95 ms',
              'fresh p99 ms',
              'max lag',
              'max pending',
              'zero loss',
            ],
            rows.map(({ f, m }) => [
              f,
              fmt(m.rate),
              ms(m.freshness.p50),
              ms(m.freshness.p95),
              ms(m.freshness.p99),
              fmt(m.lag.maxLag),
              fmt(m.lag.maxPending),
              m.zeroLoss.ok ? 'yes' : `NO (${m.zeroLoss.reasons.join('; ')})`,
            ]),
          ),
          '',
        );
      }
      const planningAnswer =
        at3000 === undefined
          ? `Capacity planning (${fmt(PLANNING.rate)} GPS events/s, p95 < ${PLANNING.p95Ms / 1000} s): not measured.`
          : `Capacity planning — does one pipeline process on this machine hold ${fmt(PLANNING.rate)} GPS events/s with ` +
            `freshness p95 < ${PLANNING.p95Ms / 1000} s? **${
              at3000.freshness.p95 < PLANNING.p95Ms && at3000.zeroLoss.ok && at3000.lagStable ? 'Yes' : 'No'
            }**: measured p95 ${ms(at3000.freshness.p95)} ms at ${fmt(at3000.sim.rate_actual)} ev/s actual ` +
            `(p50 ${ms(at3000.freshness.p50)}, p99 ${ms(at3000.freshness.p99)} ms; pipeline in→out p95 ` +
            `${ms(at3000.parts.pipeline.p95)} ms, simulator delay p95 ${ms(at3000.parts.publisher.p95)} ms; max lag ${fmt(at3000.lag.maxLag)}, ` +
            `zero loss ${at3000.zeroLoss.ok ? 'yes' : 'no'}), with the simulator and the broker on the same ${ctx.cores} cores.`;
      md.push(planningAnswer, '');
      if (planningRun)
        md.push(
          `The search stopped below ${fmt(PLANNING.rate)} ev/s, so a separate ${plan.stepS} s run measured it ` +
            `(its verdict is the 500 ms rule's; the answer above uses the ${PLANNING.p95Ms / 1000} s SLO):`,
          '',
          markdownTable(STEP_HEADERS, [stepRow(planningRun)]),
          '',
        );
      notes.push(planningAnswer.replace(/\*\*/g, ''));

      if (steps.length) {
        const pts = (pick: (m: RunMeasure) => number): [number, number][] =>
          steps.map((m) => [m.rate, pick(m)] as [number, number]);
        charts.push({
          file: 'stream-sustained.svg',
          title: 'stream: freshness vs offered rate',
          svg: lineChart({
            title: 'stream: freshness (broker-stored − event time) vs offered rate',
            xLabel: 'offered events/s',
            yLabel: 'ms',
            series: [
              { name: 'p50', points: pts((m) => m.freshness.p50) },
              { name: 'p95', points: pts((m) => m.freshness.p95) },
              { name: 'p99', points: pts((m) => m.freshness.p99) },
              { name: 'p95 target', color: '#999999', points: pts(() => FRESHNESS_TARGET_MS) },
            ],
            markers: sustained === undefined ? [] : [{ x: sustained, label: 'sustained' }],
          }),
        });
      }

      if (drain) {
        const d = drain;
        md.push('### Backlog drain', '');
        const t0 = d.measure.startMs;
        const rel = (t: number): number => (t - t0) / 1000;
        md.push(
          markdownTable(
            ['figure', 'value'],
            [
              ['rate R', `${fmt(d.rate)} ev/s (actual ${fmt(d.measure.sim.rate_actual)})`],
              [
                'pause',
                `${d.pauseS} s (POST /api/pause at ${rel(d.pauseAtMs).toFixed(1)} s, resume at ${rel(d.resumeAtMs).toFixed(1)} s)`,
              ],
              [
                'backlog at resume (pending + unacked)',
                `${fmt(d.backlogAtResume)} (R × pause = ${fmt(d.backlogArithmetic)})`,
              ],
              ['catch-up: lag < R × 0.5 s', `${ms(d.caughtUpMs)} ms after resume`],
              ['freshness p95 back < 500 ms (3 s in a row)', `${ms(d.freshRecoveredMs)} ms after resume`],
              [
                'capacity while catching up (slope of received)',
                `${fmt(d.catchUpRate && Math.round(d.catchUpRate))} ev/s`,
              ],
              [
                'capacity, backlog-only drain (no simulator)',
                `${fmt(d.pureDrainRate && Math.round(d.pureDrainRate))} ev/s (95 % of ${fmt(d.pureDrainBacklog)} events in ${ms(d.pureDrainMs)} ms)`,
              ],
              ['sustained rate (freshness rule)', sustained === undefined ? '–' : `${fmt(sustained)} ev/s`],
              ['arithmetic backlog ÷ (catch-up capacity − R)', `${ms(d.arithmetic.catchUp)} ms`],
              ['arithmetic backlog ÷ (backlog-only capacity − R)', `${ms(d.arithmetic.pureDrain)} ms`],
              ['arithmetic backlog ÷ (sustained − R)', `${ms(d.arithmetic.sustained)} ms`],
              [
                'zero loss over the whole run',
                (d.measure.zeroLoss.ok ? 'yes' : `NO (${d.measure.zeroLoss.reasons.join('; ')})`) +
                  ` — ${fmt(d.measure.sim.stored)} stored, ${fmt(d.measure.readBack.first)} first predictions, ` +
                  `${fmt(d.measure.zeroLoss.unpredicted)} unpredicted (≤ not ready), ${fmt(d.measure.zeroLoss.republished)} ` +
                  'effects published again for messages redelivered after ack_wait while paused (deduplicated by the broker)',
              ],
            ],
          ),
          '',
        );
        ratios.push({
          name: 'drain time measured / arithmetic (catch-up capacity)',
          value:
            d.caughtUpMs !== undefined && d.arithmetic.catchUp
              ? d.caughtUpMs / d.arithmetic.catchUp
              : undefined,
          note: 'lag sampled each 0.5 s, refreshed by the pipeline each 1 s: ±1 s',
        });
        ratios.push({
          name: 'drain time measured / arithmetic (backlog-only capacity)',
          value:
            d.caughtUpMs !== undefined && d.arithmetic.pureDrain
              ? d.caughtUpMs / d.arithmetic.pureDrain
              : undefined,
          note: 'the backlog-only drain has no simulator competing for the cores',
        });
        const markers = [
          { x: rel(d.pauseAtMs), label: 'pause' },
          { x: rel(d.resumeAtMs), label: 'resume' },
          ...(d.caughtUpMs !== undefined
            ? [{ x: rel(d.resumeAtMs + d.caughtUpMs), label: 'caught up' }]
            : []),
        ];
        charts.push({
          file: 'stream-drain-lag.svg',
          title: 'stream: consumer lag during the drain',
          svg: lineChart({
            title: `stream: consumer lag (pending + unacked), ${fmt(d.rate)} ev/s, pause ${d.pauseS} s`,
            xLabel: 'seconds since the simulator started',
            yLabel: 'messages',
            series: [{ name: 'lag', points: d.timeline.lag }],
            markers,
          }),
        });
        charts.push({
          file: 'stream-drain-freshness.svg',
          title: 'stream: freshness p95 per second during the drain',
          svg: lineChart({
            title: 'stream: freshness p95 per second (by broker-stored time)',
            xLabel: 'seconds since the simulator started',
            yLabel: 'ms',
            series: [
              { name: 'p95', points: d.timeline.p95 },
              {
                name: '500 ms',
                color: '#999999',
                points: d.timeline.p95.map(([s]) => [s, FRESHNESS_TARGET_MS]),
              },
            ],
            markers,
          }),
        });
      }

      md.push('### Embedded vs external inference', '');
      const e = modes.find((x) => x.mode === 'embedded')?.m;
      const x = modes.find((x) => x.mode === 'external')?.m;
      md.push(
        `Two fresh pipelines, one per mode, the same workload (seed 21) at ${fmt(modeRate)} ev/s for ${plan.modesS} s; ` +
          'external calls `serve --nodes 1 --workers 1` (no rate limit) over WebSocket. CPU is % of one core per ' +
          'process tree over the run.',
        '',
        markdownTable(
          [
            'mode',
            'actual ev/s',
            'fresh p50 ms',
            'fresh p95 ms',
            'fresh p99 ms',
            'in→out p95 ms',
            'max lag',
            'zero loss',
            'pipeline CPU',
            'server CPU',
            'simulator CPU',
            'broker CPU',
            'verdict',
          ],
          modes.map(({ mode, m, error }) =>
            m
              ? [
                  mode,
                  fmt(m.sim.rate_actual),
                  ms(m.freshness.p50),
                  ms(m.freshness.p95),
                  ms(m.freshness.p99),
                  ms(m.parts.pipeline.p95),
                  fmt(m.lag.maxLag),
                  m.zeroLoss.ok ? 'yes' : 'NO',
                  cpuText(m.cpu.pipelinePct),
                  cpuText(m.cpu.serverPct),
                  cpuText(m.cpu.simulatorPct),
                  cpuText(m.cpu.brokerPct),
                  m.pass ? 'PASS' : `FAIL: ${m.failures.join('; ')}`,
                ]
              : [
                  mode,
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  '–',
                  `FAILED: ${(error ?? '').split('\n')[0]}`,
                ],
          ),
        ),
        '',
      );
      const r = (pick: (m: RunMeasure) => number | undefined): number | undefined => {
        const a = x ? pick(x) : undefined;
        const b = e ? pick(e) : undefined;
        return a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0
          ? undefined
          : a / b;
      };
      ratios.push(
        {
          name: 'freshness p50 external/embedded',
          value: r((m) => m.freshness.p50),
          note: 'lower is better',
        },
        {
          name: 'freshness p95 external/embedded',
          value: r((m) => m.freshness.p95),
          note: 'lower is better',
        },
        {
          name: 'freshness p99 external/embedded',
          value: r((m) => m.freshness.p99),
          note: 'lower is better',
        },
        {
          name: 'CPU external (pipeline + server) / embedded',
          value: r((m) => (m.cpu.pipelinePct ?? 0) + (m.cpu.serverPct ?? 0)),
          note: '% of one core over the run (ps per process tree)',
        },
      );
      if (e || x) {
        const bars = modes.flatMap(({ mode, m }, i) =>
          (['p50', 'p95', 'p99'] as const).map((q) => ({
            label: `${mode} ${q}`,
            value: m ? m.freshness[q] : Number.NaN,
            color: PALETTE[i % PALETTE.length]!,
          })),
        );
        charts.push({
          file: 'stream-modes.svg',
          title: 'stream: embedded vs external freshness',
          svg: barChart({
            title: `stream: freshness at ${fmt(modeRate)} ev/s (ms, lower is better)`,
            unit: 'ms',
            bars,
          }),
        });
      }

      md.push(
        '### Zero loss, precisely',
        '',
        'A run has zero loss when, once drained, judged on what the broker holds: the durable consumer has 0 pending ' +
          'and 0 unacked (the pipeline acks an event only after its effects’ PubAcks); the pipeline processed at least ' +
          'every stored event (`received − duplicates ≥ stored`, stored = the simulator’s PubAcks minus broker ' +
          'duplicates); nothing went to dead letters or the late side output (the workload is clean); no event has two ' +
          'first predictions in the output stream; and every stored event is accounted for — reading the input stream ' +
          'back by event id, the events without a first prediction are no more than the pipeline’s not-ready count ' +
          '(events before their delivery’s first status or GPS point: nothing to predict yet). The pipeline’s own ' +
          'prediction counter can exceed the stream: a message redelivered after ack_wait (a pause longer than it) ' +
          'publishes its effects again, and the broker drops them by Msg-Id.',
        '',
      );
      md.push('### What it means', '', meaning(sustained, steps, at3000, drain, e, x, ctx.cores), '');
      notes.push(
        `This host has ${ctx.cores} cores shared by the simulator, nats-server, the pipeline (and the serving process in ` +
          'external mode), and possibly by other work: absolute figures are noisy; compare ratios and steps of one run.',
      );
      data['steps'] = steps.map(runData);
      data['fractions'] = fractions.map((f) => ({ fraction: f.fraction, ...runData(f.m) }));
      data['sustainedRate'] = sustained ?? null;
      data['planningRun'] = planningRun ? runData(planningRun) : null;
      data['planning'] = at3000
        ? {
            rate: PLANNING.rate,
            sloP95Ms: PLANNING.p95Ms,
            measured: at3000.freshness,
            meets: at3000.freshness.p95 < PLANNING.p95Ms && at3000.zeroLoss.ok,
          }
        : null;
      if (drain) {
        const { measure, ...rest } = drain;
        data['drain'] = { ...rest, run: runData(measure) };
      }
      data['modes'] = modes.map(({ mode, m, error }) => ({
        mode,
        rate: modeRate,
        ...(m ? runData(m) : {}),
        ...(error ? { error } : {}),
      }));
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

function shippedInference(repoRoot: string): Record<string, unknown> {
  const shipped = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy', 'pipeline.json'), 'utf8')) as {
    inference?: Record<string, unknown>;
  };
  return shipped.inference ?? {};
}

function meaning(
  sustained: number | undefined,
  steps: readonly RunMeasure[],
  at3000: RunMeasure | undefined,
  drain: DrainFigures | undefined,
  e: RunMeasure | undefined,
  x: RunMeasure | undefined,
  cores: number,
): string {
  const parts: string[] = [];
  parts.push(
    sustained === undefined
      ? `On this ${cores}-core host no step held freshness p95 < 500 ms with zero loss.`
      : `On this ${cores}-core host, with the publisher and the broker competing for the same cores, one pipeline ` +
          `process held ${fmt(sustained)} events/s with freshness p95 < 500 ms and zero loss.`,
  );
  // Who had the cores at the first failing step: the three processes' CPU against what the host has.
  const failed = steps.find((m) => !m.pass);
  if (failed) {
    const used = (failed.cpu.pipelinePct ?? 0) + (failed.cpu.simulatorPct ?? 0) + (failed.cpu.brokerPct ?? 0);
    parts.push(
      `At ${fmt(failed.rate)} ev/s the pipeline took ${Math.round(failed.cpu.pipelinePct ?? 0)} %, the simulator ` +
        `${Math.round(failed.cpu.simulatorPct ?? 0)} % and nats-server ${Math.round(failed.cpu.brokerPct ?? 0)} % of a core` +
        (used < cores * 100 * 0.85
          ? ` — ${Math.round(used)} % of the ${cores * 100} % this host has, so other work on the host held the rest and ` +
            `the limit measured here is the shared machine's`
          : ' — the host was saturated by the workload itself') +
        `; the simulator's own delay (event stored − event time) reached p95 ${ms(failed.parts.publisher.p95)} ms.`,
    );
  }
  if (at3000)
    parts.push(
      `The 3,000 ev/s planning example is ${at3000.freshness.p95 < PLANNING.p95Ms ? 'met' : 'not met'} here: ` +
        `p95 ${ms(at3000.freshness.p95)} ms against a 2 s SLO` +
        (at3000.freshness.p95 < PLANNING.p95Ms
          ? `, about ${fmt(Math.floor(PLANNING.p95Ms / Math.max(1, at3000.freshness.p95)))}× headroom.`
          : '.'),
    );
  if (drain && drain.caughtUpMs !== undefined)
    parts.push(
      `After a ${drain.pauseS} s stop at ${fmt(drain.rate)} ev/s the backlog of ${fmt(drain.backlogAtResume)} events was ` +
        `worked off in ${(drain.caughtUpMs / 1000).toFixed(1)} s` +
        (drain.arithmetic.catchUp
          ? ` (arithmetic with the capacity measured during the catch-up: ${(drain.arithmetic.catchUp / 1000).toFixed(1)} s)`
          : '') +
        ': recovery time is backlog ÷ (capacity − rate), so a pipeline run near its capacity recovers slowly. While ' +
        'consuming is stopped no prediction is published, so a freshness alert alone sees nothing: the lag and the ' +
        'oldest unprocessed age are what catch it.',
    );
  if (e && x)
    parts.push(
      `External inference gave ${(x.freshness.p95 / Math.max(1, e.freshness.p95)).toFixed(2)}× the embedded p95 at the ` +
        'same rate (a WebSocket round trip to a second process per prediction, on the same cores); on one host ' +
        'embedded is the cheaper mode, external pays off when the model needs machines of its own.',
    );
  return parts.join(' ');
}
