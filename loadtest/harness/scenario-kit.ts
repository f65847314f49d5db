/**
 * Small helpers shared by scenarios: medians and ratios over runs, the standard pair of
 * bar charts (throughput, p99), and the notes every side-by-side comparison needs.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { markdownTable } from '../../scripts/markdown';
import { scratchRepository } from './admin-client';
import type { ExitInfo, ServerHandle } from './server-process';
import type { LoadResult } from './stats';
import { barChart, type LineSeries, lineChart, PALETTE } from './svg-chart';
import type { Chart, LoadSpec, Ratio, RunRecord, ScenarioContext, ScenarioResult } from './types';

export function median(xs: readonly number[]): number | undefined {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return undefined;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1]! + v[mid]!) / 2;
}

export function ratio(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0)
    return undefined;
  return a / b;
}

/** Median of `pick(run.load)` over the runs of one target that were measured. */
export function medianOf(
  runs: readonly RunRecord[],
  target: string,
  pick: (r: RunRecord) => number | undefined,
): number | undefined {
  return median(
    runs
      .filter((r) => r.target === target && r.load && r.load.ok > 0)
      .map(pick)
      .filter((x): x is number => x !== undefined),
  );
}

/** Ratios `a/b` for throughput, p50 and p99, medians over rounds. */
export function sideBySideRatios(
  runs: readonly RunRecord[],
  a: string,
  b: string,
  aName: string,
  bName: string,
): Ratio[] {
  const tput = (r: RunRecord): number | undefined => r.load?.throughputRps;
  const p50 = (r: RunRecord): number | undefined => r.load?.latencyMs.p50;
  const p99 = (r: RunRecord): number | undefined => r.load?.latencyMs.p99;
  return [
    {
      name: `throughput ${aName}/${bName}`,
      value: ratio(medianOf(runs, a, tput), medianOf(runs, b, tput)),
      note: 'medians over rounds; higher is better, 1.0 = as fast as the reference',
    },
    {
      name: `p50 latency ${aName}/${bName}`,
      value: ratio(medianOf(runs, a, p50), medianOf(runs, b, p50)),
      note: 'medians over rounds; lower is better',
    },
    {
      name: `p99 latency ${aName}/${bName}`,
      value: ratio(medianOf(runs, a, p99), medianOf(runs, b, p99)),
      note: 'medians over rounds; lower is better',
    },
  ];
}

/** Bars for throughput and p99, one bar per run; colours by target. */
export function throughputAndP99Charts(prefix: string, title: string, runs: readonly RunRecord[]): Chart[] {
  const targets = [...new Set(runs.map((r) => r.target))];
  const color = (r: RunRecord): string => PALETTE[targets.indexOf(r.target) % PALETTE.length]!;
  const value = (r: RunRecord, v: number | undefined): number =>
    r.load && r.load.ok > 0 && v !== undefined ? v : Number.NaN;
  return [
    {
      file: `${prefix}-throughput.svg`,
      title: `${title}: throughput`,
      svg: barChart({
        title: `${title}: throughput (req/s, higher is better)`,
        unit: 'req/s',
        bars: runs.map((r) => ({ label: r.label, value: value(r, r.load?.throughputRps), color: color(r) })),
      }),
    },
    {
      file: `${prefix}-p99.svg`,
      title: `${title}: p99 latency`,
      svg: barChart({
        title: `${title}: p99 latency (ms, lower is better)`,
        unit: 'ms',
        bars: runs.map((r) => ({ label: r.label, value: value(r, r.load?.latencyMs.p99), color: color(r) })),
      }),
    },
  ];
}

/** Notes that keep a comparison honest: a saturated load generator, errors, early closes. */
export function standardNotes(runs: readonly RunRecord[], cores: number): string[] {
  const notes: string[] = [];
  const saturated = runs.filter((r) => r.load?.loadgenCpuPct.some((c) => c >= 85));
  if (saturated.length) {
    notes.push(
      `The load generator used ≥85% of a core during ${saturated.map((r) => r.label).join(', ')}: ` +
        'those figures are bounded by the client, not only by the server' +
        (cores <= 4 ? ` (this host has ${cores} cores shared by client and server).` : '.'),
    );
  }
  for (const r of runs) {
    const l = r.load;
    if (!l) continue;
    if (l.connectFailures.length || l.closes.length) {
      notes.push(
        `${r.label}: ${l.connectFailures.length} connection(s) failed to open, ${l.closes.length} closed early.`,
      );
    }
  }
  return notes;
}

/**
 * Value at `x` of a curve measured at a few points (e.g. items/s at batch sizes 1, 2, 4, …),
 * linear in log2(x) between the two measured neighbours of `x`; clamped to the first / last
 * point outside the measured range. Points with a non-positive or non-finite x, or a
 * non-finite y, are ignored; `undefined` when none is left or `x` is not a positive number.
 */
export function interpolateLog2(
  points: readonly (readonly [number, number])[],
  x: number,
): number | undefined {
  if (!Number.isFinite(x) || x <= 0) return undefined;
  const pts = points
    .filter(([px, py]) => Number.isFinite(px) && px > 0 && Number.isFinite(py))
    .slice()
    .sort((a, b) => a[0] - b[0]);
  const first = pts[0];
  const last = pts.at(-1);
  if (!first || !last) return undefined;
  if (x <= first[0]) return first[1];
  if (x >= last[0]) return last[1];
  for (let i = 1; i < pts.length; i++) {
    const [x1, y1] = pts[i]!;
    if (x > x1) continue;
    const [x0, y0] = pts[i - 1]!;
    if (x1 === x0) return y1;
    const t = (Math.log2(x) - Math.log2(x0)) / (Math.log2(x1) - Math.log2(x0));
    return y0 + t * (y1 - y0);
  }
  return last[1];
}

/** Called before the load; its returned function is called after it, to add figures to the run. */
export type Collector = (server: ServerHandle) => Promise<() => Promise<Record<string, number | undefined>>>;

/** What `withServer` saw: the server (unless it failed to start), its exit, and the body's value or error. */
export interface ServerSession<T> {
  /** undefined when the server failed to start */
  server?: ServerHandle;
  /** how the server ended once stopped (undefined when it never started) */
  exit?: ExitInfo;
  /** what the body returned; undefined when it threw or the server failed to start */
  value?: T;
  /** why the server failed to start, or what the body threw followed by the server's stderr tail */
  error?: string;
  /** the body's exception itself, for scenarios that let it fail the whole scenario */
  thrown?: unknown;
}

/**
 * Start a server, run `body` against it, and always stop it and collect its exit, whatever the
 * body did. Never throws: a failure to start or an exception in the body becomes `error`.
 */
export async function withServer<T>(
  start: () => Promise<ServerHandle>,
  body: (server: ServerHandle) => Promise<T>,
): Promise<ServerSession<T>> {
  let server: ServerHandle;
  try {
    server = await start();
  } catch (e) {
    return { error: errText(e), thrown: e };
  }
  try {
    const value = await body(server);
    return { server, value, exit: await server.stop() };
  } catch (e) {
    return { server, error: withStderr(e, server), thrown: e, exit: await server.stop() };
  }
}

/**
 * The registry and hot-swap scenarios: `serve --nodes 2 --workers 1` on a scratch copy of `model` (its own
 * state directory, no rate limit), driven by `drive`. A failed start or run comes back as the scenario's
 * failure report; otherwise the value and the server's record.
 */
export async function onScratchTwoNodes<T>(
  ctx: ScenarioContext,
  label: string,
  model: string,
  params: Record<string, unknown>,
  drive: (server: ServerHandle, modelsDir: string) => Promise<T>,
): Promise<{ value: T; server: NonNullable<RunRecord['server']> } | { failure: ScenarioResult }> {
  const scratch = scratchRepository(ctx.repoRoot, [model], `streaminfer-${label.replace(/-/g, '')}`);
  ctx.log(`${label}: starting server`);
  const session = await withServer(
    () =>
      ctx.startStreamInfer({
        label,
        nodes: 2,
        workers: 1,
        args: ['--host', '127.0.0.1', '--models-dir', scratch.modelsDir, '--model', model],
        env: { STREAMINFER_RATE_LIMIT_RPS: '0', STREAMINFER_STATE_DIR: scratch.stateDir },
      }),
    (server) => drive(server, scratch.modelsDir),
  );
  scratch.cleanup();
  if (session.value === undefined) {
    const run: RunRecord = { label, target: 'streaminfer', error: session.error };
    if (session.server) run.server = serverRecord(session.server, session.exit);
    return { failure: { params, runs: [run], ratios: [], charts: [], notes: [] } };
  }
  return { value: session.value, server: serverRecord(session.server!, session.exit) };
}

/** An error's text followed by the tail of the server's stderr (what a report needs to tell why). */
export function withStderr(e: unknown, server: ServerHandle): string {
  return `${errText(e)}\n--- server stderr (tail) ---\n${server.stderrTail().slice(-4000)}`;
}

/** The `server` field of a run: how it was started and how it ended. */
export function serverRecord(
  server: ServerHandle,
  exit: ExitInfo | undefined,
  env: Record<string, string> = server.env,
): NonNullable<RunRecord['server']> {
  return { command: server.command, env, exit };
}

/**
 * For a scenario whose runs all share one server: stamp every run that `measured` accepts (default:
 * those with a load) with the server's command, `env` and exit; a server that failed to start becomes
 * a run labelled "server" under `failedTarget`. An exception the body threw fails the whole scenario,
 * as it would have without the helper (the server is stopped by then).
 */
export function stampSharedServer(
  runs: RunRecord[],
  session: ServerSession<unknown>,
  env: Record<string, string>,
  failedTarget: string,
  measured: (r: RunRecord) => boolean = (r) => r.load !== undefined,
): void {
  if (!session.server) {
    runs.unshift({ label: 'server', target: failedTarget, error: session.error });
    return;
  }
  if (session.error !== undefined) throw session.thrown;
  for (const r of runs) if (measured(r)) r.server = serverRecord(session.server, session.exit, env);
}

/**
 * Start a server, measure one load against it, stop it. Never throws: a failure to start
 * or to measure becomes `run.error`, so the other side of a comparison is still reported.
 */
export async function runAgainst(
  ctx: ScenarioContext,
  label: string,
  target: string,
  start: () => Promise<ServerHandle>,
  load: LoadSpec,
  collect?: Collector,
): Promise<RunRecord> {
  ctx.log(`${label}: starting server`);
  const session = await withServer(start, async (server) => {
    const finish = collect ? await collect(server).catch(() => undefined) : undefined;
    const run = await ctx.measure(label, server, load);
    // ctx.measure labels the run by server kind; the caller's target is what tells sides apart
    run.target = target;
    if (finish) {
      try {
        run.metrics = { ...(run.metrics ?? {}), ...(await finish()) };
      } catch (e) {
        ctx.log(`${label}: collecting metrics failed: ${errText(e).split('\n')[0]}`);
      }
    }
    if (server.exited()) run.error = `server exited during the run\n${server.stderrTail().slice(-4000)}`;
    return run;
  });
  if (!session.server) {
    ctx.log(`${label}: server failed to start`);
    return { label, target, error: session.error };
  }
  const run: RunRecord = session.value ?? { label, target, error: session.error };
  run.server = serverRecord(session.server, session.exit);
  return run;
}

export function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * Line chart of a run's timeline: successful answers per second per version (one series
 * each) plus errors per second, over seconds since the clock started. `markers` can flag
 * events such as a reload (x in seconds).
 */
export function timelineChart(
  file: string,
  title: string,
  load: LoadResult,
  markers: { x: number; label: string }[] = [],
): Chart {
  const { bucketMs, points } = load.timeline;
  const perSec = 1000 / bucketMs;
  const versions = [...new Set(points.flatMap((p) => Object.keys(p.byVersion)))].sort();
  const series: LineSeries[] = versions.map((v) => ({
    name: `version ${v}`,
    points: points.map((p): [number, number] => [p.tMs / 1000, (p.byVersion[v] ?? 0) * perSec]),
  }));
  if (points.some((p) => p.errors > 0)) {
    series.push({
      name: 'errors',
      color: '#e15759',
      points: points.map((p): [number, number] => [p.tMs / 1000, p.errors * perSec]),
    });
  }
  return {
    file,
    title,
    svg: lineChart({ title, xLabel: 'seconds since start', yLabel: 'answers/s', series, markers }),
  };
}

/**
 * A temporary model repository holding only `names` (symlinks into `models/`), so a server
 * started on it loads nothing else. The caller removes it (`fs.rmSync(dir, { recursive: true })`).
 */
export function modelsDirWith(
  repoRoot: string,
  names: readonly string[],
  prefix = 'streaminfer-models-',
): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  for (const name of names) fs.symlinkSync(path.join(repoRoot, 'models', name), path.join(dir, name), 'dir');
  return dir;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One figure judged against a target (the "done-when" tables of the scenarios). */
export interface Verdict {
  name: string;
  target: string;
  /** the measured figure, formatted */
  measured: string;
  /** undefined when the figure could not be measured */
  pass: boolean | undefined;
  /** what was observed, especially when it fails */
  detail?: string;
}

export function verdictText(pass: boolean | undefined): string {
  return pass === undefined ? 'n/a' : pass ? 'PASS' : 'FAIL';
}

/** Markdown table of verdicts. */
export function verdictTable(verdicts: readonly Verdict[]): string {
  return markdownTable(
    ['figure', 'target', 'measured', 'verdict', 'detail'],
    verdicts.map((v) => [v.name, v.target, v.measured, verdictText(v.pass), v.detail ?? '']),
    ['left', 'left', 'right', 'left', 'left'],
  );
}

/** One-line summary of verdicts for the notes: "name target → PASS: measured; …". */
export function verdictNote(prefix: string, verdicts: readonly Verdict[]): string {
  return (
    `${prefix}: ` +
    verdicts
      .map(
        (v) =>
          `${v.name} ${v.target} → ${verdictText(v.pass)}: ${v.measured}${v.detail && v.pass === false ? ` (${v.detail})` : ''}`,
      )
      .join('; ') +
    '.'
  );
}

/** `ctx.measure` that never throws: a failed run becomes `run.error` (with the server's stderr tail). */
export async function measureSafe(
  ctx: ScenarioContext,
  label: string,
  target: string,
  server: ServerHandle,
  load: LoadSpec,
): Promise<RunRecord> {
  try {
    const run = await ctx.measure(label, server, load);
    run.target = target;
    return run;
  } catch (e) {
    return { label, target, error: withStderr(e, server) };
  }
}
