/**
 * Shadow mode: a copy of a stable-served request goes to the candidate at the lowest priority (first to be
 * shed). Its answer is compared with the stable one and never sent.
 */
import { AdmissionCode } from '../../libs/backpressure';
import type { MetricsShard } from '../../libs/metrics';
import type { BoundRequest, ErrorCode, ShadowOutput } from '../../libs/protocol';
import { outputsAgree, requestRecordBytes } from '../../libs/protocol';
import type { ServedModel, Slot } from './models';
import type { PendingRequests } from './pending';

import type { Reply, ShadowPair } from './request';
import type { RingWriter } from './ring-writer';

export interface ShadowStats {
  agree: number;
  disagree: number;
  skipped: number;
  /**
   * Mirrored copies the candidate failed with a fault of its own (model_error, internal) while stable answered:
   * counted among `skipped` too, and as candidate errors by the rollout's error-rate check. A copy shed, late
   * or refused at its low priority is not the candidate's fault and is not counted here.
   */
  candidateErrors: number;
}

/** A candidate failure on a mirrored copy that is the candidate's own fault. */
const CANDIDATE_FAULTS: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['model_error', 'internal']);

export class Shadow {
  /** Comparison counts by model name. */
  readonly stats = new Map<string, ShadowStats>();

  constructor(
    private readonly table: { readonly models: Map<string, ServedModel>; readonly epoch: number },
    private readonly pending: PendingRequests,
    private readonly writer: RingWriter,
    private readonly metrics: MetricsShard,
    /** The reply of a mirrored copy: it sends nothing. */
    private readonly silent: Reply,
  ) {}

  /** Mirrors one admitted request to `version`; returns the pair both sides fill, or undefined when shed. */
  mirror(
    primary: Slot,
    version: string,
    /** The mirrored side is the candidate (false: a canary-served request mirrored to stable). */
    mirrorIsCandidate: boolean,
    bound: BoundRequest,
    startedAt: number,
    deadlineAt: number,
    now: number,
  ): ShadowPair | undefined {
    const target = this.table.models.get(primary.model.name)?.versions.get(version);
    const stats = this.statsOf(primary.model.name);
    if (!target || target.guard.tryAdmit(target.admitted, 'shadow', now) !== AdmissionCode.Admit) {
      stats.skipped++;
      return undefined;
    }
    const ring = target.rings[0]!;
    const length = requestRecordBytes(bound);
    const offset = length <= ring.maxRecordBytes ? ring.reserve(length) : -1;
    if (offset < 0) {
      stats.skipped++;
      return undefined;
    }
    const requestId = this.writer.takeRequestId();
    this.writer.write(
      ring,
      offset,
      target.doorbell,
      { requestId, slot: target.index, priority: 'low', enqueuedAt: startedAt, deadlineAt },
      bound,
    );
    target.admitted++;
    const pair: ShadowPair = {
      model: primary.model.name,
      classifier: primary.model.signature.labels !== undefined,
      primary: undefined,
      candidate: undefined,
      mirrorIsCandidate,
      open: 2,
    };
    this.pending.add(requestId, {
      id: null,
      slot: target.index,
      priority: 'low',
      epoch: this.table.epoch,
      startedAt,
      deadlineAt,
      reply: this.silent,
      peer: undefined,
      client: undefined,
      shadow: pair,
      shadowSide: true,
      judged: false,
    });
    this.metrics.addInflight(target.index, 1);
    return pair;
  }

  /** One side of a shadow pair answered (undefined = it failed, with `failure`): compare once both have. */
  settle(
    pair: ShadowPair,
    side: 'primary' | 'candidate',
    output: ShadowOutput | undefined,
    failure?: ErrorCode,
  ): void {
    pair[side] = output;
    if (side === 'candidate' && failure !== undefined) pair.candidateFailure = failure;
    pair.open--;
    if (pair.open > 0) return;
    const stats = this.statsOf(pair.model);
    if (!pair.primary || !pair.candidate) {
      stats.skipped++;
      if (
        pair.mirrorIsCandidate &&
        pair.primary &&
        pair.candidateFailure !== undefined &&
        CANDIDATE_FAULTS.has(pair.candidateFailure)
      )
        stats.candidateErrors++;
      return;
    }
    if (outputsAgree(pair.primary, pair.candidate, pair.classifier)) stats.agree++;
    else stats.disagree++;
  }

  private statsOf(model: string): ShadowStats {
    let stats = this.stats.get(model);
    if (!stats) {
      stats = { agree: 0, disagree: 0, skipped: 0, candidateErrors: 0 };
      this.stats.set(model, stats);
    }
    return stats;
  }
}
