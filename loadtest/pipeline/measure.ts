/**
 * One measured run of the `stream` scenario: a fresh simulator run against a running pipeline, drained,
 * then read back from the broker. Freshness comes from the broker's stored timestamps of the first
 * predictions (revision 0) of events inside the measured window (after the ramp); lag from /health
 * samples; zero loss from the counters, the consumer and the output stream (see analysis.zeroLoss).
 */

import { processTreeCpuMs } from '../harness/server-process';
import type { LagSample } from './analysis';
import {
  type FirstPrediction,
  type FreshnessSummary,
  freshnessOf,
  freshnessParts,
  inEventWindow,
  type LagFigures,
  lagFigures,
  lagOf,
  lagStable,
  type ZeroLoss,
  zeroLoss,
} from './analysis';
import { lastSeq, type NatsHandle, type RunNames, readPredictions } from './broker';
import {
  getHealth,
  notReadyTotal,
  type PipelineHandle,
  type PipelineHealth,
  type SimulatorRun,
  type SimulatorSummary,
  startSimulator,
  toSample,
} from './procs';

export const FRESHNESS_TARGET_MS = 500;

/** A pipeline under measurement: its process, names, the bench's broker connection and its /health sampler. */
export interface Pipe {
  repoRoot: string;
  natsUrl: string;
  handle: PipelineHandle;
  names: RunNames;
  nats: NatsHandle;
  samples: LagSample[];
  /** other process trees whose CPU counts as the pipeline's (the server of external mode) */
  extraPids?: number[];
  /** the null pipeline (null-pipeline.ts): its output is the events republished, read back as first predictions */
  reference?: boolean;
}

export interface RunHooks {
  /** runs while the simulator runs (e.g. pause / resume); gets the simulator's spawn time */
  during?: (spawnedMs: number) => Promise<void>;
  /** runs after the simulator exits, before waiting for the drain (e.g. resume a paused pipeline) */
  afterSim?: () => Promise<void>;
}

export interface RunMeasure {
  label: string;
  rate: number;
  durationS: number;
  rampS: number;
  /** the measured window in epoch ms: [start + ramp + settle, end) */
  windowMs: [number, number];
  sim: SimulatorSummary;
  startMs: number;
  endMs: number;
  /** freshness of the first predictions of events in [start + ramp, end) */
  freshness: FreshnessSummary;
  /** the same events: publisher delay (input stored − event time) and pipeline time (prediction stored − input stored) */
  parts: { publisher: FreshnessSummary; pipeline: FreshnessSummary };
  lag: LagFigures;
  lagStable: boolean;
  zeroLoss: ZeroLoss;
  /** ms from the simulator's end until the consumer had nothing pending or unacked (undefined: never) */
  drainTailMs: number | undefined;
  /**
   * % of one core over the simulator's run: the pipeline's process tree (supervisor, pipeline, workers),
   * the server in external mode, the simulator and nats-server.
   */
  cpu: { pipelinePct?: number; serverPct?: number; simulatorPct?: number; brokerPct?: number };
  readBack: { total: number; first: number; revisions: number };
  /** every first prediction of the run (for timelines) */
  first: FirstPrediction[];
  pass: boolean;
  /** why it did not pass */
  failures: string[];
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function cpuOf(pipe: Pipe): { own?: number; extra?: number } {
  const own = pipe.handle.cpuMs();
  const extra = pipe.extraPids?.length
    ? pipe.extraPids.reduce((a, p) => a + (processTreeCpuMs(p) ?? 0), 0)
    : undefined;
  return { ...(own !== undefined ? { own } : {}), ...(extra !== undefined ? { extra } : {}) };
}

const diff = (a: number | undefined, b: number | undefined): number | undefined =>
  a === undefined || b === undefined ? undefined : b - a;

/**
 * Wait until the consumer shows nothing pending and nothing unacked but the acks held for the next checkpoint,
 * on two reads ≥ 1 s apart (its lag refreshes each second): every event processed and its effects published.
 * Held acks go out at the next checkpoint, up to the shipped 30 s interval later.
 */
export async function waitDrained(pipe: Pipe, timeoutMs: number): Promise<number | undefined> {
  const t0 = Date.now();
  let zeroSince: number | undefined;
  while (Date.now() - t0 < timeoutMs) {
    if (pipe.handle.exited()) throw new Error(`pipeline exited\n${pipe.handle.outputTail()}`);
    const h = await getHealth(pipe.handle.adminPort).catch(() => undefined);
    const now = Date.now();
    if (h && h.consumer.pending + h.consumer.ack_pending - toSample(h, now).held <= 0) {
      zeroSince ??= now;
      if (now - zeroSince >= 1100) return zeroSince - t0;
    } else {
      zeroSince = undefined;
    }
    await sleep(200);
  }
  return undefined;
}

const pct = (cpuMs: number | undefined, wallMs: number): number | undefined =>
  cpuMs === undefined || wallMs <= 0 ? undefined : Math.round((cpuMs / wallMs) * 1000) / 10;

/** One simulator run against `pipe`: publish, drain, read back, judge. Throws when the pipeline dies. */
export async function measureRun(
  pipe: Pipe,
  o: {
    label: string;
    rate: number;
    durationS: number;
    rampS: number;
    /**
     * seconds after the ramp also left out of the figures: the ramp starts every delivery (a burst of first
     * status and GPS events above the rate), and one GPS interval (~4 s) later all report at their cadence
     */
    settleS?: number;
    seed: number;
    brokerPid?: number;
    drainTimeoutMs: number;
    /** judge against the sustained-rate rule (off for runs that pause on purpose) */
    judge?: boolean;
  },
  hooks: RunHooks = {},
): Promise<RunMeasure> {
  const port = pipe.handle.adminPort;
  const seq0 = await lastSeq(pipe.nats, pipe.names.predictions);
  const evSeq0 = await lastSeq(pipe.nats, pipe.names.events);
  const h0 = await getHealth(port);
  const nr0 = await notReadyTotal(port);
  const cpuPipe0 = cpuOf(pipe);
  const cpuBroker0 = o.brokerPid ? processTreeCpuMs(o.brokerPid) : undefined;
  const spawned = Date.now();
  const sim = startSimulator(pipe.repoRoot, {
    nats: pipe.natsUrl,
    rate: o.rate,
    durationS: o.durationS,
    rampS: o.rampS,
    subjectRoot: pipe.names.tag,
    eventsStream: pipe.names.events,
    seed: o.seed,
  });
  const duringDone = hooks.during ? hooks.during(spawned) : Promise.resolve();
  // Handled now, awaited below: a hook failing while the simulator still runs must fail this run, not kill the bench.
  duringDone.catch(() => undefined);
  let run: SimulatorRun;
  try {
    run = await sim.done;
  } finally {
    await duringDone.catch(() => undefined);
  }
  await duringDone;
  const cpuPipe1 = cpuOf(pipe);
  const cpuBroker1 = o.brokerPid ? processTreeCpuMs(o.brokerPid) : undefined;
  const wallMs = run.endMs - spawned;
  if (hooks.afterSim) await hooks.afterSim();
  const drainTailMs = await waitDrained(pipe, o.drainTimeoutMs);
  const h1: PipelineHealth = await getHealth(port);
  const nr1 = await notReadyTotal(port);
  const back = await readPredictions(pipe.nats, pipe.names, seq0, evSeq0, pipe.reference === true);
  const d = (k: string): number => (h1.counts[k] ?? 0) - (h0.counts[k] ?? 0);
  const zl = zeroLoss({
    stored: run.summary.stored,
    counts: {
      received: d('received'),
      duplicates: d('duplicates'),
      invalid: d('invalid'),
      late: d('late'),
      dead_letters: d('dead_letters'),
      predictions: d('predictions'),
      notReady: nr1 - nr0,
    },
    pendingEnd: h1.consumer.pending,
    ackPendingEnd: h1.consumer.ack_pending,
    heldEnd: toSample(h1, Date.now()).held,
    firstInStream: back.first.length,
    distinctFirstInStream: back.distinctFirst,
    ...(back.events !== undefined ? { eventsInStream: back.events } : {}),
    ...(back.unpredicted !== undefined ? { unpredicted: back.unpredicted } : {}),
  });
  const from = run.startMs + (o.rampS + (o.settleS ?? 0)) * 1000;
  const measured = inEventWindow(back.first, from, run.endMs);
  const freshness = freshnessOf(measured);
  const parts = freshnessParts(measured);
  const lag = lagFigures(pipe.samples, from, run.endMs);
  const stable = lagStable(lag, o.rate, (run.endMs - from) / 1000);
  const failures: string[] = [];
  if (o.judge !== false) {
    if (!(freshness.p95 < FRESHNESS_TARGET_MS))
      failures.push(`freshness p95 ${Math.round(freshness.p95)} ms ≥ ${FRESHNESS_TARGET_MS} ms`);
    if (!stable) failures.push(`lag growing (${Math.round(lag.growthPerS ?? 0)} msgs/s)`);
    if (run.summary.rate_actual < o.rate * 0.9)
      failures.push(`simulator reached only ${run.summary.rate_actual} ev/s (bound by the publisher)`);
    if (drainTailMs === undefined) failures.push('did not drain after the simulator stopped');
  }
  if (!zl.ok) failures.push(`loss: ${zl.reasons.join('; ')}`);
  return {
    label: o.label,
    rate: o.rate,
    durationS: o.durationS,
    rampS: o.rampS,
    windowMs: [from, run.endMs],
    sim: run.summary,
    startMs: run.startMs,
    endMs: run.endMs,
    freshness,
    parts,
    lag,
    lagStable: stable,
    zeroLoss: zl,
    drainTailMs,
    cpu: {
      pipelinePct: pct(diff(cpuPipe0.own, cpuPipe1.own), wallMs),
      ...(cpuPipe0.extra !== undefined
        ? { serverPct: pct(diff(cpuPipe0.extra, cpuPipe1.extra), wallMs) }
        : {}),
      simulatorPct: pct(run.cpuMs, wallMs),
      brokerPct: pct(diff(cpuBroker0, cpuBroker1), wallMs),
    },
    readBack: { total: back.total, first: back.first.length, revisions: back.revisions },
    first: back.first,
    pass: failures.length === 0,
    failures,
  };
}

/** Lag of the latest sample (for logs). */
export function currentLag(pipe: Pipe): number {
  const s = pipe.samples[pipe.samples.length - 1];
  return s ? lagOf(s) : 0;
}
