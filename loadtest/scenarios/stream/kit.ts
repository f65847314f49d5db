/**
 * stream's pipeline kit: one pipeline on its own names for the length of a body, and a measured run as a
 * run record, report.json data and a row of the steps table.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fmt } from '../../../scripts/markdown';
import { errText } from '../../harness/scenario-kit';
import type { RunRecord, ScenarioContext } from '../../harness/types';
import { deleteRunStreams, type NatsHandle, natsUrl, runNames, writeRunConfig } from '../../pipeline/broker';
import type { Pipe, RunMeasure } from '../../pipeline/measure';
import { startNullPipeline, startPipeline, startSampler } from '../../pipeline/procs';

export async function withPipeline<T>(
  ctx: ScenarioContext,
  nats: NatsHandle,
  label: string,
  prefix: string,
  over: Record<string, unknown>,
  body: (pipe: Pipe) => Promise<T>,
  extraPids: number[] = [],
  /** the null pipeline (the reference side) on the same config, instead of the pipeline */
  reference = false,
): Promise<{ value?: T; error?: string; record: NonNullable<RunRecord['server']> | undefined }> {
  const names = runNames(prefix);
  const file = writeRunConfig(ctx.repoRoot, names, over);
  ctx.log(`${label}: starting ${reference ? 'the null pipeline' : 'pipeline'} (${names.tag})`);
  let pipe: Pipe | undefined;
  let sampler: ReturnType<typeof startSampler> | undefined;
  try {
    const handle = reference
      ? await startNullPipeline(ctx.repoRoot, label, file)
      : await startPipeline(ctx.repoRoot, label, file);
    sampler = startSampler(handle.adminPort, 500);
    pipe = {
      repoRoot: ctx.repoRoot,
      natsUrl: natsUrl(),
      handle,
      names,
      nats,
      samples: sampler.samples,
      extraPids,
      reference,
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

export const cpuText = (v: number | undefined): string => (v === undefined ? '–' : `${Math.round(v)}%`);

export const ms = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : fmt(Math.round(v));

export function runRecord(m: RunMeasure, target: string, server?: RunRecord['server']): RunRecord {
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
export function runData(m: RunMeasure): Record<string, unknown> {
  const { first: _first, ...rest } = m;
  return { ...rest, firstPredictions: m.first.length };
}

export function stepRow(m: RunMeasure): (string | number)[] {
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

export const STEP_HEADERS = [
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

/** The shipped deploy/pipeline.json's inference section. */
export function shippedInference(repoRoot: string): Record<string, unknown> {
  const shipped = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy', 'pipeline.json'), 'utf8')) as {
    inference?: Record<string, unknown>;
  };
  return shipped.inference ?? {};
}
