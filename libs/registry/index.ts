export type { ModelBatchingConfig, ModelEntry, ModelVersionEntry } from './repository';
export { compareVersions, readModel, RepositoryError, scanRepository } from './repository';
