export class RepositoryError extends Error {
  readonly code = 'model_repository';
  constructor(message: string) {
    super(message);
    this.name = 'RepositoryError';
  }
}

export class RoutingError extends Error {
  readonly code = 'unknown_version';
  constructor(message: string) {
    super(message);
    this.name = 'RoutingError';
  }
}
