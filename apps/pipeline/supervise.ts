/**
 * `streaminfer pipeline`: supervises one pipeline process as the server's supervisor does its nodes — forks
 * it, restarts it after a crash with the same backoff (by crash streak, reset by a stable run), re-reads the
 * config on SIGHUP (a model or version change goes through the pipeline's epoch barrier; anything else
 * needs a restart, and says so), and drains it on SIGTERM / SIGINT.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { nextCrashStreak, restartDelayMs } from '../../libs/process';
import { type PipelineConfig, resolvePipelineConfig } from './config';
import { EXIT_SETTING_REFUSED } from './errors';
import type { PipelineChildMessage, PipelineParentMessage } from './main';
import { instanceHost } from './pipeline';

/** How long the pipeline may take to drain before it is killed. */
const DRAIN_TIMEOUT_MS = 60_000;

export interface SuperviseOptions {
  /** The config file (re-read on SIGHUP); undefined runs on defaults + overrides. */
  configFile?: string;
  /** Flag overrides, applied over the file. */
  overrides: Record<string, unknown>;
  /**
   * `--version` was given: the first pipeline process pins it over the epoch log (a transition). Restarts
   * after that follow the log, so a crash never undoes a reload made since.
   */
  pinFromOperator?: boolean;
  logger: Logger;
}

export function loadPipelineConfig(
  file: string | undefined,
  overrides: Record<string, unknown>,
): PipelineConfig {
  let fromFile: unknown;
  if (file) {
    try {
      fromFile = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`cannot read pipeline config ${file}: ${(err as Error).message}`);
    }
  }
  return resolvePipelineConfig(fromFile, overrides);
}

/**
 * The pipeline process's Node flags: the supervisor's own, and runtime.semiSpaceMb as --max-semi-space-size
 * unless the operator set that flag already (on the command line or in NODE_OPTIONS: theirs wins).
 */
export function pipelineExecArgv(
  config: PipelineConfig,
  execArgv: readonly string[],
  env: NodeJS.ProcessEnv,
): string[] {
  const flag = '--max-semi-space-size';
  const given = [...execArgv, ...(env.NODE_OPTIONS ?? '').split(/\s+/)].some((a) => a.startsWith(flag));
  if (given || config.runtime.semiSpaceMb === 0) return [...execArgv];
  return [...execArgv, `${flag}=${config.runtime.semiSpaceMb}`];
}

export async function supervisePipeline(options: SuperviseOptions): Promise<number> {
  const { logger } = options;
  let config = loadPipelineConfig(options.configFile, options.overrides);
  let child: ChildProcess | undefined;
  let stopping = false;
  let streak = 0;
  let readyAt: number | undefined;
  let reloadIds = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let pinFromOperator = options.pinFromOperator ?? false;
  /** The model the config file (with the flags) said when last read: SIGHUP reloads when it changes. */
  let fileModel = config.model;
  let resolveExit: (code: number) => void = () => {};
  const exited = new Promise<number>((resolve) => {
    resolveExit = resolve;
  });

  // One id across the child's restarts: a restarted child takes its partitions' leases back at once.
  if (config.instance.id === '')
    config = { ...config, instance: { ...config.instance, id: `${instanceHost()}-${process.pid}` } };
  const start = () => {
    readyAt = undefined;
    const c = fork(join(__dirname, 'main.js'), [], {
      execArgv: pipelineExecArgv(config, process.execArgv, process.env),
      env: {
        ...process.env,
        STREAMINFER_PIPELINE_CONFIG: JSON.stringify(config),
        STREAMINFER_PIPELINE_PIN_FROM_OPERATOR: pinFromOperator ? '1' : '0',
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child = c;
    c.on('message', (m: PipelineChildMessage) => {
      if (m.type === 'ready') {
        readyAt = Date.now();
        pinFromOperator = false;
        logger.info(
          { pid: c.pid, admin: m.adminPort, admin_url: m.adminUrl, epoch: m.epoch },
          'pipeline ready',
        );
      } else if (m.type === 'epoch') {
        // A restart after a crash pins what the last epoch pinned (a reload by API or SIGHUP), not the file.
        config = { ...config, model: { name: m.model, version: m.version } };
      } else if (m.type === 'reloaded') {
        logger.info({ outcome: m.outcome }, 'pipeline reload');
      }
    });
    c.on('exit', (code, signal) => {
      if (child === c) child = undefined;
      if (stopping) {
        resolveExit(code ?? 0);
        return;
      }
      if (code === EXIT_SETTING_REFUSED && readyAt === undefined) {
        // Refused credentials or TLS, an unknown model or version: every restart fails the same way. Stop, as
        // a bad config does (the process printed why).
        logger.error(
          { code },
          'pipeline process could not start: a setting was refused (NATS connection, model or version, options)',
        );
        resolveExit(code);
        return;
      }
      const servedMs = readyAt === undefined ? undefined : Date.now() - readyAt;
      streak = nextCrashStreak(streak, servedMs);
      const delay = restartDelayMs(streak);
      logger.error({ code, signal, streak, restartInMs: delay }, 'pipeline process exited; restarting');
      restartTimer = setTimeout(start, delay);
    });
  };

  const toChild = (message: PipelineParentMessage) => {
    if (child?.connected) child.send(message);
  };

  process.on('SIGHUP', () => {
    toChild({ type: 'secrets' });
    let next: PipelineConfig;
    try {
      next = loadPipelineConfig(options.configFile, options.overrides);
    } catch (err) {
      logger.error({ err: (err as Error).message }, 'SIGHUP: config refused; nothing changed');
      return;
    }
    if (next.instance.id === '') next = { ...next, instance: { ...next.instance, id: config.instance.id } };
    const { model: _pinned, ...restBefore } = config;
    const { model: after, ...restAfter } = next;
    if (JSON.stringify(restBefore) !== JSON.stringify(restAfter))
      logger.warn('SIGHUP: settings other than model need a restart of `streaminfer pipeline` to apply');
    // A change of the file's model, not a difference from the pin: a reload by API (the pin now) must not
    // be undone by a SIGHUP that only re-reads certificates.
    const before = fileModel;
    fileModel = after;
    if (before.name !== after.name || before.version !== after.version) {
      config = { ...config, model: after };
      toChild({
        type: 'reload',
        id: ++reloadIds,
        model: after.name,
        version: after.version,
        reason: 'SIGHUP',
      });
    } else {
      logger.info('SIGHUP: model unchanged');
    }
  });

  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ why }, 'stopping the pipeline');
    if (restartTimer) clearTimeout(restartTimer);
    const c = child;
    if (!c) {
      resolveExit(0);
      return;
    }
    toChild({ type: 'shutdown' });
    c.kill('SIGTERM');
    setTimeout(() => c.kill('SIGKILL'), DRAIN_TIMEOUT_MS).unref();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));

  start();
  const code = await exited;
  logger.info('pipeline stopped');
  return code;
}
