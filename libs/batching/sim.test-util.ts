/** Test support: a deterministic discrete-event simulation of one worker and one model queue. */
import type { BatchPolicy } from './types';

/** Mulberry32: small seeded PRNG so simulations are reproducible. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Poisson arrivals at `ratePerMs` during [start, end). */
export function poissonArrivals(ratePerMs: number, endMs: number, seed: number, startMs = 0): number[] {
  const random = seededRandom(seed);
  const times: number[] = [];
  let t = startMs;
  for (;;) {
    t += -Math.log(1 - random()) / ratePerMs;
    if (t >= endMs) return times;
    times.push(t);
  }
}

export interface SimulationOptions {
  policy: BatchPolicy;
  /**
   * More workers sharing the one queue, each with its own policy and its own serial device (the first is
   * `policy`); each sees every arrival in `enqueuedTotal`, as the worker's lanes do with shared rings.
   */
  morePolicies?: BatchPolicy[];
  /** Sorted arrival times (ms). */
  arrivals: number[];
  /** True compute time of a batch of n (ms); may be noisy. */
  cost: (n: number) => number;
  /** Batches a worker may hold at once; the device runs them one after another. */
  maxInFlight?: number;
  /**
   * The worker's rule (apps/worker): a dispatch short of a full batch while one of its batches runs is held,
   * not claimed (asked again on the next arrival or completion).
   */
  holdPartialWhileBusy?: boolean;
  /** Pass `enqueuedTotal` (arrivals so far) in every snapshot. */
  exactArrivals?: boolean;
  /** Stop at this time even if work remains. */
  horizonMs?: number;
  /** Fail when the policy breaks its contract (size out of range, wait not in the future). */
  maxBatchSize: number;
}

export interface SimulationResult {
  /** Latency (completion − arrival) of each completed item, in arrival order of completion. */
  latencies: number[];
  batchSizes: number[];
  completed: number;
  lastCompletionMs: number;
  decisions: number;
}

interface Batch {
  items: number[];
  startAt: number;
  endAt: number;
}

interface Worker {
  policy: BatchPolicy;
  inFlight: Batch[];
  deviceFreeAt: number;
  wakeAt: number;
}

export function simulate(options: SimulationOptions): SimulationResult {
  const { arrivals, cost } = options;
  const maxInFlight = options.maxInFlight ?? 2;
  const horizon = options.horizonMs ?? Number.POSITIVE_INFINITY;
  const workers: Worker[] = [options.policy, ...(options.morePolicies ?? [])].map((policy) => ({
    policy,
    inFlight: [],
    deviceFreeAt: 0,
    wakeAt: Number.POSITIVE_INFINITY,
  }));
  const queue: number[] = [];
  const latencies: number[] = [];
  const batchSizes: number[] = [];
  let next = 0;
  let now = 0;
  let lastCompletionMs = 0;
  let decisions = 0;
  let turn = 0;

  for (;;) {
    now = next < arrivals.length ? arrivals[next]! : Number.POSITIVE_INFINITY;
    for (const worker of workers) {
      now = Math.min(now, worker.wakeAt, worker.inFlight[0]?.endAt ?? Number.POSITIVE_INFINITY);
    }
    if (now === Number.POSITIVE_INFINITY || now > horizon) break;
    for (const worker of workers) {
      while (worker.inFlight.length > 0 && worker.inFlight[0]!.endAt <= now) {
        const batch = worker.inFlight.shift()!;
        for (const enqueuedAt of batch.items) latencies.push(batch.endAt - enqueuedAt);
        lastCompletionMs = batch.endAt;
        worker.policy.observe(batch.items.length, batch.endAt - batch.startAt, now);
      }
    }
    while (next < arrivals.length && arrivals[next]! <= now) queue.push(arrivals[next++]!);
    // Workers look at the queue in turns, so none always comes first.
    turn++;
    for (let k = 0; k < workers.length; k++) {
      const worker = workers[(turn + k) % workers.length]!;
      worker.wakeAt = Number.POSITIVE_INFINITY;
      while (worker.inFlight.length < maxInFlight) {
        decisions++;
        const snapshot = {
          length: queue.length,
          oldestEnqueuedAt: queue[0] ?? 0,
          inFlightBatches: worker.inFlight.length,
          ...(options.exactArrivals ? { enqueuedTotal: next } : {}),
        };
        const decision = worker.policy.decide(snapshot, now);
        if (decision.kind === 'idle') {
          if (queue.length > 0) throw new Error(`idle with ${queue.length} queued at ${now}`);
          break;
        }
        if (decision.kind === 'wait') {
          if (!(decision.untilMs > now))
            throw new Error(`wait until ${decision.untilMs} is not after ${now}`);
          if (queue.length === 0) throw new Error(`wait with an empty queue at ${now}`);
          worker.wakeAt = decision.untilMs;
          break;
        }
        const size = decision.size;
        if (!Number.isInteger(size) || size < 1 || size > Math.min(queue.length, options.maxBatchSize)) {
          throw new Error(`bad dispatch size ${size} with ${queue.length} queued`);
        }
        if (options.holdPartialWhileBusy && worker.inFlight.length > 0 && queue.length < options.maxBatchSize)
          break;
        const items = queue.splice(0, size);
        const startAt = Math.max(now, worker.deviceFreeAt);
        const computeMs = cost(size);
        worker.deviceFreeAt = startAt + computeMs;
        worker.inFlight.push({ items, startAt, endAt: worker.deviceFreeAt });
        batchSizes.push(size);
      }
    }
  }
  return { latencies, batchSizes, completed: latencies.length, lastCompletionMs, decisions };
}
