import type { Logger } from 'pino';
import type { PipelineConfig } from './config';
import type { InferenceBackend } from './inference';

export async function createBackend(_config: PipelineConfig, _logger: Logger): Promise<InferenceBackend> {
  throw new Error('pending merge');
}
