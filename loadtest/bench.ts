/**
 * `npm run bench` — runs the benchmark scenarios in one go, each comparing configurations
 * side by side on the same host in the same run, and writes
 * `loadtest/reports/latest/report.{json,md}` (+ SVG charts) and a timestamped copy.
 *
 *   npm run bench
 *   npm run bench -- --quick
 *   npm run bench -- --scenario ws-echo --rounds 3
 *   BENCH_CONNECTIONS=20 BENCH_REQUESTS=200 npm run bench
 *
 * Exit status: 0 when every scenario and run succeeded, 1 otherwise, 2 on bad usage.
 */
import { execFileSync } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { writeReport } from './harness/report';
import { killAllLoadgens, runLoad } from './harness/run-load';
import { errText } from './harness/scenario-kit';
import { killAllServers, startBareEcho, startStreamInfer } from './harness/server-process';
import type {
  BenchReport,
  MachineInfo,
  RunRecord,
  ScenarioContext,
  ScenarioReport,
  Sizes,
} from './harness/types';
import { SCENARIOS } from './scenarios';

const USAGE = `usage: npm run bench -- [options]

  -s, --scenario a[,b]   run only these scenarios (default: all)
  -q, --quick            smaller runs (smoke test of the whole flow)
      --rounds N         repeat each measured configuration N times, alternating; ratios use
                         medians (default 3, 1 with --quick)
      --loadgen-procs N  load-generator processes per run (default: 1, or cores/4 up to 4 on 8+ cores)
      --out DIR          report root (default: loadtest/reports)
      --list             list scenarios and exit
  -h, --help

environment: BENCH_STREAM_LOG_DIR (every stream instance's log lines to DIR/<label>.log),
             BENCH_CONNECTIONS, BENCH_REQUESTS (override every scenario's sizes),
             BENCH_ROUNDS, BENCH_LOADGEN_PROCS, BENCH_QUICK=1,
             BENCH_ROLLOUT_SHADOW=1, BENCH_ROLLOUT_SETTINGS='{"min_requests":30,…}' (rollout scenario)`;

class UsageError extends Error {}

function positiveInt(v: string | undefined, name: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new UsageError(`${name} must be a positive integer, got "${v}"`);
  return n;
}

export interface BenchOptions {
  scenarios: string[];
  quick: boolean;
  rounds: number;
  loadgenProcesses: number;
  out: string;
  list: boolean;
  help: boolean;
  connections?: number;
  requests?: number;
}

export function parseBenchArgs(
  argv: string[],
  env: NodeJS.ProcessEnv,
  repoRoot: string,
  cores: number,
): BenchOptions {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        scenario: { type: 'string', short: 's' },
        quick: { type: 'boolean', short: 'q' },
        rounds: { type: 'string' },
        'loadgen-procs': { type: 'string' },
        out: { type: 'string' },
        list: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (e) {
    throw new UsageError(errText(e));
  }
  const str = (k: string): string | undefined =>
    typeof values[k] === 'string' ? (values[k] as string) : undefined;
  const known = SCENARIOS.map((s) => s.name);
  const wanted = (str('scenario') ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const w of wanted) {
    if (!known.includes(w)) throw new UsageError(`unknown scenario "${w}" (known: ${known.join(', ')})`);
  }
  const defaultProcs = cores >= 8 ? Math.min(4, Math.floor(cores / 4)) : 1;
  const quick = values['quick'] === true || env['BENCH_QUICK'] === '1';
  return {
    scenarios: wanted.length ? known.filter((k) => wanted.includes(k)) : known,
    quick,
    rounds: positiveInt(str('rounds') ?? env['BENCH_ROUNDS'], '--rounds / BENCH_ROUNDS') ?? (quick ? 1 : 3),
    loadgenProcesses:
      positiveInt(
        str('loadgen-procs') ?? env['BENCH_LOADGEN_PROCS'],
        '--loadgen-procs / BENCH_LOADGEN_PROCS',
      ) ?? defaultProcs,
    out: path.resolve(str('out') ?? path.join(repoRoot, 'loadtest', 'reports')),
    list: values['list'] === true,
    help: values['help'] === true,
    connections: positiveInt(env['BENCH_CONNECTIONS'], 'BENCH_CONNECTIONS'),
    requests: positiveInt(env['BENCH_REQUESTS'], 'BENCH_REQUESTS'),
  };
}

function uwsNative(): boolean {
  try {
    const uws = require('uWebSockets.js') as { App: unknown };
    return String(uws.App).includes('[native code]');
  } catch {
    return false;
  }
}

function git(repoRoot: string, args: string[]): string | undefined {
  try {
    return execFileSync('git', args, {
      cwd: repoRoot,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return undefined;
  }
}

export function machineInfo(repoRoot: string): MachineInfo {
  const cpus = os.cpus();
  const commit = git(repoRoot, ['rev-parse', 'HEAD']);
  const status = commit ? git(repoRoot, ['status', '--porcelain']) : undefined;
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    totalMemGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    platform: os.platform(),
    arch: os.arch(),
    kernel: os.release(),
    node: process.version,
    uwsNative: uwsNative(),
    loadAvgBefore: os.loadavg().map((x) => Math.round(x * 100) / 100),
    loadAvgAfter: [],
    ...(commit ? { gitCommit: commit, gitDirty: (status ?? '') !== '' } : {}),
  };
}

const t0 = Date.now();
function log(msg: string): void {
  process.stderr.write(`[bench +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
}

export function makeContext(opts: BenchOptions, repoRoot: string, cores: number): ScenarioContext {
  return {
    repoRoot,
    quick: opts.quick,
    rounds: opts.rounds,
    loadgenProcesses: opts.loadgenProcesses,
    cores,
    sizes(full: Sizes, quick: Sizes): Sizes {
      const base = opts.quick ? quick : full;
      return { connections: opts.connections ?? base.connections, requests: opts.requests ?? base.requests };
    },
    log,
    startStreamInfer: (o) => startStreamInfer({ ...o, repoRoot }),
    startBareEcho: (o) => startBareEcho(o),
    async measure(label, server, load): Promise<RunRecord> {
      let cpu0: number | undefined;
      let cpu1: number | undefined;
      let tGo = 0;
      let tDone = 0;
      const onDone = (): void => {
        if (tDone) return;
        tDone = performance.now();
        cpu1 = server.cpuMs();
      };
      log(`${label}: ${load.connections} conns × ${load.requestsPerConnection} requests → ${server.wsUrl}`);
      const result = await runLoad({
        ...load,
        url: server.wsUrl,
        processes: load.processes ?? opts.loadgenProcesses,
        bodyOptions: { repoRoot, ...load.bodyOptions },
        onGo: () => {
          tGo = performance.now();
          cpu0 = server.cpuMs();
          load.onGo?.();
        },
        onDone: () => {
          onDone();
          load.onDone?.();
        },
      });
      onDone();
      const serverCpuPct =
        cpu0 !== undefined && cpu1 !== undefined && tDone > tGo
          ? ((cpu1 - cpu0) / (tDone - tGo)) * 100
          : undefined;
      const errs = result.errorCount ? `, ${result.errorCount} errors` : '';
      log(
        `${label}: ${result.ok} ok${errs}, ${Math.round(result.throughputRps)} req/s, ` +
          `p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms`,
      );
      return {
        label,
        target: server.kind,
        load: result,
        ...(serverCpuPct !== undefined ? { serverCpuPct: Math.round(serverCpuPct * 10) / 10 } : {}),
      };
    },
  };
}

export async function main(argv = process.argv.slice(2)): Promise<number> {
  const repoRoot = path.resolve(__dirname, '..', '..');
  const cores = os.cpus().length;
  let opts: BenchOptions;
  try {
    opts = parseBenchArgs(argv, process.env, repoRoot, cores);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`bench: ${e.message}\n\n${USAGE}\n`);
      return 2;
    }
    throw e;
  }
  if (opts.help) {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  if (opts.list) {
    for (const s of SCENARIOS) process.stdout.write(`${s.name}\n    ${s.description}\n`);
    return 0;
  }

  const startedAt = new Date();
  const machine = machineInfo(repoRoot);
  if (!machine.uwsNative)
    log('WARNING: uWebSockets.js native binary not loaded; the bare ceiling will refuse to run');
  log(
    `${machine.cpuModel} × ${machine.cores}, node ${machine.node}, load ${machine.loadAvgBefore.join(' ')}; ` +
      `scenarios: ${opts.scenarios.join(', ')}${opts.quick ? ' (quick)' : ''}`,
  );
  const ctx = makeContext(opts, repoRoot, cores);
  const reports: ScenarioReport[] = [];
  for (const name of opts.scenarios) {
    const scenario = SCENARIOS.find((s) => s.name === name)!;
    const s0 = Date.now();
    const started = new Date().toISOString();
    log(`=== ${scenario.name}`);
    try {
      const result = await scenario.run(ctx);
      const ok = result.runs.every((r) => !r.error);
      reports.push({
        name,
        description: scenario.description,
        ok,
        startedAt: started,
        durationMs: Date.now() - s0,
        ...result,
      });
    } catch (e) {
      log(`${name} failed: ${errText(e).split('\n')[0]}`);
      reports.push({
        name,
        description: scenario.description,
        ok: false,
        error: e instanceof Error ? (e.stack ?? e.message) : String(e),
        startedAt: started,
        durationMs: Date.now() - s0,
        params: {},
        runs: [],
        ratios: [],
        charts: [],
        notes: [],
      });
    } finally {
      // nothing a scenario started may outlive it
      killAllLoadgens();
      killAllServers();
    }
  }
  machine.loadAvgAfter = os.loadavg().map((x) => Math.round(x * 100) / 100);
  const finished = new Date();
  const report: BenchReport = {
    tool: 'streaminfer-bench',
    schema: 1,
    startedAt: startedAt.toISOString(),
    finishedAt: finished.toISOString(),
    durationMs: finished.getTime() - startedAt.getTime(),
    options: {
      scenarios: opts.scenarios,
      quick: opts.quick,
      rounds: opts.rounds,
      loadgenProcesses: opts.loadgenProcesses,
      ...(opts.connections ? { connectionsOverride: opts.connections } : {}),
      ...(opts.requests ? { requestsOverride: opts.requests } : {}),
    },
    machine,
    ok: reports.every((r) => r.ok),
    scenarios: reports,
  };
  const { latest, stamped } = writeReport(report, opts.out);
  for (const s of reports) {
    const ratios = s.ratios
      .map((r) => `${r.name} ${r.value === undefined ? '–' : r.value.toFixed(3)}`)
      .join('; ');
    log(`${s.name}: ${s.ok ? 'ok' : 'FAILED'}${ratios ? ' — ' + ratios : ''}`);
  }
  log(
    `report: ${path.relative(process.cwd(), path.join(latest, 'report.md'))} (copy in ${path.relative(process.cwd(), stamped)})`,
  );
  return report.ok ? 0 : 1;
}

if (require.main === module) {
  const abort = (sig: string): void => {
    log(`${sig}: stopping servers and load generators`);
    killAllLoadgens();
    killAllServers();
    process.exit(130);
  };
  process.on('SIGINT', () => abort('SIGINT'));
  process.on('SIGTERM', () => abort('SIGTERM'));
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (e: unknown) => {
      process.stderr.write(`bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      killAllLoadgens();
      killAllServers();
      process.exitCode = 1;
    },
  );
}
