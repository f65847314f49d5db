/**
 * The pipeline's input: a durable pull consumer with explicit acks. `max_ack_pending` is the backpressure
 * bound (the broker stops delivering while that many messages await an ack); `ack_wait` brings back a
 * message whose processor died; `max_deliver` caps redeliveries of a poison message.
 */
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { requirePositiveInt } from '../../../libs/config';
import { invalidOptions, PipelineIoError, requireName } from '../errors';
import { partitionOfKey } from './layout';
import { nanos } from './nanos';

/** Maps a message subject to its source partition; watermarks are tracked per partition. */
export type PartitionFn = (subject: string) => string;

export const SINGLE_PARTITION: PartitionFn = () => '0';

const PULL_EXPIRES_MS = 5000;

/** Spreads keys over `count` partitions by the subject's last token (the delivery id). */
export function hashPartitioner(count: number): PartitionFn {
  requirePositiveInt('partition count', count, 1, invalidOptions);
  return (subject) => String(partitionOfKey(subject.slice(subject.lastIndexOf('.') + 1), count));
}

export interface SourceOptions {
  stream: string;
  durable: string;
  /** Defaults to every subject of the stream. */
  filterSubject?: string;
  maxAckPending: number;
  ackWaitMs: number;
  maxDeliver: number;
  /** Messages asked of the broker per pull request. */
  batchSize: number;
  partitionOf?: PartitionFn;
  /**
   * Wait for the broker to confirm each ack (a request per message). Off by default: a lost ack only means a
   * redelivery, which the pipeline already dedupes, and the confirmation costs as much as the publish.
   */
  confirmAcks?: boolean;
  /**
   * Start the durable at this stream sequence (recreating it): a pipeline restored from a checkpoint replays
   * exactly what came after the checkpoint's position, at once, instead of waiting out ack_wait.
   */
  startSequence?: number;
}

export interface SourceMessage {
  data: Uint8Array;
  subject: string;
  streamSeq: number;
  /** 1 on first delivery; 2 and more after ack_wait expired or a nak. */
  deliveryCount: number;
  partition: string;
  /** When the broker stored the message (ms since epoch). */
  storedAtMs: number;
  /** Resolves once the ack is sent (confirmAcks: once the broker confirmed it). */
  ack(): Promise<void>;
  nak(delayMs?: number): void;
  term(reason: string): void;
  /** Extends ack_wait for a message still being worked on. */
  working(): void;
}

export interface SourceLag {
  /** Messages in the stream not yet delivered to this consumer (the consumer-lag metric). */
  pending: number;
  /** Delivered, not yet acked. */
  ackPending: number;
  redelivered: number;
}

interface MessageStream extends AsyncIterable<JsMsg> {
  close(): Promise<unknown>;
}

function validate(options: SourceOptions): Required<SourceOptions> {
  requireName('stream', options.stream);
  requireName('durable', options.durable);
  requirePositiveInt('maxAckPending', options.maxAckPending, 1, invalidOptions);
  requirePositiveInt('ackWaitMs', options.ackWaitMs, 1000, invalidOptions);
  const maxDeliver = options.maxDeliver;
  if (maxDeliver !== -1) requirePositiveInt('maxDeliver', maxDeliver, 2, invalidOptions);
  requirePositiveInt('batchSize', options.batchSize, 1, invalidOptions);
  if (options.batchSize > options.maxAckPending) {
    throw new PipelineIoError('invalid_options', 'batchSize must not exceed maxAckPending');
  }
  return {
    ...options,
    filterSubject: options.filterSubject ?? '',
    partitionOf: options.partitionOf ?? SINGLE_PARTITION,
    confirmAcks: options.confirmAcks ?? false,
    startSequence: options.startSequence ?? 0,
  };
}

export class JetStreamSource {
  private messagesIter: MessageStream | null = null;
  private stopped = false;

  private constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: Required<SourceOptions>,
    /** open() created the durable (startSequence, or none existed): its first delivery is delivery 1. */
    private readonly created: boolean,
  ) {}

  /** Creates the durable consumer when missing, or brings its limits to the configured ones. */
  static async open(
    js: JetStreamClient,
    jsm: JetStreamManager,
    options: SourceOptions,
  ): Promise<JetStreamSource> {
    const opts = validate(options);
    const limits = {
      ack_wait: nanos(opts.ackWaitMs),
      max_deliver: opts.maxDeliver,
      max_ack_pending: opts.maxAckPending,
    };
    let created = false;
    const add = () => {
      created = true;
      return jsm.consumers.add(opts.stream, {
        durable_name: opts.durable,
        ack_policy: AckPolicy.Explicit,
        ...(opts.startSequence > 1
          ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: opts.startSequence }
          : { deliver_policy: DeliverPolicy.All }),
        ...(opts.filterSubject === '' ? {} : { filter_subject: opts.filterSubject }),
        ...limits,
      });
    };
    try {
      if (opts.startSequence > 0) {
        await jsm.consumers.delete(opts.stream, opts.durable).catch((err: unknown) => {
          if (!(err instanceof JetStreamApiError && err.code === 10014)) throw err;
        });
        await add();
      } else {
        try {
          await jsm.consumers.info(opts.stream, opts.durable);
          await jsm.consumers.update(opts.stream, opts.durable, limits);
        } catch (err) {
          if (!(err instanceof JetStreamApiError && err.code === 10014)) throw err;
          await add();
        }
      }
    } catch (err) {
      throw new PipelineIoError(
        'consumer_provision_failed',
        `consumer ${opts.durable} on ${opts.stream}: ${String(err)}`,
        { cause: err },
      );
    }
    return new JetStreamSource(js, jsm, opts, created);
  }

  get stream(): string {
    return this.options.stream;
  }

  get durable(): string {
    return this.options.durable;
  }

  get ackWaitMs(): number {
    return this.options.ackWaitMs;
  }

  /** -1: unlimited. At this delivery count the broker gives the message up for good. */
  get maxDeliver(): number {
    return this.options.maxDeliver;
  }

  /**
   * Messages in delivery order until stop(); the client keeps up to batchSize pulled ahead. Every delivery,
   * a redelivery too, takes the consumer's next delivery sequence, so a jump means deliveries were handed to
   * a connection that dropped them (a node killed or cut off under it): the iteration ends with
   * `delivery_gap` before the message after the gap, which would otherwise be decided before them (they come
   * back only after ack_wait, and a checkpointing partition would take them for redeliveries of what it had).
   */
  async *messages(): AsyncGenerator<SourceMessage> {
    if (this.messagesIter)
      throw new PipelineIoError('invalid_options', 'a source is consumed by one loop only');
    const consumer = await this.js.consumers.get(this.options.stream, this.options.durable);
    if (this.stopped) return;
    const iter = (await consumer.consume({
      max_messages: this.options.batchSize,
      // Pulls expire after 5 s (heartbeats every 2.5 s), not 30: when the consumer's leader moves (a node
      // killed), the open pulls die with it and the client re-pulls once two heartbeats are missed.
      expires: PULL_EXPIRES_MS,
    })) as unknown as MessageStream;
    this.messagesIter = iter;
    if (this.stopped) {
      // Stopped while the iterator was being made. Not awaited: close() resolves only once a loop has read
      // the iterator to its end, and this one never will (awaiting it hung a partition's drain forever).
      void iter.close().catch(() => undefined);
      return;
    }
    // A consumer created by open() has delivered nothing: its first delivery must be 1, or the first pull's
    // deliveries were lost (a connection cut as the partition started). Unchecked, they were skipped for good:
    // the reopen starts past the position, which the first delivery after them had already moved. A durable
    // reused as it was may still serve an earlier loop's pull requests: its first delivery sets the count.
    let last = this.created ? 0 : -1;
    for await (const msg of iter) {
      const seq = msg.info.deliverySequence;
      if (last !== -1 && seq !== last + 1) {
        throw new PipelineIoError(
          'delivery_gap',
          `consumer ${this.options.durable}: delivery ${seq} after ${last}: the deliveries between never arrived`,
        );
      }
      last = seq;
      yield this.wrap(msg);
    }
  }

  async lag(): Promise<SourceLag> {
    const info = await this.jsm.consumers.info(this.options.stream, this.options.durable);
    return { pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered };
  }

  /** Stops pulling; messages already handed out may still be acked. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.messagesIter?.close();
  }

  private wrap(msg: JsMsg): SourceMessage {
    return {
      data: msg.data,
      subject: msg.subject,
      streamSeq: msg.info.streamSequence,
      deliveryCount: msg.info.deliveryCount,
      partition: this.options.partitionOf(msg.subject),
      storedAtMs: Math.floor(msg.info.timestampNanos / 1_000_000),
      ack: this.options.confirmAcks
        ? async () => {
            await msg.ackAck();
          }
        : async () => {
            msg.ack();
          },
      nak: (delayMs) => msg.nak(delayMs),
      term: (reason) => msg.term(reason),
      working: () => msg.working(),
    };
  }
}
