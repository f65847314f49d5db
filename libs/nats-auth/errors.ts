/** A NATS connection setting that cannot work: `setting` names it as the user gave it (flag, env, config key). */
export class NatsAuthError extends Error {
  readonly code = 'nats_auth' as const;

  constructor(
    readonly setting: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(`${setting}: ${message}`, options);
    this.name = 'NatsAuthError';
  }
}
