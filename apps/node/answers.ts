/**
 * Answers: the response ring drained into Replies — every admitted request gets exactly one answer (its
 * worker's, or the node's own when the worker died, the deadline passed long ago, or the node shut down).
 */
import type { MetricsShard } from '../../libs/metrics';
import { MAX_SLOTS, SHED_REASONS } from '../../libs/metrics';
import type { ErrorCode } from '../../libs/protocol';
import {
  errorCodeFromIndex,
  errorCodeIndex,
  httpStatusOf,
  readComputeMs,
  readErrorResponse,
  readFirstOutput,
  readQueueMs,
  readResponseRequestId,
  readResponseStatus,
} from '../../libs/protocol';
import type { RingBuffer } from '../../libs/ring';
import { JUDGED, judgedByCode, ServiceTimes } from '../../libs/rollout';
import type { Rejection } from './admission';
import type { Slot } from './models';
import type { PendingRequests } from './pending';

import type { Peer, PendingRequest, Reply } from './request';
import { PROTOCOL_HTTP } from './request';
import type { Shadow } from './shadow';

const SWEEP_INTERVAL_MS = 1000;
/** A request still unanswered this long after its deadline is answered by the node itself (never hangs). */
const SWEEP_GRACE_MS = 5000;
const MODEL_ERROR = errorCodeIndex('model_error');
const DEADLINE_EXCEEDED = errorCodeIndex('deadline_exceeded');
const DEADLINE_SHED = SHED_REASONS.indexOf('deadline');

export class Answers {
  /** Requests answered by a worker or by the node (not shadow copies). */
  answered = 0;
  /** The request the drain loop is answering, so a failure there still answers it. */
  private answering: PendingRequest | undefined;
  private drainLoopRunning = false;
  private sweepTimer: NodeJS.Timeout | undefined;
  private onIdle: (() => void) | undefined;
  /** Each version's measured service time: the floor a deadline must reach to count in a rollout check. */
  private readonly serviceTimes = new ServiceTimes(MAX_SLOTS);

  constructor(
    private readonly responses: RingBuffer,
    private readonly pending: PendingRequests,
    private readonly slots: ReadonlyArray<Slot | undefined>,
    private readonly metrics: MetricsShard,
    private readonly shadow: Shadow,
    private readonly clock: () => number,
    /** Records a failure of the answer path (it must never end the node). */
    private readonly onError: (where: string, error: unknown) => void,
  ) {}

  start(): void {
    if (this.drainLoopRunning) return;
    this.drainLoopRunning = true;
    void this.drainResponses();
    this.sweepTimer = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  stop(): void {
    this.drainLoopRunning = false;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.pending.stop();
  }

  /** Answers a request refused before it was admitted (nothing of it is in a ring). */
  reject(
    peer: Peer,
    reply: Reply,
    rejection: Rejection,
    startedAt: number,
    close = false,
    suppressed?: number,
  ): void {
    const error = rejection.error;
    this.metrics.recordRequest(
      rejection.slot,
      peer.protocol,
      errorCodeIndex(error.code),
      (this.clock() - startedAt) / 1000,
      peer.tenant?.metricsIndex ?? 0,
    );
    const body = reply.error(rejection.id, error.code, error.message, error.retryAfterMs, suppressed);
    reply.send(peer, body, httpStatusOf(error.code), close, error.retryAfterMs);
  }

  /** Answers everything already in the response ring. */
  drainNow(): void {
    while (this.responses.pendingRecords() > 0) {
      if (this.responses.claim(this.onResponse, 4096) === 0) break;
    }
  }

  /**
   * A worker died holding these requests: the answers it already wrote are delivered first, the rest are
   * failed `internal` (never dropped). Returns how many were failed.
   */
  failClaimedBy(workerIndex: number, claimed: readonly number[]): number {
    this.drainNow();
    let failed = 0;
    for (const requestId of claimed)
      if (
        this.answerWithError(
          requestId,
          'internal',
          `worker ${workerIndex} died while computing this request; retry`,
        )
      )
        failed++;
    return failed;
  }

  /** Answers a request the workers will never answer (dead worker, sweeper, shutdown timeout). */
  answerWithError(requestId: number, code: ErrorCode, message: string): boolean {
    const request = this.pending.take(requestId);
    if (!request) return false;
    if (request.shadow)
      this.shadow.settle(request.shadow, request.shadowSide ? 'candidate' : 'primary', undefined, code);
    if (request.shadowSide) {
      this.finishInternal(request);
      return true;
    }
    const seconds = (this.clock() - request.startedAt) / 1000;
    const codeIndex = errorCodeIndex(code);
    this.metrics.recordRequest(
      request.slot,
      request.peer?.protocol ?? PROTOCOL_HTTP,
      codeIndex,
      seconds,
      request.peer?.tenant?.metricsIndex ?? 0,
    );
    if (request.judged) this.judge(request, codeIndex, seconds);
    this.complete(request, request.reply.error(request.id, code, message), httpStatusOf(code));
    return true;
  }

  /** Resolves when every admitted request is answered, or after timeoutMs (then the rest are answered `unavailable`). */
  async waitForIdle(timeoutMs: number): Promise<number> {
    if (this.pending.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.onIdle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.onIdle = undefined;
    this.drainNow();
    let abandoned = 0;
    for (const requestId of this.pending.requestIds()) {
      if (this.answerWithError(requestId, 'unavailable', 'server shut down before this request was computed'))
        abandoned++;
    }
    return abandoned;
  }

  /**
   * The drain loop is not a uWS callback, but a throw there would end the node just the same: guarded, and
   * the request being answered gets `internal` instead of nothing.
   */
  private readonly onResponse = (offset: number): boolean => {
    try {
      return this.answerResponse(offset);
    } catch (error) {
      this.onError('response', error);
      const request = this.answering;
      this.answering = undefined;
      if (request === undefined) return true;
      try {
        if (request.shadowSide) this.finishInternal(request);
        else
          this.complete(
            request,
            request.reply.error(request.id, 'internal', 'internal error while answering; it was logged'),
            500,
          );
      } catch (again) {
        this.onError('response', again);
      }
      return true;
    }
  };

  private answerResponse(offset: number): boolean {
    const ring = this.responses;
    const view = ring.view;
    const request = this.pending.take(readResponseRequestId(view, offset));
    if (!request) return true; // answered already (sweeper, dead worker) — drop the late duplicate
    this.answering = request;
    const latencyMs = this.clock() - request.startedAt;
    const status = readResponseStatus(view, offset);
    const slot = this.slots[request.slot]!;
    // A request the worker found past its deadline (never computed): counted here, where its tenant is known.
    if (status === DEADLINE_EXCEEDED)
      this.metrics.recordShed(request.slot, DEADLINE_SHED, request.peer?.tenant?.metricsIndex ?? 0);
    if (request.shadow) {
      this.shadow.settle(
        request.shadow,
        request.shadowSide ? 'candidate' : 'primary',
        status === 0 ? readFirstOutput(ring.bytes, view, offset, slot.model.signature) : undefined,
        status === 0 ? undefined : errorCodeFromIndex(status),
      );
      if (request.shadowSide) {
        this.answering = undefined;
        this.finishInternal(request);
        return true;
      }
    }
    let body: string | Uint8Array;
    let httpStatus = 200;
    if (status === 0) {
      body = request.reply.success(request, slot, ring, offset, latencyMs);
      const queueMs = readQueueMs(view, offset);
      const computeMs = readComputeMs(view, offset);
      this.metrics.recordQueueAndCompute(request.slot, queueMs / 1000, computeMs / 1000);
      this.serviceTimes.observe(request.slot, slot.model.name, slot.version, queueMs + computeMs);
    } else {
      const error = readErrorResponse(ring.bytes, view, offset);
      body = request.reply.error(request.id, error.code, error.message);
      httpStatus = httpStatusOf(error.code);
      // The model failed on what this client sent (batch isolation answered it alone): the client pays, in
      // rate-limit tokens, so one whose requests keep failing the model is throttled like a flooder.
      if (status === MODEL_ERROR && request.client) {
        request.client.chargeModelError(this.clock());
        this.metrics.recordClientModelError(request.slot);
      }
    }
    const peer = request.peer!;
    this.metrics.recordRequest(
      request.slot,
      peer.protocol,
      status,
      latencyMs / 1000,
      peer.tenant?.metricsIndex ?? 0,
    );
    if (request.judged) this.judge(request, status, latencyMs / 1000);
    this.answering = undefined;
    this.complete(request, body, httpStatus);
    return true;
  }

  /**
   * Counts a routed answer for the rollout checks (libs/rollout judge.ts): ok, or the version's error, or
   * nothing. A deadline shorter than the model's measured service time is the client's fault.
   */
  private judge(request: PendingRequest, codeIndex: number, seconds: number): void {
    let judged = judgedByCode[codeIndex] ?? JUDGED.excluded;
    if (judged === JUDGED.deadline) {
      const model = this.slots[request.slot]?.model.name;
      const floorMs = model === undefined ? 0 : this.serviceTimes.floorMs(model);
      judged = request.deadlineAt - request.startedAt >= floorMs ? JUDGED.error : JUDGED.excluded;
    }
    if (judged !== JUDGED.excluded) this.metrics.recordJudged(request.slot, judged === JUDGED.error, seconds);
  }

  /** Bookkeeping of an answered request (slot, client, metrics), then the answer leaves in order. */
  private complete(request: PendingRequest, body: string | Uint8Array, httpStatus: number): void {
    this.metrics.addInflight(request.slot, -1);
    this.answered++;
    const slot = this.slots[request.slot];
    if (slot) {
      slot.admitted--;
      slot.guard.onCompleted(1, this.clock());
    }
    request.client?.onCompleted();
    this.pending.deliverInOrder(request, body, httpStatus);
    if (this.pending.size === 0) this.onIdle?.();
  }

  /** Bookkeeping for a shadow copy that finished: nobody is answered. */
  private finishInternal(request: PendingRequest): void {
    this.metrics.addInflight(request.slot, -1);
    const slot = this.slots[request.slot];
    if (slot) {
      slot.admitted--;
      slot.guard.onCompleted(1, this.clock());
    }
    if (this.pending.size === 0) this.onIdle?.();
  }

  private async drainResponses(): Promise<void> {
    const ring = this.responses;
    while (this.drainLoopRunning) {
      const sequence = ring.writeSequence();
      if (ring.pendingRecords() === 0) {
        // The uWS sockets keep this process alive: no timer per wait.
        await ring.waitForData(sequence, 500, false);
        continue;
      }
      this.drainNow();
    }
  }

  private sweep(): void {
    for (const requestId of this.pending.overdue(this.clock(), SWEEP_GRACE_MS)) {
      try {
        this.answerWithError(requestId, 'deadline_exceeded', 'no worker answered before the deadline');
      } catch (error) {
        this.onError('sweep', error);
      }
    }
  }
}
