import { Rng } from '../../rng';

/** The project's seeded PRNG (mulberry32) with the draws a simulation needs: same seed, same run everywhere. */
export class SimRng extends Rng {
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  /** Box–Muller without the cached second value: the simulator's runs (and the model trained on them) rely on it. */
  override normal(mean = 0, sd = 1): number {
    let u = 0;
    while (u === 0) u = this.next();
    return mean + sd * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }

  exponential(mean: number): number {
    return -mean * Math.log(1 - this.next());
  }
}

/** A seed for an independent stream derived from a run seed and labels (FNV-1a over the parts). */
export function subSeed(seed: number, ...parts: (string | number)[]): number {
  let h = 0x811c9dc5 ^ (seed >>> 0);
  for (const ch of parts.join('/')) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
