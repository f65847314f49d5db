/**
 * Online model of batch compute cost, cost(n) ≈ a + b·n (ms), for the adaptive policy.
 *
 * - Weighted least squares over exponentially forgotten sufficient statistics: each new observation multiplies
 *   the old ones by `forgetting` (default 0.98, a memory of about 50 batches), so the model follows slow drift
 *   (other load on the device, thermal throttling) without a window buffer.
 * - A weak prior keeps it defined from the start and with few or identical batch sizes: two pseudo-observations
 *   on the prior line, at n = 1 and n = maxBatchSize, with total weight `priorWeight` (default 0.5, i.e. half a
 *   real batch). The prior is forgotten like data but never below `minPriorWeight` (default 0.01), so a long
 *   run of one batch size cannot make the fit singular (the slope then stays at the prior's), while real data
 *   (weight up to 1 / (1 - forgetting) = 50) soon dominates even when its batch sizes are narrowly spread.
 * - Robust: after `warmupSamples` observations a sample whose residual exceeds 3 × the running residual scale
 *   is down-weighted in proportion (Huber weights), so a GC pause or a one-off stall does not drag the model.
 *   The scale itself follows raw residuals, so a lasting change of cost is accepted within a few batches.
 * - Physical: a and b are constrained to be >= 0 (constrained least squares on the boundary when needed).
 */
export interface CostModelOptions {
  priorInterceptMs: number;
  priorPerItemMs: number;
  /** Largest batch size the model will be asked about; places the second prior point. */
  maxBatchSize: number;
  priorWeight?: number;
  minPriorWeight?: number;
  forgetting?: number;
  warmupSamples?: number;
}

const HUBER_K = 3;
const SCALE_DECAY = 0.9;

export class CostModel {
  private readonly forgetting: number;
  private readonly warmupSamples: number;
  private readonly minPriorWeight: number;
  private priorWeight: number;
  // Prior pseudo-observation statistics for a total weight of 1.
  private readonly p0: number;
  private readonly px: number;
  private readonly py: number;
  private readonly pxx: number;
  private readonly pxy: number;
  // Exponentially forgotten data statistics.
  private s0 = 0;
  private sx = 0;
  private sy = 0;
  private sxx = 0;
  private sxy = 0;
  private samples = 0;
  private residualScale = 0;
  private a: number;
  private b: number;

  constructor(options: CostModelOptions) {
    this.forgetting = options.forgetting ?? 0.98;
    this.warmupSamples = options.warmupSamples ?? 5;
    this.priorWeight = options.priorWeight ?? 0.5;
    this.minPriorWeight = Math.min(this.priorWeight, options.minPriorWeight ?? 0.01);
    const weight = 0.5;
    const x1 = 1;
    const x2 = Math.max(2, options.maxBatchSize);
    const y1 = options.priorInterceptMs + options.priorPerItemMs * x1;
    const y2 = options.priorInterceptMs + options.priorPerItemMs * x2;
    this.p0 = 2 * weight;
    this.px = weight * (x1 + x2);
    this.py = weight * (y1 + y2);
    this.pxx = weight * (x1 * x1 + x2 * x2);
    this.pxy = weight * (x1 * y1 + x2 * y2);
    this.a = options.priorInterceptMs;
    this.b = options.priorPerItemMs;
  }

  /** Fixed cost per batch (ms). */
  get intercept(): number {
    return this.a;
  }

  /** Marginal cost per item (ms). */
  get perItem(): number {
    return this.b;
  }

  /** Batches observed so far (accepted samples). */
  get sampleCount(): number {
    return this.samples;
  }

  /** Typical absolute prediction error (ms): an exponentially weighted mean of recent residuals. */
  get errorScale(): number {
    return this.residualScale;
  }

  predict(batchSize: number): number {
    return this.a + this.b * batchSize;
  }

  /** Adds one observed batch; returns false (and ignores it) when the values are not usable. */
  observe(batchSize: number, computeMs: number): boolean {
    if (!Number.isFinite(batchSize) || batchSize < 1 || !Number.isFinite(computeMs) || computeMs < 0)
      return false;
    const predicted = this.predict(batchSize);
    const residual = Math.abs(computeMs - predicted);
    let weight = 1;
    if (this.samples >= this.warmupSamples) {
      const scale = Math.max(this.residualScale, 0.02 * predicted, 0.01);
      if (residual > HUBER_K * scale) weight = (HUBER_K * scale) / residual;
    }
    this.residualScale =
      this.samples === 0 ? residual : SCALE_DECAY * this.residualScale + (1 - SCALE_DECAY) * residual;

    const f = this.forgetting;
    this.s0 = f * this.s0 + weight;
    this.sx = f * this.sx + weight * batchSize;
    this.sy = f * this.sy + weight * computeMs;
    this.sxx = f * this.sxx + weight * batchSize * batchSize;
    this.sxy = f * this.sxy + weight * batchSize * computeMs;
    this.priorWeight = Math.max(this.minPriorWeight, f * this.priorWeight);
    this.samples++;
    this.refit();
    return true;
  }

  private refit(): void {
    const w = this.priorWeight;
    const s0 = this.s0 + w * this.p0;
    const sx = this.sx + w * this.px;
    const sy = this.sy + w * this.py;
    const sxx = this.sxx + w * this.pxx;
    const sxy = this.sxy + w * this.pxy;
    const det = s0 * sxx - sx * sx;
    let a = det > 0 ? (sy * sxx - sx * sxy) / det : sy / s0;
    let b = det > 0 ? (s0 * sxy - sx * sy) / det : 0;
    if (b < 0) {
      b = 0;
      a = sy / s0;
    }
    if (a < 0) {
      a = 0;
      b = sxy / sxx;
    }
    this.a = Math.max(0, a);
    this.b = Math.max(0, b);
  }
}
