/**
 * stream-chaos report: the Markdown sections (setup, per kill, per killed partition, checkpoints,
 * correctness, freshness, what the instances logged, what it means), the charts, ratios, runs and data.
 */
import { fmt, markdownTable } from '../../../scripts/markdown';
import { lineChart } from '../../harness/svg-chart';
import type { Chart, Ratio, RunRecord } from '../../harness/types';
import type { FreshnessSummary } from '../../pipeline/analysis';
import { perSecondP95 } from '../../pipeline/analysis';
import {
  histogramQuantile,
  type OutputComparison,
  type PartitionCheckpoints,
  promValue,
} from '../../pipeline/chaos-analysis';
import type { ChaosFigures } from './analyse';
import { type ChaosRun, type KillRecord, relS, s1 } from './drive';
import { PARTITIONS, type Pipeline, type Plan, WORKLOAD } from './plan';

const ms = (v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '–' : fmt(Math.round(v));
const fr = (f: FreshnessSummary | undefined): string =>
  !f || f.count === 0 ? '–' : `${ms(f.p50)} / ${ms(f.p95)} / ${ms(f.p99)} (${fmt(f.count)})`;

/** Setup: the workload, the two pipelines, the kill schedule. */
function setupSection(plan: Plan, run: ChaosRun): string[] {
  const { fed } = run;
  const md: string[] = [];
  const intervalS = plan.intervalMs / 1000;
  const maxAckPending = Math.max(100_000, plan.rate * intervalS * 2);
  md.push(
    '### Setup',
    '',
    `${fmt(fed.records)} records (${fmt(fed.stored[0])} stored in each event stream; seed ${WORKLOAD.seed}, ` +
      `disorder ${WORKLOAD.disorderMs / 1000} s, ${WORKLOAD.duplicateFraction * 100} % duplicates) published live at ` +
      `${fmt(plan.rate)} ev/s (actual ${fmt(fed.rateActual)}) for ${plan.durationS} s to two pipelines on their own ` +
      `streams, the same records in the same order, each key on the same of ${PARTITIONS} partitions ` +
      `(records per partition: ${fed.perPartition.map((n, k) => `p${k} ${fmt(n)}`).join(', ')}). Both: shipped ` +
      `deploy/pipeline.json, checkpoint every ${intervalS} s per partition (staggered), maxAckPending ` +
      `${fmt(maxAckPending)} per partition durable, output duplicate window 1 s (shorter than any replay: the broker ` +
      `cannot hide a republished effect), lease TTL ${plan.leaseTtlMs / 1000} s. Reference: one instance owning all ` +
      `partitions. Victim: instances va and vb, two partitions each; every ${plan.killEveryS} s one of them, ` +
      `alternating, gets SIGKILL — its pipeline process (the supervisor restarts it under the same instance id and ` +
      `it takes its leases back), and kill ${plan.wholeKill} the whole instance (process and supervisor): its ` +
      'partitions move to the survivor once their leases expire, then a fresh instance joins and takes two back.',
    '',
  );
  return md;
}

/** Per kill: what it hit, its replay against the arithmetic, its recovery. */
function perKillSection(plan: Plan, run: ChaosRun, f: ChaosFigures): string[] {
  const { kills } = run;
  const { lagLimit } = f;
  const rel = (t: number): number => relS(run.feedStart, t);
  const md: string[] = [];
  const intervalS = plan.intervalMs / 1000;
  md.push('### Per kill', '');
  const t = (a: number | undefined, b: number | undefined): string =>
    a === undefined || b === undefined ? '–' : ((a - b) / 1000).toFixed(1);
  md.push(
    markdownTable(
      [
        '#',
        'kill',
        'at s',
        'partitions',
        'kill → ready / takeover s',
        'since checkpoint s (per partition)',
        'held acks at kill (Σ)',
        'expected: since × rate × share (Σ)',
        '_replayed_events_total (Σ processes, to the next kill)',
        'replayed / expected',
        'effects not republished',
        'kill → all owned s',
        'kill → replay done s',
        'kill → recovered s',
        'fresh p50 / p95 / p99 ms in recovery (victim)',
        'same events, reference',
      ],
      kills.map((k) => [
        k.n,
        `${k.kind} ${k.instance}${k.freshInstance ? ` (then ${k.freshInstance} joined: ${t(k.rebalancedAtMs, k.killAtMs)} s)` : ''}`,
        s1(rel(k.killAtMs)),
        k.partitions.map((x) => `p${x.partition}`).join(' '),
        t(k.readyAtMs ?? k.takeoverAtMs, k.killAtMs),
        k.partitions.map((x) => s1(x.sinceCheckpointS)).join(' / '),
        fmt(k.heldTotal),
        fmt(k.expectedTotal === undefined ? undefined : Math.round(k.expectedTotal)),
        fmt(k.replayedEvents),
        k.replayedEvents !== undefined && k.expectedTotal
          ? (k.replayedEvents / k.expectedTotal).toFixed(2)
          : '–',
        fmt(k.replayDeduplicated),
        t(k.recovery?.ownedAt, k.killAtMs),
        t(k.recovery?.replayDoneAt, k.killAtMs),
        t(k.recovery?.recoveredAt, k.killAtMs),
        fr(k.freshnessRecovery),
        fr(k.referenceFreshnessRecovery),
      ]),
    ),
    '',
    `The arithmetic: a partition restores its last completed checkpoint and replays what came after it, so a ` +
      `crash s seconds after a checkpoint replays about s × (that partition's rate) events — with a 60 s interval, ` +
      `a crash 45 s after a checkpoint replays about 45 s of events; here the interval is ${intervalS} s, so at ` +
      `most about ${intervalS} s of a partition's events (${fmt(Math.round((intervalS * plan.rate) / PARTITIONS))} at ` +
      `${fmt(plan.rate)} ev/s over ${PARTITIONS} partitions) while checkpoints complete in time. Held acks = the ` +
      'messages the partition processed since its last completed checkpoint (acks wait for the checkpoint): ' +
      'exactly what its restore must process again, read just before the kill. `_replayed_events_total` counts ' +
      'the messages a restored partition processes up to what the previous owner had been handed (its ' +
      'durable’s delivered sequence), summed over the victim’s processes from this kill to the next: the ' +
      'measured replay. Recovered = every partition owned by a live instance, none `replaying`, and the broker’s ' +
      `undelivered backlog (Σ num_pending of the partition durables) below rate × 0.5 s = ${fmt(lagLimit)} on two ` +
      'samples 1 s apart. Freshness in recovery: first predictions of events whose event time lies between the ' +
      'kill and recovered.',
    '',
  );
  return md;
}

/** Per killed partition: its checkpoint at the kill, its restore, its replay span, its catch-up. */
function perPartitionSection(run: ChaosRun): string[] {
  const { kills } = run;
  const rel = (t: number): number => relS(run.feedStart, t);
  const md: string[] = [];
  md.push(
    '#### Per killed partition',
    '',
    markdownTable(
      [
        'kill',
        'partition',
        'since checkpoint s',
        'checkpoint at kill (id @ position)',
        'restored by',
        'restored (id @ position)',
        'held at kill',
        'expected (since × rate × share)',
        'replay span (replayUntil − position, stream seqs of all partitions)',
        'caught up after s (pipeline)',
      ],
      kills.flatMap((k) =>
        k.partitions.map((x) => [
          k.n,
          `p${x.partition}`,
          s1(x.sinceCheckpointS),
          `${x.checkpointId ?? '–'} @ ${fmt(x.checkpointPosition)}`,
          x.restore ? `${x.restore.by} at ${s1(rel(x.restore.atMs))} s` : '–',
          x.restore ? `${x.restore.checkpoint} @ ${fmt(x.restore.position)}` : '–',
          fmt(x.heldAtKill),
          fmt(x.expected === undefined ? undefined : Math.round(x.expected)),
          x.restore ? fmt(Math.max(0, x.restore.replayUntil - x.restore.position)) : '–',
          x.caughtUp ? `${x.caughtUp.seconds.toFixed(1)} (${x.caughtUp.by})` : '–',
        ]),
      ),
    ),
    '',
    'Restored = the checkpoint the partition’s next owner restored (its "restored from checkpoint" line): the ' +
      'one completed before the kill, or a later one when the kill hit a partition whose checkpoint was under way. ' +
      'Caught up after = the pipeline’s own figure (partition taken → replayed span processed and nothing pending).',
    '',
  );
  return md;
}

/** Checkpoint duration and size per partition, and the reference's histogram as a cross-check. */
function checkpointSection(run: ChaosRun, f: ChaosFigures): string[] {
  const { refMetrics } = run;
  const { ckpt, refHist } = f;
  const md: string[] = [];
  const ckRows = (who: string, list: PartitionCheckpoints[]) =>
    list.map((c) => [
      who,
      `p${c.partition}`,
      fmt(c.count),
      ms(c.p50Ms),
      ms(c.meanMs),
      ms(c.maxMs),
      `${fmt(Math.round(c.lastBytes / 1024))} KiB`,
      `${fmt(Math.round(c.maxBytes / 1024))} KiB`,
    ]);
  const refQ = (q: number): string => {
    if (!refHist) return '–';
    const v = histogramQuantile(refHist, q);
    return Number.isFinite(v.value) ? `${v.beyond ? '>' : '≤'} ${fmt(Math.round(v.value * 1000))} ms` : '–';
  };
  md.push(
    '### Checkpoints per partition',
    '',
    markdownTable(
      [
        'pipeline',
        'partition',
        'checkpoints',
        'duration p50 ms',
        'mean ms',
        'max ms',
        'size (last)',
        'size max',
      ],
      [...ckRows('victim', ckpt.victim), ...ckRows('reference', ckpt.reference)],
    ),
    '',
    'From each completed checkpoint’s log line (`checkpoint completed`: duration from closing the partition’s ' +
      'barrier to its pointer written, and bytes), attributed to its partition by the subject of the stream ' +
      `message at its position. Cross-check, the reference’s \`_checkpoint_duration_seconds\` histogram: ` +
      `${fmt(refHist?.count)} checkpoints, p50 ${refQ(0.5)}, p99 ${refQ(0.99)}, mean ` +
      `${refHist?.count ? ms((refHist.sum / refHist.count) * 1000) : '–'} ms; failures ` +
      `${fmt(refMetrics && promValue(refMetrics, 'streaminfer_stream_checkpoint_failures_total'))}.`,
    '',
  );
  return md;
}

/** Correctness decision by decision, where the duplicates are, freshness steady vs recovery. */
function correctnessSection(run: ChaosRun, f: ChaosFigures): string[] {
  const { kills, refCovered, vicCovered } = run;
  const { cmp, correct, dupInfo, fresh } = f;
  const md: string[] = [];
  md.push(
    '### Correctness: victim vs reference, decision by decision',
    '',
    markdownTable(
      ['figure', 'value', 'must be'],
      [
        [
          'predictions in the reference / victim output',
          `${fmt(cmp.referenceCount)} / ${fmt(cmp.victimCount)}`,
          'equal',
        ],
        ['duplicates (a decision id twice in the victim)', fmt(cmp.duplicates.length), '0'],
        ['lost (reference decision ids missing in the victim)', fmt(cmp.lost.length), '0'],
        ['extra (victim decision ids the reference lacks)', fmt(cmp.extra.length), '0'],
        ['value mismatches (same decision id, other risk)', fmt(cmp.mismatches.length), '0'],
        ['Msg-Id ≠ decision id', fmt(cmp.msgIdMismatches), '0'],
        ['duplicates in the reference itself', fmt(cmp.referenceDuplicates.length), '0'],
        [
          'every partition durable drained at the end (checkpoints cover every stored event)',
          `${refCovered && vicCovered ? 'yes' : `NO (reference ${refCovered}, victim ${vicCovered})`}`,
          'yes',
        ],
      ],
    ),
    '',
    correct
      ? `**Exactly once under ${kills.length} kills (one of a whole instance): PASS.**`
      : `**FAIL**: ${[
          cmp.duplicates.length ? `duplicates e.g. ${cmp.duplicates.slice(0, 3).join(', ')}` : '',
          cmp.lost.length ? `lost e.g. ${cmp.lost.slice(0, 3).join(', ')}` : '',
          cmp.extra.length ? `extra e.g. ${cmp.extra.slice(0, 3).join(', ')}` : '',
          cmp.mismatches.length
            ? `mismatches e.g. ${cmp.mismatches
                .slice(0, 3)
                .map((x) => `${x.id} ${x.reference}≠${x.victim}`)
                .join(', ')}`
            : '',
        ]
          .filter(Boolean)
          .join('; ')}`,
    '',
  );
  md.push(
    ...(dupInfo.size
      ? [
          markdownTable(
            ['duplicates of partition', 'count', 'second copies stored from … to s'],
            [...dupInfo.entries()].map(([k, d]) => [`p${k}`, fmt(d.n), `${s1(d.firstS)} … ${s1(d.lastS)}`]),
          ),
          '',
        ]
      : []),
    '### Freshness: steady vs recovery',
    '',
    markdownTable(
      ['pipeline', 'steady p50 / p95 / p99 ms (events)', 'recovery windows p50 / p95 / p99 ms (events)'],
      [
        ['victim', fr(fresh.victimSteady), fr(fresh.victimRecovery)],
        ['reference (never killed)', fr(fresh.referenceSteady), fr(fresh.referenceRecovery)],
      ],
    ),
    '',
    'Freshness = a first prediction’s broker-stored time − its event time, for events after the ramp + 4 s. ' +
      'A replayed event’s prediction is not published again, so its stored time is the first one: recovery ' +
      'freshness is that of the events that arrived while a partition was down or catching up.',
    '',
  );
  return md;
}

/** The warnings and errors each instance logged, one line per distinct message. */
function logSection(run: ChaosRun, pipelines: readonly Pipeline[]): string[] {
  const { refS, vicS } = run;
  const rel = (t: number): number => relS(run.feedStart, t);
  const md: string[] = [];
  const shown = (list: { atMs: number; line: string }[]): string[] => {
    // one line per distinct message, with how often it came
    const byMsg = new Map<string, { first: number; n: number; line: string }>();
    for (const e of list) {
      const msg = /"msg":"([^"]*)"/.exec(e.line)?.[1] ?? e.line.slice(0, 80);
      const b = byMsg.get(msg);
      if (b) b.n++;
      else byMsg.set(msg, { first: Math.round(rel(e.atMs) * 10) / 10, n: 1, line: e.line });
    }
    return [...byMsg.values()].map((b) => `- ×${b.n}, first at ${b.first} s: \`${b.line.slice(0, 300)}\``);
  };
  md.push(
    '### What the instances logged (warn and above)',
    '',
    `/health samples (every 1 s, 1.5 s timeout) a live process did not answer: victim ${vicS.stalls()}, reference ` +
      `${refS.stalls()} — its event loop was busy (a checkpoint serialising a partition's state, a replay at full speed).`,
    '',
    ...pipelines.flatMap((p) =>
      p.instances.flatMap((i) => [
        `${p.label} ${i.id} (${i.events.length} lines, ${i.readies.length - 1} restarts${i.dead ? ', killed whole' : ''}):`,
        '',
        ...(i.events.length ? shown(i.events) : ['- nothing']),
        '',
      ]),
    ),
  );
  return md;
}

/** The report's Markdown and its "what it means" paragraph (also a note). */
export function chaosMarkdown(
  plan: Plan,
  run: ChaosRun,
  f: ChaosFigures,
  pipelines: readonly Pipeline[],
): { md: string[]; meaning: string } {
  const md = [
    ...setupSection(plan, run),
    ...perKillSection(plan, run, f),
    ...perPartitionSection(run),
    ...checkpointSection(run, f),
    ...correctnessSection(run, f),
    ...logSection(run, pipelines),
  ];
  const m = meaning(plan, run.kills, f.cmp, f.correct, f.fresh, f.ckpt.victim);
  md.push('### What it means', '', m, '');
  return { md, meaning: m };
}

/** Backlog over time (both pipelines, and the victim per partition) and freshness p95 per second, kills marked. */
export function chaosCharts(plan: Plan, run: ChaosRun, f: ChaosFigures): Chart[] {
  const { kills, refS, vicS, feedStart } = run;
  const { vicFirst, refFirst } = f;
  const rel = (t: number): number => relS(feedStart, t);
  const charts: Chart[] = [];
  const markers = [
    ...kills.map((k) => ({
      x: rel(k.killAtMs),
      label: `kill ${k.n}${k.kind === 'instance' ? ' (instance)' : ''}`,
    })),
    ...kills
      .filter((k) => k.freshStartedAtMs !== undefined)
      .map((k) => ({ x: rel(k.freshStartedAtMs!), label: `${k.freshInstance} joins` })),
  ];
  charts.push({
    file: 'stream-chaos-lag.svg',
    title: 'stream-chaos: undelivered backlog over time, kills marked',
    svg: lineChart({
      title: `stream-chaos: Σ num_pending of the ${PARTITIONS} partition durables, ${fmt(plan.rate)} ev/s, kill every ${plan.killEveryS} s`,
      xLabel: 'seconds since the feed started',
      yLabel: 'events',
      series: [
        { name: 'victim', points: vicS.samples.map((p) => [rel(p.tMs), p.lag] as [number, number]) },
        { name: 'reference', points: refS.samples.map((p) => [rel(p.tMs), p.lag] as [number, number]) },
      ],
      markers,
    }),
  });
  charts.push({
    file: 'stream-chaos-partitions.svg',
    title: 'stream-chaos: victim backlog per partition, kills marked',
    svg: lineChart({
      title: 'stream-chaos: victim num_pending per partition durable',
      xLabel: 'seconds since the feed started',
      yLabel: 'events',
      series: Array.from({ length: PARTITIONS }, (_, k) => ({
        name: `p${k}`,
        points: vicS.samples
          .filter((p) => p.pendingBy[k] !== undefined)
          .map((p) => [rel(p.tMs), p.pendingBy[k]!] as [number, number]),
      })),
      markers,
    }),
  });
  charts.push({
    file: 'stream-chaos-freshness.svg',
    title: 'stream-chaos: freshness p95 per second, kills marked',
    svg: lineChart({
      title: 'stream-chaos: freshness p95 per second of stored time (ms)',
      xLabel: 'seconds since the feed started',
      yLabel: 'ms',
      series: [
        { name: 'victim', points: perSecondP95(vicFirst, feedStart).filter(([s]) => s >= 0) },
        { name: 'reference', points: perSecondP95(refFirst, feedStart).filter(([s]) => s >= 0) },
      ],
      markers,
    }),
  });
  return charts;
}

/** Replay against the arithmetic, and recovery freshness against steady. */
export function chaosRatios(run: ChaosRun, f: ChaosFigures): Ratio[] {
  const { kills } = run;
  const { fresh } = f;
  const ratios: Ratio[] = [];
  ratios.push({
    name: 'replayed (_replayed_events_total) / (Σ since checkpoint × rate × share), mean over process kills',
    value: (() => {
      const rs = kills
        .filter((k) => k.kind === 'process' && k.replayedEvents !== undefined && k.expectedTotal)
        .map((k) => k.replayedEvents! / k.expectedTotal!);
      return rs.length ? rs.reduce((a, b) => a + b, 0) / rs.length : undefined;
    })(),
    note: 'about 1 expected while the partitions keep up with the feed',
  });
  ratios.push({
    name: 'freshness p95 recovery / steady (victim)',
    value:
      fresh.victimSteady.count && fresh.victimRecovery.count
        ? fresh.victimRecovery.p95 / Math.max(1, fresh.victimSteady.p95)
        : undefined,
  });
  return ratios;
}

/** One run record per pipeline; the victim carries the kill and correctness figures. */
export function chaosRuns(
  plan: Plan,
  run: ChaosRun,
  f: ChaosFigures,
  pipelines: readonly Pipeline[],
): RunRecord[] {
  const { fed, kills, ref, victim } = run;
  const { cmp, correct, fresh, ckpt } = f;
  const runs: RunRecord[] = [];
  for (const p of pipelines)
    runs.push({
      label: p.label,
      target: `pipeline-checkpointed ${p.instances.length} instance${p.instances.length > 1 ? 's' : ''}`,
      server: { command: p.instances[0]!.handle.command, env: {} },
      metrics: {
        rate_target: plan.rate,
        rate_actual: fed.rateActual,
        stored: fed.stored[p === ref ? 0 : 1],
        predictions: p === ref ? cmp.referenceCount : cmp.victimCount,
        restarts: p.instances.reduce((a, i) => a + i.readies.length - 1, 0),
        ...(p === victim
          ? {
              kills: kills.length,
              duplicates: cmp.duplicates.length,
              lost: cmp.lost.length,
              extra: cmp.extra.length,
              mismatches: cmp.mismatches.length,
              fresh_steady_p95_ms: fresh.victimSteady.p95,
              fresh_recovery_p95_ms: fresh.victimRecovery.p95,
              checkpoint_max_ms: Math.max(...ckpt.victim.map((c) => c.maxMs)),
              checkpoint_size_max_bytes: Math.max(...ckpt.victim.map((c) => c.maxBytes)),
            }
          : { fresh_steady_p95_ms: fresh.referenceSteady.p95 }),
      },
      ...(correct || p === ref
        ? {}
        : { error: 'victim output differs from the reference (see the correctness table)' }),
    });
  return runs;
}

/** report.json's data beyond the plan: feed, kills, comparison, freshness, checkpoints, samples. */
export function chaosData(run: ChaosRun, f: ChaosFigures): Record<string, unknown> {
  const { fed, kills, refCovered, vicCovered, refS, vicS } = run;
  const { cmp, correct, dupInfo, fresh, ckpt } = f;
  const rel = (t: number): number => relS(run.feedStart, t);
  const data: Record<string, unknown> = {};
  data['feed'] = { ...fed, publishedAt: undefined };
  data['kills'] = kills.map((k) => ({ ...k, atS: rel(k.killAtMs) }));
  data['comparison'] = {
    ...cmp,
    duplicates: cmp.duplicates.slice(0, 50),
    lost: cmp.lost.slice(0, 50),
    extra: cmp.extra.slice(0, 50),
    mismatches: cmp.mismatches.slice(0, 50),
    referenceDuplicates: cmp.referenceDuplicates.slice(0, 50),
    counts: {
      duplicates: cmp.duplicates.length,
      lost: cmp.lost.length,
      extra: cmp.extra.length,
      mismatches: cmp.mismatches.length,
    },
  };
  data['correct'] = correct;
  data['duplicatesByPartition'] = Object.fromEntries(dupInfo);
  data['freshness'] = fresh;
  data['checkpoints'] = ckpt;
  data['covered'] = { reference: refCovered, victim: vicCovered };
  data['samples'] = {
    victim: vicS.samples.map((s) => ({ ...s, tS: rel(s.tMs) })),
    reference: refS.samples.map((s) => [rel(s.tMs), s.lag, s.covered, s.replaying]),
  };
  return data;
}

function meaning(
  plan: Plan,
  kills: readonly KillRecord[],
  cmp: OutputComparison,
  correct: boolean,
  fresh: { victimSteady: FreshnessSummary; victimRecovery: FreshnessSummary },
  ck: readonly PartitionCheckpoints[],
): string {
  const parts: string[] = [];
  const intervalS = plan.intervalMs / 1000;
  parts.push(
    correct
      ? `${kills.length} kills (${kills.filter((k) => k.kind === 'process').length} of a process, ` +
          `${kills.filter((k) => k.kind === 'instance').length} of a whole instance) left the victim's output exactly ` +
          `equal to the failure-free run's: ${fmt(cmp.victimCount)} predictions, none twice, none missing, every risk the same.`
      : `The victim's output is NOT the reference's: ${cmp.duplicates.length} duplicates, ${cmp.lost.length} lost, ` +
          `${cmp.extra.length} extra, ${cmp.mismatches.length} value mismatches.`,
  );
  const withReplay = kills.filter((k) => k.replayedEvents !== undefined && k.expectedTotal);
  if (withReplay.length)
    parts.push(
      'Replay per kill, measured against the arithmetic (Σ over the killed partitions of time since checkpoint × ' +
        'the partition’s rate): ' +
        withReplay
          .map(
            (k) =>
              `#${k.n} ${fmt(k.replayedEvents)} replayed vs ${fmt(Math.round(k.expectedTotal!))} expected ` +
              `(${k.partitions.map((x) => `p${x.partition} ${s1(x.sinceCheckpointS)} s`).join(', ')}; ${fmt(k.heldTotal)} acks held)`,
          )
          .join('; ') +
        `. With a ${intervalS} s interval a partition replays at most about ${intervalS} s of its own events — a ` +
        'crash just after a checkpoint replays almost nothing, one just before the next replays the whole interval; ' +
        'the same holds at 60 s (45 s after a checkpoint: about 45 s of events).',
    );
  const rec = kills.filter((k) => k.recovery?.recoveredAt !== undefined);
  if (rec.length)
    parts.push(
      `From kill to every partition caught up took ${rec
        .map((k) => `${s1((k.recovery!.recoveredAt! - k.killAtMs) / 1000)} s (#${k.n}, ${k.kind})`)
        .join(
          ', ',
        )}: a process kill costs the supervisor's restart, the restores and the replay plus the downtime's ` +
        `backlog worked off at capacity − rate; a whole-instance kill adds the lease TTL (${plan.leaseTtlMs / 1000} s) ` +
        'before the survivor may take the partitions.',
    );
  if (fresh.victimRecovery.count && fresh.victimSteady.count)
    parts.push(
      `Freshness p95 was ${ms(fresh.victimSteady.p95)} ms outside the recoveries and ${ms(fresh.victimRecovery.p95)} ms for ` +
        'events that arrived between a kill and its recovery: a crash shows up as freshness, not as loss.',
    );
  if (ck.length)
    parts.push(
      `A victim partition's checkpoint took ${ck.map((c) => `${ms(c.p50Ms)} ms`).join(' / ')} (p50, p0…p${ck.length - 1}; ` +
        `max ${ms(Math.max(...ck.map((c) => c.maxMs)))} ms) and its state reached ` +
        `${ck.map((c) => `${fmt(Math.round(c.maxBytes / 1024))} KiB`).join(' / ')}: each partition writes only its ` +
        `own keys, about a ${ck.length}th of one pipeline's state.`,
    );
  return parts.join(' ');
}
