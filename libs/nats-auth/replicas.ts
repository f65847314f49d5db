/**
 * How many copies JetStream keeps of each stream, KV bucket and object store StreamInfer creates (`replicas`,
 * 1 on a single server, 3 on a 3-node cluster). Checked against the server at connect and against the
 * server's answer at create, so a count the cluster cannot hold is refused with a message that says why.
 */

/** JetStream's own ceiling for a stream's replica count. */
export const MAX_REPLICAS = 5;

/** JetStream API codes a create answers when the count cannot be had. */
const REPLICAS_NOT_SUPPORTED = 10074; // replicas > 1 not supported in non-clustered mode
const INSUFFICIENT_RESOURCES = 10023; // fewer JetStream servers (or less storage) than replicas
const NO_SUITABLE_PEERS = 10005; // "no suitable peers for placement": fewer servers in the cluster than replicas

/**
 * Why `replicas` cannot work against the server that greeted the connection (its INFO), or undefined.
 * A server outside a cluster holds one copy; a clustered server's size is known only at create (below).
 */
export function replicasProblem(
  replicas: number,
  server: { cluster?: string; version?: string } | undefined,
  shown: string,
): string | undefined {
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS)
    return `replicas must be an integer from 1 to ${MAX_REPLICAS} (got ${replicas})`;
  if (replicas > 1 && !server?.cluster)
    return `replicas ${replicas} needs a JetStream cluster of at least ${replicas} servers, but NATS at ${shown} (nats-server ${server?.version ?? 'unknown'}) is not clustered: set replicas to 1, or run a cluster`;
  return undefined;
}

/** A create's refusal for the replica count, said plainly; undefined for any other error. */
export function describeReplicasRefusal(err: unknown, replicas: number, what: string): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === REPLICAS_NOT_SUPPORTED)
    return `${what}: replicas ${replicas} refused, the NATS server is not clustered (set replicas to 1)`;
  if ((code === INSUFFICIENT_RESOURCES || code === NO_SUITABLE_PEERS) && replicas > 1)
    return `${what}: replicas ${replicas} refused, the JetStream cluster has fewer than ${replicas} servers up with room (server: ${serverReason(err)})`;
  return undefined;
}

/**
 * A placement refused only because a peer is offline for now (restarting, or its route or stats briefly lost
 * under load): worth asking again for a few seconds before refusing; a cluster that is too small is not.
 */
export function isPeerOffline(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return (
    (code === NO_SUITABLE_PEERS || code === INSUFFICIENT_RESOURCES) && /peer offline/i.test(serverReason(err))
  );
}

function serverReason(err: unknown): string {
  const message = (err as { message?: unknown } | null)?.message;
  return typeof message === 'string' && message.length > 0 ? message : 'insufficient resources';
}

/** An existing stream with fewer copies than asked: refused rather than silently running with less. */
export function replicasShortfall(
  have: number,
  replicas: number,
  what: string,
  stream: string,
): string | undefined {
  if (have >= replicas) return undefined;
  return `${what} exists with ${have} replica(s), ${replicas} asked: scale it first (nats stream edit ${stream} --replicas ${replicas})`;
}
