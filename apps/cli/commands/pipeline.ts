/**
 * `streaminfer pipeline`: runs the delivery pipeline (apps/pipeline) on NATS JetStream under its supervisor.
 * Everything comes from `--config` (the shipped one is deploy/pipeline.json); the flags below override it.
 */
import type { Command } from 'commander';
import pino from 'pino';
import { mergeNatsSettings, NatsAuthError, natsSettingsFromEnv } from '../../../libs/nats-auth';
import { readPipelineAdminSecrets } from '../../pipeline/admin';
import { pipelineNatsAuth } from '../../pipeline/connection';
import { PipelineConfigError } from '../../pipeline/errors';
import { loadPipelineConfig, supervisePipeline } from '../../pipeline/supervise';
import { addNatsOptions, type NatsFlags, natsFlagSettings } from '../nats-options';
import { pipelineRecoverCommand } from './pipeline-recover';

interface PipelineFlags extends NatsFlags {
  config?: string;
  nats?: string;
  mode?: string;
  url?: string;
  modelsDir?: string;
  version?: string;
  adminPort?: string;
  subjectRoot?: string;
  logLevel?: string;
}

function intFlag(name: string, value: string, fail: (message: string) => never): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) fail(`${name} must be an integer (got ${value})`);
  return n;
}

/**
 * Flags (and the STREAMINFER_NATS_* file and user settings, under the flags) as a config override: only what
 * is given. A password or token stays in the environment; the pipeline process reads it there.
 */
export function pipelineOverrides(
  flags: PipelineFlags,
  fail: (message: string) => never,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  const inference: Record<string, unknown> = {};
  let fromEnv: ReturnType<typeof natsSettingsFromEnv>;
  try {
    fromEnv = natsSettingsFromEnv(env);
  } catch (err) {
    fail((err as Error).message);
  }
  const {
    servers: _,
    password: _p,
    token: _t,
    ...nats
  } = mergeNatsSettings('', natsFlagSettings(flags), fromEnv);
  if (flags.nats) o.nats = { ...nats, servers: flags.nats };
  else if (Object.keys(nats).length > 0) o.nats = nats;
  if (flags.subjectRoot !== undefined) o.subjectRoot = flags.subjectRoot;
  if (flags.logLevel) o.logLevel = flags.logLevel;
  if (flags.mode) inference.mode = flags.mode;
  if (flags.url) inference.url = flags.url;
  if (flags.modelsDir) inference.modelsDir = flags.modelsDir;
  if (Object.keys(inference).length > 0) o.inference = inference;
  if (flags.version) o.model = { version: flags.version };
  if (flags.adminPort !== undefined) o.admin = { port: intFlag('--admin-port', flags.adminPort, fail) };
  return o;
}

/** What `streaminfer stream` prints before it runs: the command's name in 0.1 (docs/decisions/0008). */
export const STREAM_DEPRECATED = '`streaminfer stream` is deprecated; use `streaminfer pipeline`';

export type PipelineAction = (flags: PipelineFlags) => Promise<void>;

/**
 * `pipeline`, and `stream` as its deprecated alias: the same options, subcommands and action; the alias is left
 * out of `--help` and prints STREAM_DEPRECATED to stderr first. `action` is replaceable for tests.
 */
export function registerPipeline(
  program: Command,
  fail: (message: string) => never,
  action: PipelineAction = (flags) => runPipeline(flags, fail),
): void {
  pipelineCommand(program.command('pipeline'), fail, action);
  pipelineCommand(program.command('stream', { hidden: true }), fail, action)
    .description('deprecated name of `streaminfer pipeline`: the same command, after a notice on stderr')
    // Before the action of the command or of a subcommand (`stream recover`), once.
    .hook('preAction', () => {
      process.stderr.write(`${STREAM_DEPRECATED}\n`);
    });
}

function pipelineCommand(
  command: Command,
  fail: (message: string) => never,
  action: PipelineAction,
): Command {
  addNatsOptions(command);
  command.addCommand(pipelineRecoverCommand(fail));
  return command
    .description(
      'run the delivery pipeline on NATS JetStream: events → event-time features → delay-risk → predictions and alerts',
    )
    .option('--config <file>', 'pipeline config (JSON; see deploy/pipeline.json); flags override it')
    .option('--nats <urls>', 'NATS server(s), nats:// or tls:// (default nats://127.0.0.1:4222)')
    .option('--mode <mode>', 'inference: embedded (own worker pool) or external (a StreamInfer server)')
    .option('--url <ws-url>', 'external mode: the server WebSocket endpoint (default ws://127.0.0.1:8000/ws)')
    .option('--models-dir <dir>', 'embedded mode: model repository (default ./models)')
    .option(
      '--version <v>',
      'model version to pin: wins over the epoch log at start (recorded as a transition); without it a restart continues the last epoch',
    )
    .option('--admin-port <port>', 'health, metrics and admin API port (default 9470; 0 picks one)')
    .option('--subject-root <prefix>', 'prefix every subject (tenants, tests)')
    .option('--log-level <level>', 'pino log level')
    .action((flags: PipelineFlags) => action(flags));
}

async function runPipeline(flags: PipelineFlags, fail: (message: string) => never): Promise<void> {
  const overrides = pipelineOverrides(flags, fail);
  const logger = pino({ base: { component: 'stream-supervisor', pid: process.pid } });
  try {
    const config = loadPipelineConfig(flags.config, overrides);
    // The admin token file and TLS files are checked here, before anything starts (exit 2 naming the file).
    readPipelineAdminSecrets(config.admin, process.env, (message) => logger.warn(message));
    // The NATS files (password, token, seed, creds, certificates) are read and checked now, once more
    // by the pipeline process.
    pipelineNatsAuth(config.nats);
  } catch (err) {
    if (err instanceof NatsAuthError) fail(err.message);
    fail(err instanceof PipelineConfigError ? `config ${err.message}` : (err as Error).message);
  }
  process.exitCode = await supervisePipeline({
    configFile: flags.config,
    overrides,
    logger,
    pinFromOperator: flags.version !== undefined,
  });
}
