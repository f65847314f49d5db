/**
 * The contract between the bench and its scenarios. A scenario is a module under
 * `loadtest/scenarios/` exporting `{ name, description, run(ctx) }`, registered in
 * `scenarios/index.ts`. It starts what it needs through `ctx`, measures, and returns runs
 * (one per measured configuration), ratios, charts and notes; the bench adds timing and
 * status and renders the report.
 */
import type { RunLoadOptions } from './run-load';
import type { BareEchoOptions, ExitInfo, ServerHandle, StreamInferOptions } from './server-process';
import type { LoadResult } from './stats';

export interface RunRecord {
  /** short label used in tables and charts, e.g. "bare uWS", "StreamInfer batch=16" */
  label: string;
  /** what was measured: 'bare-echo' | 'streaminfer' | anything a scenario defines */
  target: string;
  server?: { command: string[]; env: Record<string, string>; exit?: ExitInfo };
  load?: LoadResult;
  /** CPU of the server's process tree during the measured window, % of one core */
  serverCpuPct?: number;
  /** extra figures, e.g. { meanBatchSize: 7.9 } from /metrics */
  metrics?: Record<string, number | undefined>;
  /** set when this run could not be measured (server failed to start, loadgen crashed, ...) */
  error?: string;
}

export interface Ratio {
  name: string;
  /** undefined when one side is missing */
  value: number | undefined;
  note?: string;
}

export interface Chart {
  /** file name inside the report folder, e.g. "ws-echo-throughput.svg" */
  file: string;
  title: string;
  svg: string;
}

/** What a scenario's `run` returns. */
export interface ScenarioResult {
  /** effective parameters (connections, requests, flags, env) for the report */
  params: Record<string, unknown>;
  runs: RunRecord[];
  ratios: Ratio[];
  charts: Chart[];
  notes: string[];
  /** extra Markdown appended to the scenario's section */
  markdown?: string;
  /** extra JSON for report.json */
  data?: unknown;
}

/** A scenario's section of the report: its result plus what the bench knows about the run. */
export interface ScenarioReport extends ScenarioResult {
  name: string;
  description: string;
  ok: boolean;
  /** why the scenario failed as a whole (a thrown error) */
  error?: string;
  startedAt: string;
  durationMs: number;
}

export interface Sizes {
  connections: number;
  requests: number;
}

export type LoadSpec = Omit<RunLoadOptions, 'url' | 'processes'> & { processes?: number };

export interface ScenarioContext {
  repoRoot: string;
  quick: boolean;
  /** repetitions of each measured configuration (alternating targets); default 1 */
  rounds: number;
  loadgenProcesses: number;
  /** logical CPU cores of this host (the client and the servers share them) */
  cores: number;
  /** pick sizes: quick or full, then BENCH_CONNECTIONS / BENCH_REQUESTS overrides */
  sizes(full: Sizes, quick: Sizes): Sizes;
  log(msg: string): void;
  startStreamInfer(opts: Omit<StreamInferOptions, 'repoRoot'>): Promise<ServerHandle>;
  startBareEcho(opts?: BareEchoOptions): Promise<ServerHandle>;
  /** run a load against `server` (its /ws) and record load + server CPU as a RunRecord */
  measure(label: string, server: ServerHandle, load: LoadSpec): Promise<RunRecord>;
}

export interface Scenario {
  name: string;
  description: string;
  run(ctx: ScenarioContext): Promise<ScenarioResult>;
}

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  totalMemGiB: number;
  platform: string;
  arch: string;
  kernel: string;
  node: string;
  uwsNative: boolean;
  loadAvgBefore: number[];
  loadAvgAfter: number[];
  gitCommit?: string;
  gitDirty?: boolean;
}

export interface BenchReport {
  tool: 'streaminfer-bench';
  schema: 1;
  startedAt: string;
  finishedAt: string;
  durationMs: number;
  options: {
    scenarios: string[];
    quick: boolean;
    rounds: number;
    loadgenProcesses: number;
    connectionsOverride?: number;
    requestsOverride?: number;
  };
  machine: MachineInfo;
  ok: boolean;
  scenarios: ScenarioReport[];
}
