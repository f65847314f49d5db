/** Nearest-rank quantiles: the one definition the bench's figures use (p50/p95/p99 of latencies, freshness). */

/** Nearest-rank q-quantile (q in 0..1) of an ascending array; NaN when empty. */
export function quantileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1]!;
}

/** Nearest-rank q-quantile of `values` in any order, non-finite values left out; undefined when none is left. */
export function quantile(values: readonly number[], q: number): number | undefined {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return v.length === 0 ? undefined : quantileSorted(v, q);
}
