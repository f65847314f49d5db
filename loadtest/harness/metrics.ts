/**
 * Reading the server's `/metrics` from the bench: the scrape itself (I/O); the parser and the helpers over
 * its samples (sums, label filters, histogram means and quantiles, deltas between two scrapes) live in
 * libs/metrics and are re-exported here for the scenarios.
 */
import { type MetricSample, parsePrometheusText } from '../../libs/metrics';
import { httpGet } from './server-process';

export type { HistogramSums, LabelFilter, MetricSample } from '../../libs/metrics';
export {
  findSamples,
  histogramMean,
  histogramMeanDelta,
  histogramQuantile,
  histogramTotals,
  matches,
  parsePrometheusText,
  sampleDeltas,
  sumSamples,
} from '../../libs/metrics';

/** GET a `/metrics` URL and parse it. */
export async function scrapeMetrics(url: string, timeoutMs = 5000): Promise<MetricSample[]> {
  const r = await httpGet(url, timeoutMs);
  if (r.status !== 200) throw new Error(`GET ${url}: HTTP ${r.status}`);
  return parsePrometheusText(r.body);
}
