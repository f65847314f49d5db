/**
 * `streaminfer stream`: runs the delivery pipeline (apps/stream) on NATS JetStream under its supervisor.
 * Everything comes from `--config` (the shipped one is deploy/pipeline.json); the flags below override it.
 */
import type { Command } from 'commander';
import pino from 'pino';
import { readPipelineAdminSecrets } from '../stream/admin';
import { PipelineConfigError } from '../stream/config';
import { loadPipelineConfig, superviseStream } from '../stream/supervise';

interface StreamFlags {
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

/** Flags as a config override (only the flags given). */
export function streamOverrides(
  flags: StreamFlags,
  fail: (message: string) => never,
): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  const inference: Record<string, unknown> = {};
  if (flags.nats) o.nats = flags.nats;
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

export function registerStream(program: Command, fail: (message: string) => never): void {
  program
    .command('stream')
    .description(
      'run the delivery pipeline on NATS JetStream: events → event-time features → delay-risk → predictions and alerts',
    )
    .option('--config <file>', 'pipeline config (JSON; see deploy/pipeline.json); flags override it')
    .option('--nats <url>', 'NATS server (default nats://127.0.0.1:4222)')
    .option('--mode <mode>', 'inference: embedded (own worker pool) or external (a StreamInfer server)')
    .option('--url <ws-url>', 'external mode: the server WebSocket endpoint (default ws://127.0.0.1:8000/ws)')
    .option('--models-dir <dir>', 'embedded mode: model repository (default ./models)')
    .option('--version <v>', 'model version the first epoch pins')
    .option('--admin-port <port>', 'health, metrics and admin API port (default 9470; 0 picks one)')
    .option('--subject-root <prefix>', 'prefix every subject (tenants, tests)')
    .option('--log-level <level>', 'pino log level')
    .action(async (flags: StreamFlags) => {
      const overrides = streamOverrides(flags, fail);
      const logger = pino({ base: { component: 'stream-supervisor', pid: process.pid } });
      try {
        const config = loadPipelineConfig(flags.config, overrides);
        // The admin token file and TLS files are checked here, before anything starts (exit 2 naming the file).
        readPipelineAdminSecrets(config.admin, process.env, (message) => logger.warn(message));
      } catch (err) {
        fail(err instanceof PipelineConfigError ? `config ${err.message}` : (err as Error).message);
      }
      process.exitCode = await superviseStream({ configFile: flags.config, overrides, logger });
    });
}
