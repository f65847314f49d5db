/**
 * What can go wrong in this lib's NATS I/O, as kinds, not as an error class: the lib throws the caller's own
 * typed error through the `fail` it is given (the fleet's FleetError, the pipeline's PipelineIoError), so a
 * caller's codes and `instanceof` checks are the same whether a failure came from here or from its own code.
 */
export type JetStreamFailure =
  /** An option or the replica count is refused before (or at) connect. */
  | 'invalid_options'
  /** NATS is not reachable, or JetStream is not enabled there. */
  | 'unreachable'
  /** NATS answered no: bad or expired credentials, a TLS mismatch, no JetStream permission. Not retried. */
  | 'refused'
  /** An existing bucket or store does not have the TTL or the replicas asked for. */
  | 'mismatch';

export type FailWith = (failure: JetStreamFailure, message: string, options?: ErrorOptions) => Error;
