/**
 * `streaminfer models rollout <model> --version V [...]` and `models rollout-status|rollout-pause|rollout-resume|
 * rollout-abort <model>`: progressive delivery through the admin API (POST/GET /api/models/{model}/rollout…).
 * `rollout-status --wait` follows the rollout until it ends: exit 0 when promoted, 1 when rolled back or aborted.
 */
import type { Command } from 'commander';
import { type AdminFlags, type ClientOptions, callServer } from '../client';

export interface RolloutCommandKit {
  addClientOptions(command: Command): Command;
  clientOptions(flags: AdminFlags): ClientOptions;
  fail(message: string): never;
}

export interface RolloutFlags extends AdminFlags {
  json?: boolean;
  version?: string;
  steps?: string;
  dwell?: string;
  minRequests?: string;
  interval?: string;
  failures?: string;
  minSamples?: string;
  window?: string;
  shadow?: boolean;
  shadowDwell?: string;
  shadowMinRequests?: string;
  maxErrorIncrease?: string;
  maxP99Ratio?: string;
  maxDisagreement?: string;
  wait?: boolean;
}

/** `90`, `90s`, `1.5m`, `500ms`, `1h` → seconds; undefined for anything else. */
export function parseSeconds(text: string): number | undefined {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!match) return undefined;
  const value = Number(match[1]);
  const unit = match[2] ?? 's';
  return unit === 'ms' ? value / 1000 : unit === 'm' ? value * 60 : unit === 'h' ? value * 3600 : value;
}

/**
 * The API body for `models rollout`, or the flag that is wrong. The server validates the bounds; this only
 * turns text into numbers. Checks named by flags are the ones turned on; none named = the server's defaults.
 */
export function rolloutBody(flags: RolloutFlags): { body: Record<string, unknown> } | { error: string } {
  if (!flags.version) return { error: '--version is required' };
  const body: Record<string, unknown> = { version: flags.version };
  const number = (
    text: string | undefined,
    flag: string,
    key: string,
    duration = false,
  ): string | undefined => {
    if (text === undefined) return undefined;
    const value = duration ? parseSeconds(text) : Number(text);
    if (value === undefined || !Number.isFinite(value))
      return `${flag} must be ${duration ? 'a duration (60s, 2m, 500ms)' : 'a number'}, got "${text}"`;
    body[key] = value;
    return undefined;
  };
  if (flags.steps !== undefined) {
    const steps = flags.steps.split(',').map((step) => Number(step.trim()));
    if (steps.some((step) => !Number.isFinite(step)))
      return { error: `--steps must be percentages separated by commas (5,10,25,50), got "${flags.steps}"` };
    body.steps = steps;
  }
  const error =
    number(flags.dwell, '--dwell', 'dwell_s', true) ??
    number(flags.minRequests, '--min-requests', 'min_requests') ??
    number(flags.interval, '--interval', 'interval_s', true) ??
    number(flags.failures, '--failures', 'failures_to_rollback') ??
    number(flags.minSamples, '--min-samples', 'min_samples') ??
    number(flags.window, '--window', 'window_s', true);
  if (error) return { error };
  if (flags.shadow || flags.shadowDwell !== undefined || flags.shadowMinRequests !== undefined) {
    const shadow: Record<string, unknown> = {};
    if (flags.shadowDwell !== undefined) {
      const value = parseSeconds(flags.shadowDwell);
      if (value === undefined)
        return { error: `--shadow-dwell must be a duration, got "${flags.shadowDwell}"` };
      shadow.dwell_s = value;
    }
    if (flags.shadowMinRequests !== undefined) {
      const value = Number(flags.shadowMinRequests);
      if (!Number.isFinite(value)) return { error: `--shadow-min-requests must be a number` };
      shadow.min_requests = value;
    }
    body.shadow = shadow;
  }
  const checks: Record<string, unknown> = {};
  for (const [text, flag, name, field] of [
    [flags.maxErrorIncrease, '--max-error-increase', 'error_rate', 'max_increase'],
    [flags.maxP99Ratio, '--max-p99-ratio', 'p99_ratio', 'max'],
    [flags.maxDisagreement, '--max-disagreement', 'disagreement', 'max'],
  ] as const) {
    if (text === undefined) continue;
    const value = Number(text);
    if (!Number.isFinite(value)) return { error: `${flag} must be a number, got "${text}"` };
    checks[name] = { [field]: value };
  }
  if (Object.keys(checks).length > 0) body.checks = checks;
  return { body };
}

interface RolloutView {
  model: string;
  stable: string;
  candidate: string;
  state: string;
  step: number;
  share: number;
  steps: number[];
  step_started_at: string;
  checks: Array<{
    name: string;
    value: number | null;
    threshold: number;
    verdict: string;
    candidate_samples: number;
    stable_samples: number;
    consecutive_failures: number;
  }>;
  reason: string | null;
  transitions: Array<{ at: string; from: string; to: string; reason: string }>;
}

/** A rollout in a few lines: where it is, each check, the last transitions. */
export function formatRollout(view: RolloutView): string {
  const phase = view.step < 0 ? 'shadow phase' : `step ${view.step + 1}/${view.steps.length}`;
  const lines = [
    `${view.model}: ${view.candidate} over ${view.stable} — ${view.state}, ${phase}, candidate share ${view.share}% (steps ${view.steps.join(' → ')} %)`,
  ];
  for (const check of view.checks) {
    const value = check.value === null ? '-' : Number(check.value.toPrecision(3));
    lines.push(
      `  ${check.name.padEnd(12)} ${check.verdict.padEnd(12)} value ${value} (threshold ${check.threshold}; samples ${check.candidate_samples} candidate / ${check.stable_samples} stable${check.consecutive_failures ? `; failed ${check.consecutive_failures} in a row` : ''})`,
    );
  }
  if (view.reason) lines.push(`  reason: ${view.reason}`);
  for (const t of view.transitions.slice(-5)) lines.push(`  ${t.at}  ${t.from} → ${t.to} (${t.reason})`);
  return lines.join('\n');
}

const FINISHED = new Set(['promoted', 'rolled_back', 'aborted']);

export function registerRollout(models: Command, kit: RolloutCommandKit): void {
  const call = async (
    flags: RolloutFlags,
    method: 'GET' | 'POST',
    path: string,
    body?: Record<string, unknown>,
  ) => {
    const { status, body: answer } = await callServer(kit.clientOptions(flags), method, path, body);
    const typed = answer as { rollout?: RolloutView; code?: string; message?: string };
    if (flags.json) console.log(JSON.stringify(answer, null, 2));
    else if (status === 200 && typed.rollout) console.log(formatRollout(typed.rollout));
    else console.error(`rollout failed (${status} ${typed.code}): ${typed.message}`);
    if (status !== 200) process.exitCode = 1;
    return status === 200 ? typed.rollout : undefined;
  };
  const base = (name: string) => `/api/models/${encodeURIComponent(name)}/rollout`;

  kit
    .addClientOptions(
      models
        .command('rollout <model>')
        .description(
          'start a progressive rollout: the candidate share rises step by step while its checks pass, and rolls back by itself when they fail',
        )
        .requiredOption('--version <v>', 'the candidate version (loaded if it is not the candidate yet)')
        .option(
          '--steps <list>',
          'canary shares in percent, e.g. 5,10,25,50 (a last 100 = promote); default 5,10,25,50,100',
        )
        .option('--dwell <duration>', 'minimum time per step (60s, 2m); default 60s')
        .option('--min-requests <n>', 'candidate requests a step needs; default 100')
        .option('--interval <duration>', 'evaluation interval; default 5s')
        .option('--failures <n>', 'consecutive failing evaluations that roll back; default 3')
        .option('--min-samples <n>', 'samples each side needs before any verdict; default 50')
        .option('--window <duration>', 'sliding window of the checks; default 60s')
        .option('--shadow', 'start with a shadow phase (0% served, every request mirrored and compared)')
        .option('--shadow-dwell <duration>', 'minimum time of the shadow phase; default 30s')
        .option('--shadow-min-requests <n>', 'compared requests the shadow phase needs; default 100')
        .option(
          '--max-error-increase <x>',
          'error-rate check: candidate may exceed stable by this (0.01 = 1 point)',
        )
        .option('--max-p99-ratio <x>', 'latency check: candidate p99 / stable p99 at most this')
        .option(
          '--max-disagreement <x>',
          'disagreement check: share of mirrored requests answered differently',
        ),
    )
    .action(async (name: string, flags: RolloutFlags) => {
      const built = rolloutBody(flags);
      if ('error' in built) kit.fail(built.error);
      await call(flags, 'POST', base(name), built.body);
    });

  kit
    .addClientOptions(
      models
        .command('rollout-status <model>')
        .description(
          "a model's latest rollout: state, step, share, each check's value and verdict, transitions",
        )
        .option('--wait', 'follow it until it ends: exit 0 when promoted, 1 when rolled back or aborted'),
    )
    .action(async (name: string, flags: RolloutFlags) => {
      let view = await call(flags, 'GET', base(name));
      while (flags.wait && view && !FINISHED.has(view.state)) {
        await new Promise((resolve) => setTimeout(resolve, 2000));
        view = await call(flags, 'GET', base(name));
      }
      if (flags.wait && view && view.state !== 'promoted') process.exitCode = 1;
    });

  for (const [action, what] of [
    ['pause', 'hold the share where it is (a failing check still rolls back)'],
    ['resume', 'carry a paused rollout on from its step'],
    ['abort', 'roll back now: candidate share 0, no mirroring, the candidate stays loaded'],
  ] as const)
    kit
      .addClientOptions(models.command(`rollout-${action} <model>`).description(what))
      .action(async (name: string, flags: RolloutFlags) => {
        await call(flags, 'POST', `${base(name)}/${action}`, {});
      });
}
