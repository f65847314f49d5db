/**
 * The request path of this node: the pieces a request passes through, made once and wired together:
 * admission → ring → answers → pending (answer order) → Reply, with shadow beside admission and node-status
 * reading them all.
 */
import type { MetricsShard } from '../../libs/metrics';
import type { RingBuffer } from '../../libs/ring';
import { testDelayMs } from '../../libs/test-hooks';
import { Admission } from './admission';
import { Answers } from './answers';
import { EPOCH_HOLD_MAX_BYTES, EPOCH_HOLD_MAX_MS } from './epoch-order';
import type { NodeStartOptions } from './ipc';
import { NodeStatus } from './node-status';
import { PendingRequests } from './pending';
import type { Replies } from './reply';
import { createReplies } from './reply';
import type { Connection, Transport } from './request';
import { RingWriter } from './ring-writer';
import { Shadow } from './shadow';
import type { ModelTable } from './table';
import type { TransportGuard } from './transport-guard';

export interface RequestPath {
  replies: Replies;
  pending: PendingRequests;
  admission: Admission;
  answers: Answers;
  status: NodeStatus;
}

/** What the request path needs of the transport that owns it. */
export interface RequestPathTransport extends Transport {
  readonly guard: TransportGuard;
  readonly transportCounters: {
    slowConsumerWarnings: number;
    slowConsumerCloses: number;
  };
  /** Unsent bytes of a connection against the slow-consumer limits. */
  observeConsumer(connection: Connection): void;
  wsConnections(): number;
  /** Tenant names by metrics index (absent in-process: no tenants). */
  tenantNames?(): ReadonlyArray<string | undefined>;
}

export function createRequestPath(
  options: NodeStartOptions,
  table: ModelTable,
  responses: RingBuffer,
  metrics: MetricsShard,
  transport: RequestPathTransport,
  clock: () => number,
): RequestPath {
  const guard = transport.guard;
  // Tests shorten the time bound (STREAMINFER_TEST_HOLD_MS, honoured only with test hooks on).
  const testHoldMs = options.testHooks ? testDelayMs('HOLD_MS') : Number.NaN;
  const holdLimits = {
    maxHoldMs: testHoldMs > 0 ? testHoldMs : EPOCH_HOLD_MAX_MS,
    maxHoldBytes: EPOCH_HOLD_MAX_BYTES,
  };
  const replies = createReplies(transport);
  const pending = new PendingRequests(
    holdLimits,
    clock,
    (connection) => transport.observeConsumer(connection),
    (error) => guard.record('answer hold timer', error),
  );
  const writer = new RingWriter();
  const shadow = new Shadow(table, pending, writer, metrics, replies.silent);
  const admission = new Admission(options, table, metrics, writer, pending, shadow, clock);
  const answers = new Answers(responses, pending, table.slots, metrics, shadow, clock, (where, error) =>
    guard.record(where, error),
  );
  const status = new NodeStatus(table, {
    inflight: () => pending.size,
    wsConnections: () => transport.wsConnections(),
    tenantNames: () => transport.tenantNames?.() ?? [],
    admission: admission.counters,
    transport: transport.transportCounters,
    order: pending.counters,
    shadow: shadow.stats,
    guard,
  });
  return { replies, pending, admission, answers, status };
}
