/** The inference backend the config chooses: the embedded worker pool or an external StreamInfer server. */
import type { Logger } from 'pino';
import type { PipelineConfig } from '../config';
import { createEmbeddedBackend } from './embedded';
import { createExternalBackend } from './external';
import type { InferenceBackend } from './inference';

export async function createBackend(config: PipelineConfig, logger: Logger): Promise<InferenceBackend> {
  const pin = { model: config.model.name, version: config.model.version };
  const inference = config.inference;
  if (inference.mode === 'embedded') {
    return createEmbeddedBackend({
      modelsDir: inference.modelsDir,
      workers: inference.workers,
      device: inference.device,
      logger: logger.child({ component: 'embedded-inference' }),
      pins: [pin],
      // The pipeline never has more predictions in flight than messages × revisions; keep admission above it.
      maxInflight: Math.max(4096, config.concurrency * 4),
    });
  }
  return createExternalBackend({
    url: inference.url,
    connections: inference.connections,
    maxInflight: inference.maxInflight,
    logger: logger.child({ component: 'external-inference' }),
  });
}
