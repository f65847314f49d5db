/**
 * The statistics behind the checks, all one-sided at 95 % (z = 1.645): a verdict is `fail` only when the
 * data show, at that confidence, that the candidate is worse than the threshold allows, `pass` only when
 * they show it is within it, and `insufficient` in between or below the minimum sample size.
 *
 * - Proportions (disagreement): Wilson score interval of k successes in n.
 * - Difference of two proportions (candidate error rate − stable error rate): Newcombe's hybrid score
 *   interval (Newcombe 1998, method 10), built from the two Wilson intervals; well behaved at 0 errors.
 * - Quantiles (p99) from cumulative histogram buckets: the count of samples at or below the true q-quantile
 *   is Binomial(n, q), so the order statistics at ranks n·q ∓ z·√(n·q·(1−q)) bound it; a rank is turned into
 *   a value by linear interpolation inside its bucket (as Prometheus's histogram_quantile does). A rank past
 *   n gives no upper bound (Infinity); a rank in the +Inf bucket is bounded below by the last finite bound.
 */

export const Z_95_ONE_SIDED = 1.645;

export interface Interval {
  lower: number;
  upper: number;
}

/** Wilson score interval for k of n (n > 0); each side is a one-sided bound at `z`. */
export function wilson(k: number, n: number, z = Z_95_ONE_SIDED): Interval {
  if (n <= 0) return { lower: 0, upper: 1 };
  const p = k / n;
  const z2 = z * z;
  const denominator = 1 + z2 / n;
  const centre = (p + z2 / (2 * n)) / denominator;
  const half = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / denominator;
  return { lower: Math.max(0, centre - half), upper: Math.min(1, centre + half) };
}

/** Newcombe's interval for p1 − p2 (k1 of n1 minus k2 of n2), each side one-sided at `z`. */
export function proportionDifference(
  k1: number,
  n1: number,
  k2: number,
  n2: number,
  z = Z_95_ONE_SIDED,
): Interval & { estimate: number } {
  const p1 = n1 > 0 ? k1 / n1 : 0;
  const p2 = n2 > 0 ? k2 / n2 : 0;
  const a = wilson(k1, n1, z);
  const b = wilson(k2, n2, z);
  const estimate = p1 - p2;
  return {
    estimate,
    lower: estimate - Math.sqrt((p1 - a.lower) ** 2 + (b.upper - p2) ** 2),
    upper: estimate + Math.sqrt((a.upper - p1) ** 2 + (p2 - b.lower) ** 2),
  };
}

/**
 * The value at `rank` (1..n, may be fractional) of a histogram: `bounds` are the upper bounds (the last one
 * Infinity), `cumulative` the counts at or below each. Linear inside a bucket, from the previous bound (0 for
 * the first). A rank in the +Inf bucket returns `inf` (the caller picks Infinity or the last finite bound).
 */
export function valueAtRank(
  bounds: readonly number[],
  cumulative: readonly number[],
  rank: number,
  inf: 'infinity' | 'last_finite',
): number {
  const n = cumulative[cumulative.length - 1] ?? 0;
  if (n <= 0 || rank <= 0) return 0;
  for (let i = 0; i < bounds.length; i++) {
    const count = cumulative[i]!;
    if (count < rank) continue;
    const upper = bounds[i]!;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    if (!Number.isFinite(upper)) return inf === 'infinity' ? Number.POSITIVE_INFINITY : lower;
    const below = i === 0 ? 0 : cumulative[i - 1]!;
    const inBucket = count - below;
    return inBucket > 0 ? lower + ((upper - lower) * (rank - below)) / inBucket : upper;
  }
  return inf === 'infinity' ? Number.POSITIVE_INFINITY : (bounds[bounds.length - 2] ?? 0);
}

/** The q-quantile of a histogram with a one-sided confidence bound each way (see the module comment). */
export function quantileBounds(
  bounds: readonly number[],
  cumulative: readonly number[],
  q: number,
  z = Z_95_ONE_SIDED,
): { estimate: number; lower: number; upper: number; n: number } {
  const n = cumulative[cumulative.length - 1] ?? 0;
  const spread = z * Math.sqrt(n * q * (1 - q));
  const lowRank = Math.floor(n * q - spread);
  const highRank = Math.ceil(n * q + spread);
  return {
    n,
    estimate: valueAtRank(bounds, cumulative, n * q, 'last_finite'),
    lower: lowRank < 1 ? 0 : valueAtRank(bounds, cumulative, lowRank, 'last_finite'),
    upper: highRank > n ? Number.POSITIVE_INFINITY : valueAtRank(bounds, cumulative, highRank, 'infinity'),
  };
}
