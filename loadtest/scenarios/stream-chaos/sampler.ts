/** stream-chaos sampling: each pipeline's backlog per partition and its instances' /health, once a second. */
import type { NatsHandle } from '../../pipeline/broker';
import { type InstanceHealth, instanceHealth, partitionConsumers } from '../../pipeline/instances';
import { live, PARTITIONS, type Pipeline, type Sample, type Sampler } from './plan';

/**
 * Samples a pipeline every `everyMs`: Σ per-partition num_pending (what no consumer has been handed yet —
 * the broker's count, true while an instance is down too), and each live instance's /health. Keeps every
 * instance's last answer (with its time) for the kill records.
 */
export function sampler(nats: NatsHandle, p: Pipeline, everyMs: number): Sampler {
  const samples: Sample[] = [];
  const last = new Map<string, { tMs: number; pid: number; h: InstanceHealth }>();
  let stopped = false;
  let busy = false;
  let stalls = 0;
  let prev: (number | undefined)[] = [];
  const timer = setInterval(() => {
    if (stopped || busy) return;
    busy = true;
    void (async () => {
      const insts = live(p);
      const [cs, hs] = await Promise.all([
        partitionConsumers(nats, p.names, PARTITIONS),
        Promise.all(insts.map((i) => instanceHealth(i.current().admin, 1500))),
      ]);
      const tMs = Date.now();
      const pendingBy = cs.map((c, k) => c?.pending ?? prev[k]);
      prev = pendingBy;
      const owned = new Set<number>();
      let replaying = 0;
      const owners: Sample['owners'] = {};
      insts.forEach((inst, i) => {
        const h = hs[i];
        owners[inst.label] = h?.instance.owned;
        if (!h) {
          // a process that is alive but did not answer within 1.5 s: its event loop was busy
          if (isAlive(inst.current().pid)) stalls++;
          return;
        }
        last.set(inst.label, { tMs, pid: inst.current().pid, h });
        for (const k of h.instance.owned) owned.add(k);
        replaying += h.partitions.filter((x) => x.replaying).length;
      });
      samples.push({
        tMs,
        lag: pendingBy.reduce<number>((a, b) => a + (b ?? 0), 0),
        covered: owned.size,
        replaying,
        pendingBy,
        owners,
      });
    })()
      .catch(() => undefined)
      .finally(() => {
        busy = false;
      });
  }, everyMs);
  return {
    samples,
    last,
    stalls: () => stalls,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}

export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
