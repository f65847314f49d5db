/**
 * stream's measured phases: on one pipeline the warm-up, the sustained-rate search, 50/80 % of it, the
 * capacity-planning rate and the drain (sustainedPhase); then embedded vs external on two fresh pipelines
 * (modesPhase).
 */
import * as fs from 'node:fs';
import { errText, modelsDirWith, serverRecord } from '../../harness/scenario-kit';
import { processTreeRssBytes, type ServerHandle } from '../../harness/server-process';
import type { RunRecord, ScenarioContext } from '../../harness/types';
import { roundRate } from '../../pipeline/analysis';
import type { NatsHandle } from '../../pipeline/broker';
import { measureRun, type Pipe, type RunMeasure, waitDrained } from '../../pipeline/measure';
import { getHealth } from '../../pipeline/procs';
import { type CpuProfile, type StageCost, stageCosts } from '../../pipeline/profile-stages';
import { type DrainFigures, drainPhase } from './drain';
import { ms, runRecord, shippedInference, withPipeline } from './kit';
import { PLANNING, type Plan } from './plan';

/** What the embedded pipeline measured; kept as far as it got when a phase failed. */
export interface SustainedRun {
  steps: RunMeasure[];
  fractions: { fraction: number; m: RunMeasure }[];
  /** the highest passing step's rate */
  sustained: number | undefined;
  drain: DrainFigures | undefined;
  /** a run at PLANNING.rate when no step or fraction ran at it */
  planningRun: RunMeasure | undefined;
  /** a run at the sustained rate with the pipeline process's main thread profiled (GET /api/profile) */
  profiled?: ProfiledRun;
}

export interface ProfiledRun {
  m: RunMeasure;
  seconds: number;
  /** events the pipeline received while it was profiled */
  events: number;
  stages: StageCost[];
  /** what the state and its checkpoints cost over the profiled window (undefined: not read) */
  state?: StateCost;
  error?: string;
}

/** Memory and checkpoint bytes at the sustained rate, per live delivery (a key of the decider's state). */
export interface StateCost {
  /** deliveries in state at the window's end, every partition */
  keys: number;
  /** the decider's own estimate of its state (streaminfer_stream_state_bytes) */
  stateBytes: number;
  /** resident memory of the pipeline's process tree (supervisor, pipeline, inference worker) */
  rssBytes: number | undefined;
  /** checkpoint bytes written per second over the window (streaminfer_stream_checkpoint_written_bytes_total) */
  checkpointBytesPerS: number;
  /** the last completed checkpoint's size (one partition's) */
  lastCheckpointBytes: number;
}

/** A metric's value summed over its label sets, from GET /metrics. */
async function metricSum(port: number, name: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
  let total = 0;
  for (const line of (await res.text()).split('\n')) {
    if (line !== name && !line.startsWith(`${name} `) && !line.startsWith(`${name}{`)) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) total += v;
  }
  return total;
}

/** What every judged run of the plan shares: its ramp, settle, broker and drain wait. */
const judged = (plan: Plan, broker: number | undefined) => ({
  rampS: plan.rampS,
  settleS: plan.settleS,
  brokerPid: broker,
  drainTimeoutMs: plan.drainTimeoutMs,
});

/** Each run's simulator seed: steps, fractions and the planning run each take the next. */
interface Seeds {
  next: number;
}

/** Steps up the rate until one fails (falling back to half the first when it fails); the extra steps when all pass. */
async function searchSustained(
  ctx: ScenarioContext,
  pipe: Pipe,
  plan: Plan,
  broker: number | undefined,
  s: SustainedRun,
  seeds: Seeds,
  side = 'sustained',
): Promise<void> {
  const rates = [...plan.steps];
  const extra = [...plan.extraSteps];
  let fellBack = false;
  for (let i = 0; i < rates.length; i++) {
    const rate = rates[i]!;
    ctx.log(`${side}: ${rate} ev/s for ${plan.stepS} s`);
    const m = await measureRun(pipe, {
      label: `${side} ${rate} ev/s`,
      rate,
      durationS: plan.stepS,
      seed: seeds.next++,
      ...judged(plan, broker),
    });
    s.steps.push(m);
    ctx.log(
      `${side} ${rate}: p50 ${ms(m.freshness.p50)} p95 ${ms(m.freshness.p95)} p99 ${ms(m.freshness.p99)} ms, ` +
        `max lag ${m.lag.maxLag}, ${m.pass ? 'PASS' : `FAIL (${m.failures.join('; ')})`}`,
    );
    if (!m.pass) {
      // nothing passed yet: one step at half the rate, so the report still has a sustained figure
      const half = roundRate(rate / 2);
      if (s.sustained === undefined && i === 0 && half < rate) {
        rates.splice(0, rates.length, rate, half);
        fellBack = true;
        continue;
      }
      break;
    }
    if (fellBack) {
      s.sustained = rate;
      break;
    }
    s.sustained = rate;
    if (i === rates.length - 1 && extra.length) rates.push(...extra.splice(0));
  }
}

/** 50 % and 80 % of the sustained rate, from a drained consumer (or saying it was not). */
async function sustainedFractions(
  ctx: ScenarioContext,
  pipe: Pipe,
  plan: Plan,
  broker: number | undefined,
  s: SustainedRun,
  sustained: number,
  seeds: Seeds,
): Promise<void> {
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
      seed: seeds.next++,
      ...judged(plan, broker),
    });
    s.fractions.push({ fraction, m });
  }
}

/** 1 + 2: sustained rate, 50/80 %, the planning rate and the drain, on one pipeline. */
export async function sustainedPhase(
  ctx: ScenarioContext,
  nats: NatsHandle,
  plan: Plan,
  broker: number | undefined,
): Promise<{ s: SustainedRun; runs: RunRecord[] }> {
  const s: SustainedRun = {
    steps: [],
    fractions: [],
    sustained: undefined,
    drain: undefined,
    planningRun: undefined,
  };
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
    const seeds: Seeds = { next: 1 };
    await searchSustained(ctx, pipe, plan, broker, s, seeds);
    if (s.sustained !== undefined) await sustainedFractions(ctx, pipe, plan, broker, s, s.sustained, seeds);
    // The capacity-planning example needs a measurement at its rate even when the search stopped below it.
    if (![...s.steps, ...s.fractions.map((f) => f.m)].some((m) => m.rate === PLANNING.rate)) {
      ctx.log(
        `planning: ${PLANNING.rate} ev/s for ${plan.stepS} s (against a ${PLANNING.p95Ms / 1000} s SLO)`,
      );
      s.planningRun = await measureRun(pipe, {
        label: `planning ${PLANNING.rate} ev/s`,
        rate: PLANNING.rate,
        durationS: plan.stepS,
        rampS: plan.rampS,
        settleS: plan.settleS,
        seed: seeds.next++,
        brokerPid: broker,
        drainTimeoutMs: plan.drainTimeoutMs,
      });
    }
    if (s.sustained !== undefined)
      s.profiled = await profiledRun(ctx, pipe, plan, broker, s.sustained, seeds);
    const drainRate = roundRate((s.sustained ?? plan.steps[0]!) * 0.5);
    s.drain = await drainPhase(ctx, pipe, plan, drainRate, s.sustained, broker);
  });
  const runs: RunRecord[] = [];
  for (const m of s.steps) runs.push(runRecord(m, 'pipeline-embedded', a.record));
  for (const f of s.fractions) runs.push(runRecord(f.m, 'pipeline-embedded', a.record));
  if (s.planningRun) runs.push(runRecord(s.planningRun, 'pipeline-embedded', a.record));
  if (s.profiled) runs.push(runRecord(s.profiled.m, 'pipeline-embedded', a.record));
  if (s.drain) runs.push(runRecord(s.drain.measure, 'pipeline-embedded', a.record));
  if (a.error) runs.push({ label: 'pipeline (embedded)', target: 'pipeline-embedded', error: a.error });
  return { s, runs };
}

export interface ModeRun {
  mode: string;
  m?: RunMeasure;
  error?: string;
  cpuNote?: string;
}

/** 3: embedded vs external, two fresh pipelines, same workload and rate; their run records go to `runs`. */
export async function modesPhase(
  ctx: ScenarioContext,
  nats: NatsHandle,
  plan: Plan,
  broker: number | undefined,
  sustained: number | undefined,
  runs: RunRecord[],
): Promise<{ modeRate: number; modes: ModeRun[] }> {
  const modeRate = roundRate((sustained ?? plan.steps[0]!) * 0.65);
  const modes: ModeRun[] = [];
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
      label: 'server',
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

  return { modeRate, modes };
}

/** The null pipeline's steps: up from the pipeline's sustained rate until one fails. */
export function nullLadder(plan: Plan, from: number | undefined): number[] {
  const start = Math.max(plan.nullStep, roundRate(from ?? plan.steps[0]!));
  return Array.from({ length: plan.nullSteps }, (_, i) => start + i * plan.nullStep);
}

/** 0: the null pipeline (the reference side) on its own names: the highest rate the broker carries here. */
export async function nullPhase(
  ctx: ScenarioContext,
  nats: NatsHandle,
  plan: Plan,
  broker: number | undefined,
  pipelineSustained: number | undefined,
): Promise<{ s: SustainedRun; runs: RunRecord[]; error?: string }> {
  const s: SustainedRun = {
    steps: [],
    fractions: [],
    sustained: undefined,
    drain: undefined,
    planningRun: undefined,
  };
  const steps = nullLadder(plan, pipelineSustained);
  const a = await withPipeline(
    ctx,
    nats,
    'null pipeline',
    'n',
    {},
    async (pipe) => {
      await measureRun(pipe, {
        label: 'null warm-up',
        rate: plan.warmup.rate,
        durationS: plan.warmup.seconds,
        rampS: 1,
        seed: 98,
        drainTimeoutMs: plan.drainTimeoutMs,
        judge: false,
      });
      await searchSustained(ctx, pipe, { ...plan, steps, extraSteps: [] }, broker, s, { next: 101 }, 'null');
    },
    [],
    true,
  );
  const runs = s.steps.map((m) => runRecord(m, 'null-pipeline', a.record));
  if (a.error) runs.push({ label: 'null pipeline', target: 'null-pipeline', error: a.error });
  return { s, runs, ...(a.error ? { error: a.error } : {}) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

const WRITTEN = 'streaminfer_stream_checkpoint_written_bytes_total';

/** One more step at the sustained rate, its measured window profiled: the cost per event by stage. */
async function profiledRun(
  ctx: ScenarioContext,
  pipe: Pipe,
  plan: Plan,
  broker: number | undefined,
  rate: number,
  seeds: Seeds,
): Promise<ProfiledRun> {
  const seconds = plan.profileS;
  const port = pipe.handle.adminPort;
  let found: Omit<ProfiledRun, 'm'> = { seconds, events: 0, stages: [], error: 'not taken' };
  ctx.log(`profile: ${rate} ev/s, the pipeline process's main thread profiled for ${seconds} s`);
  const m = await measureRun(
    pipe,
    {
      label: `profiled ${rate} ev/s`,
      rate,
      durationS: plan.rampS + plan.settleS + seconds + 1,
      seed: seeds.next++,
      ...judged(plan, broker),
    },
    {
      during: async (spawnedMs) => {
        try {
          await sleep(spawnedMs + (plan.rampS + plan.settleS) * 1000 - Date.now());
          const before = (await getHealth(port)).counts['received'] ?? 0;
          const writtenBefore = await metricSum(port, WRITTEN);
          const startedMs = Date.now();
          const res = await fetch(`http://127.0.0.1:${port}/api/profile?seconds=${seconds}`, {
            signal: AbortSignal.timeout((seconds + 30) * 1000),
          });
          if (res.status !== 200) throw new Error(`GET /api/profile: HTTP ${res.status} ${await res.text()}`);
          const profile = (await res.json()) as CpuProfile;
          const h = await getHealth(port);
          const events = (h.counts['received'] ?? 0) - before;
          const written = (await metricSum(port, WRITTEN)) - writtenBefore;
          found = {
            seconds,
            events,
            stages: stageCosts(profile, events),
            state: {
              keys: h.state_keys,
              stateBytes: h.state_bytes,
              rssBytes: processTreeRssBytes(pipe.handle.pid),
              checkpointBytesPerS: written / ((Date.now() - startedMs) / 1000),
              lastCheckpointBytes: await metricSum(port, 'streaminfer_stream_checkpoint_bytes'),
            },
          };
        } catch (e) {
          found = { seconds, events: 0, stages: [], error: errText(e) };
        }
      },
    },
  );
  return { m, ...found };
}
