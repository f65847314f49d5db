/**
 * registry: the model registry's canary, shadow and rollback on `digits` (stable = 1,
 * candidate = 2), `serve --nodes 2 --workers 1`, WebSocket clients recording every answer.
 *
 * 1. canary 10 % over ≥ 2,000 requests: observed share of version 2 (target 10 % ± 2 points);
 *    cross-checked with `streaminfer_routed_requests_total{route="canary"}`.
 * 2. shadow over ≥ 400 distinct rows at a modest rate: every client answer must come from the
 *    stable version; the server's disagreement count (Δ`streaminfer_shadow_comparisons_total
 *    {agree="false"}`) must equal the one computed offline with onnxruntime-node on the very
 *    same rows (argmax of both ONNX files).
 * 3. rollback under load: promote 2 (stable = 2, previous = 1), 8 closed-loop clients, call
 *    rollback; time from the call to the first answer from version 1 whose request was sent
 *    after the call started (target < 100 ms), failed requests over the whole phase (target 0).
 */
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';
import { fmt, markdownTable } from '../../scripts/markdown';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';
import { argmaxRows } from '../../scripts/models/train-mlp';
import { AdminCaller } from '../harness/admin-caller';
import { callText, type TimedCall } from '../harness/admin-client';
import { type MetricSample, scrapeMetrics, sumSamples } from '../harness/metrics';
import { onScratchTwoNodes } from '../harness/scenario-kit';
import type { ServerHandle } from '../harness/server-process';
import { ClosedLoop, type RowSource, rowSource } from '../harness/stream-clients';
import { barChart, type LineSeries, lineChart, PALETTE } from '../harness/svg-chart';
import {
  type AnswerRecord,
  countDisagreements,
  errorCounts,
  firstServedAfter,
  latencyMs,
  latencyStats,
  timelineBuckets,
  versionCounts,
  versionShare,
} from '../harness/swap-analysis';
import type { Chart, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';
import { type Check, checksMarkdown, checksNote } from '../harness/verdicts';

const MODEL = 'digits';
const STABLE = '1';
const CANDIDATE = '2';

/** Done-when figures. */
export const REGISTRY_TARGETS = {
  canaryPercent: 10,
  /** observed canary share within this many percentage points of canaryPercent */
  canaryTolerancePoints: 2,
  canaryRequests: 2000,
  shadowRequests: 400,
  /** rollback: call → first answer from the old stable (request sent after the call), below */
  rollbackMs: 100,
} as const;

/** Normal-approximation 95 % interval of a share measured over n trials (percentage points). */
export function shareInterval95(share: number, n: number): [number, number] {
  const half = 1.96 * Math.sqrt((share * (1 - share)) / Math.max(1, n));
  return [Math.max(0, share - half), Math.min(1, share + half)];
}

/** Row of the `seq`-th request of connection `conn` among `conns`: distinct for the first 1,797 requests. */
export function distinctRow(conn: number, seq: number, conns: number, n: number): number {
  // 7 is coprime with 1797 (= 3 × 599), so i ↦ 7i mod n visits every row once
  return ((seq * conns + conn) * 7) % n;
}

/** Top-1 labels of `version` on `rows`, computed in this process with onnxruntime-node. */
export async function offlineLabels(
  modelFile: string,
  pixels: ArrayLike<number>,
  rows: readonly number[],
): Promise<number[]> {
  const batch = new Float32Array(rows.length * 64);
  rows.forEach((r, i) => {
    for (let c = 0; c < 64; c++) batch[i * 64 + c] = pixels[r * 64 + c]!;
  });
  const session = await ort.InferenceSession.create(modelFile);
  try {
    const out = await session.run({ pixels: new ort.Tensor('float32', batch, [rows.length, 64]) });
    const probs = out['probabilities'];
    if (!probs) throw new Error(`${modelFile}: no "probabilities" output`);
    return Array.from(argmaxRows(probs.data as Float32Array, rows.length, 10));
  } finally {
    await session.release();
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const pct = (v: number | undefined, digits = 2): string =>
  v === undefined ? '–' : `${(v * 100).toFixed(digits)}%`;
const ms1 = (v: number | undefined): string | number => (v === undefined ? '–' : Number(v.toFixed(1)));

function modelView(c: TimedCall): Record<string, unknown> {
  const m = c.body['model'];
  return typeof m === 'object' && m !== null ? (m as Record<string, unknown>) : {};
}

function delta(
  before: readonly MetricSample[],
  after: readonly MetricSample[],
  name: string,
  filter: Record<string, string>,
): number {
  return sumSamples(after, name, filter) - sumSamples(before, name, filter);
}

interface RollbackTrial {
  trial: number;
  promote: TimedCall;
  rollback: TimedCall;
  /** phase start (clock), call start */
  startMs: number;
  answers: AnswerRecord[];
  /** ms from the call to the first v1 answer whose request was sent after the call */
  effectMs: number | undefined;
  /** ms from the call to the first v1 answer of any request (in flight at the call included) */
  firstAnyMs: number | undefined;
  /** answers from the new stable (2) whose request was sent after the call returned */
  staleAfterReturn: number;
  errors: Record<string, number>;
  unmatched: number;
  closes: number;
}

/** The phases' sizes, the clients' rows, and the parameters the report shows. */
function registrySetup(ctx: ScenarioContext) {
  const T = REGISTRY_TARGETS;
  const canaryConns = 8;
  const shadowConns = 2;
  const rollbackConns = 8;
  const trials = ctx.quick ? 1 : 3;
  const shadowRequests = ctx.quick ? T.shadowRequests : 600;
  const rollbackLeadMs = ctx.quick ? 500 : 1000;
  const params = {
    server: `serve --nodes 2 --workers 1 --model ${MODEL}`,
    env: 'STREAMINFER_RATE_LIMIT_RPS=0, fresh STREAMINFER_STATE_DIR',
    canary: { percent: T.canaryPercent, requests: T.canaryRequests, connections: canaryConns },
    shadow: { requests: shadowRequests, connections: shadowConns, gapMs: 2, rows: 'distinct' },
    rollback: { connections: rollbackConns, trials, beforeMs: rollbackLeadMs, afterMs: rollbackLeadMs },
  };
  const digits = loadDigits(digitsDataPath(ctx.repoRoot));
  const rows: RowSource = rowSource(digits.pixels, 64);
  return {
    canaryConns,
    shadowConns,
    rollbackConns,
    trials,
    shadowRequests,
    rollbackLeadMs,
    params,
    digits,
    rows,
  };
}

type RegistrySetup = ReturnType<typeof registrySetup>;

/** The admin API and the clients as the phases use them; `calls` collects the set-up calls for the report. */
interface Driver {
  server: ServerHandle;
  api(p: string, body: unknown): Promise<TimedCall>;
  /** a call that must answer 200 with these fields in its `model` view */
  must(p: string, body: unknown, want?: Record<string, unknown>): Promise<TimedCall>;
  loopFor(connections: number, extra?: Partial<ConstructorParameters<typeof ClosedLoop>[0]>): ClosedLoop;
  calls: TimedCall[];
}

function driver(server: ServerHandle, admin: AdminCaller, rows: RowSource): Driver {
  const api = (p: string, body: unknown): Promise<TimedCall> => admin.post(`${server.adminUrl}${p}`, body);
  return {
    server,
    api,
    async must(p, body, want) {
      const c = await api(p, body);
      if (c.status !== 200) throw new Error(`POST ${p} ${JSON.stringify(body)}: ${callText(c)}`);
      const m = modelView(c);
      for (const [k, v] of Object.entries(want ?? {}))
        if (m[k] !== v)
          throw new Error(`POST ${p}: expected model.${k} = ${String(v)}, got ${JSON.stringify(m)}`);
      return c;
    },
    loopFor: (connections, extra = {}) =>
      new ClosedLoop({
        url: server.wsUrl,
        connections,
        model: MODEL,
        rows,
        warmupPerConnection: 5,
        timeoutMs: 10_000,
        ...extra,
      }),
    calls: [],
  };
}

interface CanaryRun {
  answers: AnswerRecord[];
  unmatched: number;
  before: MetricSample[];
  after: MetricSample[];
}

/** Phase 1: canary at its percentage over a fixed number of requests. */
async function measureCanary(ctx: ScenarioContext, s: RegistrySetup, d: Driver): Promise<CanaryRun> {
  const T = REGISTRY_TARGETS;
  d.calls.push(
    await d.must(
      `/api/models/${MODEL}/canary`,
      { percent: T.canaryPercent },
      { canary_percent: T.canaryPercent },
    ),
  );
  const loop = d.loopFor(s.canaryConns, { maxRequests: T.canaryRequests });
  await loop.open();
  const before = await scrapeMetrics(`${d.server.adminUrl}/metrics`);
  ctx.log(`registry: canary ${T.canaryPercent}% over ${T.canaryRequests} requests`);
  loop.start();
  await loop.done;
  const answers = await loop.stop();
  const after = await scrapeMetrics(`${d.server.adminUrl}/metrics`);
  ctx.log(`registry: canary share ${pct(versionShare(answers, CANDIDATE))}`);
  return { answers, unmatched: loop.unmatched, before, after };
}

interface ShadowRun {
  answers: AnswerRecord[];
  unmatched: number;
  agree: number;
  disagree: number;
  skipped: number;
  waitedMs: number;
  offline1: number[];
  offline2: number[];
  rows: number[];
}

/** Phase 2: shadow on distinct rows; the server's comparison counters, then the same rows offline. */
async function measureShadow(ctx: ScenarioContext, s: RegistrySetup, d: Driver): Promise<ShadowRun> {
  const { shadowConns, shadowRequests, rows, digits } = s;
  d.calls.push(await d.must(`/api/models/${MODEL}/canary`, { percent: 0 }, { canary_percent: 0 }));
  d.calls.push(await d.must(`/api/models/${MODEL}/shadow`, { enabled: true }, { shadow: true }));
  // warm-up requests are shadowed too: measure the counters after it
  const loop = d.loopFor(shadowConns, {
    maxRequests: shadowRequests,
    gapMs: 2,
    rowFor: (conn, seq) => distinctRow(conn, seq, shadowConns, rows.n),
  });
  await loop.open();
  await sleep(300);
  const url = `${d.server.adminUrl}/metrics`;
  const before = await scrapeMetrics(url);
  ctx.log(`registry: shadow over ${shadowRequests} requests`);
  loop.start();
  await loop.done;
  const answers = await loop.stop();
  const sentOk = answers.filter((a) => a.error === undefined).length;
  const t = performance.now();
  let agree = 0;
  let disagree = 0;
  let skipped = 0;
  for (let i = 0; i < 100; i++) {
    const after = await scrapeMetrics(url);
    agree = delta(before, after, 'streaminfer_shadow_comparisons_total', { model: MODEL, agree: 'true' });
    disagree = delta(before, after, 'streaminfer_shadow_comparisons_total', { model: MODEL, agree: 'false' });
    skipped = delta(before, after, 'streaminfer_shadow_skipped_total', { model: MODEL });
    if (agree + disagree + skipped >= answers.length) break;
    await sleep(50);
  }
  const waitedMs = performance.now() - t;
  d.calls.push(await d.must(`/api/models/${MODEL}/shadow`, { enabled: false }, { shadow: false }));
  const sentRows = answers.map((a) => a.row);
  ctx.log(
    `registry: shadow ${agree} agree, ${disagree} disagree, ${skipped} skipped (of ${sentOk} ok); offline…`,
  );
  const file = (v: string): string => path.join(ctx.repoRoot, 'models', MODEL, v, 'model.onnx');
  const offline1 = await offlineLabels(file(STABLE), digits.pixels, sentRows);
  const offline2 = await offlineLabels(file(CANDIDATE), digits.pixels, sentRows);
  return {
    answers,
    unmatched: loop.unmatched,
    agree,
    disagree,
    skipped,
    waitedMs,
    offline1,
    offline2,
    rows: sentRows,
  };
}

/** Phase 3: promote the candidate, then roll back under load, `trials` times. */
async function measureRollbacks(ctx: ScenarioContext, s: RegistrySetup, d: Driver): Promise<RollbackTrial[]> {
  const { trials, rollbackConns, rollbackLeadMs } = s;
  const rollbacks: RollbackTrial[] = [];
  for (let trial = 0; trial < trials; trial++) {
    if (trial > 0)
      d.calls.push(
        await d.must(`/api/models/${MODEL}/candidate`, { version: CANDIDATE }, { candidate: CANDIDATE }),
      );
    const promote = await d.must(
      `/api/models/${MODEL}/promote`,
      {},
      { stable: CANDIDATE, previous_stable: STABLE },
    );
    const loop = d.loopFor(rollbackConns);
    await loop.open();
    const startMs = performance.now();
    loop.start();
    await sleep(rollbackLeadMs);
    const rollback = await d.api(`/api/models/${MODEL}/rollback`, {});
    await sleep(rollbackLeadMs);
    const answers = await loop.stop();
    if (rollback.status !== 200) throw new Error(`rollback: ${callText(rollback)}`);
    const m = modelView(rollback);
    if (m['stable'] !== STABLE)
      throw new Error(`rollback: stable is ${String(m['stable'])}, expected ${STABLE}`);
    const effect = firstServedAfter(answers, rollback.calledMs, STABLE);
    const anyV1 = answers
      .filter((a) => a.error === undefined && a.version === STABLE && a.recvMs >= rollback.calledMs)
      .reduce<number | undefined>(
        (best, a) => (best === undefined || a.recvMs < best ? a.recvMs : best),
        undefined,
      );
    const r: RollbackTrial = {
      trial: trial + 1,
      promote,
      rollback,
      startMs,
      answers,
      effectMs: effect?.ms,
      firstAnyMs: anyV1 === undefined ? undefined : anyV1 - rollback.calledMs,
      staleAfterReturn: answers.filter(
        (a) => a.error === undefined && a.version === CANDIDATE && a.sentMs >= rollback.returnedMs,
      ).length,
      errors: errorCounts(answers),
      unmatched: loop.unmatched,
      closes: loop.closes.length,
    };
    rollbacks.push(r);
    ctx.log(
      `registry: rollback ${trial + 1}/${trials}: effect ${ms1(r.effectMs)} ms, API ${String(rollback.body['duration_ms'])} ms, ` +
        `${answers.length} requests, errors ${JSON.stringify(r.errors)}`,
    );
  }
  return rollbacks;
}

interface RegistryRun {
  setup: TimedCall[];
  canary: CanaryRun;
  shadow: ShadowRun;
  rollbacks: RollbackTrial[];
}

/** Measured phases, in order, on one server: stable = 1 and candidate = 2 first. */
async function driveRegistry(
  ctx: ScenarioContext,
  s: RegistrySetup,
  server: ServerHandle,
): Promise<RegistryRun> {
  // admin calls from another process: a fetch here would delay the clients' receive stamps
  const admin = await AdminCaller.start(`${server.adminUrl}/health`);
  try {
    const d = driver(server, admin, s.rows);
    // stable = 1 (atomic reload; the repository default 2 becomes previous_stable), candidate = 2
    d.calls.push(await d.must('/api/reload', { model: MODEL, version: STABLE }));
    d.calls.push(
      await d.must(
        `/api/models/${MODEL}/candidate`,
        { version: CANDIDATE },
        { stable: STABLE, candidate: CANDIDATE },
      ),
    );
    const canary = await measureCanary(ctx, s, d);
    const shadow = await measureShadow(ctx, s, d);
    const rollbacks = await measureRollbacks(ctx, s, d);
    return { setup: d.calls, canary, shadow, rollbacks };
  } finally {
    admin.close();
  }
}

/** Analysis: canary share, shadow counts against offline, rollback effect, and the done-when checks. */
function registryFigures(s: RegistrySetup, m: RegistryRun) {
  const T = REGISTRY_TARGETS;
  const { trials } = s;
  const { canary, shadow, rollbacks } = m;
  // ---- analysis: canary
  const cOk = canary.answers.filter((a) => a.error === undefined);
  const cShare = versionShare(canary.answers, CANDIDATE);
  const cErrors = errorCounts(canary.answers);
  const cFailed = canary.answers.length - cOk.length;
  const routedCanary = delta(canary.before, canary.after, 'streaminfer_routed_requests_total', {
    model: MODEL,
    route: 'canary',
  });
  const routedStable = delta(canary.before, canary.after, 'streaminfer_routed_requests_total', {
    model: MODEL,
    route: 'stable',
  });
  const ci = cShare === undefined ? undefined : shareInterval95(cShare, cOk.length);
  const cDev = cShare === undefined ? undefined : Math.abs(cShare * 100 - T.canaryPercent);

  // ---- analysis: shadow
  const sOk = shadow.answers.filter((a) => a.error === undefined);
  const sVersions = versionCounts(shadow.answers);
  const sCandidate = sOk.filter((a) => a.version !== STABLE).length;
  const offlineDisagree = countDisagreements(shadow.offline1, shadow.offline2);
  const distinctRows = new Set(shadow.rows).size;
  // the answers clients got, against the offline stable labels (same rows, same order)
  const servedVsOffline1 = shadow.answers.filter(
    (a, i) => a.error === undefined && a.label !== String(shadow.offline1[i]),
  ).length;
  const sCompared = shadow.agree + shadow.disagree;

  // ---- analysis: rollback
  const effects = rollbacks.map((r) => r.effectMs);
  const worstEffect =
    effects.every((e) => e !== undefined) && effects.length ? Math.max(...(effects as number[])) : undefined;
  const rbFailed = rollbacks.reduce(
    (a, r) => a + Object.values(r.errors).reduce((x, y) => x + y, 0) + r.unmatched + r.closes,
    0,
  );
  const rbRequests = rollbacks.reduce((a, r) => a + r.answers.length, 0);
  const rbStale = rollbacks.reduce((a, r) => a + r.staleAfterReturn, 0);
  const apiMs = rollbacks.map((r) => Number(r.rollback.body['duration_ms']));

  const checks: Check[] = [
    {
      name: `canary share of version ${CANDIDATE}`,
      target: `${T.canaryPercent}% ± ${T.canaryTolerancePoints} points over ≥ ${fmt(T.canaryRequests)} requests`,
      measured: `${pct(cShare)} of ${fmt(cOk.length)}`,
      pass:
        cDev === undefined ? undefined : cDev <= T.canaryTolerancePoints && cOk.length >= T.canaryRequests,
      detail:
        `95% interval ${ci ? `${pct(ci[0], 1)}–${pct(ci[1], 1)}` : '–'}; /metrics routed canary ${fmt(routedCanary)}, stable ${fmt(routedStable)}` +
        (cFailed ? `; ${cFailed} failed: ${JSON.stringify(cErrors)}` : '') +
        (cDev !== undefined && cDev > T.canaryTolerancePoints
          ? `; off by ${(cDev - T.canaryTolerancePoints).toFixed(2)} points beyond the tolerance`
          : ''),
    },
    {
      name: 'shadow: answers clients got from the candidate',
      target: '0',
      measured: fmt(sCandidate),
      pass: sOk.length ? sCandidate === 0 : undefined,
      detail: `versions served: ${Object.entries(sVersions)
        .map(([v, n]) => `${v}: ${n}`)
        .join(', ')}; ${servedVsOffline1} served labels differ from offline version ${STABLE}`,
    },
    {
      name: 'shadow disagreement: server = offline',
      target: 'equal, over ≥ 400 requests, every copy compared',
      measured: `server ${fmt(shadow.disagree)} / offline ${fmt(offlineDisagree)}`,
      pass:
        sCompared === shadow.answers.length && shadow.answers.length >= T.shadowRequests
          ? shadow.disagree === offlineDisagree
          : sOk.length
            ? false
            : undefined,
      detail:
        `${fmt(shadow.answers.length)} requests on ${distinctRows} distinct rows; server compared ${fmt(sCompared)} ` +
        `(${fmt(shadow.agree)} agree, ${fmt(shadow.disagree)} disagree, rate ${pct(sCompared ? shadow.disagree / sCompared : undefined)}), ` +
        `skipped ${fmt(shadow.skipped)}; offline rate ${pct(shadow.rows.length ? offlineDisagree / shadow.rows.length : undefined)}`,
    },
    {
      name: 'rollback takes effect (call → first old-stable answer, request sent after the call)',
      target: `< ${T.rollbackMs} ms${trials > 1 ? ' in every trial' : ''}`,
      measured: effects.map((e) => `${ms1(e)} ms`).join(', '),
      pass: worstEffect === undefined ? undefined : worstEffect < T.rollbackMs,
      detail:
        `API duration_ms ${apiMs.map((v) => fmt(v)).join(', ')}; first version-${STABLE} answer of any request ` +
        `${rollbacks.map((r) => `${ms1(r.firstAnyMs)} ms`).join(', ')}; ${rbStale} version-${CANDIDATE} answers sent after the call returned`,
    },
    {
      name: 'failed requests during the rollback phase',
      target: '0',
      measured: fmt(rbFailed),
      pass: rbRequests ? rbFailed === 0 && rbStale === 0 : undefined,
      detail: `${fmt(rbRequests)} requests over ${trials} trial(s)`,
    },
  ];

  return {
    cOk,
    cShare,
    cErrors,
    cFailed,
    routedCanary,
    routedStable,
    ci,
    sVersions,
    offlineDisagree,
    distinctRows,
    servedVsOffline1,
    sCompared,
    checks,
  };
}

type RegistryFigures = ReturnType<typeof registryFigures>;

/** Charts: canary share, shadow comparisons, the first rollback trial over time. */
function registryCharts(m: RegistryRun, f: RegistryFigures): Chart[] {
  const T = REGISTRY_TARGETS;
  const { shadow, rollbacks } = m;
  const { cShare, offlineDisagree } = f;
  // ---- charts
  const charts: Chart[] = [
    {
      file: 'registry-canary.svg',
      title: 'registry: canary share (configured vs observed)',
      svg: barChart({
        title: `registry: canary share of version ${CANDIDATE} (%)`,
        unit: '%',
        bars: [
          { label: 'configured', value: T.canaryPercent, color: PALETTE[0] },
          { label: 'observed', value: cShare === undefined ? Number.NaN : cShare * 100, color: PALETTE[1] },
          { label: 'low bound', value: T.canaryPercent - T.canaryTolerancePoints, color: '#bab0ac' },
          { label: 'high bound', value: T.canaryPercent + T.canaryTolerancePoints, color: '#bab0ac' },
        ],
      }),
    },
    {
      file: 'registry-shadow.svg',
      title: 'registry: shadow comparisons',
      svg: barChart({
        title: `registry: shadow over ${shadow.answers.length} requests (server vs offline)`,
        unit: 'requests',
        bars: [
          { label: 'agree (server)', value: shadow.agree, color: PALETTE[4] },
          { label: 'disagree (server)', value: shadow.disagree, color: PALETTE[2] },
          { label: 'disagree (offline)', value: offlineDisagree, color: PALETTE[1] },
          { label: 'skipped (server)', value: shadow.skipped, color: '#bab0ac' },
        ],
      }),
    },
  ];
  const shown = rollbacks[0];
  if (shown) {
    const bucketMs = 20;
    const callMs = shown.rollback.calledMs;
    const buckets = timelineBuckets(shown.answers, shown.startMs, bucketMs);
    const shift = (shown.startMs - callMs) / 1000;
    const versions = [...new Set(buckets.flatMap((b) => Object.keys(b.byVersion)))].sort();
    const series: LineSeries[] = versions.map((v, i) => ({
      name: `version ${v}`,
      color: PALETTE[i % PALETTE.length]!,
      points: buckets.map((b): [number, number] => [b.tMs / 1000 + shift, b.byVersion[v] ?? 0]),
    }));
    if (buckets.some((b) => b.errors))
      series.push({
        name: 'errors',
        color: '#e15759',
        points: buckets.map((b) => [b.tMs / 1000 + shift, b.errors]),
      });
    charts.push({
      file: 'registry-rollback.svg',
      title: 'registry: rollback under load (answers per 20 ms by version; 0 = rollback call)',
      svg: lineChart({
        title: `registry: rollback under load, trial 1 (answers per ${bucketMs} ms by version)`,
        xLabel: 'seconds since the rollback call',
        yLabel: `answers / ${bucketMs} ms`,
        series,
        markers: [
          { x: 0, label: 'rollback called' },
          { x: (shown.rollback.returnedMs - callMs) / 1000, label: 'returned' },
          ...(shown.effectMs !== undefined ? [{ x: shown.effectMs / 1000, label: `first v${STABLE}` }] : []),
        ],
        width: 900,
      }),
    });
  }

  return charts;
}

/** The report's Markdown section. */
function registryMarkdown(s: RegistrySetup, m: RegistryRun, f: RegistryFigures): string {
  const { canaryConns, shadowConns, rollbackConns, rollbackLeadMs } = s;
  const { canary, shadow, rollbacks } = m;
  const {
    checks,
    cOk,
    cFailed,
    cShare,
    ci,
    routedCanary,
    routedStable,
    distinctRows,
    sVersions,
    sCompared,
    offlineDisagree,
  } = f;
  // ---- markdown
  const md: string[] = ['### Done-when', '', checksMarkdown(checks), ''];
  md.push(
    '### Canary',
    '',
    markdownTable(
      [
        'requests',
        'ok',
        'failed',
        `version ${STABLE}`,
        `version ${CANDIDATE}`,
        'observed share',
        '95% interval',
        'routed canary (/metrics)',
        'routed stable (/metrics)',
        'p50 ms',
        'p99 ms',
      ],
      [
        [
          canary.answers.length,
          cOk.length,
          cFailed,
          versionCounts(canary.answers)[STABLE] ?? 0,
          versionCounts(canary.answers)[CANDIDATE] ?? 0,
          pct(cShare),
          ci ? `${pct(ci[0], 1)}–${pct(ci[1], 1)}` : '–',
          routedCanary,
          routedStable,
          ms1(latencyStats(cOk.map(latencyMs)).p50),
          ms1(latencyStats(cOk.map(latencyMs)).p99),
        ],
      ],
    ),
    '',
    `${canaryConns} connections, 1 in flight each, no routing key (each request drawn at random). ` +
      'The /metrics deltas include the other node’s share of the same requests (both nodes are summed).',
    '',
    '### Shadow',
    '',
    markdownTable(
      [
        'requests',
        'distinct rows',
        'served v1',
        'served v2',
        'compared',
        'agree',
        'disagree (server)',
        'disagree (offline)',
        'skipped',
        'waited for counters ms',
      ],
      [
        [
          shadow.answers.length,
          distinctRows,
          sVersions[STABLE] ?? 0,
          sVersions[CANDIDATE] ?? 0,
          sCompared,
          shadow.agree,
          shadow.disagree,
          offlineDisagree,
          shadow.skipped,
          Math.round(shadow.waitedMs),
        ],
      ],
    ),
    '',
    `${shadowConns} connections, 1 in flight each, 2 ms pause between requests. Offline = argmax of ` +
      '`models/digits/1/model.onnx` vs `models/digits/2/model.onnx` run in the bench process with ' +
      'onnxruntime-node (one batch, input `pixels` float32 [n, 64], output `probabilities`) on the rows ' +
      'that were sent; server = Δ`streaminfer_shadow_comparisons_total{agree}` (and Δ`streaminfer_shadow_skipped_total`) ' +
      'between a scrape after the warm-up and the counters once every copy was accounted for.',
    '',
    '### Rollback under load',
    '',
    markdownTable(
      [
        'trial',
        'requests',
        'failed',
        'API duration_ms',
        'client call ms',
        'effect ms',
        'first v1 (any) ms',
        `v${CANDIDATE} sent after return`,
        'p99 ms',
      ],
      rollbacks.map((r) => [
        r.trial,
        r.answers.length,
        Object.values(r.errors).reduce((a, b) => a + b, 0) + r.unmatched + r.closes,
        fmt(Number(r.rollback.body['duration_ms'])),
        ms1(r.rollback.returnedMs - r.rollback.calledMs),
        ms1(r.effectMs),
        ms1(r.firstAnyMs),
        r.staleAfterReturn,
        ms1(latencyStats(r.answers.filter((a) => a.error === undefined).map(latencyMs)).p99),
      ]),
    ),
    '',
    `Each trial: candidate = ${CANDIDATE} (after the first), promote (stable = ${CANDIDATE}, previous = ${STABLE}), ` +
      `${rollbackConns} closed-loop clients, rollback called after ${rollbackLeadMs} ms, load for ${rollbackLeadMs} ms more. ` +
      `"Effect" = call start → arrival of the first version-${STABLE} answer whose request was sent after the call started; ` +
      '"first v1 (any)" also counts requests already in flight at the call.',
    '',
  );

  return md.join('\n');
}

/** The scenario's result from a measured run. */
function registryReport(
  s: RegistrySetup,
  m: RegistryRun,
  serverInfo: NonNullable<RunRecord['server']>,
): ScenarioResult {
  const { params } = s;
  const { setup, canary, shadow, rollbacks } = m;
  const f = registryFigures(s, m);
  const {
    checks,
    cOk,
    cErrors,
    cShare,
    ci,
    routedCanary,
    routedStable,
    distinctRows,
    sVersions,
    offlineDisagree,
    servedVsOffline1,
  } = f;
  const charts = registryCharts(m, f);
  const markdown = registryMarkdown(s, m, f);
  const notes = [checksNote('registry done-when', checks)];
  return {
    params,
    runs: [],
    ratios: [],
    charts,
    notes,
    markdown,
    data: {
      checks,
      setup: setup.map((c) => ({ status: c.status, body: c.body, ms: c.returnedMs - c.calledMs })),
      canary: {
        requests: canary.answers.length,
        ok: cOk.length,
        errors: cErrors,
        unmatched: canary.unmatched,
        versions: versionCounts(canary.answers),
        share: cShare,
        interval95: ci,
        routedCanary,
        routedStable,
      },
      shadow: {
        requests: shadow.answers.length,
        distinctRows,
        versions: sVersions,
        errors: errorCounts(shadow.answers),
        unmatched: shadow.unmatched,
        agree: shadow.agree,
        disagree: shadow.disagree,
        skipped: shadow.skipped,
        offlineDisagree,
        servedVsOffline1,
        rows: shadow.rows,
      },
      rollback: rollbacks.map((r) => ({
        trial: r.trial,
        requests: r.answers.length,
        errors: r.errors,
        unmatched: r.unmatched,
        closes: r.closes,
        effectMs: r.effectMs,
        firstAnyMs: r.firstAnyMs,
        staleAfterReturn: r.staleAfterReturn,
        apiDurationMs: r.rollback.body['duration_ms'],
        clientCallMs: r.rollback.returnedMs - r.rollback.calledMs,
        promote: r.promote.body,
        rollback: r.rollback.body,
      })),
      server: serverInfo,
    },
  };
}

export const registry: Scenario = {
  name: 'registry',
  description:
    'Model registry on `digits` (stable = 1, candidate = 2), `serve --nodes 2 --workers 1`: canary 10 % over ' +
    '≥ 2,000 WebSocket requests (observed share of version 2, target ± 2 points); shadow over ≥ 400 distinct ' +
    'rows (clients only ever get version 1; the server’s disagreement count must equal the one computed ' +
    'offline with onnxruntime-node on the same rows); rollback under load (8 clients; call → first answer ' +
    'from the old stable < 100 ms, zero failed requests).',
  async run(ctx) {
    const setup = registrySetup(ctx);
    const run = await onScratchTwoNodes(ctx, 'registry', MODEL, setup.params, (server) =>
      driveRegistry(ctx, setup, server),
    );
    if ('failure' in run) return run.failure;
    return registryReport(setup, run.value, run.server);
  },
};
