/**
 * The pipeline process (forked by `streaminfer pipeline`, apps/pipeline/supervise.ts): the admin endpoint first
 * (so /health answers "starting"), then the inference backend and the pipeline. It drains on SIGTERM, on a
 * 'shutdown' message and on the loss of its supervisor; a reload arrives as a 'reload' message (SIGHUP on
 * the supervisor) or on the admin API.
 */
import pino from 'pino';
import { NatsAuthError } from '../../libs/nats-auth';
import { PipelineAdmin, readPipelineAdminSecrets } from './admin';
import { type PipelineConfig, resolvePipelineConfig } from './config';
import { EXIT_SETTING_REFUSED, PipelineIoError } from './errors';
import { createBackend } from './inference/backends';
import { ExternalInferenceError } from './inference/errors';
import { unservedPinCode } from './inference/pin-errors';
import { PipelineMetrics } from './metrics';
import { DeliveryPipeline } from './pipeline';

export type PipelineChildMessage =
  | { type: 'ready'; adminPort: number; adminUrl: string; epoch: number }
  | { type: 'reloaded'; id: number; outcome: unknown }
  | { type: 'epoch'; model: string; version: string; epoch: number }
  | { type: 'failed'; error: string };

export type PipelineParentMessage =
  | { type: 'reload'; id: number; model?: string; version?: string; reason: string }
  | { type: 'shutdown' }
  /** SIGHUP: read the admin token file and TLS files again. */
  | { type: 'secrets' };

function send(message: PipelineChildMessage): void {
  if (process.connected) process.send?.(message);
}

async function main(): Promise<void> {
  const config: PipelineConfig = resolvePipelineConfig(
    JSON.parse(process.env.STREAMINFER_PIPELINE_CONFIG ?? '{}'),
  );
  const logger = pino({ level: config.logLevel, base: { component: 'stream', pid: process.pid } });
  const metrics = new PipelineMetrics();
  let pipeline: DeliveryPipeline | undefined;
  const warn = (message: string) => logger.warn(message);
  const admin = new PipelineAdmin(
    () => pipeline,
    metrics,
    config.admin,
    readPipelineAdminSecrets(config.admin, process.env, warn),
    logger,
  );
  const adminAddress = await admin.listen();
  const adminPort = adminAddress.port ?? 0;
  let stopping: Promise<void> | undefined;
  const shutdown = (why: string, code = 0) => {
    stopping ??= (async () => {
      logger.info({ why }, 'draining');
      await pipeline?.stop();
      await admin.close();
      logger.info('pipeline stopped');
      process.exit(code);
    })();
    return stopping;
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('disconnect', () => void shutdown('supervisor gone'));
  process.on('message', (raw: PipelineParentMessage) => {
    if (raw?.type === 'shutdown') void shutdown('shutdown');
    else if (raw?.type === 'secrets') {
      // SIGHUP: the token file and certificate again; one that cannot be used keeps the previous ones.
      try {
        admin.useSecrets(readPipelineAdminSecrets(config.admin, process.env, warn));
        logger.info('admin token and certificate re-read');
      } catch (err) {
        logger.error(
          { err: (err as Error).message },
          'SIGHUP: admin secrets refused; keeping the previous ones',
        );
      }
    } else if (raw?.type === 'reload') {
      const p = pipeline;
      if (!p) return send({ type: 'reloaded', id: raw.id, outcome: { result: 'failed', error: 'starting' } });
      void p
        .reload({ model: raw.model, version: raw.version }, raw.reason)
        .then((outcome) => send({ type: 'reloaded', id: raw.id, outcome }));
    }
  });

  const backend = await createBackend(config, logger);
  const p = new DeliveryPipeline({
    config,
    backend,
    metrics,
    logger,
    onEpoch: (pin, epoch) => send({ type: 'epoch', model: pin.model, version: pin.version, epoch }),
    // `streaminfer pipeline --version`: the supervisor says so for the first start only.
    pinFromOperator: process.env.STREAMINFER_PIPELINE_PIN_FROM_OPERATOR === '1',
    // Exit non-zero: the supervisor restarts the process (with its crash backoff) and its leases come back.
    onFatal: (err) => {
      send({ type: 'failed', error: `lease thread died: ${err.message}` });
      void shutdown('fatal: lease thread died', 1);
    },
  });
  await p.start();
  pipeline = p;
  send({ type: 'ready', adminPort, adminUrl: adminAddress.url, epoch: p.currentEpoch });
  logger.info({ admin: adminAddress.url }, 'pipeline ready');
}

/** A start that fails the same way every time: a setting to fix, not a crash to restart after. */
function refusedSetting(err: unknown): boolean {
  if (err instanceof NatsAuthError) return true;
  if (err instanceof PipelineIoError) return err.code === 'nats_refused' || err.code === 'invalid_options';
  if (unservedPinCode(err) !== undefined) return true;
  return err instanceof ExternalInferenceError && err.code === 'invalid_options';
}

main().catch((err: unknown) => {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  // pino may not exist yet (bad config): stderr is the one place that always works.
  process.stderr.write(`streaminfer pipeline: ${message}\n`);
  send({ type: 'failed', error: message });
  const code = refusedSetting(err) ? EXIT_SETTING_REFUSED : 1;
  process.exitCode = code;
  setTimeout(() => process.exit(code), 100).unref();
});
