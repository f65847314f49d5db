import { setTimeout as sleep } from 'node:timers/promises';
import { isPeerOffline } from '../nats-auth';

/**
 * How long a create waits out a peer that is offline for now (a rolling restart, a route or its stats lost
 * for a moment under load) before the refusal stands: longer than a nats-server restart on loopback (~1 s).
 */
export const PEER_OFFLINE_WAIT_MS = 10_000;

export interface PlacementWait {
  waitMs?: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<unknown>;
}

/** Runs a stream, bucket or store create, asking again while its placement is refused for an offline peer. */
export async function createPlaced<T>(create: () => Promise<T>, wait: PlacementWait = {}): Promise<T> {
  const now = wait.now ?? Date.now;
  const pause = wait.sleep ?? sleep;
  const until = now() + (wait.waitMs ?? PEER_OFFLINE_WAIT_MS);
  for (let delay = 250; ; delay = Math.min(delay * 2, 2000)) {
    try {
      return await create();
    } catch (err) {
      if (!isPeerOffline(err) || now() + delay > until) throw err;
      await pause(delay);
    }
  }
}
