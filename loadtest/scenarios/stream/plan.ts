/** stream setup: the plan (steps, phases' lengths), quick or full, and the capacity-planning example. */
import type { ScenarioContext } from '../../harness/types';

export interface Plan {
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
  /** the null pipeline's steps: this many, this far apart, from the pipeline's sustained rate up */
  nullSteps: number;
  nullStep: number;
  /**
   * seconds the profiled run profiles: at least one checkpoint interval (the shipped 30 s), or a checkpoint's
   * whole cost lands on whichever short window holds it (a 3 s window put it at 26 % or 0 %)
   */
  profileS: number;
}

export const FULL: Plan = {
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
  nullSteps: 12,
  nullStep: 1000,
  profileS: 60,
};

export const QUICK: Plan = {
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
  nullSteps: 8,
  nullStep: 500,
  profileS: 32,
};

/** The capacity-planning example of the issue: 3,000 GPS events/s against a p95 < 2 s SLO. */
export const PLANNING = { rate: 3000, p95Ms: 2000 };

/** BENCH_STREAM_RATES=1000,2000,... overrides the steps (no extra steps then). */
export function planFor(ctx: ScenarioContext): Plan {
  const base = ctx.quick ? QUICK : FULL;
  const env = process.env['BENCH_STREAM_RATES'];
  if (!env) return base;
  const steps = env.split(',').map((s) => Number(s.trim()));
  if (steps.length === 0 || steps.some((s) => !Number.isInteger(s) || s < 1))
    throw new Error(`BENCH_STREAM_RATES must be positive integers separated by commas (got "${env}")`);
  return { ...base, steps, extraSteps: [] };
}
