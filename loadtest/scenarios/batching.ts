/**
 * batching: what micro-batching buys on a model where batching pays. The heavy `bench`
 * model (models/bench: 256 → 4096 → (4096 → 4096) ×2 shared → 256 MLP) over WebSocket at concurrency 64
 * (64 connections × 1 request in flight), served by `serve --nodes 1 --workers 1` twice in
 * the same run: once with `STREAMINFER_BATCH_SIZE=1` (no batching) and once with the model's
 * own batching (`config.json`), binary tensor frames both ways, and a third time with the model's batching and
 * JSON text both ways (the goal: JSON as fast as binary). The model's in-process speed
 * (`streaminfer bench model bench --json`, same thread settings as the server's single
 * worker), measured alone before each round and after the last (best pass per batch size),
 * gives the ceiling: served req/s is reported as a fraction of the in-process items/s at the
 * mean batch size the server actually reached.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fmt, leftThenRight, markdownTable } from '../../scripts/markdown';
import { histogramMeanDelta, histogramTotals, type MetricSample, scrapeMetrics } from '../harness/metrics';
import { runLoad } from '../harness/run-load';
import {
  type Collector,
  errText,
  interpolateLog2,
  medianOf,
  ratio,
  runAgainst,
  sideBySideRatios,
  standardNotes,
  throughputAndP99Charts,
} from '../harness/scenario-kit';
import type { LoadSpec, Ratio, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';

const MODEL = 'bench';
const UNBATCHED = 'unbatched';
const BATCHED = 'batched';
/** The model's batching with JSON text requests and answers (the goal: JSON as fast as binary). */
const BATCHED_JSON = 'batched-json';

/** Done-when figures of the scenario. */
export const TARGETS = {
  /** batched req/s ÷ `STREAMINFER_BATCH_SIZE=1` req/s, at least */
  gain: 8,
  /** batched p99 ÷ unbatched p99, below */
  p99Ratio: 1,
  /** batched req/s ÷ in-process items/s at the batch size reached, at least (binary frames) */
  servedFraction: 0.9,
  /** the same with JSON text requests and answers, at least */
  servedFractionJson: 0.85,
} as const;

/** One row of `streaminfer bench model --json` */
export interface InProcessRow {
  batchSize: number;
  calls: number;
  usPerCall: number;
  usPerItem: number;
  itemsPerSecond: number;
}

export interface InProcessResult {
  model: string;
  version: string;
  executionProvider: string;
  intraOpThreads: number;
  results: InProcessRow[];
}

/** Validate the JSON `streaminfer bench model --json` prints. */
export function parseInProcess(text: string): InProcessResult {
  const v = JSON.parse(text) as Partial<InProcessResult>;
  const rows = Array.isArray(v.results) ? v.results : [];
  const good = rows.filter(
    (r) =>
      r &&
      Number.isFinite(r.batchSize) &&
      r.batchSize > 0 &&
      Number.isFinite(r.itemsPerSecond) &&
      r.itemsPerSecond > 0 &&
      Number.isFinite(r.usPerCall),
  );
  if (good.length === 0) throw new Error(`no usable results in: ${text.slice(0, 300)}`);
  return {
    model: String(v.model ?? MODEL),
    version: String(v.version ?? '?'),
    executionProvider: String(v.executionProvider ?? '?'),
    intraOpThreads: Number(v.intraOpThreads ?? Number.NaN),
    results: good,
  };
}

/** Items/s in-process at `batch` (log-linear between the measured batch sizes). */
export function inProcessAt(result: InProcessResult, batch: number): number | undefined {
  return interpolateLog2(
    result.results.map((r): [number, number] => [r.batchSize, r.itemsPerSecond]),
    batch,
  );
}

/**
 * The ceiling from several in-process passes: per batch size, the pass with the most
 * items/s (a shared machine only ever makes a pass slower, never faster).
 */
export function bestOf(passes: readonly InProcessResult[]): InProcessResult | undefined {
  const first = passes[0];
  if (!first) return undefined;
  const best = new Map<number, InProcessRow>();
  for (const p of passes) {
    for (const r of p.results) {
      const b = best.get(r.batchSize);
      if (!b || r.itemsPerSecond > b.itemsPerSecond) best.set(r.batchSize, r);
    }
  }
  return { ...first, results: [...best.values()].sort((a, b) => a.batchSize - b.batchSize) };
}

/**
 * The ceiling measured next to one round: the mean of the in-process passes just before and just
 * after it (either may be missing). On a shared host the model's own speed drifts by up to 2×
 * within minutes; pairing compares the served run with the machine as it was at that time.
 */
export function pairedCeiling(
  before: InProcessResult | undefined,
  after: InProcessResult | undefined,
  batch: number,
): number | undefined {
  const values = [before, after]
    .map((pass) => (pass ? inProcessAt(pass, batch) : undefined))
    .filter((v): v is number => v !== undefined);
  return values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0) / values.length;
}

/** The model's own `max_batch_size` from its config.json (64 for `bench`). */
function modelMaxBatch(repoRoot: string): number {
  try {
    const cfg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'models', MODEL, 'config.json'), 'utf8')) as {
      batching?: { max_batch_size?: unknown };
    };
    const n = Number(cfg.batching?.max_batch_size);
    return Number.isInteger(n) && n > 0 ? n : 64;
  } catch {
    return 64;
  }
}

/** A model repository holding only `bench` (a symlink), so the server loads nothing else. */
function benchOnlyModelsDir(repoRoot: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'streaminfer-batching-'));
  fs.symlinkSync(path.join(repoRoot, 'models', MODEL), path.join(dir, MODEL), 'dir');
  return dir;
}

/** Run `node dist/apps/cli/main.js <args>` and parse its JSON; never concurrently with a load run (also used by `sweep`). */
export function runInProcessBench(
  repoRoot: string,
  args: string[],
  timeoutMs: number,
): Promise<InProcessResult> {
  const main = path.join(repoRoot, 'dist', 'apps', 'cli', 'main.js');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [main, ...args], {
      cwd: repoRoot,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (err = (err + s).slice(-4000)));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        const why = signal === 'SIGKILL' ? `killed after ${Math.round(timeoutMs / 1000)} s` : `code ${code}`;
        reject(new Error(`in-process bench failed (${why})\n${err.trim()}`));
        return;
      }
      try {
        resolve(parseInProcess(out));
      } catch (e) {
        reject(new Error(`in-process bench printed no usable JSON: ${errText(e)}\n${err.trim()}`));
      }
    });
  });
}

const ms = (seconds: number | undefined): number | undefined =>
  seconds === undefined ? undefined : seconds * 1000;

/** Where the "before" scrape of a run comes from: taken when the measured phase starts. */
interface ScrapeProbe {
  url?: string;
  atGo?: Promise<MetricSample[] | undefined>;
}

/**
 * Warm the server up with the measured load's own shape (so the first session runs and
 * JIT are out of the way). The load generator, a fresh process per run, then warms its own
 * code with a few requests per connection (else its first cycles run cold and it, not the
 * server, sets the pace); `/metrics` is scraped when its measured phase starts (`probe.atGo`,
 * from the load's `onGo`; every warm-up batch has been answered by then, and the first
 * measured batch cannot complete before the scrape does: it needs all 64 requests and ~30 ms
 * of compute) and again after it, so the deltas cover the measured requests. The `batches`
 * figure shows it (runs × connections ÷ batch size).
 */
function batchCollector(
  ctx: ScenarioContext,
  load: LoadSpec,
  warmPerConnection: number,
  probe: ScrapeProbe,
): Collector {
  return async (server) => {
    const url = `${server.adminUrl}/metrics`;
    probe.url = url;
    try {
      if (warmPerConnection > 0) {
        const warm = await runLoad({
          url: server.wsUrl,
          connections: load.connections,
          requestsPerConnection: warmPerConnection,
          inFlightPerConnection: 1,
          body: load.body,
          bodyOptions: { repoRoot: ctx.repoRoot, ...load.bodyOptions },
          binary: load.binary,
          timeLimitMs: 60_000,
          processes: 1,
        });
        if (warm.ok === 0)
          throw new Error(`warm-up got no ok answers (errors: ${JSON.stringify(warm.errors)})`);
      }
      const fallback = await scrapeMetrics(url);
      return async () => {
        const atGo = probe.atGo ? await probe.atGo : undefined;
        const after = await scrapeMetrics(url);
        // without the scrape at go, the deltas include the load generator's warm-up batches
        return { ...metricDeltas(atGo ?? fallback, after), scrapedAtGo: atGo ? 1 : 0 };
      };
    } catch (e) {
      ctx.log(`${server.label}: warm-up / metrics failed: ${errText(e).split('\n')[0]}`);
      throw e;
    }
  };
}

/** Batch size, batches, queue and compute time of `bench` between two scrapes. */
export function metricDeltas(
  before: readonly MetricSample[],
  after: readonly MetricSample[],
): Record<string, number | undefined> {
  const filter = { model: MODEL };
  const batches =
    histogramTotals(after, 'streaminfer_batch_size', filter).count -
    histogramTotals(before, 'streaminfer_batch_size', filter).count;
  return {
    meanBatchSize: histogramMeanDelta(before, after, 'streaminfer_batch_size', filter),
    batches,
    meanQueueMs: ms(histogramMeanDelta(before, after, 'streaminfer_queue_duration_seconds', filter)),
    meanComputeMs: ms(histogramMeanDelta(before, after, 'streaminfer_compute_duration_seconds', filter)),
  };
}

export interface Criterion {
  name: string;
  target: string;
  value: number | undefined;
  /** undefined when the figure is missing */
  pass: boolean | undefined;
  detail: string;
}

const pct = (v: number | undefined): string => (v === undefined ? '–' : `${(v * 100).toFixed(1)}%`);
const times = (v: number | undefined): string => (v === undefined ? '–' : `${v.toFixed(2)}×`);

/** Judge the medians against the done-when figures. */
export function judge(
  gain: number | undefined,
  p99Ratio: number | undefined,
  servedFraction: number | undefined,
  batchReached: number | undefined,
  json?: { servedFraction: number | undefined; batchReached: number | undefined },
): Criterion[] {
  const verdict = (ok: boolean | undefined): string => (ok === undefined ? 'n/a' : ok ? 'PASS' : 'FAIL');
  const gainOk = gain === undefined ? undefined : gain >= TARGETS.gain;
  const p99Ok = p99Ratio === undefined ? undefined : p99Ratio < TARGETS.p99Ratio;
  const fracOk = servedFraction === undefined ? undefined : servedFraction >= TARGETS.servedFraction;
  const jsonFraction = json?.servedFraction;
  const jsonOk = jsonFraction === undefined ? undefined : jsonFraction >= TARGETS.servedFractionJson;
  const jsonCriterion: Criterion[] = json
    ? [
        {
          name: `JSON: served ÷ in-process items/s at the batch reached${json.batchReached === undefined ? '' : ` (${fmt(json.batchReached)})`} (passes around each run)`,
          target: `≥ ${pct(TARGETS.servedFractionJson)}`,
          value: jsonFraction,
          pass: jsonOk,
          detail:
            `${verdict(jsonOk)}: ${pct(jsonFraction)}` +
            (jsonOk === false
              ? ` (short by ${((TARGETS.servedFractionJson - jsonFraction!) * 100).toFixed(1)} points)`
              : ''),
        },
      ]
    : [];
  return [
    {
      name: 'batching gain (batched req/s ÷ batch=1 req/s)',
      target: `≥ ${TARGETS.gain}×`,
      value: gain,
      pass: gainOk,
      detail:
        `${verdict(gainOk)}: ${times(gain)}` +
        (gainOk === false
          ? ` (short by ${times(TARGETS.gain - gain!)}, ${pct(1 - gain! / TARGETS.gain)})`
          : ''),
    },
    {
      name: 'p99 latency batched ÷ batch=1',
      target: `< ${TARGETS.p99Ratio}`,
      value: p99Ratio,
      pass: p99Ok,
      detail: `${verdict(p99Ok)}: ${p99Ratio === undefined ? '–' : p99Ratio.toFixed(3)}`,
    },
    {
      name: `served ÷ in-process items/s at the batch reached${batchReached === undefined ? '' : ` (${fmt(batchReached)})`} (passes around each run)`,
      target: `≥ ${pct(TARGETS.servedFraction)}`,
      value: servedFraction,
      pass: fracOk,
      detail:
        `${verdict(fracOk)}: ${pct(servedFraction)}` +
        (fracOk === false
          ? ` (short by ${((TARGETS.servedFraction - servedFraction!) * 100).toFixed(1)} points)`
          : ''),
    },
    ...jsonCriterion,
  ];
}

/** Sizes, the load, the two sides, the in-process command and the server's arguments. */
function batchingSetup(ctx: ScenarioContext, modelsDir: string) {
  // 40 cycles per batched run: with 20, the load generator's first cycles (its JIT still warming)
  // were a large share of a run that lasted under a second, and the figure moved by ±15%
  const size = ctx.sizes({ connections: 64, requests: 40 }, { connections: 64, requests: 6 });
  const maxBatch = modelMaxBatch(ctx.repoRoot);
  const load: LoadSpec = {
    connections: size.connections,
    requestsPerConnection: size.requests,
    inFlightPerConnection: 1,
    body: 'bench-model',
    bodyOptions: { model: MODEL },
    // binary tensor frames on both sides: JSON of 256 floats per request and per answer cost
    // ~10 ms of a ~31 ms cycle on a 2-core host (with the one-pass model), which hid the model's speed
    binary: true,
    // a fresh load-generator process warms its own code first; /metrics is scraped at go (batchCollector)
    warmupPerConnection: ctx.quick ? 1 : 6,
    timeLimitMs: ctx.quick ? 60_000 : 180_000,
  };
  const warmPerConnection = ctx.quick ? 2 : 6;
  // STREAMINFER_RATE_LIMIT_RPS=0: a batching benchmark must not measure the per-client rate limiter
  const commonEnv = { STREAMINFER_RATE_LIMIT_RPS: '0' };
  const sides = [
    {
      target: UNBATCHED,
      name: 'batch=1',
      setting: '1 (STREAMINFER_BATCH_SIZE=1)',
      env: { ...commonEnv, STREAMINFER_BATCH_SIZE: '1' },
    },
    {
      target: BATCHED,
      name: 'batched',
      setting: `${maxBatch} (model config)`,
      env: { ...commonEnv },
    },
    {
      // the same server and load with JSON text both ways ({"input":[256 floats]} in, the result out)
      target: BATCHED_JSON,
      name: 'batched JSON',
      setting: `${maxBatch} (model config), JSON`,
      env: { ...commonEnv },
      binary: false,
    },
  ];
  const notes: string[] = [];
  const leaked = ['STREAMINFER_BATCH_SIZE', 'STREAMINFER_BATCH_POLICY', 'STREAMINFER_BATCH_TIMEOUT_MS']
    .filter((k) => process.env[k] !== undefined)
    .map((k) => `${k}=${process.env[k]}`);
  if (leaked.length) {
    notes.push(
      `The bench's environment sets ${leaked.join(', ')}: it reaches the batched server too and overrides ` +
        'the model’s own batching, so the "batched" side is not the model config.',
    );
  }

  const inProcessArgs = [
    'bench',
    'model',
    MODEL,
    '--json',
    '--models-dir',
    modelsDir,
    '--max-batch',
    String(maxBatch),
    '--min-ms',
    ctx.quick ? '200' : '500',
    '--workers',
    '1',
  ];
  const intraOp = process.env['STREAMINFER_INTRA_OP_THREADS']?.trim();
  if (intraOp) inProcessArgs.push('--intra-op-threads', intraOp);
  const serverArgs = ['--models-dir', modelsDir, '--model', MODEL];
  return { maxBatch, load, warmPerConnection, sides, notes, inProcessArgs, serverArgs };
}

type BatchingSetup = ReturnType<typeof batchingSetup>;

/** The in-process passes: the ceiling, measured alone on the machine (no server or load generator running). */
interface InProcessPasses {
  passes: { result: InProcessResult; ms: number; loadAvg: number[] }[];
  /** passAt[k]: the pass before round k + 1 (the last one follows the last round); undefined if it failed */
  passAt: (InProcessResult | undefined)[];
  errors: string[];
}

async function inProcessPass(ctx: ScenarioContext, setup: BatchingSetup, p: InProcessPasses): Promise<void> {
  const { inProcessArgs } = setup;
  const n = p.passes.length + p.errors.length + 1;
  ctx.log(`in-process pass ${n}: node dist/apps/cli/main.js ${inProcessArgs.join(' ')}`);
  const loadAvg = os.loadavg().map((x) => Math.round(x * 100) / 100);
  const t0 = Date.now();
  try {
    const result = await runInProcessBench(ctx.repoRoot, inProcessArgs, 180_000);
    p.passes.push({ result, ms: Date.now() - t0, loadAvg });
    p.passAt.push(result);
    ctx.log(
      `in-process pass ${n}: ${result.results
        .map((r) => `b${r.batchSize} ${Math.round(r.itemsPerSecond)}/s`)
        .join(', ')} (${result.executionProvider}, ${result.intraOpThreads} intra-op threads)`,
    );
  } catch (e) {
    p.passAt.push(undefined);
    p.errors.push(errText(e));
    ctx.log(`in-process pass ${n} failed: ${errText(e).split('\n')[0]}`);
  }
}

/** One served run of one side: a fresh server, warmed, /metrics scraped when the measured phase starts. */
function measureSide(
  ctx: ScenarioContext,
  setup: BatchingSetup,
  side: BatchingSetup['sides'][number],
  label: string,
): Promise<RunRecord> {
  const { warmPerConnection, serverArgs } = setup;
  const load: LoadSpec = { ...setup.load, binary: side.binary ?? setup.load.binary };
  const probe: ScrapeProbe = {};
  return runAgainst(
    ctx,
    label,
    side.target,
    () => ctx.startStreamInfer({ label, nodes: 1, workers: 1, args: serverArgs, env: { ...side.env } }),
    {
      ...load,
      onGo: () => {
        if (probe.url) probe.atGo = scrapeMetrics(probe.url).catch(() => undefined);
      },
    },
    batchCollector(ctx, load, warmPerConnection, probe),
  );
}

/** Measured phase: in-process before every round and once after the last; served runs alternate sides each round. */
async function measureRounds(ctx: ScenarioContext, setup: BatchingSetup, p: InProcessPasses) {
  const runs: RunRecord[] = [];
  const roundOf = new Map<RunRecord, number>();
  const broken = new Set<string>();
  for (let round = 1; round <= ctx.rounds; round++) {
    await inProcessPass(ctx, setup, p);
    const suffix = ctx.rounds > 1 ? ` #${round}` : '';
    for (const side of setup.sides) {
      if (broken.has(side.target)) continue;
      const run = await measureSide(ctx, setup, side, `${side.name}${suffix}`);
      runs.push(run);
      roundOf.set(run, round);
      if (run.error && !run.load) broken.add(side.target); // will not start next round either
    }
  }
  await inProcessPass(ctx, setup, p);
  return { runs, roundOf };
}

const SERVED = new Set([UNBATCHED, BATCHED, BATCHED_JSON]);

/** Each served run's ceiling: in-process items/s at the batch size it reached (best pass, and the passes around it). */
function attachCeilings(
  runs: readonly RunRecord[],
  inProcess: InProcessResult | undefined,
  passAt: readonly (InProcessResult | undefined)[],
  roundOf: ReadonlyMap<RunRecord, number>,
): void {
  for (const run of runs) {
    if (!run.load || run.load.ok === 0 || !SERVED.has(run.target)) continue;
    const m = (run.metrics ??= {});
    // with STREAMINFER_BATCH_SIZE=1 every run is one item, whatever /metrics says
    const reached = m['meanBatchSize'] ?? (run.target === UNBATCHED ? 1 : undefined);
    const ceiling = inProcess && reached !== undefined ? inProcessAt(inProcess, reached) : undefined;
    m['inProcessItemsPerSec'] = ceiling;
    m['servedOverInProcess'] = ratio(run.load.throughputRps, ceiling);
    const round = roundOf.get(run);
    const paired =
      round !== undefined && reached !== undefined
        ? pairedCeiling(passAt[round - 1], passAt[round], reached)
        : undefined;
    m['pairedInProcessItemsPerSec'] = paired;
    m['servedOverPairedInProcess'] = ratio(run.load.throughputRps, paired);
  }
}

/** Analysis: medians per side, the done-when criteria, the ratios, and the notes. */
function batchingFigures(ctx: ScenarioContext, setup: BatchingSetup, runs: readonly RunRecord[]) {
  const { sides, notes } = setup;
  const served = runs.filter((r) => SERVED.has(r.target));
  const med = (target: string, pick: (r: RunRecord) => number | undefined): number | undefined =>
    medianOf(served, target, pick);
  const medians = Object.fromEntries(
    sides.map((s) => [
      s.target,
      {
        rps: med(s.target, (r) => r.load?.throughputRps),
        p50: med(s.target, (r) => r.load?.latencyMs.p50),
        p95: med(s.target, (r) => r.load?.latencyMs.p95),
        p99: med(s.target, (r) => r.load?.latencyMs.p99),
        meanBatchSize: med(s.target, (r) => r.metrics?.['meanBatchSize']),
        inProcessItemsPerSec: med(s.target, (r) => r.metrics?.['inProcessItemsPerSec']),
        servedOverInProcess: med(s.target, (r) => r.metrics?.['servedOverInProcess']),
        pairedInProcessItemsPerSec: med(s.target, (r) => r.metrics?.['pairedInProcessItemsPerSec']),
        servedOverPairedInProcess: med(s.target, (r) => r.metrics?.['servedOverPairedInProcess']),
        serverCpuPct: med(s.target, (r) => r.serverCpuPct),
      },
    ]),
  ) as Record<string, Record<string, number | undefined>>;
  const mb = medians[BATCHED]!;
  const mu = medians[UNBATCHED]!;
  const mj = medians[BATCHED_JSON]!;
  const criteria = judge(
    ratio(mb['rps'], mu['rps']),
    ratio(mb['p99'], mu['p99']),
    mb['servedOverPairedInProcess'] ?? mb['servedOverInProcess'],
    mb['meanBatchSize'],
    {
      servedFraction: mj['servedOverPairedInProcess'] ?? mj['servedOverInProcess'],
      batchReached: mj['meanBatchSize'],
    },
  );

  const ratios: Ratio[] = [
    ...sideBySideRatios(served, BATCHED, UNBATCHED, 'batched', 'batch=1'),
    {
      name: 'served/in-process, batched',
      value: mb['servedOverPairedInProcess'],
      note:
        `req/s ÷ in-process items/s at the mean batch reached (${fmt(mb['meanBatchSize'])}), the passes just ` +
        'before and after the run; medians over rounds',
    },
    {
      name: 'served/best in-process, batched',
      value: mb['servedOverInProcess'],
      note: 'req/s ÷ the best in-process pass of the whole scenario (stricter: a max of noisy passes); medians',
    },
    {
      name: 'served/in-process, batched JSON',
      value: mj['servedOverPairedInProcess'],
      note:
        `JSON text requests and answers; req/s ÷ in-process items/s at its mean batch (${fmt(mj['meanBatchSize'])}), ` +
        'the passes around the run; medians over rounds',
    },
    {
      name: 'JSON ÷ binary req/s, batched',
      value: ratio(mj['rps'], mb['rps']),
      note: 'same server settings and load, JSON text vs binary tensor frames; medians over rounds',
    },
    {
      name: 'served/in-process, batch=1',
      value: mu['servedOverInProcess'],
      note: 'req/s ÷ in-process items/s at batch 1; medians over rounds',
    },
  ];

  notes.push(
    'Requests and answers are binary tensor frames (libs/protocol/binary.ts: raw float32 bytes, a ' +
      'small JSON header) on the batch=1 and batched sides, JSON text on the "batched JSON" side ' +
      '(`{"id","model","input":[256 floats]}` in; the answer with its float32 scores printed shortest, ' +
      'libs/protocol/json-answer.ts). The load generator reads only the header (id, version) of each ' +
      'answer: the JSON header of a binary frame, the text before `,"result":` of a JSON answer.',
  );
  notes.push(
    `Done-when (medians over ${ctx.rounds} round(s)): ` +
      criteria.map((c) => `${c.name} ${c.target} → ${c.detail}`).join('; ') +
      '.',
  );
  notes.push(...standardNotes(served, ctx.cores));
  if (ctx.cores <= 4) {
    notes.push(
      `This host has ${ctx.cores} cores: the in-process figure had them to itself, while the served runs ` +
        'share them between the gateway, the worker’s ONNX Runtime threads and the load generator.',
    );
  }

  return { served, medians, criteria, ratios };
}

type BatchingFigures = ReturnType<typeof batchingFigures>;

/** The report's Markdown section: per-run table, done-when, in-process table. */
function batchingMarkdown(
  ctx: ScenarioContext,
  setup: BatchingSetup,
  modelsDir: string,
  f: BatchingFigures,
  inProcess: InProcessResult | undefined,
  p: InProcessPasses,
  settingOf: (target: string) => string,
): string {
  const { sides, load, warmPerConnection, inProcessArgs } = setup;
  const { served, medians, criteria } = f;
  const { passes, errors: inProcessErrors } = p;
  const row = (
    name: string,
    setting: string,
    f: Record<string, number | undefined>,
    rps: number | undefined,
    lat: (number | undefined)[],
    cpu: number | undefined,
  ): string[] => [
    name,
    setting,
    fmt(rps),
    ...lat.map((x) => fmt(x)),
    fmt(f['meanBatchSize']),
    fmt(f['pairedInProcessItemsPerSec']),
    pct(f['servedOverPairedInProcess']),
    fmt(f['inProcessItemsPerSec']),
    pct(f['servedOverInProcess']),
    cpu === undefined ? '–' : `${Math.round(cpu)}%`,
  ];
  const perRun = served
    .filter((r) => r.load && r.load.ok > 0)
    .map((r) =>
      row(
        r.label,
        settingOf(r.target),
        r.metrics ?? {},
        r.load!.throughputRps,
        [r.load!.latencyMs.p50, r.load!.latencyMs.p95, r.load!.latencyMs.p99],
        r.serverCpuPct,
      ),
    );
  if (ctx.rounds > 1) {
    for (const s of sides) {
      const m = medians[s.target]!;
      perRun.push(
        row(
          `**median ${s.name}**`,
          s.setting,
          m,
          m['rps'],
          [m['p50'], m['p95'], m['p99']],
          m['serverCpuPct'],
        ),
      );
    }
  }
  const md: string[] = [
    '### Batched vs `STREAMINFER_BATCH_SIZE=1`',
    '',
    markdownTable(
      [
        'run',
        'max batch',
        'req/s',
        'p50 ms',
        'p95 ms',
        'p99 ms',
        'mean batch',
        'in-process items/s at that batch (passes around the run)',
        'served / in-process',
        'best in-process items/s',
        'served / best',
        'server CPU',
      ],
      perRun,
      leftThenRight(2, 10),
    ),
    '',
    'Mean batch = Δ`streaminfer_batch_size_sum` ÷ Δ`_count` for model="bench" between scrapes when the measured ' +
      'phase starts and just after it. Before each run the server is warmed with the same load ' +
      `(${warmPerConnection} requests per connection), and the load generator — a fresh process — warms its own ` +
      `code with ${load.warmupPerConnection} requests per connection before its clock starts. In-process ` +
      'items/s at a fractional batch size: linear in log2(batch) between the measured powers of two. ' +
      '"In-process … around the run" is the mean of the in-process passes just before and just after the ' +
      'round (the verdict uses it: this shared host’s own speed drifts by up to 2× within minutes, so a run ' +
      'is compared with the machine as it was then); "best" is the fastest pass of the whole scenario.',
    '',
    '### Done-when',
    '',
    markdownTable(
      ['figure', 'target', 'measured', 'verdict'],
      criteria.map((c) => [
        c.name,
        c.target,
        c.name.includes('served') ? pct(c.value) : c.name.startsWith('p99') ? fmt(c.value) : times(c.value),
        c.pass === undefined ? 'n/a' : c.pass ? 'PASS' : 'FAIL',
      ]),
      ['left', 'left', 'right', 'left'],
    ),
    '',
    '### In-process ceiling',
    '',
  ];
  if (inProcess) {
    const b1 = inProcess.results.find((r) => r.batchSize === 1)?.itemsPerSecond;
    const perPass = (batch: number): string =>
      passes
        .map((p) => p.result.results.find((r) => r.batchSize === batch)?.itemsPerSecond)
        .map((v) => (v === undefined ? '–' : fmt(Math.round(v))))
        .join(' / ');
    md.push(
      `\`node dist/apps/cli/main.js ${inProcessArgs.join(' ').replace(modelsDir, '<dir with only bench>')}\` — ` +
        `${inProcess.model} v${inProcess.version} on ${inProcess.executionProvider}, ` +
        `${inProcess.intraOpThreads} intra-op thread(s) (the server's with \`--workers 1\`). ` +
        `${passes.length} pass(es), one before each round and one after the last, never during a load run ` +
        `(load average at their starts: ${passes.map((p) => p.loadAvg[0]).join(', ')}); ` +
        'the ceiling is the best pass per batch size.',
      '',
      markdownTable(
        ['batch', 'items/s (best)', 'µs/call', 'µs/item', '× batch 1', 'items/s per pass'],
        inProcess.results.map((r) => [
          r.batchSize,
          fmt(r.itemsPerSecond),
          fmt(r.usPerCall),
          fmt(r.usPerItem),
          times(ratio(r.itemsPerSecond, b1)),
          perPass(r.batchSize),
        ]),
        ['right', 'right', 'right', 'right', 'right', 'left'],
      ),
    );
  } else {
    md.push(`The in-process bench failed: ${inProcessErrors[0]?.split('\n')[0] ?? 'unknown error'}`);
  }

  return md.join('\n');
}

/** The scenario's result. */
function batchingReport(
  ctx: ScenarioContext,
  setup: BatchingSetup,
  modelsDir: string,
  runs: RunRecord[],
  inProcess: InProcessResult | undefined,
  p: InProcessPasses,
): ScenarioResult {
  const { maxBatch, load, warmPerConnection, sides, notes, inProcessArgs, serverArgs } = setup;
  const { passes, errors: inProcessErrors } = p;
  const f = batchingFigures(ctx, setup, runs);
  const { served, medians, criteria, ratios } = f;
  const settingOf = (target: string): string => sides.find((s) => s.target === target)?.setting ?? target;
  const markdown = batchingMarkdown(ctx, setup, modelsDir, f, inProcess, p, settingOf);
  return {
    params: {
      model: MODEL,
      connections: load.connections,
      requestsPerConnection: load.requestsPerConnection,
      totalRequestsPerRun: load.connections * load.requestsPerConnection,
      inFlightPerConnection: 1,
      frames:
        'binary tensor frames (float32[256] in, float32[256] out); the "batched JSON" side: JSON text both ways',
      serverWarmupPerConnection: warmPerConnection,
      loadgenWarmupPerConnection: load.warmupPerConnection,
      rounds: ctx.rounds,
      server: `serve --nodes 1 --workers 1 ${serverArgs.join(' ').replace(modelsDir, '<dir with only bench>')}`,
      env: Object.fromEntries(sides.map((s) => [s.name, s.env])),
    },
    runs,
    ratios,
    charts: throughputAndP99Charts('batching', `batching (bench model, ${load.connections} conns)`, served),
    notes,
    markdown,
    data: {
      model: MODEL,
      maxBatchSize: maxBatch,
      targets: TARGETS,
      inProcess: {
        command: [
          'node',
          'dist/apps/cli/main.js',
          ...inProcessArgs.map((a) => (a === modelsDir ? '<dir with only bench>' : a)),
        ],
        best: inProcess,
        passes: passes.map((p) => ({ durationMs: p.ms, loadAvgAtStart: p.loadAvg, ...p.result })),
        errors: inProcessErrors,
      },
      perRun: served.map((r) => ({
        label: r.label,
        target: r.target,
        maxBatch: settingOf(r.target),
        rps: r.load?.throughputRps,
        latencyMs: r.load
          ? { p50: r.load.latencyMs.p50, p95: r.load.latencyMs.p95, p99: r.load.latencyMs.p99 }
          : undefined,
        serverCpuPct: r.serverCpuPct,
        loadgenCpuPct: r.load?.loadgenCpuPct,
        ...(r.metrics ?? {}),
        ...(r.error ? { error: r.error.split('\n')[0] } : {}),
      })),
      medians,
      criteria,
    },
  };
}

export const batching: Scenario = {
  name: 'batching',
  description:
    'The heavy `bench` model (256→4096→(4096→4096)×2 shared→256 MLP, float32[256] in and out) over WebSocket at ' +
    'concurrency 64 (64 connections × 1 in flight), binary tensor frames both ways, ' +
    '`serve --nodes 1 --workers 1` serving only `bench`: ' +
    '`STREAMINFER_BATCH_SIZE=1` (no batching) vs the model’s own batching (its config.json), and that batching ' +
    'with JSON text requests and answers, alternating; plus the model’s in-process items/s (`streaminfer bench model bench`) as the ceiling at ' +
    'the mean batch size the server reached (from `/metrics`).',
  async run(ctx) {
    const modelsDir = benchOnlyModelsDir(ctx.repoRoot);
    const setup = batchingSetup(ctx, modelsDir);
    const p: InProcessPasses = { passes: [], passAt: [], errors: [] };
    let measured: Awaited<ReturnType<typeof measureRounds>>;
    try {
      measured = await measureRounds(ctx, setup, p);
    } finally {
      fs.rmSync(modelsDir, { recursive: true, force: true });
    }
    const { runs, roundOf } = measured;
    const inProcess = bestOf(p.passes.map((x) => x.result));
    if (!inProcess) {
      runs.unshift({ label: 'in-process', target: 'in-process', error: p.errors.join('\n\n') });
    } else if (p.errors.length) {
      setup.notes.push(`${p.errors.length} in-process pass(es) failed: ${p.errors[0]!.split('\n')[0]}`);
    }
    attachCeilings(runs, inProcess, p.passAt, roundOf);
    return batchingReport(ctx, setup, modelsDir, runs, inProcess, p);
  },
};
