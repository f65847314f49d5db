export class RepositoryError extends Error {
  readonly code = 'ERR_MODEL_REPOSITORY';
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
