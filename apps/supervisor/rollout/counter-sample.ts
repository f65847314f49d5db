/**
 * What a rollout judges, read from the nodes: the counters of its two versions and the shadow comparisons,
 * summed over every node's metrics JSON (the same series /metrics aggregates).
 */
import type { MetricJson } from '../../../libs/metrics';
import { DURATION_BUCKETS } from '../../../libs/metrics';
import type { CounterSample, VersionCounters } from '../../../libs/rollout';

/** The judged-duration histogram's bucket bounds, +Inf last (the sample window's bounds too). */
export const BOUNDS: readonly number[] = [...DURATION_BUCKETS, Number.POSITIVE_INFINITY];

function emptyCounters(): { requests: number; errors: number; latency: number[] } {
  return { requests: 0, errors: 0, latency: BOUNDS.map(() => 0) };
}

/**
 * The rollout's counters from every node's metrics JSON (what /metrics aggregates), summed: the judged answers
 * (`streaminfer_rollout_judged_*`, what the nodes count per libs/rollout judge.ts: requests the router routed,
 * less client and load faults) and the shadow comparisons. Pinned requests and client faults never reach them.
 */
export function counterSample(
  perNode: readonly MetricJson[][],
  model: string,
  stable: string,
  candidate: string,
  at: number,
): CounterSample {
  const sides = { stable: emptyCounters(), candidate: emptyCounters() };
  const shadow = { agree: 0, disagree: 0, candidateErrors: 0 };
  const sideOf = (labels: Record<string, unknown>) =>
    labels.model !== model
      ? undefined
      : labels.version === stable
        ? sides.stable
        : labels.version === candidate
          ? sides.candidate
          : undefined;
  for (const metrics of perNode)
    for (const metric of metrics) {
      if (metric.name === 'streaminfer_rollout_judged_requests_total') {
        for (const value of metric.values) {
          const side = sideOf(value.labels);
          if (!side) continue;
          side.requests += value.value;
          if (value.labels.result === 'error') side.errors += value.value;
        }
      } else if (metric.name === 'streaminfer_rollout_judged_duration_seconds') {
        for (const value of metric.values) {
          if (!('metricName' in value) || !value.metricName?.endsWith('_bucket')) continue;
          const side = sideOf(value.labels);
          if (!side) continue;
          const le = String(value.labels.le);
          const index = le === '+Inf' ? BOUNDS.length - 1 : BOUNDS.indexOf(Number(le));
          if (index >= 0) side.latency[index]! += value.value;
        }
      } else if (metric.name === 'streaminfer_shadow_candidate_errors_total') {
        for (const value of metric.values)
          if (value.labels.model === model) shadow.candidateErrors += value.value;
      } else if (metric.name === 'streaminfer_shadow_comparisons_total') {
        for (const value of metric.values) {
          if (value.labels.model !== model) continue;
          if (value.labels.agree === 'true') shadow.agree += value.value;
          else shadow.disagree += value.value;
        }
      }
    }
  return {
    at,
    stable: sides.stable as VersionCounters,
    candidate: sides.candidate as VersionCounters,
    shadow,
  };
}
