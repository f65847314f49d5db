/**
 * What a checkpoint of `streaminfer pipeline` has to write, without a broker: the delivery decider fed the
 * bench's workload (the stream-chaos scenario's shape: ⌈rate × 4⌉ deliveries, GPS ~4 s) in event-time order,
 * its snapshot serialised every `every` events — size, serialisation time (the pipeline does it at its
 * barrier, on its event loop), and the parts. Run after a build:
 *   node dist/loadtest/pipeline/chaos-state-probe.js [rate=1200] [events=500000] [every=100000]
 * (needs memory: --max-old-space-size=6000 for 500,000 events). With --expose-gc each measurement starts from a
 * collected heap, so a major collection of the ingestion's garbage does not land in it by chance.
 */
import { DeliveryDecider, liveOptions, simulationRecords } from '../../libs/delivery';

function main(): void {
  const [rate, max, every] = [1200, 500_000, 100_000].map((d, i) => {
    const v = Number(process.argv[2 + i] ?? d);
    if (!Number.isInteger(v) || v < 1) throw new Error(`argument ${i + 1} must be a positive integer`);
    return v;
  }) as [number, number, number];
  const start = Date.UTC(2026, 10, 30, 10, 0, 0);
  // the shipped deploy/pipeline.json's event-time settings
  const decider = new DeliveryDecider({
    outOfOrdernessMs: 10_000,
    allowedLatenessMs: 60_000,
    idleTimeoutMs: 10_000,
    stateTtlMs: 1_200_000,
    dedupeTtlMs: 900_000,
    alertThreshold: 0.8,
  });
  const records = simulationRecords(
    liveOptions(
      {
        rate,
        durationMs: 3_600_000,
        rampMs: 5000,
        subSecondTimes: true,
        disorderMs: 2000,
        duplicateFraction: 0.02,
        seed: 31,
      },
      start,
    ),
  );
  const size = (v: unknown): number => JSON.stringify(v).length;
  let n = 0;
  for (const r of records) {
    decider.ingest(r.payload, 'p0', undefined, r.publishAtMs);
    n++;
    if (n % every === 0 || n === max) {
      (globalThis as { gc?: () => void }).gc?.();
      const s0 = performance.now();
      const snapshot = decider.snapshot();
      const snapshotMs = Math.round(performance.now() - s0);
      const t0 = performance.now();
      let bytes: number;
      try {
        bytes = JSON.stringify(snapshot).length;
      } catch (err) {
        console.log(JSON.stringify({ events: n, error: String(err) }));
        return;
      }
      const engine = snapshot.engine as unknown as Record<string, unknown>;
      console.log(
        JSON.stringify({
          events: n,
          eventMinutes: Math.round((r.publishAtMs - start) / 6000) / 10,
          mb: Math.round(bytes / 1e5) / 10,
          stringifyMs: Math.round(performance.now() - t0),
          snapshotMs,
          bytesPerEvent: Math.round(bytes / n),
          engineKeysMb: Math.round(size(engine['keys']) / 1e5) / 10,
          dedupeMb: Math.round(size(engine['dedupe']) / 1e5) / 10,
          deliveriesMb: Math.round(size(snapshot.deliveries) / 1e5) / 10,
        }),
      );
    }
    if (n >= max) break;
  }
}

main();
