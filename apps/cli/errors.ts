export class ClientError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly body?: unknown,
  ) {
    super(message);
    this.name = 'ClientError';
  }
}

/** A server answer status cannot read. */
export class StatusError extends Error {
  constructor(
    readonly code: 'bad_answer' | 'unauthorized' | 'unavailable',
    message: string,
  ) {
    super(message);
    this.name = 'StatusError';
  }
}
