/**
 * The epoch log: each transition of the pinned model version is one record on `<root>.delivery.epochs` (in
 * the predictions stream), `{epoch, model, version, previous, reason, at}`, published with
 * `Msg-Id = epoch:<n>:<model>@<version>` so a retried write is stored once. The last record is where a
 * restarted pipeline picks up its numbering.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { ModelPin } from '../inference/inference';
import type { StreamLayout } from './layout';
import type { JetStreamSink } from './sink';

export interface EpochRecord {
  epoch: number;
  model: string;
  version: string;
  previous: { epoch: number; model: string; version: string } | null;
  reason: string;
  at: string;
}

export class EpochLog {
  constructor(
    private readonly jsm: JetStreamManager,
    private readonly sink: JetStreamSink,
    private readonly layout: StreamLayout,
    private readonly clock: () => number,
  ) {}

  /** The latest record, or null when none was ever written (or it cannot be read). */
  async last(): Promise<EpochRecord | null> {
    try {
      const stored = await this.jsm.streams.getMessage(this.layout.predictions.name, {
        last_by_subj: this.layout.subjects.epochsSubject,
      });
      return stored ? (stored.json() as EpochRecord) : null;
    } catch {
      return null;
    }
  }

  async record(
    epoch: number,
    pin: ModelPin,
    previous: EpochRecord | null,
    reason: string,
  ): Promise<EpochRecord> {
    const record: EpochRecord = {
      epoch,
      model: pin.model,
      version: pin.version,
      previous: previous ? { epoch: previous.epoch, model: previous.model, version: previous.version } : null,
      reason,
      at: new Date(this.clock()).toISOString(),
    };
    await this.sink.publish({
      subject: this.layout.subjects.epochsSubject,
      data: JSON.stringify(record),
      msgId: `epoch:${epoch}:${record.model}@${record.version}`,
    });
    return record;
  }
}
