/**
 * The `stream-chaos` scenario's feed: one live simulation (the reference workload, paced in real time) whose
 * every record is published to several event streams — the same payload, the same Msg-Id, in the same order
 * on one connection — so a reference pipeline and a victim pipeline see exactly the same input, and their
 * outputs can be compared decision id by decision id. (Two simulator processes would not do: each draws its
 * event times and id prefix from its own start.)
 */

import { publishBounded } from '../../apps/cli/commands/simulate';
import { eventSubject, JetStreamSink, type NatsHandle, partitionOfKey } from '../../apps/pipeline';
import { liveOptions, paced, type SimOptions, type SimRecord, simulationRecords } from '../../libs/delivery';

export interface ChaosFeedOptions {
  rate: number;
  durationMs: number;
  rampMs: number;
  seed: number;
  /** subject prefixes, one per target stream (`<root>.delivery.events`) */
  prefixes: readonly string[];
  /** the pipelines' key partitions (the subject's partition token) */
  partitions: number;
  disorderMs: number;
  duplicateFraction: number;
  /** publishes in flight at most (per record: one per prefix) */
  maxInflight?: number;
  now?: () => number;
}

export interface ChaosFeedSummary {
  /** records handed to the broker (each published to every prefix) */
  records: number;
  /** per prefix: PubAcks that stored a message, and those the broker dropped as duplicates */
  stored: number[];
  brokerDuplicates: number[];
  failed: number;
  startMs: number;
  endMs: number;
  rateActual: number;
  /** publish time (ms, wall) of each record, in order — for "what was published by t" */
  publishedAt: number[];
  /** records per key partition (each partition's share of the rate) */
  perPartition: number[];
}

/** Runs the feed to its end; `stop()` ends it early. Never rejects on a failed publish (it counts them). */
export function startChaosFeed(
  nats: NatsHandle,
  o: ChaosFeedOptions,
): { done: Promise<ChaosFeedSummary>; stop(): void; published(): number; perPartition(): number[] } {
  const now = o.now ?? Date.now;
  let stopped = false;
  const startMs = now();
  const endMs = startMs + o.durationMs;
  const sink = new JetStreamSink(nats.js, { maxAttempts: 3 });
  const summary: ChaosFeedSummary = {
    records: 0,
    stored: o.prefixes.map(() => 0),
    brokerDuplicates: o.prefixes.map(() => 0),
    failed: 0,
    startMs,
    endMs: startMs,
    rateActual: 0,
    publishedAt: [],
    perPartition: Array.from({ length: o.partitions }, () => 0),
  };
  const sim: Partial<SimOptions> & { rate: number } = {
    rate: o.rate,
    durationMs: o.durationMs,
    rampMs: o.rampMs,
    subSecondTimes: true,
    disorderMs: o.disorderMs,
    duplicateFraction: o.duplicateFraction,
    seed: o.seed,
  };
  const records = simulationRecords(liveOptions(sim, startMs));
  function* untilEnd(): Generator<SimRecord> {
    for (const r of records) {
      if (r.publishAtMs >= endMs) return;
      yield r;
    }
  }
  const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
  const due = async function* () {
    for await (const { record } of paced(untilEnd(), { now, sleep })) yield record;
  };
  const publishOne = async (r: SimRecord): Promise<void> => {
    summary.records++;
    summary.publishedAt.push(now());
    summary.perPartition[partitionOfKey(r.delivery_id, o.partitions)]!++;
    // One connection, sent in this order: every target stream stores the records in the same order.
    const acks = await Promise.allSettled(
      o.prefixes.map((prefix) =>
        sink.publish({
          subject: eventSubject(prefix, r.delivery_id, o.partitions),
          data: r.payload,
          msgId: r.msgId,
        }),
      ),
    );
    acks.forEach((a, i) => {
      if (a.status === 'rejected') summary.failed++;
      else if (a.value.duplicate) summary.brokerDuplicates[i]!++;
      else summary.stored[i]!++;
    });
  };
  const done = (async () => {
    await publishBounded(due(), publishOne, o.maxInflight ?? 512, () => stopped);
    summary.endMs = now();
    const s = (summary.endMs - startMs) / 1000;
    summary.rateActual = s > 0 ? Math.round((summary.records / s) * 10) / 10 : 0;
    return summary;
  })();
  return {
    done,
    stop: () => {
      stopped = true;
    },
    published: () => summary.records,
    perPartition: () => [...summary.perPartition],
  };
}
