/**
 * Micro benchmark (not a test): the delivery decider's cost per event, against the number of live deliveries
 * and the number of GPS points in a delivery's 5-minute window.
 *
 *   npm run build && node dist/loadtest/micro/decider.js [--deliveries 200,2000,20000] [--gps-ms 4000] \
 *     [--minutes 7] [--measure-minutes 1] [--json FILE]
 *
 * Each case feeds one decider (one partition) the simulator's reference workload in arrival order, admitted
 * 200 ms after its publish time, for `minutes` of event time, and times only the last `measure-minutes` (the
 * windows are full by then, histories as long as the workload makes them). Decode (JSON parse and checks) is
 * part of ingest and so of the figure; features, revisions and state upkeep are the rest.
 */
import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { DEFAULT_PIPELINE_CONFIG } from '../../apps/pipeline';
import { DeliveryDecider, simulationRecords } from '../../libs/delivery';
import { quantileSorted } from '../harness/quantile';

interface Case {
  deliveries: number;
  gpsIntervalMs: number;
  events: number;
  measured: number;
  usPerEvent: number;
  /** per-event µs percentiles over the measured events, in blocks of 1,000 events */
  blockP50Us: number;
  blockP99Us: number;
  decisionsPerEvent: number;
  heapMbAfter: number;
}

const list = (s: string): number[] => s.split(',').map((v) => Number(v.trim()));

function runCase(deliveries: number, gpsIntervalMs: number, minutes: number, measureMinutes: number): Case {
  const startMs = Date.UTC(2026, 10, 8, 10, 0, 0);
  // The pipeline's defaults (deploy/pipeline.json has the same).
  const decider = new DeliveryDecider({
    ...DEFAULT_PIPELINE_CONFIG.eventTime,
    alertThreshold: DEFAULT_PIPELINE_CONFIG.alertThreshold,
    maxEventBytes: DEFAULT_PIPELINE_CONFIG.maxEventBytes,
  });
  const records = simulationRecords({
    seed: 7,
    deliveries,
    durationMs: minutes * 60_000,
    startMs,
    gpsIntervalMs,
    disorderMs: 2_000,
    rampMs: 60_000,
    subSecondTimes: true,
    idPrefix: `m${deliveries}-`,
  });
  const measureFrom = startMs + (minutes - measureMinutes) * 60_000;
  const endAt = startMs + minutes * 60_000;
  let events = 0;
  let measured = 0;
  let decisions = 0;
  let measuredNs = 0n;
  const blocks: number[] = [];
  let blockNs = 0n;
  let blockN = 0;
  for (const r of records) {
    // Records come in publish order: the publish time is the arrival, admitted 200 ms later.
    if (r.publishAtMs >= endAt) break;
    const at = r.publishAtMs + 200;
    events++;
    if (r.publishAtMs < measureFrom) {
      decider.ingest(r.payload, 'p0', undefined, at);
      continue;
    }
    const t0 = process.hrtime.bigint();
    const result = decider.ingest(r.payload, 'p0', undefined, at);
    const dt = process.hrtime.bigint() - t0;
    measuredNs += dt;
    blockNs += dt;
    measured++;
    decisions += result.decisions.length;
    if (++blockN === 1000) {
      blocks.push(Number(blockNs) / 1000 / 1000);
      blockNs = 0n;
      blockN = 0;
    }
  }
  blocks.sort((a, b) => a - b);
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    deliveries,
    gpsIntervalMs,
    events,
    measured,
    usPerEvent: round(Number(measuredNs) / 1000 / Math.max(1, measured)),
    blockP50Us: round(quantileSorted(blocks, 0.5)),
    blockP99Us: round(quantileSorted(blocks, 0.99)),
    decisionsPerEvent: Math.round((decisions / Math.max(1, measured)) * 100) / 100,
    heapMbAfter: Math.round(process.memoryUsage().heapUsed / 1e6),
  };
}

function main(): void {
  const { values } = parseArgs({
    options: {
      deliveries: { type: 'string', default: '200,2000,20000' },
      'gps-ms': { type: 'string', default: '4000' },
      minutes: { type: 'string', default: '7' },
      'measure-minutes': { type: 'string', default: '1' },
      json: { type: 'string' },
    },
  });
  const minutes = Number(values.minutes);
  const measureMinutes = Number(values['measure-minutes']);
  if (!(minutes > measureMinutes && measureMinutes > 0))
    throw new Error('--minutes must exceed --measure-minutes > 0');
  const cases: Case[] = [];
  for (const gps of list(values['gps-ms']!))
    for (const n of list(values.deliveries!)) {
      const c = runCase(n, gps, minutes, measureMinutes);
      cases.push(c);
      console.log(
        `${String(n).padStart(6)} deliveries, GPS every ${gps} ms (${Math.round(300_000 / gps)} points per 5 min): ` +
          `${c.usPerEvent} µs/event (blocks of 1,000: p50 ${c.blockP50Us}, p99 ${c.blockP99Us}), ` +
          `${c.decisionsPerEvent} decisions/event, ${c.measured} of ${c.events} events timed, heap ${c.heapMbAfter} MB`,
      );
    }
  if (values.json)
    fs.writeFileSync(values.json, `${JSON.stringify({ minutes, measureMinutes, cases }, null, 2)}\n`);
}

main();
