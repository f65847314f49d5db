/**
 * Who should own how many partitions, and in which order an instance tries them: pure, the same answer in
 * every instance from the same live set.
 */
import { fnv1a32 } from '../io/layout';

/**
 * Balanced share of `self`: live ids sorted, rank r gets floor(P/N) + (r < P mod N ? 1 : 0). Every instance
 * computes the same split from the same live set, and the shares sum to P. `self` counts as live even when
 * its own heartbeat is not visible yet.
 */
export function balancedTarget(partitions: number, live: readonly string[], self: string): number {
  const ids = [...new Set([...live, self])].sort();
  const rank = ids.indexOf(self);
  const n = ids.length;
  return Math.floor(partitions / n) + (rank < partitions % n ? 1 : 0);
}

/** 32-bit FNV-1a with a murmur3 finaliser: cheap, stable across processes, well mixed for short keys. */
export function hash32(text: string): number {
  let h = fnv1a32(text);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * Rendezvous (highest random weight) order of partitions for one instance: instances prefer different
 * partitions, so simultaneous joiners rarely race for the same key, and the order of one instance never
 * depends on who else is live.
 */
export function preferenceOrder(instanceId: string, partitions: number): number[] {
  const scored = Array.from({ length: partitions }, (_, p) => ({ p, w: hash32(`${instanceId}/${p}`) }));
  scored.sort((a, b) => b.w - a.w || a.p - b.p);
  return scored.map((s) => s.p);
}
