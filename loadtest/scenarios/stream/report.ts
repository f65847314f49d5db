/**
 * stream's report: the sustained-rate steps and fractions, the capacity-planning answer, the backlog drain,
 * embedded vs external, zero loss and what it means (Markdown, charts, ratios, notes), and report.json's data.
 */
import { fmt, markdownTable } from '../../../scripts/markdown';
import { barChart, lineChart, PALETTE } from '../../harness/svg-chart';
import type { Chart, Ratio, ScenarioContext } from '../../harness/types';
import { FRESHNESS_TARGET_MS, type RunMeasure } from '../../pipeline/measure';
import type { DrainFigures } from './drain';
import type { ModeRun, SustainedRun } from './drive';
import { cpuText, ms, runData, STEP_HEADERS, stepRow } from './kit';
import { PLANNING, type Plan } from './plan';

/** What the report phases add to: the scenario result's Markdown, notes, charts and ratios. */
export interface StreamReport {
  md: string[];
  notes: string[];
  charts: Chart[];
  ratios: Ratio[];
}

/** The run measured at the capacity-planning rate, wherever it was measured. */
export function planningMeasure(s: SustainedRun): RunMeasure | undefined {
  const { steps, fractions, planningRun } = s;
  return [...steps, ...fractions.map((f) => f.m), ...(planningRun ? [planningRun] : [])].find(
    (m) => m.rate === PLANNING.rate,
  );
}

/** Steps, the sustained rate, and 50/80/100 % of it. */
export function sustainedSection({ md }: StreamReport, plan: Plan, s: SustainedRun): void {
  const { steps, fractions, sustained } = s;
  md.push('### Sustained rate', '');
  md.push(
    `Steps of ${plan.stepS} s (the ramp of ${plan.rampS} s and ${plan.settleS} s after it are left out of the ` +
      'figures: the ramp starts every delivery at once, a burst above the rate, and one GPS interval later all ' +
      'report at their cadence), each a fresh simulator run against one ' +
      `running pipeline; a step passes with freshness p95 < ${FRESHNESS_TARGET_MS} ms, zero loss, a lag that grew by ` +
      'less than half a second of input over the step, the simulator within 10 % of its rate, and a drain once it stops.',
    '',
    markdownTable(STEP_HEADERS, steps.map(stepRow)),
    '',
  );
  md.push(
    sustained === undefined
      ? `**Sustained rate: none of the steps passed** (lowest ${plan.steps[0]} ev/s).`
      : `**Sustained rate: ${fmt(sustained)} events/s** (${
          steps.length >= 2 && steps[1]!.rate < steps[0]!.rate
            ? `the first step, ${fmt(steps[0]!.rate)} ev/s, failed and half of it passed: the limit lies between`
            : `the highest passing step${
                steps[steps.length - 1]!.pass ? '; every step passed, so the true limit is higher' : ''
              }`
        }).`,
    '',
  );
  if (sustained !== undefined) {
    const top = steps.find((m) => m.rate === sustained)!;
    const rows = [...fractions.map((f) => ({ f: `${f.fraction * 100} %`, m: f.m })), { f: '100 %', m: top }];
    md.push(
      markdownTable(
        [
          'of sustained',
          'ev/s',
          'fresh p50 ms',
          'fresh p95 ms',
          'fresh p99 ms',
          'max lag',
          'max pending',
          'zero loss',
        ],
        rows.map(({ f, m }) => [
          f,
          fmt(m.rate),
          ms(m.freshness.p50),
          ms(m.freshness.p95),
          ms(m.freshness.p99),
          fmt(m.lag.maxLag),
          fmt(m.lag.maxPending),
          m.zeroLoss.ok ? 'yes' : `NO (${m.zeroLoss.reasons.join('; ')})`,
        ]),
      ),
      '',
    );
  }
}

/** Does one pipeline hold the planning rate within its SLO (also a note), and its run when it was a separate one. */
export function planningSection(
  { md, notes }: StreamReport,
  ctx: ScenarioContext,
  plan: Plan,
  s: SustainedRun,
  at3000: RunMeasure | undefined,
): void {
  const { planningRun } = s;
  const planningAnswer =
    at3000 === undefined
      ? `Capacity planning (${fmt(PLANNING.rate)} GPS events/s, p95 < ${PLANNING.p95Ms / 1000} s): not measured.`
      : `Capacity planning — does one pipeline process on this machine hold ${fmt(PLANNING.rate)} GPS events/s with ` +
        `freshness p95 < ${PLANNING.p95Ms / 1000} s? **${
          at3000.freshness.p95 < PLANNING.p95Ms && at3000.zeroLoss.ok && at3000.lagStable ? 'Yes' : 'No'
        }**: measured p95 ${ms(at3000.freshness.p95)} ms at ${fmt(at3000.sim.rate_actual)} ev/s actual ` +
        `(p50 ${ms(at3000.freshness.p50)}, p99 ${ms(at3000.freshness.p99)} ms; pipeline in→out p95 ` +
        `${ms(at3000.parts.pipeline.p95)} ms, simulator delay p95 ${ms(at3000.parts.publisher.p95)} ms; max lag ${fmt(at3000.lag.maxLag)}, ` +
        `zero loss ${at3000.zeroLoss.ok ? 'yes' : 'no'}), with the simulator and the broker on the same ${ctx.cores} cores.`;
  md.push(planningAnswer, '');
  if (planningRun)
    md.push(
      `The search stopped below ${fmt(PLANNING.rate)} ev/s, so a separate ${plan.stepS} s run measured it ` +
        `(its verdict is the 500 ms rule's; the answer above uses the ${PLANNING.p95Ms / 1000} s SLO):`,
      '',
      markdownTable(STEP_HEADERS, [stepRow(planningRun)]),
      '',
    );
  notes.push(planningAnswer.replace(/\*\*/g, ''));
}

/** Freshness against the offered rate, the sustained rate marked. */
export function sustainedChart({ charts }: StreamReport, s: SustainedRun): void {
  const { steps, sustained } = s;
  if (steps.length) {
    const pts = (pick: (m: RunMeasure) => number): [number, number][] =>
      steps.map((m) => [m.rate, pick(m)] as [number, number]);
    charts.push({
      file: 'stream-sustained.svg',
      title: 'stream: freshness vs offered rate',
      svg: lineChart({
        title: 'stream: freshness (broker-stored − event time) vs offered rate',
        xLabel: 'offered events/s',
        yLabel: 'ms',
        series: [
          { name: 'p50', points: pts((m) => m.freshness.p50) },
          { name: 'p95', points: pts((m) => m.freshness.p95) },
          { name: 'p99', points: pts((m) => m.freshness.p99) },
          { name: 'p95 target', color: '#999999', points: pts(() => FRESHNESS_TARGET_MS) },
        ],
        markers: sustained === undefined ? [] : [{ x: sustained, label: 'sustained' }],
      }),
    });
  }
}

/** The drain's figures against the arithmetic, as a table, two ratios and two charts. */
export function drainSection(
  { md, ratios, charts }: StreamReport,
  d: DrainFigures,
  sustained: number | undefined,
): void {
  md.push('### Backlog drain', '');
  const t0 = d.measure.startMs;
  const rel = (t: number): number => (t - t0) / 1000;
  md.push(
    markdownTable(
      ['figure', 'value'],
      [
        ['rate R', `${fmt(d.rate)} ev/s (actual ${fmt(d.measure.sim.rate_actual)})`],
        [
          'pause',
          `${d.pauseS} s (POST /api/pause at ${rel(d.pauseAtMs).toFixed(1)} s, resume at ${rel(d.resumeAtMs).toFixed(1)} s)`,
        ],
        [
          'backlog at resume (pending + unacked)',
          `${fmt(d.backlogAtResume)} (R × pause = ${fmt(d.backlogArithmetic)})`,
        ],
        ['catch-up: lag < R × 0.5 s', `${ms(d.caughtUpMs)} ms after resume`],
        ['freshness p95 back < 500 ms (3 s in a row)', `${ms(d.freshRecoveredMs)} ms after resume`],
        [
          'capacity while catching up (slope of received)',
          `${fmt(d.catchUpRate && Math.round(d.catchUpRate))} ev/s`,
        ],
        [
          'capacity, backlog-only drain (no simulator)',
          `${fmt(d.pureDrainRate && Math.round(d.pureDrainRate))} ev/s (95 % of ${fmt(d.pureDrainBacklog)} events in ${ms(d.pureDrainMs)} ms)`,
        ],
        ['sustained rate (freshness rule)', sustained === undefined ? '–' : `${fmt(sustained)} ev/s`],
        ['arithmetic backlog ÷ (catch-up capacity − R)', `${ms(d.arithmetic.catchUp)} ms`],
        ['arithmetic backlog ÷ (backlog-only capacity − R)', `${ms(d.arithmetic.pureDrain)} ms`],
        ['arithmetic backlog ÷ (sustained − R)', `${ms(d.arithmetic.sustained)} ms`],
        [
          'zero loss over the whole run',
          (d.measure.zeroLoss.ok ? 'yes' : `NO (${d.measure.zeroLoss.reasons.join('; ')})`) +
            ` — ${fmt(d.measure.sim.stored)} stored, ${fmt(d.measure.readBack.first)} first predictions, ` +
            `${fmt(d.measure.zeroLoss.unpredicted)} unpredicted (≤ not ready), ${fmt(d.measure.zeroLoss.republished)} ` +
            'effects published again for messages redelivered after ack_wait while paused (deduplicated by the broker)',
        ],
      ],
    ),
    '',
  );
  ratios.push({
    name: 'drain time measured / arithmetic (catch-up capacity)',
    value:
      d.caughtUpMs !== undefined && d.arithmetic.catchUp ? d.caughtUpMs / d.arithmetic.catchUp : undefined,
    note: 'lag sampled each 0.5 s, refreshed by the pipeline each 1 s: ±1 s',
  });
  ratios.push({
    name: 'drain time measured / arithmetic (backlog-only capacity)',
    value:
      d.caughtUpMs !== undefined && d.arithmetic.pureDrain
        ? d.caughtUpMs / d.arithmetic.pureDrain
        : undefined,
    note: 'the backlog-only drain has no simulator competing for the cores',
  });
  const markers = [
    { x: rel(d.pauseAtMs), label: 'pause' },
    { x: rel(d.resumeAtMs), label: 'resume' },
    ...(d.caughtUpMs !== undefined ? [{ x: rel(d.resumeAtMs + d.caughtUpMs), label: 'caught up' }] : []),
  ];
  charts.push({
    file: 'stream-drain-lag.svg',
    title: 'stream: consumer lag during the drain',
    svg: lineChart({
      title: `stream: consumer lag (pending + unacked), ${fmt(d.rate)} ev/s, pause ${d.pauseS} s`,
      xLabel: 'seconds since the simulator started',
      yLabel: 'messages',
      series: [{ name: 'lag', points: d.timeline.lag }],
      markers,
    }),
  });
  charts.push({
    file: 'stream-drain-freshness.svg',
    title: 'stream: freshness p95 per second during the drain',
    svg: lineChart({
      title: 'stream: freshness p95 per second (by broker-stored time)',
      xLabel: 'seconds since the simulator started',
      yLabel: 'ms',
      series: [
        { name: 'p95', points: d.timeline.p95 },
        {
          name: '500 ms',
          color: '#999999',
          points: d.timeline.p95.map(([s]) => [s, FRESHNESS_TARGET_MS]),
        },
      ],
      markers,
    }),
  });
}

/** The modes' table. */
export function modesSection(
  { md }: StreamReport,
  plan: Plan,
  modeRate: number,
  modes: readonly ModeRun[],
): void {
  md.push('### Embedded vs external inference', '');
  md.push(
    `Two fresh pipelines, one per mode, the same workload (seed 21) at ${fmt(modeRate)} ev/s for ${plan.modesS} s; ` +
      'external calls `serve --nodes 1 --workers 1` (no rate limit) over WebSocket. CPU is % of one core per ' +
      'process tree over the run.',
    '',
    markdownTable(
      [
        'mode',
        'actual ev/s',
        'fresh p50 ms',
        'fresh p95 ms',
        'fresh p99 ms',
        'in→out p95 ms',
        'max lag',
        'zero loss',
        'pipeline CPU',
        'server CPU',
        'simulator CPU',
        'broker CPU',
        'verdict',
      ],
      modes.map(({ mode, m, error }) =>
        m
          ? [
              mode,
              fmt(m.sim.rate_actual),
              ms(m.freshness.p50),
              ms(m.freshness.p95),
              ms(m.freshness.p99),
              ms(m.parts.pipeline.p95),
              fmt(m.lag.maxLag),
              m.zeroLoss.ok ? 'yes' : 'NO',
              cpuText(m.cpu.pipelinePct),
              cpuText(m.cpu.serverPct),
              cpuText(m.cpu.simulatorPct),
              cpuText(m.cpu.brokerPct),
              m.pass ? 'PASS' : `FAIL: ${m.failures.join('; ')}`,
            ]
          : [
              mode,
              '–',
              '–',
              '–',
              '–',
              '–',
              '–',
              '–',
              '–',
              '–',
              '–',
              `FAILED: ${(error ?? '').split('\n')[0]}`,
            ],
      ),
    ),
    '',
  );
}

/** external ÷ embedded ratios and the freshness bars. */
export function modesFigures(
  { ratios, charts }: StreamReport,
  modeRate: number,
  modes: readonly ModeRun[],
): void {
  const e = modes.find((x) => x.mode === 'embedded')?.m;
  const x = modes.find((x) => x.mode === 'external')?.m;
  const r = (pick: (m: RunMeasure) => number | undefined): number | undefined => {
    const a = x ? pick(x) : undefined;
    const b = e ? pick(e) : undefined;
    return a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0
      ? undefined
      : a / b;
  };
  ratios.push(
    {
      name: 'freshness p50 external/embedded',
      value: r((m) => m.freshness.p50),
      note: 'lower is better',
    },
    {
      name: 'freshness p95 external/embedded',
      value: r((m) => m.freshness.p95),
      note: 'lower is better',
    },
    {
      name: 'freshness p99 external/embedded',
      value: r((m) => m.freshness.p99),
      note: 'lower is better',
    },
    {
      name: 'CPU external (pipeline + server) / embedded',
      value: r((m) => (m.cpu.pipelinePct ?? 0) + (m.cpu.serverPct ?? 0)),
      note: '% of one core over the run (ps per process tree)',
    },
  );
  if (e || x) {
    const bars = modes.flatMap(({ mode, m }, i) =>
      (['p50', 'p95', 'p99'] as const).map((q) => ({
        label: `${mode} ${q}`,
        value: m ? m.freshness[q] : Number.NaN,
        color: PALETTE[i % PALETTE.length]!,
      })),
    );
    charts.push({
      file: 'stream-modes.svg',
      title: 'stream: embedded vs external freshness',
      svg: barChart({
        title: `stream: freshness at ${fmt(modeRate)} ev/s (ms, lower is better)`,
        unit: 'ms',
        bars,
      }),
    });
  }
}

/** Zero loss, precisely; what it means; the host note. */
export function closingSection(
  { md, notes }: StreamReport,
  ctx: ScenarioContext,
  s: SustainedRun,
  at3000: RunMeasure | undefined,
  modes: readonly ModeRun[],
): void {
  const { steps, sustained, drain } = s;
  const e = modes.find((x) => x.mode === 'embedded')?.m;
  const x = modes.find((x) => x.mode === 'external')?.m;
  md.push(
    '### Zero loss, precisely',
    '',
    'A run has zero loss when, once drained, judged on what the broker holds: the durable consumer has 0 pending ' +
      'and 0 unacked (the pipeline acks an event only after its effects’ PubAcks); the pipeline processed at least ' +
      'every stored event (`received − duplicates ≥ stored`, stored = the simulator’s PubAcks minus broker ' +
      'duplicates); nothing went to dead letters or the late side output (the workload is clean); no event has two ' +
      'first predictions in the output stream; and every stored event is accounted for — reading the input stream ' +
      'back by event id, the events without a first prediction are no more than the pipeline’s not-ready count ' +
      '(events before their delivery’s first status or GPS point: nothing to predict yet). The pipeline’s own ' +
      'prediction counter can exceed the stream: a message redelivered after ack_wait (a pause longer than it) ' +
      'publishes its effects again, and the broker drops them by Msg-Id.',
    '',
  );
  md.push('### What it means', '', meaning(sustained, steps, at3000, drain, e, x, ctx.cores), '');
  notes.push(
    `This host has ${ctx.cores} cores shared by the simulator, nats-server, the pipeline (and the serving process in ` +
      'external mode), and possibly by other work: absolute figures are noisy; compare ratios and steps of one run.',
  );
}

/** report.json's data beyond the plan: steps, fractions, the sustained and planning figures, the drain, the modes. */
export function streamData(
  s: SustainedRun,
  at3000: RunMeasure | undefined,
  modeRate: number,
  modes: readonly ModeRun[],
): Record<string, unknown> {
  const { steps, fractions, sustained, planningRun, drain } = s;
  const data: Record<string, unknown> = {};
  data['steps'] = steps.map(runData);
  data['fractions'] = fractions.map((f) => ({ fraction: f.fraction, ...runData(f.m) }));
  data['sustainedRate'] = sustained ?? null;
  data['planningRun'] = planningRun ? runData(planningRun) : null;
  data['planning'] = at3000
    ? {
        rate: PLANNING.rate,
        sloP95Ms: PLANNING.p95Ms,
        measured: at3000.freshness,
        meets: at3000.freshness.p95 < PLANNING.p95Ms && at3000.zeroLoss.ok,
      }
    : null;
  if (drain) {
    const { measure, ...rest } = drain;
    data['drain'] = { ...rest, run: runData(measure) };
  }
  data['modes'] = modes.map(({ mode, m, error }) => ({
    mode,
    rate: modeRate,
    ...(m ? runData(m) : {}),
    ...(error ? { error } : {}),
  }));
  return data;
}

function meaning(
  sustained: number | undefined,
  steps: readonly RunMeasure[],
  at3000: RunMeasure | undefined,
  drain: DrainFigures | undefined,
  e: RunMeasure | undefined,
  x: RunMeasure | undefined,
  cores: number,
): string {
  const parts: string[] = [];
  parts.push(
    sustained === undefined
      ? `On this ${cores}-core host no step held freshness p95 < 500 ms with zero loss.`
      : `On this ${cores}-core host, with the publisher and the broker competing for the same cores, one pipeline ` +
          `process held ${fmt(sustained)} events/s with freshness p95 < 500 ms and zero loss.`,
  );
  // Who had the cores at the first failing step: the three processes' CPU against what the host has.
  const failed = steps.find((m) => !m.pass);
  if (failed) {
    const used = (failed.cpu.pipelinePct ?? 0) + (failed.cpu.simulatorPct ?? 0) + (failed.cpu.brokerPct ?? 0);
    parts.push(
      `At ${fmt(failed.rate)} ev/s the pipeline took ${Math.round(failed.cpu.pipelinePct ?? 0)} %, the simulator ` +
        `${Math.round(failed.cpu.simulatorPct ?? 0)} % and nats-server ${Math.round(failed.cpu.brokerPct ?? 0)} % of a core` +
        (used < cores * 100 * 0.85
          ? ` — ${Math.round(used)} % of the ${cores * 100} % this host has, so other work on the host held the rest and ` +
            `the limit measured here is the shared machine's`
          : ' — the host was saturated by the workload itself') +
        `; the simulator's own delay (event stored − event time) reached p95 ${ms(failed.parts.publisher.p95)} ms.`,
    );
  }
  if (at3000)
    parts.push(
      `The 3,000 ev/s planning example is ${at3000.freshness.p95 < PLANNING.p95Ms ? 'met' : 'not met'} here: ` +
        `p95 ${ms(at3000.freshness.p95)} ms against a 2 s SLO` +
        (at3000.freshness.p95 < PLANNING.p95Ms
          ? `, about ${fmt(Math.floor(PLANNING.p95Ms / Math.max(1, at3000.freshness.p95)))}× headroom.`
          : '.'),
    );
  if (drain && drain.caughtUpMs !== undefined)
    parts.push(
      `After a ${drain.pauseS} s stop at ${fmt(drain.rate)} ev/s the backlog of ${fmt(drain.backlogAtResume)} events was ` +
        `worked off in ${(drain.caughtUpMs / 1000).toFixed(1)} s` +
        (drain.arithmetic.catchUp
          ? ` (arithmetic with the capacity measured during the catch-up: ${(drain.arithmetic.catchUp / 1000).toFixed(1)} s)`
          : '') +
        ': recovery time is backlog ÷ (capacity − rate), so a pipeline run near its capacity recovers slowly. While ' +
        'consuming is stopped no prediction is published, so a freshness alert alone sees nothing: the lag and the ' +
        'oldest unprocessed age are what catch it.',
    );
  if (e && x)
    parts.push(
      `External inference gave ${(x.freshness.p95 / Math.max(1, e.freshness.p95)).toFixed(2)}× the embedded p95 at the ` +
        'same rate (a WebSocket round trip to a second process per prediction, on the same cores); on one host ' +
        'embedded is the cheaper mode, external pays off when the model needs machines of its own.',
    );
  return parts.join(' ');
}

/** The pipeline's sustained rate against the null pipeline's (the broker's speed here): the ratio the goal is set on. */
export function nullSection(
  { md, ratios, charts, notes }: StreamReport,
  plan: Plan,
  pipeline: SustainedRun,
  reference: SustainedRun,
  error: string | undefined,
): void {
  md.push('### Against the null pipeline', '');
  md.push(
    'The null pipeline (loadtest/pipeline/null-pipeline.ts) reads the same input stream with the same ' +
      'partitions, consumer limits and in-flight bound, and republishes each event unchanged to the ' +
      'predictions stream with a Msg-Id, acking after its PubAck: no decoding, no state, no model. Same ' +
      `simulator, same judging; its steps go up by ${fmt(plan.nullStep)} ev/s from the pipeline's sustained rate.`,
    '',
    markdownTable(STEP_HEADERS, reference.steps.map(stepRow)),
    '',
  );
  if (error) notes.push(`null pipeline: ${error.split('\n')[0]}`);
  const top = reference.steps[reference.steps.length - 1];
  const bound = top?.pass ? ' (every step passed: the null rate is higher, the ratio lower)' : '';
  const ratio =
    pipeline.sustained !== undefined && reference.sustained !== undefined
      ? pipeline.sustained / reference.sustained
      : undefined;
  md.push(
    `**Null pipeline: ${reference.sustained === undefined ? 'no step passed' : `${fmt(reference.sustained)} ev/s`}${bound}; ` +
      `pipeline: ${pipeline.sustained === undefined ? 'no step passed' : `${fmt(pipeline.sustained)} ev/s`}; ` +
      `ratio ${ratio === undefined ? '–' : `${Math.round(ratio * 100)} %`}** (goal ≥ 75 %).`,
    '',
  );
  ratios.push({
    name: 'pipeline sustained rate / null pipeline sustained rate',
    value: ratio,
    note: `steps of ${fmt(plan.nullStep)} ev/s on the null side, of the plan's steps on the pipeline side`,
  });
  const pts = (steps: RunMeasure[]): [number, number][] =>
    steps.map((m) => [m.rate, m.freshness.p95] as [number, number]);
  if (reference.steps.length || pipeline.steps.length)
    charts.push({
      file: 'stream-vs-null.svg',
      title: 'stream: freshness p95 vs offered rate, pipeline and null pipeline',
      svg: lineChart({
        title: 'stream: freshness p95 vs offered rate — pipeline and null pipeline',
        xLabel: 'offered events/s',
        yLabel: 'ms',
        series: [
          { name: 'pipeline p95', points: pts(pipeline.steps) },
          { name: 'null pipeline p95', points: pts(reference.steps) },
          {
            name: 'p95 target',
            color: '#999999',
            points: pts([...pipeline.steps, ...reference.steps]).map(([x]) => [x, FRESHNESS_TARGET_MS]),
          },
        ],
        markers: [
          ...(pipeline.sustained === undefined ? [] : [{ x: pipeline.sustained, label: 'pipeline' }]),
          ...(reference.sustained === undefined ? [] : [{ x: reference.sustained, label: 'null' }]),
        ],
      }),
    });
}

/** The profiled run's cost per event by stage (main thread of the pipeline process). */
export function stagesSection({ md, notes }: StreamReport, s: SustainedRun): void {
  const p = s.profiled;
  if (!p) return;
  md.push('### Cost per event by stage', '');
  if (p.error || p.events === 0) {
    notes.push(`stage profile: ${p.error ?? 'no events while profiling'}`);
    md.push(`No stage table: ${p.error ?? 'no events while profiling'}.`, '');
    return;
  }
  md.push(
    `A run at the sustained rate (${fmt(p.m.rate)} ev/s) with the pipeline process's main thread profiled for ` +
      `${p.seconds} s (GET /api/profile, 1 ms sampling) while it received ${fmt(p.events)} events; each ` +
      'sample is given to the first stage of its stack in this order: checkpoint, decode (parse and checks), ' +
      'encode (effects), infer (the backend; the model itself runs on its worker thread), publish, ack, receive ' +
      '(NATS client reads), decide (decider, event-time engine, per-message bookkeeping), metrics, admin, gc. ' +
      `The run: freshness p95 ${ms(p.m.freshness.p95)} ms, pipeline CPU ${cpuText(p.m.cpu.pipelinePct)} ` +
      '(its process tree: supervisor, pipeline, inference worker).',
    '',
    markdownTable(
      ['stage', 'µs per event', 'share of busy time', 'CPU ms'],
      p.stages
        .filter((c) => c.stage !== 'idle')
        .map((c) => [
          c.stage,
          (c.usPerEvent ?? 0).toFixed(1),
          `${c.pct.toFixed(1)} %`,
          fmt(Math.round(c.ms)),
        ]),
    ),
    '',
  );
  const st = p.state;
  if (!st || st.keys === 0) return;
  const perKey = (bytes: number) => `${fmt(Math.round(bytes / st.keys))} B`;
  md.push(
    `State at the end of the profiled window: ${fmt(st.keys)} live deliveries. Checkpoint bytes per second are ` +
      `the written-bytes counter over the ${p.seconds} s window (every partition, the shipped interval).`,
    '',
    markdownTable(
      ['figure', 'total', 'per live delivery'],
      [
        [
          'decider state (its estimate)',
          `${(st.stateBytes / 2 ** 20).toFixed(1)} MiB`,
          perKey(st.stateBytes),
        ],
        [
          'resident memory (pipeline process tree)',
          st.rssBytes === undefined ? '–' : `${(st.rssBytes / 2 ** 20).toFixed(0)} MiB`,
          st.rssBytes === undefined ? '–' : perKey(st.rssBytes),
        ],
        [
          'checkpoint bytes written per second',
          `${fmt(Math.round(st.checkpointBytesPerS))} B/s`,
          `${perKey(st.checkpointBytesPerS)}/s`,
        ],
        ['last checkpoint (one partition)', `${fmt(st.lastCheckpointBytes)} B`, '–'],
      ],
    ),
    '',
  );
}
