/**
 * Pure figures of the `stream-scale` scenario: whether a rate step kept the lag bounded and freshness within
 * the SLO, one instance's capacity at that SLO, and the planning arithmetic (instances for a target rate at a
 * utilisation). No I/O.
 */
import { slope } from './analysis';

export interface LagVerdict {
  /** lag growth over the step, messages/s (least squares; undefined with < 2 samples) */
  growthPerS: number | undefined;
  /** lag at the step's last sample */
  end: number;
  /** grew by less than half a second of input over the step, and ends below two seconds of input */
  bounded: boolean;
}

/** Lag samples [seconds, messages] of one step at `rate` ev/s. */
export function lagVerdict(points: readonly (readonly [number, number])[], rate: number): LagVerdict {
  const growthPerS = slope(points);
  const end = points.length ? points[points.length - 1]![1] : 0;
  const span = points.length >= 2 ? points[points.length - 1]![0] - points[0]![0] : 0;
  const bounded = (growthPerS === undefined || growthPerS * span < rate * 0.5) && end < rate * 2;
  return { growthPerS, end, bounded };
}

export interface StepOutcome {
  rate: number;
  p95Ms: number;
  bounded: boolean;
}

export const withinSlo = (s: StepOutcome, sloP95Ms: number): boolean =>
  s.bounded && Number.isFinite(s.p95Ms) && s.p95Ms <= sloP95Ms;

/**
 * Capacity at the SLO: the highest rate of the ascending steps before the first one that missed it (a rate
 * that passes only above a failed one is noise, not capacity); undefined when the first step failed.
 */
export function capacityAtSlo(steps: readonly StepOutcome[], sloP95Ms: number): number | undefined {
  let best: number | undefined;
  for (const s of [...steps].sort((a, b) => a.rate - b.rate)) {
    if (!withinSlo(s, sloP95Ms)) break;
    best = s.rate;
  }
  return best;
}

/** Instances to run `target` ev/s with each at `utilisation` of its capacity: ceil(target / (u·C)). */
export function instancesFor(target: number, utilisation: number, capacity: number): number {
  if (!(capacity > 0) || !(utilisation > 0)) throw new Error('capacity and utilisation must be positive');
  return Math.ceil(target / (utilisation * capacity));
}

/** CPU time over wall time, % of one core. */
export const cpuPct = (cpuMs: number | undefined, wallMs: number): number | undefined =>
  cpuMs === undefined || wallMs <= 0 ? undefined : (cpuMs / wallMs) * 100;
