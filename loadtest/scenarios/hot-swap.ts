/**
 * hot-swap: model reloads under continuous load. 32 WebSocket clients (one request in flight
 * each, closed loop) stream `digits` requests at `serve --nodes 2 --workers 1` for 30 s while
 * 20 reloads alternate between versions 1 and 2 — half atomic, half rolling — plus one reload
 * pointing at a corrupt model file (version 3, garbage bytes) in the middle. Every answer is
 * recorded (send time, receive time, version, epoch, connection), so the report can check:
 * zero failed or lost requests, the corrupt reload refused with a clear message while traffic
 * carries on, no answer from the released version after a commit, per-connection epoch order
 * (epochs never decrease; within one epoch only that epoch's stable version), and p99 of the
 * requests in flight during a reload call vs the rest.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fmt, markdownTable } from '../../scripts/markdown';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';
import { AdminCaller } from '../harness/admin-caller';
import { callText, type TimedCall } from '../harness/admin-client';
import { histogramMeanDelta, type MetricSample, scrapeMetrics, sumSamples } from '../harness/metrics';
import { onScratchTwoNodes } from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import { ClosedLoop, rowSource } from '../harness/stream-clients';
import { barChart, type LineSeries, lineChart, PALETTE } from '../harness/svg-chart';
import {
  type AnswerRecord,
  type Commit,
  checkAfterCommits,
  checkConnectionOrder,
  epochVersions,
  errorCounts,
  type Interval,
  type LatencyStats,
  latencyMs,
  latencyStats,
  minMedianMax,
  splitByIntervals,
  timelineBuckets,
  versionCounts,
} from '../harness/swap-analysis';
import type { Chart, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';
import { type Check, checksMarkdown, checksNote } from '../harness/verdicts';

const MODEL = 'digits';
const CORRUPT_VERSION = '3';

/** Done-when figures. */
export const HOT_SWAP_TARGETS = {
  /** p99 of the requests in flight during a reload call ÷ p99 of the rest, at most */
  p99Factor: 2,
} as const;

export type Strategy = 'atomic' | 'rolling';

export interface PlannedReload {
  /** position among all calls (the corrupt one included) */
  index: number;
  version: string;
  strategy: Strategy;
  corrupt: boolean;
  /** when to call it, ms after the clock started */
  atMs: number;
}

/** Strategy of the j-th good reload: a, r, r, a, … — each strategy gets both versions equally. */
const STRATEGY_CYCLE: readonly Strategy[] = ['atomic', 'rolling', 'rolling', 'atomic'];

/**
 * The reload schedule: `reloads` good reloads alternating 1, 2, 1, … (the server starts on the
 * repository default, 2), strategies cycling atomic, rolling, rolling, atomic, and one reload
 * to the corrupt version in the middle; calls spread evenly between `headMs` of steady state
 * at the start and `tailMs` at the end.
 */
export function reloadPlan(
  reloads: number,
  durationMs: number,
  headMs: number,
  tailMs: number,
): PlannedReload[] {
  const calls = reloads + 1;
  const span = Math.max(0, durationMs - headMs - tailMs);
  const interval = span / calls;
  const corruptAt = Math.floor(calls / 2);
  const out: PlannedReload[] = [];
  let good = 0;
  for (let k = 0; k < calls; k++) {
    const atMs = Math.round(headMs + k * interval);
    if (k === corruptAt) {
      out.push({ index: k, version: CORRUPT_VERSION, strategy: 'atomic', corrupt: true, atMs });
      continue;
    }
    out.push({
      index: k,
      version: good % 2 === 0 ? '1' : '2',
      strategy: STRATEGY_CYCLE[good % STRATEGY_CYCLE.length]!,
      corrupt: false,
      atMs,
    });
    good++;
  }
  return out;
}

export interface ReloadCall extends PlannedReload {
  /** first attempt's start and the final answer, bench clock */
  calledMs: number;
  returnedMs: number;
  /** attempts (409 reload_in_progress → wait 100 ms, try again) */
  attempts: number;
  call: TimedCall;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function driveReloads(
  admin: AdminCaller,
  adminUrl: string,
  plan: readonly PlannedReload[],
  t0: number,
  log: (m: string) => void,
): Promise<ReloadCall[]> {
  const out: ReloadCall[] = [];
  for (const p of plan) {
    const wait = t0 + p.atMs - performance.now();
    if (wait > 0) await sleep(wait);
    const calledMs = performance.now();
    let attempts = 0;
    let call: TimedCall;
    for (;;) {
      attempts++;
      call = await admin.post(`${adminUrl}/api/reload`, {
        model: MODEL,
        version: p.version,
        strategy: p.strategy,
      });
      if (call.status === 409 && attempts < 100) {
        await sleep(100);
        continue;
      }
      break;
    }
    out.push({ ...p, calledMs, returnedMs: call.returnedMs, attempts, call });
    const b = call.body;
    log(
      `reload ${p.index + 1}/${plan.length} → ${p.version} (${p.strategy}${p.corrupt ? ', corrupt' : ''}): ` +
        (call.status === 200
          ? `${String(b['result'])}, epoch ${String(b['epoch'])}, ${String(b['duration_ms'])} ms`
          : callText(call)),
    );
  }
  return out;
}

function commitOf(r: ReloadCall): Commit | undefined {
  const b = r.call.body;
  if (r.call.status !== 200 || b['result'] !== 'committed' || typeof b['epoch'] !== 'number')
    return undefined;
  const change = (Array.isArray(b['changes']) ? (b['changes'] as Record<string, unknown>[]) : []).find(
    (c) => c['model'] === MODEL,
  );
  return {
    epoch: b['epoch'],
    from: String(change?.['from'] ?? '?'),
    to: String(change?.['to'] ?? r.version),
    calledMs: r.calledMs,
    returnedMs: r.returnedMs,
  };
}

const ms1 = (v: number | undefined): string | number => (v === undefined ? '–' : Number(v.toFixed(1)));

/** Reload counters and mean duration between two scrapes. */
function reloadMetrics(
  before: readonly MetricSample[],
  after: readonly MetricSample[],
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const result of ['committed', 'failed', 'unchanged'])
    for (const strategy of ['atomic', 'rolling']) {
      const d =
        sumSamples(after, 'streaminfer_reloads_total', { result, strategy }) -
        sumSamples(before, 'streaminfer_reloads_total', { result, strategy });
      if (d) out[`${result}/${strategy}`] = d;
    }
  const mean = histogramMeanDelta(before, after, 'streaminfer_reload_duration_seconds');
  if (mean !== undefined) out['mean reload_duration_seconds'] = mean;
  return out;
}

export interface OffenderGroup {
  /** the reload call whose window the requests overlapped ("none" outside every call) */
  call: string;
  /** e.g. "version 1 in epoch 2" */
  kind: string;
  count: number;
  /** first / last send time of these requests, s since the clock started */
  firstSentS: number;
  lastSentS: number;
}

/** Ordering violations grouped by the reload call they overlapped and by (version, epoch). */
export function offenderGroups(
  offenders: readonly AnswerRecord[],
  calls: readonly Pick<
    ReloadCall,
    'index' | 'strategy' | 'version' | 'corrupt' | 'calledMs' | 'returnedMs'
  >[],
  t0: number,
): OffenderGroup[] {
  const groups = new Map<string, OffenderGroup>();
  for (const a of offenders) {
    const c = calls.find((x) => a.sentMs <= x.returnedMs && a.recvMs >= x.calledMs);
    const call = c ? `#${c.index + 1} ${c.strategy} → ${c.version}${c.corrupt ? ' (corrupt)' : ''}` : 'none';
    const kind = `version ${a.version ?? '?'} in epoch ${a.epoch ?? '?'}`;
    const key = `${call}|${kind}`;
    const sentS = (a.sentMs - t0) / 1000;
    const g = groups.get(key);
    if (g) {
      g.count++;
      g.firstSentS = Math.min(g.firstSentS, sentS);
      g.lastSentS = Math.max(g.lastSentS, sentS);
    } else groups.set(key, { call, kind, count: 1, firstSentS: sentS, lastSentS: sentS });
  }
  return [...groups.values()].sort((x, y) => x.firstSentS - y.firstSentS);
}

/** The scenario's sizes and schedule, the clients' rows, and the parameters the report shows. */
function hotSwapSetup(ctx: ScenarioContext) {
  const quick = ctx.quick;
  const connections = ctx.sizes(
    { connections: 32, requests: 0 },
    { connections: 32, requests: 0 },
  ).connections;
  const durationMs = quick ? 10_000 : 30_000;
  const reloads = quick ? 6 : 20;
  const headMs = quick ? 2_000 : 3_000;
  const tailMs = quick ? 2_000 : 3_000;
  const plan = reloadPlan(reloads, durationMs, headMs, tailMs);
  const params = {
    connections,
    inFlightPerConnection: 1,
    durationS: durationMs / 1000,
    reloads,
    corruptReloads: 1,
    reloadIntervalMs: plan.length > 1 ? plan[1]!.atMs - plan[0]!.atMs : undefined,
    steadyHeadS: headMs / 1000,
    steadyTailS: tailMs / 1000,
    server: `serve --nodes 2 --workers 1 --model ${MODEL}`,
    env: 'STREAMINFER_RATE_LIMIT_RPS=0, fresh STREAMINFER_STATE_DIR',
  };
  const digits = loadDigits(digitsDataPath(ctx.repoRoot));
  const rows = rowSource(digits.pixels, 64);
  return { connections, durationMs, headMs, tailMs, plan, params, rows };
}

type HotSwapSetup = ReturnType<typeof hotSwapSetup>;

/** What the measured phase recorded: every answer, every reload call, the clock and /metrics around it. */
interface HotSwapRun {
  loop: ClosedLoop;
  calls: ReloadCall[];
  t0: number;
  tEnd: number;
  before: MetricSample[];
  after: MetricSample[];
}

/** Measured phase: the clients stream for the whole window while the reload calls go out on schedule. */
async function driveHotSwap(
  ctx: ScenarioContext,
  setup: HotSwapSetup,
  modelsDir: string,
  server: ServerHandle,
): Promise<HotSwapRun> {
  const { connections, durationMs, tailMs, plan, rows } = setup;
  // the corrupt version, added after start-up (it must not stop the server from starting)
  fs.mkdirSync(path.join(modelsDir, MODEL, CORRUPT_VERSION), { recursive: true });
  fs.writeFileSync(
    path.join(modelsDir, MODEL, CORRUPT_VERSION, 'model.onnx'),
    'this is not an ONNX file: hot-swap scenario corrupt version\n',
  );
  const loop = new ClosedLoop({
    url: server.wsUrl,
    connections,
    model: MODEL,
    rows,
    warmupPerConnection: 20,
    timeoutMs: 10_000,
  });
  let admin: AdminCaller | undefined;
  try {
    await loop.open();
    // reload calls from another process: a fetch here would delay the clients' receive stamps
    admin = await AdminCaller.start(`${server.adminUrl}/health`);
    const before = await scrapeMetrics(`${server.adminUrl}/metrics`);
    ctx.log(`hot-swap: ${connections} clients for ${durationMs / 1000} s, ${plan.length} reload calls`);
    const t0 = performance.now();
    loop.start();
    const calls = await driveReloads(admin, server.adminUrl, plan, t0, (m) => ctx.log(`hot-swap: ${m}`));
    const lastReturned = calls.at(-1)?.returnedMs ?? t0;
    const endAt = Math.max(t0 + durationMs, lastReturned + tailMs);
    await sleep(endAt - performance.now());
    await loop.stop();
    const tEnd = performance.now();
    const after = await scrapeMetrics(`${server.adminUrl}/metrics`);
    return { loop, calls, t0, tEnd, before, after };
  } catch (e) {
    await loop.stop().catch(() => undefined);
    throw e;
  } finally {
    admin?.close();
  }
}

/** Analysis: epochs the reload API reported, latency during vs outside the calls, order, the corrupt call. */
function analyseHotSwap(m: HotSwapRun) {
  const { loop, calls, t0, tEnd } = m;
  const answers: AnswerRecord[] = loop.answers;
  const ok = answers.filter((a) => a.error === undefined);
  const warm = loop.warmupAnswers.filter((a) => a.error === undefined && a.epoch !== undefined).at(-1);
  const commits = calls.map(commitOf).filter((c): c is Commit => c !== undefined);
  const initialEpoch = warm?.epoch ?? (commits[0] ? commits[0].epoch - 1 : 0);
  const initialVersion = warm?.version ?? commits[0]?.from ?? '2';
  const epochs = epochVersions(initialEpoch, initialVersion, commits);
  const intervals: Interval[] = calls.map((c) => ({ start: c.calledMs, end: c.returnedMs }));
  const { during, steady } = splitByIntervals(ok, intervals);
  const latDuring = latencyStats(during.map(latencyMs));
  const latSteady = latencyStats(steady.map(latencyMs));
  const latAll = latencyStats(ok.map(latencyMs));
  const p99Factor =
    latDuring.p99 !== undefined && latSteady.p99 !== undefined && latSteady.p99 > 0
      ? latDuring.p99 / latSteady.p99
      : undefined;
  const order = checkConnectionOrder(answers, epochs);
  const afterCommit = checkAfterCommits(
    answers,
    commits,
    calls.map((c) => c.calledMs),
  );
  const offenders = offenderGroups(order.offenders, calls, t0);
  const errors = errorCounts(answers);
  const failures = answers.length - ok.length;
  const lost = (errors['client_timeout'] ?? 0) + (errors['connection_closed'] ?? 0);
  const windowS = (tEnd - t0) / 1000;

  // corrupt reload
  const corrupt = calls.find((c) => c.corrupt);
  const epochBeforeCorrupt = corrupt
    ? ([...commits].reverse().find((c) => c.returnedMs <= corrupt.calledMs)?.epoch ?? initialEpoch)
    : undefined;
  const stableBeforeCorrupt = epochBeforeCorrupt === undefined ? undefined : epochs.get(epochBeforeCorrupt);
  const corruptAnswers = corrupt
    ? answers.filter((a) => a.sentMs <= corrupt.returnedMs && a.recvMs >= corrupt.calledMs)
    : [];
  const corruptErrors = corruptAnswers.filter((a) => a.error !== undefined).length;
  const corruptOff = corruptAnswers.filter(
    (a) => a.error === undefined && (a.version !== stableBeforeCorrupt || a.epoch !== epochBeforeCorrupt),
  ).length;
  const cb = corrupt?.call.body ?? {};
  const corruptMessage = String(cb['message'] ?? '');
  const corruptRefused =
    corrupt !== undefined &&
    corrupt.call.status === 500 &&
    cb['code'] === 'reload_failed' &&
    cb['result'] === 'failed' &&
    cb['epoch'] === epochBeforeCorrupt &&
    corruptMessage.includes(`version ${CORRUPT_VERSION}`);

  // reload durations per strategy
  const good = calls.filter((c) => !c.corrupt);
  const committedGood = good.filter((c) => commitOf(c) !== undefined);
  const durationRows = (['atomic', 'rolling'] as const).map((strategy) => {
    const these = committedGood.filter((c) => c.strategy === strategy);
    const server = minMedianMax(these.map((c) => Number(c.call.body['duration_ms'])));
    const client = minMedianMax(these.map((c) => c.returnedMs - c.calledMs));
    return { strategy, server, client };
  });

  return {
    answers,
    ok,
    commits,
    initialEpoch,
    initialVersion,
    epochs,
    during,
    latDuring,
    latSteady,
    latAll,
    p99Factor,
    order,
    afterCommit,
    offenders,
    errors,
    failures,
    lost,
    windowS,
    corrupt,
    epochBeforeCorrupt,
    stableBeforeCorrupt,
    corruptAnswers,
    corruptErrors,
    corruptOff,
    cb,
    corruptRefused,
    good,
    committedGood,
    durationRows,
  };
}

type HotSwapFigures = ReturnType<typeof analyseHotSwap>;

/** The done-when checks. */
function hotSwapChecks(m: HotSwapRun, f: HotSwapFigures): Check[] {
  const { loop } = m;
  const {
    answers,
    ok,
    epochs,
    latDuring,
    latSteady,
    p99Factor,
    order,
    afterCommit,
    offenders,
    errors,
    failures,
    lost,
    corrupt,
    epochBeforeCorrupt,
    stableBeforeCorrupt,
    corruptAnswers,
    corruptErrors,
    corruptOff,
    cb,
    corruptRefused,
    good,
    committedGood,
  } = f;
  const checks: Check[] = [
    {
      name: 'failed or lost requests',
      target: '0',
      measured: fmt(failures + loop.unmatched),
      pass: failures === 0 && loop.unmatched === 0 && loop.closes.length === 0,
      detail:
        `${fmt(answers.length)} requests, ${fmt(ok.length)} ok` +
        (failures ? `; errors ${JSON.stringify(errors)}` : '') +
        (lost ? `; ${lost} lost (client timeout / connection closed)` : '') +
        (loop.unmatched ? `; ${loop.unmatched} unmatched answers` : '') +
        (loop.closes.length ? `; ${loop.closes.length} connections closed by the server` : ''),
    },
    {
      name: 'reloads committed',
      target: `${good.length} of ${good.length}`,
      measured: `${committedGood.length} of ${good.length}`,
      pass: committedGood.length === good.length,
      detail: good
        .filter((c) => commitOf(c) === undefined)
        .map((c) => `#${c.index + 1} → ${c.version}: ${callText(c.call)}`)
        .join('; '),
    },
    {
      name: 'corrupt-file reload refused with a clear message',
      target: '500 reload_failed, epoch unchanged',
      measured: corrupt ? `${callText(corrupt.call)}; epoch ${String(cb['epoch'])}` : 'not called',
      pass: corrupt ? corruptRefused : undefined,
      detail: `epoch before ${epochBeforeCorrupt ?? '–'}`,
    },
    {
      name: 'traffic during the corrupt reload',
      target: '0 errors, old stable + epoch only',
      measured: `${corruptErrors} errors, ${corruptOff} other version/epoch`,
      pass: corrupt ? corruptErrors === 0 && corruptOff === 0 && corruptAnswers.length > 0 : undefined,
      detail: `${corruptAnswers.length} requests in flight during the call (version ${stableBeforeCorrupt ?? '–'}, epoch ${epochBeforeCorrupt ?? '–'})`,
    },
    {
      name: 'answers from the released version after a commit',
      target: '0',
      measured: fmt(afterCommit.releasedVersion + afterCommit.staleEpoch),
      pass:
        afterCommit.checked > 0
          ? afterCommit.releasedVersion === 0 && afterCommit.staleEpoch === 0
          : undefined,
      detail:
        `${fmt(afterCommit.checked)} answers sent after a commit returned: ${afterCommit.staleEpoch} with an older epoch, ` +
        `${afterCommit.releasedVersion} from the replaced version before the next call` +
        (afterCommit.examples.length ? `; e.g. ${afterCommit.examples.join('; ')}` : ''),
    },
    {
      name: 'per-connection epoch order',
      target: 'epochs never decrease; 1 version per epoch',
      measured: `${order.epochDecreases} decreases, ${order.wrongVersionForEpoch + order.unknownEpoch} off-epoch versions`,
      pass:
        order.answers > 0
          ? order.epochDecreases === 0 && order.wrongVersionForEpoch === 0 && order.unknownEpoch === 0
          : undefined,
      detail:
        `${fmt(order.answers)} answers on ${order.connections} connections, ${epochs.size} epochs seen by the driver` +
        (order.oldAfterNew ? `; ${order.oldAfterNew} old-version answers after a new one` : '') +
        (offenders.length
          ? `; by reload call: ${offenders.map((g) => `${g.call}: ${g.count}× ${g.kind}`).join('; ')}`
          : '') +
        (order.examples.length ? `; e.g. ${order.examples.join('; ')}` : ''),
    },
    {
      name: 'p99 during reloads ÷ steady p99',
      target: `≤ ${HOT_SWAP_TARGETS.p99Factor}×`,
      measured: p99Factor === undefined ? '–' : `${p99Factor.toFixed(2)}×`,
      pass: p99Factor === undefined ? undefined : p99Factor <= HOT_SWAP_TARGETS.p99Factor,
      detail:
        `during: ${ms1(latDuring.p99)} ms over ${fmt(latDuring.n)} answers; steady: ${ms1(latSteady.p99)} ms over ${fmt(latSteady.n)}` +
        (p99Factor !== undefined && p99Factor > HOT_SWAP_TARGETS.p99Factor
          ? `; over by ${(p99Factor - HOT_SWAP_TARGETS.p99Factor).toFixed(2)}×`
          : ''),
    },
  ];

  return checks;
}

/** Charts: answers by version over time with the reload calls marked, and the latency bars. */
function hotSwapCharts(m: HotSwapRun, f: HotSwapFigures) {
  const { calls, t0, tEnd } = m;
  const { answers, latDuring, latSteady } = f;
  const bucketMs = 250;
  const buckets = timelineBuckets(answers, t0, bucketMs, tEnd - t0);
  const versions = [...new Set(buckets.flatMap((b) => Object.keys(b.byVersion)))].sort();
  const series: LineSeries[] = versions.map((v, i) => ({
    name: `version ${v}`,
    color: PALETTE[i % PALETTE.length]!,
    points: buckets.map((b): [number, number] => [b.tMs / 1000, b.byVersion[v] ?? 0]),
  }));
  if (buckets.some((b) => b.errors > 0))
    series.push({
      name: 'errors',
      color: '#e15759',
      points: buckets.map((b): [number, number] => [b.tMs / 1000, b.errors]),
    });
  const markers = calls.map((c) => ({
    x: (c.calledMs - t0) / 1000,
    label: c.corrupt ? 'bad' : `${c.strategy === 'atomic' ? 'a' : 'r'}${c.version}`,
  }));
  const charts: Chart[] = [
    {
      file: 'hot-swap-timeline.svg',
      title:
        'hot-swap: answers per 250 ms by version (a = atomic, r = rolling reload to that version; bad = corrupt)',
      svg: lineChart({
        title: 'hot-swap: answers per 250 ms by version served',
        xLabel: 'seconds since start (markers: reload calls; a/r = atomic/rolling → version)',
        yLabel: 'answers / 250 ms',
        series,
        markers,
        width: 1200,
        height: 360,
      }),
    },
    {
      file: 'hot-swap-p99.svg',
      title: 'hot-swap: latency, steady vs during reloads',
      svg: barChart({
        title: 'hot-swap: client latency (ms), steady vs in flight during a reload call',
        unit: 'ms',
        bars: [
          { label: 'p50 steady', value: latSteady.p50 ?? Number.NaN, color: PALETTE[0] },
          { label: 'p50 during', value: latDuring.p50 ?? Number.NaN, color: PALETTE[1] },
          { label: 'p99 steady', value: latSteady.p99 ?? Number.NaN, color: PALETTE[0] },
          { label: 'p99 during', value: latDuring.p99 ?? Number.NaN, color: PALETTE[1] },
        ],
      }),
    },
  ];

  return { bucketMs, buckets, charts };
}

/** Latency of the "during" answers by the kind of call they overlapped (one answer may overlap two). */
function latencyByKind(m: HotSwapRun, f: HotSwapFigures): [string, LatencyStats][] {
  const { calls } = m;
  const { during, latDuring, latSteady } = f;
  const duringOf = (pick: (c: ReloadCall) => boolean): LatencyStats =>
    latencyStats(
      splitByIntervals(
        during,
        calls.filter(pick).map((c) => ({ start: c.calledMs, end: c.returnedMs })),
      ).during.map(latencyMs),
    );
  const latencyRows: [string, LatencyStats][] = [
    ['steady state', latSteady],
    ['during reloads (all)', latDuring],
    ['… during atomic reloads', duringOf((c) => !c.corrupt && c.strategy === 'atomic')],
    ['… during rolling reloads', duringOf((c) => !c.corrupt && c.strategy === 'rolling')],
    ['… during the corrupt reload', duringOf((c) => c.corrupt)],
  ];

  return latencyRows;
}

/** Reload durations per strategy, and every reload call (collapsed). */
function reloadDurationsSection(m: HotSwapRun, f: HotSwapFigures): string[] {
  const { calls, t0 } = m;
  const { ok, durationRows } = f;
  const md: string[] = [];
  md.push(
    '### Reload durations',
    '',
    markdownTable(
      [
        'strategy',
        'committed',
        'server min ms',
        'server median ms',
        'server max ms',
        'client min ms',
        'client median ms',
        'client max ms',
      ],
      durationRows.map((r) => [
        r.strategy,
        r.server?.n ?? 0,
        ms1(r.server?.min),
        ms1(r.server?.median),
        ms1(r.server?.max),
        ms1(r.client?.min),
        ms1(r.client?.median),
        ms1(r.client?.max),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    "Server = the answer's `duration_ms`; client = call start → answer received (bench clock).",
    '',
    '<details><summary>every reload call</summary>',
    '',
    markdownTable(
      [
        '#',
        'at s',
        'strategy',
        'version',
        'HTTP',
        'result',
        'epoch',
        'change',
        'server ms',
        'client ms',
        'attempts',
        'in flight',
      ],
      calls.map((c) => {
        const b = c.call.body;
        const cm = commitOf(c);
        const inFlight = ok.filter((a) => a.sentMs <= c.returnedMs && a.recvMs >= c.calledMs).length;
        return [
          c.index + 1,
          Number(((c.calledMs - t0) / 1000).toFixed(2)),
          c.strategy,
          c.version + (c.corrupt ? ' (corrupt)' : ''),
          c.call.status,
          String(b['result'] ?? b['code'] ?? ''),
          typeof b['epoch'] === 'number' ? b['epoch'] : '',
          cm ? `${cm.from} → ${cm.to}` : '',
          ms1(typeof b['duration_ms'] === 'number' ? b['duration_ms'] : undefined),
          ms1(c.returnedMs - c.calledMs),
          c.attempts,
          inFlight,
        ];
      }),
    ),
    '',
    '</details>',
    '',
  );
  return md;
}

/** The report's Markdown section, and the reload counters it quotes from /metrics. */
function hotSwapMarkdown(
  m: HotSwapRun,
  f: HotSwapFigures,
  checks: readonly Check[],
  latencyRows: readonly [string, LatencyStats][],
): { markdown: string; rm: Record<string, number> } {
  const { before, after } = m;
  const { answers, ok, failures, windowS, latAll, offenders, corrupt, cb } = f;
  const md: string[] = [];
  md.push('### Done-when', '', checksMarkdown(checks), '');
  md.push(
    '### Load',
    '',
    markdownTable(
      ['requests', 'ok', 'failed', 'window s', 'ok req/s', 'versions served', 'p50 ms', 'p99 ms', 'max ms'],
      [
        [
          answers.length,
          ok.length,
          failures,
          Number(windowS.toFixed(1)),
          Math.round(ok.length / windowS),
          Object.entries(versionCounts(answers))
            .map(([v, n]) => `${v}: ${n}`)
            .join(', '),
          ms1(latAll.p50),
          ms1(latAll.p99),
          ms1(latAll.max),
        ],
      ],
    ),
    '',
    markdownTable(
      ['answers', 'n', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms', 'mean ms'],
      latencyRows.map(([name, l]) => [
        name,
        l.n,
        ms1(l.p50),
        ms1(l.p95),
        ms1(l.p99),
        ms1(l.max),
        ms1(l.mean),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    '"During reloads" = answers whose request was in flight while a reload call was in progress: ' +
      '[send, receive] overlaps [call start, answer received] of some `POST /api/reload` (the corrupt ' +
      'one included; a call retried after 409 counts from its first attempt). "Steady" = every other answer. ' +
      'Latency is client-side, send → receive.',
    '',
  );
  md.push(...reloadDurationsSection(m, f));
  if (offenders.length)
    md.push(
      '### Per-connection order violations',
      '',
      markdownTable(
        ['reload call overlapped', 'answers', 'what', 'first sent s', 'last sent s'],
        offenders.map((g) => [
          g.call,
          g.count,
          g.kind,
          Number(g.firstSentS.toFixed(3)),
          Number(g.lastSentS.toFixed(3)),
        ]),
      ),
      '',
      'An answer is a violation when its epoch is lower than an earlier answer’s on the same connection, or ' +
        'its version is not the stable version the reload API reported for that epoch.',
      '',
    );
  if (corrupt)
    md.push(`Corrupt reload answer: \`${corrupt.call.status} ${JSON.stringify(cb).slice(0, 600)}\``, '');
  const rm = reloadMetrics(before, after);
  md.push(
    `/metrics deltas: ${Object.entries(rm)
      .map(([k, v]) => `${k} = ${fmt(v)}`)
      .join(', ')}.`,
    '',
  );

  return { markdown: md.join('\n'), rm };
}

/** The scenario's result from a measured run. */
function hotSwapReport(
  ctx: ScenarioContext,
  setup: HotSwapSetup,
  m: HotSwapRun,
  serverInfo: NonNullable<RunRecord['server']>,
): ScenarioResult {
  const { params, connections } = setup;
  const { loop, calls, t0 } = m;
  const f = analyseHotSwap(m);
  const checks = hotSwapChecks(m, f);
  const { bucketMs, buckets, charts } = hotSwapCharts(m, f);
  const latencyRows = latencyByKind(m, f);
  const { markdown, rm } = hotSwapMarkdown(m, f, checks, latencyRows);
  const {
    answers,
    ok,
    errors,
    windowS,
    latAll,
    latSteady,
    latDuring,
    p99Factor,
    initialEpoch,
    initialVersion,
    durationRows,
    order,
    offenders,
    afterCommit,
    corruptRefused,
    corruptAnswers,
    corruptErrors,
    corruptOff,
  } = f;
  const notes = [checksNote('hot-swap done-when', checks)];
  if (ctx.cores <= 4)
    notes.push(
      `This host has ${ctx.cores} cores shared by the ${connections} clients (one process), two gateway ` +
        'processes and their workers: reload work (loading an ONNX session) competes with serving for CPU.',
    );

  return {
    params,
    runs: [],
    ratios: [
      {
        name: 'p99 during reloads / steady p99',
        value: p99Factor,
        note: `target ≤ ${HOT_SWAP_TARGETS.p99Factor}`,
      },
    ],
    charts,
    notes,
    markdown,
    data: {
      checks,
      requests: answers.length,
      ok: ok.length,
      errors,
      unmatched: loop.unmatched,
      closes: loop.closes,
      windowS,
      latencyMs: { all: latAll, steady: latSteady, during: latDuring },
      latencyByKind: Object.fromEntries(latencyRows),
      p99Factor,
      initial: { epoch: initialEpoch, version: initialVersion },
      reloads: calls.map((c) => ({
        index: c.index,
        atS: (c.calledMs - t0) / 1000,
        strategy: c.strategy,
        version: c.version,
        corrupt: c.corrupt,
        status: c.call.status,
        attempts: c.attempts,
        clientMs: c.returnedMs - c.calledMs,
        body: c.call.body,
      })),
      durations: durationRows,
      order: { ...order, offenders: undefined },
      orderViolationsByCall: offenders,
      afterCommit,
      corrupt: {
        refused: corruptRefused,
        inFlight: corruptAnswers.length,
        errors: corruptErrors,
        offVersionOrEpoch: corruptOff,
      },
      timeline: { bucketMs, buckets },
      reloadMetrics: rm,
      server: serverInfo,
    },
  };
}

export const hotSwap: Scenario = {
  name: 'hot-swap',
  description:
    '32 WebSocket clients (1 in flight each, closed loop) stream `digits` at `serve --nodes 2 --workers 1` ' +
    'for 30 s while 20 reloads alternate between versions 1 and 2 (half atomic, half rolling) plus one ' +
    'reload to a corrupt model file in the middle; every answer recorded (send/receive time, version, ' +
    'epoch, connection). Checks: zero failed or lost requests, the corrupt reload refused with traffic ' +
    'unaffected, no answer from the released version after a commit, per-connection epoch order, ' +
    'p99 of requests in flight during a reload call ≤ 2× the rest. `--quick`: 10 s, 6 reloads.',
  async run(ctx) {
    const setup = hotSwapSetup(ctx);
    const run = await onScratchTwoNodes(ctx, 'hot-swap', MODEL, setup.params, (server, modelsDir) =>
      driveHotSwap(ctx, setup, modelsDir, server),
    );
    if ('failure' in run) return run.failure;
    return hotSwapReport(ctx, setup, run.value, run.server);
  },
};
