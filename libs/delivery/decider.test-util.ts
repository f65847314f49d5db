/** Simulated decider runs for the snapshot tests: ingests on two partitions (one goes quiet now and then, so
 * idleness moves the watermark), each at an admission time, and everything observable about each step. */

import { rng } from '../event-time/engine.test-util';
import type { DeliveryDecider } from './decider';
import { simulate } from './simulator';

/** `at`: the admission time (processing time, ms from 0). */
export interface Step {
  payload: string;
  partition: string;
  at: number;
}

export interface RunShape {
  seed: number;
  deliveries: number;
  minutes: number;
  /** Admission time between records: min + a uniform draw of `spread` ms. */
  gapMs: readonly [min: number, spread: number];
  /** p1 is quiet for the last `quiet` of every `cycle` records. */
  cycle: readonly [cycle: number, quiet: number];
}

export function steps(shape: RunShape): Step[] {
  const { records } = simulate({
    seed: shape.seed,
    deliveries: shape.deliveries,
    durationMs: shape.minutes * 60_000,
    gpsIntervalMs: 5_000,
    disorderMs: 20_000,
    duplicateFraction: 0.03,
    tooLateFraction: 0.02,
    invalidFraction: 0.01,
    subSecondTimes: true,
  });
  const random = rng(shape.seed);
  const [cycle, quiet] = shape.cycle;
  const out: Step[] = [];
  let at = 0;
  records.forEach((r, i) => {
    at += shape.gapMs[0] + Math.floor(random() * shape.gapMs[1]);
    const partition = i % cycle < cycle - quiet && random() < 0.5 ? 'p1' : 'p0';
    out.push({ payload: r.payload, partition, at });
  });
  return out;
}

/** Everything observable about one step; `alerts`: ask alertFor for the first decision or for every one. */
export function play(decider: DeliveryDecider, step: Step, alerts: 'first' | 'all' = 'first'): string {
  const r = decider.ingest(step.payload, step.partition, undefined, step.at);
  const asked = alerts === 'all' ? r.decisions : r.decisions.slice(0, 1);
  return JSON.stringify([
    r.disposition,
    r.reason,
    r.behindWatermark,
    r.notReady,
    r.decisions.map((d) => [d.delivery_id, d.event_id, d.event_time, d.eventTimeMs, d.revision, [...d.row]]),
    r.windowResults,
    r.watermark,
    asked.length > 0 ? asked.map((d) => decider.alertFor(d.delivery_id, d.row[4]! / 30)) : null,
  ]);
}
