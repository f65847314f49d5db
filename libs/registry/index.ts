// The top-1 helper lives with the tensor descriptions; routing and shadow comparisons use it from here too.
export { argmax } from '../protocol';
export { RepositoryError, RoutingError } from './errors';
export type {
  ModelPlan,
  NodeSettings,
  NodeTls,
  PlanNotice,
  Planned,
  RegistryAction,
  RegistryChange,
  RepositoryModel,
  TablePlan,
  UnavailableModel,
} from './plan';
export {
  defaultModelPlan,
  findModel,
  REGISTRY_ACTIONS,
  registryChange,
  registryStateOf,
  registryTransition,
  repositoryPlan,
  rescanPlan,
  versionReloadPlan,
  withModel,
  withoutFailed,
  withSavedState,
  withSettings,
} from './plan';
export type {
  BrokenModel,
  ModelBatchingConfig,
  ModelBatchingFile,
  ModelConfigFile,
  ModelConfigParsed,
  ModelEntry,
  ModelVersionEntry,
} from './repository';
export {
  isRepositoryName,
  parseModelConfig,
  readModel,
  scanRepository,
  scanRepositoryDetailed,
} from './repository';
export type { ModelRoutes, RouteDecision, RouteKind } from './routing';
export { route, routingKeyDraw } from './routing';
export type { ModelState, RegistryState, StateFs } from './state';
export { loadState, saveState, writeDurably } from './state';
