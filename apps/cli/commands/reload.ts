/**
 * `streaminfer reload`: a model version, the default model, a config file's live settings, or a re-read of the
 * repository (SIGHUP through --pid-file), on every node; `--wait` until every node is ready again.
 */
import { readFileSync } from 'node:fs';
import { type Command, Option } from 'commander';
import { type ClientOptions, callServer } from '../client';
import { type ClientFlags, type CommandKit, printRefusal, report } from '../command-kit';
import { ClientError } from '../errors';
import type { HealthAnswer } from '../status-view';

interface ReloadAnswer {
  id?: number;
  result?: string;
  strategy?: string;
  epoch?: number;
  epoch_before?: number;
  changes?: Array<{ model: string; from: string | null; to: string | null }>;
  default_model?: string;
  previous?: string;
  duration_ms?: number;
  code?: string;
  message?: string;
  error?: string;
  settings_applied?: string[];
  restart_required?: string[];
  nodes?: Array<{ node: number; state: string; error?: string }>;
  /** `--wait`: when every node answered ready again, counted from the command's start. */
  ready_after_ms?: number;
}

function describeReload(answer: ReloadAnswer): string {
  const lines = [
    `reload ${answer.id}: ${answer.result} (${answer.strategy}), epoch ${answer.epoch_before} -> ${answer.epoch}, ${answer.duration_ms} ms`,
  ];
  for (const change of answer.changes ?? [])
    lines.push(`  ${change.model}: ${change.from ?? '(new)'} -> ${change.to ?? '(removed)'}`);
  if (answer.previous !== answer.default_model)
    lines.push(`  default model: ${answer.previous} -> ${answer.default_model}`);
  if (answer.settings_applied?.length)
    lines.push(`  settings applied: ${answer.settings_applied.join(', ')}`);
  if (answer.restart_required?.length)
    lines.push(`  need a restart to take effect: ${answer.restart_required.join(', ')}`);
  for (const node of answer.nodes ?? [])
    if (node.state !== 'committed' && node.state !== 'rolled')
      lines.push(
        `  node ${node.node}: ${node.state.replace('_', ' ')}${node.error ? ` (${node.error})` : ''}`,
      );
  if (answer.error) lines.push(`  error: ${answer.error}`);
  return lines.join('\n');
}

export function registerReload(program: Command, kit: CommandKit): void {
  const { addClientOptions, clientOptions, fail } = kit;
  addClientOptions(
    program
      .command('reload')
      .description(
        'reload models on every node: a version, the default model, or re-read the repository (like SIGHUP)',
      ),
    false,
  )
    .option('--model <name>', 'model to act on (alone: make it the default model)')
    .option('--version <v>', 'with --model: make this version stable (loads it if needed)')
    .addOption(
      new Option('--strategy <name>', 'atomic (epoch barrier) or rolling (node by node, in place)').choices([
        'atomic',
        'rolling',
      ]),
    )
    .option(
      '--pid-file <file>',
      'signal the supervisor (SIGHUP: re-read config and repository) instead of calling the API',
    )
    .option(
      '--config <file>',
      "apply this JSON config file's live settings on every node (as SIGHUP does with the serve --config file); " +
        'the file is read here and sent to the server; its admin settings also locate the admin listener',
    )
    .option(
      '--wait',
      'after the outcome, wait until every node is ready again (what READY=1 tells systemd); for ExecReload=',
    )
    .action(
      async (
        flags: ClientFlags & {
          model?: string;
          version?: string;
          strategy?: string;
          pidFile?: string;
          config?: string;
          wait?: boolean;
        },
      ) => {
        const options = clientOptions(flags);
        const started = Date.now();
        let answer: ReloadAnswer;
        let status = 200;
        let body: Record<string, unknown> | undefined;
        if (flags.config) {
          if (flags.model || flags.version || flags.pidFile)
            fail('--config re-reads everything; it takes no --model, --version or --pid-file');
          let config: unknown;
          try {
            config = JSON.parse(readFileSync(flags.config, 'utf8'));
          } catch (error) {
            fail(`cannot read config file ${flags.config}: ${(error as Error).message}`);
          }
          body = { config };
        } else if (flags.pidFile) {
          if (flags.model || flags.version || flags.strategy)
            fail(
              '--pid-file sends SIGHUP (re-read everything); it takes no --model, --version or --strategy',
            );
        } else {
          if (flags.version && !flags.model) fail('--version needs --model');
          body = {};
          if (flags.model) body.model = flags.model;
          if (flags.version) body.version = flags.version;
        }
        if (body && flags.strategy) body.strategy = flags.strategy;
        const before = ((await callServer(options, 'GET', '/api/reload')).body as ReloadAnswer).id ?? 0;
        if (flags.pidFile) {
          const pid = Number(readFileSync(flags.pidFile, 'utf8').trim());
          if (!Number.isInteger(pid) || pid <= 0) fail(`${flags.pidFile} holds no pid`);
          process.kill(pid, 'SIGHUP');
          answer = await outcomeAfter(options, before, 'SIGHUP sent, but', fail);
          if (answer.result === 'failed') status = 500;
        } else {
          let response: { status: number; body: unknown } | undefined;
          try {
            response = await callServer({ ...options, timeoutMs: 180000 }, 'POST', '/api/reload', body);
          } catch (error) {
            if (!(error instanceof ClientError)) throw error;
          }
          const refused = response?.status === 503 && (response.body as ReloadAnswer).code === 'unavailable';
          if (response && !refused) {
            status = response.status;
            answer = response.body as ReloadAnswer;
          } else {
            // The node carrying this request went away (the reload restarted it): read the outcome instead.
            answer = await outcomeAfter(options, before, 'the connection was lost, and', fail);
            if (answer.result === 'failed') status = 500;
          }
        }
        let notReady: string | undefined;
        if (flags.wait && status === 200) {
          notReady = await readyAgain(options, started + 180000);
          if (notReady) status = 503;
          else answer.ready_after_ms = Date.now() - started;
        }
        report(
          flags,
          status,
          answer,
          () => {
            if (answer.id !== undefined && answer.result)
              (status === 200 ? console.log : console.error)(describeReload(answer));
            else printRefusal('reload', status, answer);
            if (answer.ready_after_ms !== undefined)
              console.log(`  ready again after ${answer.ready_after_ms} ms`);
            if (notReady) console.error(`  ${notReady}`);
          },
          true,
        );
        if (notReady && flags.json) console.error(`streaminfer: ${notReady}`);
      },
    );
}

/** Waits for a reload outcome newer than `before` (GET /api/reload). */
async function outcomeAfter(
  options: ClientOptions,
  before: number,
  what: string,
  fail: (message: string) => never,
): Promise<ReloadAnswer> {
  const until = Date.now() + 180000;
  for (;;) {
    // A connection may land on a node that is going away: that is one more try, not a failure.
    const reply = await callServer(options, 'GET', '/api/reload').catch((error: unknown) => {
      if (error instanceof ClientError) return undefined;
      throw error;
    });
    const answer = reply?.status === 200 ? (reply.body as ReloadAnswer) : undefined;
    if (answer && (answer.id ?? 0) > before) return answer;
    if (Date.now() > until) fail(`${what} no reload outcome appeared within 180 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * `reload --wait`: polls /health until the host is ready (every node ready and serving; the moment the
 * supervisor sends READY=1). Returns why not when `until` passes first.
 */
async function readyAgain(options: ClientOptions, until: number): Promise<string | undefined> {
  let seen = 'no answer yet';
  for (;;) {
    const reply = await callServer({ ...options, timeoutMs: 10000 }, 'GET', '/health').catch(
      (error: unknown) => {
        if (error instanceof ClientError) return { status: 0, body: error.message };
        throw error;
      },
    );
    if (reply.status === 200) return undefined;
    const health = reply.body as Partial<HealthAnswer> | string;
    seen =
      typeof health === 'string'
        ? health
        : `status ${health.status}; ${(health.nodes ?? []).map((node) => `node ${node.node} ${node.state}`).join(', ')}`;
    if (Date.now() > until) return `the host was not ready again within 180 s (last seen: ${seen})`;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
