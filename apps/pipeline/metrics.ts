/**
 * The pipeline's Prometheus metrics (`streaminfer_stream_*`, same conventions as the server: seconds,
 * `_total` counters, bounded labels). Freshness is the figure that matters: prediction PubAck − event_time.
 */
import { Counter, Gauge, Histogram, Registry, Summary } from 'prom-client';
import { registerProcessMetrics } from '../../libs/metrics';

/** Freshness buckets: 10 ms … 10 min (a drained backlog is minutes old). */
const FRESHNESS_BUCKETS = [
  0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120, 300, 600,
];
const INFERENCE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

export class PipelineMetrics {
  readonly registry = new Registry();
  readonly events = new Counter({
    name: 'streaminfer_stream_events_total',
    help: 'Events received, by type (gps, status, traffic; invalid for payloads that failed validation)',
    labelNames: ['type'],
    registers: [this.registry],
  });
  readonly invalid = new Counter({
    name: 'streaminfer_stream_invalid_events_total',
    help: 'Events dead-lettered as invalid, by the field that failed',
    labelNames: ['field'],
    registers: [this.registry],
  });
  readonly duplicates = new Counter({
    name: 'streaminfer_stream_duplicate_events_total',
    help: 'Events whose event_id was already processed (redeliveries, duplicates past the broker window)',
    registers: [this.registry],
  });
  readonly late = new Counter({
    name: 'streaminfer_stream_late_events_total',
    help: 'Events beyond allowed lateness, sent to the late side output',
    registers: [this.registry],
  });
  readonly behindWatermark = new Counter({
    name: 'streaminfer_stream_behind_watermark_events_total',
    help: 'Events accepted behind the watermark (inside allowed lateness)',
    registers: [this.registry],
  });
  readonly notReady = new Counter({
    name: 'streaminfer_stream_not_ready_events_total',
    help: 'Accepted events with no prediction at their time yet (no first status or no GPS point before them)',
    labelNames: ['missing'],
    registers: [this.registry],
  });
  readonly predictions = new Counter({
    name: 'streaminfer_stream_predictions_total',
    help: 'Predictions published: kind="first" for an event\'s first, "revision" for corrections',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly alerts = new Counter({
    name: 'streaminfer_stream_alerts_total',
    help: 'Delay alerts published (P(late) above the threshold)',
    registers: [this.registry],
  });
  readonly windowResults = new Counter({
    name: 'streaminfer_stream_window_results_total',
    help: 'Event-time window firings (kind="first") and revisions by late events (kind="revision"), per window',
    labelNames: ['window', 'kind'],
    registers: [this.registry],
  });
  readonly deadLetters = new Counter({
    name: 'streaminfer_stream_dead_letters_total',
    help: 'Dead letters published (counted at their PubAck), by reason (invalid, processor_error, max_deliver)',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly deadLettersFailing = new Gauge({
    name: 'streaminfer_stream_dead_letters_failing',
    help: 'Dead letters and late records the broker refuses that no spool took (spool full or disabled): retried with backoff, their partition holds its position; > 0 is degraded',
    registers: [this.registry],
  });
  readonly spoolRecords = new Gauge({
    name: 'streaminfer_stream_spool_records',
    help: 'Dead letters and late records the broker refused, kept in the local spool (their source acked) until it takes them',
    registers: [this.registry],
  });
  readonly spoolBytes = new Gauge({
    name: 'streaminfer_stream_spool_bytes',
    help: 'Bytes of side outputs pending in the local spool (bounded by spool.maxBytes)',
    registers: [this.registry],
  });
  readonly spoolFull = new Gauge({
    name: 'streaminfer_stream_spool_full',
    help: '1 while the side-output spool is full: side outputs the broker refuses then hold their partitions',
    registers: [this.registry],
  });
  readonly spoolOldestAge = new Gauge({
    name: 'streaminfer_stream_spool_oldest_age_seconds',
    help: 'Age of the oldest side output waiting in the local spool (0: none)',
    registers: [this.registry],
  });
  readonly truncatedSideOutputs = new Counter({
    name: 'streaminfer_stream_truncated_side_outputs_total',
    help: 'Dead letters and late records over the broker max_payload, published with the raw payload cut (length and SHA-256 kept)',
    registers: [this.registry],
  });
  readonly sinkFailures = new Counter({
    name: 'streaminfer_stream_sink_publish_failures_total',
    help: 'Publish attempts that got no PubAck (retried under the same Msg-Id)',
    registers: [this.registry],
  });
  readonly redeliveryNaks = new Counter({
    name: 'streaminfer_stream_naks_total',
    help: 'Messages handed back to the broker for redelivery (effects not stored)',
    registers: [this.registry],
  });
  readonly freshness = new Histogram({
    name: 'streaminfer_stream_freshness_seconds',
    help: "Prediction published (PubAck) − its event's event_time, for each event's first prediction",
    buckets: FRESHNESS_BUCKETS,
    registers: [this.registry],
  });
  readonly freshnessRecent = new Summary({
    name: 'streaminfer_stream_freshness_recent_seconds',
    help: 'Freshness quantiles over the last minute (the same observations as the histogram)',
    percentiles: [0.5, 0.95, 0.99],
    maxAgeSeconds: 60,
    ageBuckets: 6,
    registers: [this.registry],
  });
  /** The same observations over the last 10 s, for /health's `stale` (not exported: the summary above is). */
  private readonly freshnessNow = new Summary({
    name: 'streaminfer_stream_freshness_now_seconds',
    help: 'Freshness quantiles over the last 10 s',
    percentiles: [0.95],
    maxAgeSeconds: 10,
    ageBuckets: 5,
    registers: [],
  });
  readonly inference = new Histogram({
    name: 'streaminfer_stream_inference_duration_seconds',
    help: 'One prediction, from the call to the backend to its answer (queueing and batching included)',
    labelNames: ['mode'],
    buckets: INFERENCE_BUCKETS,
    registers: [this.registry],
  });
  readonly consumerPending = new Gauge({
    name: 'streaminfer_stream_consumer_pending_messages',
    help: 'Consumer lag: messages in the input stream not yet delivered to the pipeline (num_pending)',
    registers: [this.registry],
  });
  readonly consumerAckPending = new Gauge({
    name: 'streaminfer_stream_consumer_ack_pending_messages',
    help: 'Messages delivered and not yet acked (bounded by max_ack_pending)',
    registers: [this.registry],
  });
  readonly oldestUnprocessedAge = new Gauge({
    name: 'streaminfer_stream_oldest_unprocessed_age_seconds',
    help: 'Age (now − broker store time) of the oldest input message not processed yet (at the broker, or fetched and not published); 0 when none',
    registers: [this.registry],
  });
  readonly unprocessed = new Gauge({
    name: 'streaminfer_stream_unprocessed_messages',
    help: 'Input messages not processed yet: pending at the broker, and fetched but not published (the lag slo.lagMessages bounds)',
    registers: [this.registry],
  });
  readonly stale = new Gauge({
    name: 'streaminfer_stream_stale',
    help: "1 while /health's stale is true: running but past slo.freshnessP95Ms or slo.lagMessages",
    registers: [this.registry],
  });
  readonly watermarkLag = new Gauge({
    name: 'streaminfer_stream_watermark_lag_seconds',
    help: 'Now − the event-time watermark (includes the configured out-of-orderness bound)',
    registers: [this.registry],
  });
  readonly watermarkAhead = new Gauge({
    name: 'streaminfer_stream_watermark_ahead_seconds',
    help: 'The highest partition watermark − now: negative normally; above 0, events from the future were accepted',
    registers: [this.registry],
  });
  readonly stateKeys = new Gauge({
    name: 'streaminfer_stream_state_keys',
    help: 'Deliveries held in keyed state',
    registers: [this.registry],
  });
  readonly stateBytes = new Gauge({
    name: 'streaminfer_stream_state_bytes',
    help: 'Estimated bytes of keyed state (windows, histories, dedupe ids)',
    registers: [this.registry],
  });
  readonly inflight = new Gauge({
    name: 'streaminfer_stream_inflight_messages',
    help: 'Messages between receipt and ack',
    registers: [this.registry],
  });
  readonly epoch = new Gauge({
    name: 'streaminfer_stream_epoch',
    help: 'Current processing epoch',
    registers: [this.registry],
  });
  readonly pinned = new Gauge({
    name: 'streaminfer_stream_pinned_model_info',
    help: 'The model version the current epoch pins (value 1)',
    labelNames: ['model', 'version'],
    registers: [this.registry],
  });
  readonly checkpointDuration = new Histogram({
    name: 'streaminfer_stream_checkpoint_duration_seconds',
    help: 'A checkpoint, from closing the barrier to its pointer written (snapshot, serialise, store)',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly checkpointPause = new Histogram({
    name: 'streaminfer_stream_checkpoint_pause_seconds',
    help: "The part of a checkpoint the partition's input waits for: barrier alignment and the snapshot's head",
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly checkpointBytes = new Gauge({
    name: 'streaminfer_stream_checkpoint_bytes',
    help: 'Size of the last completed checkpoint',
    registers: [this.registry],
  });
  readonly checkpointAge = new Gauge({
    name: 'streaminfer_stream_checkpoint_age_seconds',
    help: 'Time since the last completed checkpoint (what a crash now would replay, in time)',
    registers: [this.registry],
  });
  readonly checkpointPosition = new Gauge({
    name: 'streaminfer_stream_checkpoint_position',
    help: 'Input stream sequence the last completed checkpoint covers (acked up to here)',
    registers: [this.registry],
  });
  readonly checkpointFailures = new Counter({
    name: 'streaminfer_stream_checkpoint_failures_total',
    help: 'Checkpoints that did not become the restore point (their messages stay unacked)',
    registers: [this.registry],
  });
  readonly restoreDuration = new Gauge({
    name: 'streaminfer_stream_restore_duration_seconds',
    help: 'How long the last start took to read and restore its checkpoint',
    registers: [this.registry],
  });
  readonly replayedEvents = new Counter({
    name: 'streaminfer_stream_replayed_events_total',
    help: 'Input messages processed again after a restore (the span since the checkpoint)',
    registers: [this.registry],
  });
  readonly replayDeduplicated = new Counter({
    name: 'streaminfer_stream_replay_deduplicated_effects_total',
    help: 'Replayed effects not published again: already in the output streams since the checkpoint',
    registers: [this.registry],
  });
  readonly recoverySeconds = new Gauge({
    name: 'streaminfer_stream_recovery_seconds',
    help: 'Last restored partition: from taking it to caught up (the replayed span processed and its lag back to 0)',
    registers: [this.registry],
  });
  readonly partitionOwned = new Gauge({
    name: 'streaminfer_stream_partition_owned',
    help: '1 for each partition this instance holds the lease of and works',
    labelNames: ['partition'],
    registers: [this.registry],
  });
  readonly partitionFailed = new Gauge({
    name: 'streaminfer_stream_partition_failed',
    help: '1 for each partition whose lease this instance holds but cannot work (its checkpoint does not read)',
    labelNames: ['partition'],
    registers: [this.registry],
  });
  readonly partitionsOwned = new Gauge({
    name: 'streaminfer_stream_partitions_owned',
    help: 'Partitions this instance works (of the pipeline total, streaminfer_stream_partitions)',
    registers: [this.registry],
  });
  readonly partitionsTotal = new Gauge({
    name: 'streaminfer_stream_partitions',
    help: 'Key partitions of the pipeline (config partitions)',
    registers: [this.registry],
  });
  readonly liveInstances = new Gauge({
    name: 'streaminfer_stream_live_instances',
    help: 'Instances of this pipeline heartbeating in the lease bucket, as this one sees them',
    registers: [this.registry],
  });
  readonly partitionEvents = new Counter({
    name: 'streaminfer_stream_partition_events_total',
    help: 'Input messages per partition, as worked here (key skew: compare partitions)',
    labelNames: ['partition'],
    registers: [this.registry],
  });
  readonly partitionPending = new Gauge({
    name: 'streaminfer_stream_partition_pending_messages',
    help: "Messages of the partition not yet delivered to its consumer (the partition's lag)",
    labelNames: ['partition'],
    registers: [this.registry],
  });
  readonly busiestKey = new Gauge({
    name: 'streaminfer_stream_busiest_key_events',
    help: "Events of the partition's busiest delivery over the last full minute (one series per partition)",
    labelNames: ['partition', 'key'],
    registers: [this.registry],
  });
  readonly partitionMoves = new Counter({
    name: 'streaminfer_stream_partition_moves_total',
    help: 'Partitions this instance took or gave up, by direction and reason',
    labelNames: ['direction', 'reason'],
    registers: [this.registry],
  });
  readonly up = new Gauge({
    name: 'streaminfer_stream_up',
    help: "1 while the pipeline is consuming (/health's consuming: connected, every partition worked, none failed)",
    registers: [this.registry],
  });

  constructor() {
    registerProcessMetrics(this.registry, 'streaminfer_stream_process_');
  }

  observeFreshness(seconds: number): void {
    this.freshness.observe(seconds);
    this.freshnessRecent.observe(seconds);
    this.freshnessNow.observe(seconds);
  }

  /** Freshness p95 (seconds) of the last 10 s; NaN when nothing was published. */
  async freshnessNowP95(): Promise<number> {
    const data = await this.freshnessNow.get();
    return data.values.find((v) => v.labels.quantile === 0.95)?.value ?? Number.NaN;
  }

  setPin(model: string, version: string, epoch: number): void {
    this.pinned.reset();
    this.pinned.set({ model, version }, 1);
    this.epoch.set(epoch);
  }

  /** Current freshness quantiles (seconds) of the last minute, for /health and the bench. */
  async freshnessQuantiles(): Promise<{ p50: number; p95: number; p99: number; count: number }> {
    const data = await this.freshnessRecent.get();
    const at = (q: number) => data.values.find((v) => v.labels.quantile === q)?.value ?? Number.NaN;
    const count = data.values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
    return { p50: at(0.5), p95: at(0.95), p99: at(0.99), count };
  }
}
