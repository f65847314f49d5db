export type { ModelBatchingConfig, ModelEntry, ModelVersionEntry } from './repository';
export { compareVersions, RepositoryError, readModel, scanRepository } from './repository';
export type { ModelRoutes, RouteDecision, RouteKind } from './routing';
export { argmax, ROUTE_KINDS, RoutingError, route, routingKeyDraw } from './routing';
export type { ModelState, RegistryState } from './state';
export { loadState, STATE_FILE, saveState, statePath } from './state';
