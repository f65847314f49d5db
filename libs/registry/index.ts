export type { ModelBatchingConfig, ModelEntry, ModelVersionEntry } from './repository';
export { compareVersions, RepositoryError, readModel, scanRepository } from './repository';
