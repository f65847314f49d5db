/**
 * The pipeline process (forked by `streaminfer stream`, apps/stream/supervise.ts): the admin endpoint first
 * (so /health answers "starting"), then the inference backend and the pipeline. It drains on SIGTERM, on a
 * 'shutdown' message and on the loss of its supervisor; a reload arrives as a 'reload' message (SIGHUP on
 * the supervisor) or on the admin API.
 */
import pino from 'pino';
import { NatsAuthError } from '../../libs/nats-auth';
import { PipelineAdmin } from './admin';
import { createBackend } from './backends';
import { type PipelineConfig, resolvePipelineConfig } from './config';
import { EXIT_NATS_REFUSED, StreamIoError } from './errors';
import { PipelineMetrics } from './metrics';
import { DeliveryPipeline } from './pipeline';

export type PipelineChildMessage =
  | { type: 'ready'; adminPort: number; epoch: number }
  | { type: 'reloaded'; id: number; outcome: unknown }
  | { type: 'epoch'; model: string; version: string; epoch: number }
  | { type: 'failed'; error: string };

export type PipelineParentMessage =
  | { type: 'reload'; id: number; model?: string; version?: string; reason: string }
  | { type: 'shutdown' };

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
  const admin = new PipelineAdmin(() => pipeline, metrics, {
    host: config.admin.host,
    port: config.admin.port,
    token: process.env.STREAMINFER_ADMIN_TOKEN?.trim() || undefined,
    logger,
  });
  const adminPort = await admin.listen();
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
    else if (raw?.type === 'reload') {
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
    // Exit non-zero: the supervisor restarts the process (with its crash backoff) and its leases come back.
    onFatal: (err) => {
      send({ type: 'failed', error: `lease thread died: ${err.message}` });
      void shutdown('fatal: lease thread died', 1);
    },
  });
  await p.start();
  pipeline = p;
  send({ type: 'ready', adminPort, epoch: p.currentEpoch });
  logger.info({ admin: `http://${config.admin.host}:${adminPort}` }, 'pipeline ready');
}

main().catch((err: unknown) => {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  // pino may not exist yet (bad config): stderr is the one place that always works.
  process.stderr.write(`streaminfer stream: ${message}\n`);
  send({ type: 'failed', error: message });
  const refused =
    err instanceof NatsAuthError || (err instanceof StreamIoError && err.code === 'nats_refused');
  const code = refused ? EXIT_NATS_REFUSED : 1;
  process.exitCode = code;
  setTimeout(() => process.exit(code), 100).unref();
});
