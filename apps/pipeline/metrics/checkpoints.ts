import { Counter, Gauge, Histogram } from 'prom-client';
import { MetricGroup } from './group';

/** Checkpoints taken, and the restore and replay after a start or a partition taken over. */
export class CheckpointMetrics extends MetricGroup {
  readonly duration = new Histogram({
    name: 'streaminfer_stream_checkpoint_duration_seconds',
    help: 'A checkpoint, from closing the barrier to its pointer written (snapshot, serialise, store)',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: this.registers,
  });
  readonly pause = new Histogram({
    name: 'streaminfer_stream_checkpoint_pause_seconds',
    help: "The part of a checkpoint the partition's input waits for: barrier alignment and the snapshot's head",
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: this.registers,
  });
  readonly bytes = new Gauge({
    name: 'streaminfer_stream_checkpoint_bytes',
    help: 'Size of the last completed checkpoint',
    registers: this.registers,
  });
  readonly written = new Counter({
    name: 'streaminfer_stream_checkpoint_written_bytes_total',
    help: 'Bytes of completed checkpoints written, every partition (its rate: what checkpoints cost the store)',
    registers: this.registers,
  });
  readonly age = new Gauge({
    name: 'streaminfer_stream_checkpoint_age_seconds',
    help: 'Time since the last completed checkpoint (what a crash now would replay, in time)',
    registers: this.registers,
  });
  readonly position = new Gauge({
    name: 'streaminfer_stream_checkpoint_position',
    help: 'Input stream sequence the last completed checkpoint covers (acked up to here)',
    registers: this.registers,
  });
  readonly failures = new Counter({
    name: 'streaminfer_stream_checkpoint_failures_total',
    help: 'Checkpoints that did not become the restore point (their messages stay unacked)',
    registers: this.registers,
  });
  readonly restoreDuration = new Gauge({
    name: 'streaminfer_stream_restore_duration_seconds',
    help: 'How long the last start took to read and restore its checkpoint',
    registers: this.registers,
  });
  readonly replayedEvents = new Counter({
    name: 'streaminfer_stream_replayed_events_total',
    help: 'Input messages processed again after a restore (the span since the checkpoint)',
    registers: this.registers,
  });
  readonly replayDeduplicated = new Counter({
    name: 'streaminfer_stream_replay_deduplicated_effects_total',
    help: 'Replayed effects not published again: already in the output streams since the checkpoint',
    registers: this.registers,
  });
  readonly recoverySeconds = new Gauge({
    name: 'streaminfer_stream_recovery_seconds',
    help: 'Last restored partition: from taking it to caught up (the replayed span processed and its lag back to 0)',
    registers: this.registers,
  });
}
