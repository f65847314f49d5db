/** What the `stream-ownership` bench hands each ownership-worker.ts process (JSON in argv). */
export interface OwnershipWorkerConfig {
  /**
   * lease: KV leases and holds(). pinned: priority group, fenced on the client's `consumer_unpinned`.
   * pinned-timed: the same, also fenced once its last pull is priority_timeout (= ttlMs) old — the bound a
   * pinned client could put on itself, as the lease's renewal + TTL.
   */
  mode: 'lease' | 'pinned' | 'pinned-timed';
  url: string;
  stream: string;
  /** Subject prefix of the events: `<prefix>.<p>.<key>`. */
  subjectPrefix: string;
  /** Durables `<durable>-p<k>`; also the lease group. */
  durable: string;
  bucket: string;
  instanceId: string;
  partitions: number;
  /** Lease TTL (lease mode). The pinned durables' priority_timeout is set by the bench to the same. */
  ttlMs: number;
  ackWaitMs: number;
  /** Pull expiry of the pinned consumers: under priority_timeout, or an idle pinned client loses its pin. */
  expiresMs: number;
  batch: number;
  workUs: number;
  gated: boolean;
}

export const PRIORITY_GROUP = 'owners';
