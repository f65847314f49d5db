import pino from 'pino';
import { simulate } from '../../libs/delivery';
import { resolvePipelineConfig } from './config';
import type { InferenceBackend } from './inference/inference';
import { eventSubject, streamLayout } from './io/layout';
import type { Effect } from './io/sink';
import type { SourceMessage } from './io/source';
import { PipelineMetrics } from './metrics';
import { emptyCounts, type PartitionContext } from './partition-context';
import { PartitionMessages } from './partition-messages';

/** A backend whose answers wait for release() while held. */
function heldBackend() {
  let held = false;
  let waiting: Array<() => void> = [];
  let calls = 0;
  const backend: InferenceBackend = {
    mode: 'embedded',
    prepare: async () => undefined,
    predict: async () => {
      calls++;
      if (held) await new Promise<void>((resolve) => waiting.push(resolve));
      return 0.9;
    },
    close: async () => undefined,
  } as unknown as InferenceBackend;
  return {
    backend,
    hold: () => {
      held = true;
    },
    release: () => {
      held = false;
      for (const w of waiting) w();
      waiting = [];
    },
    get calls() {
      return calls;
    },
  };
}

function context(backend: InferenceBackend): PartitionContext {
  const layout = streamLayout();
  return {
    config: resolvePipelineConfig({ partitions: 1, alertThreshold: 0.5 }),
    layout,
    nats: undefined as never,
    checkpointNats: undefined as never,
    sink: undefined as never,
    backend,
    metrics: new PipelineMetrics(),
    logger: pino({ level: 'silent' }),
    clock: () => Date.now(),
    counts: emptyCounts(),
    current: () => ({ pin: { model: 'delay-risk', version: '1' }, epoch: 0 }),
    operatorPaused: () => false,
    holds: () => true,
  };
}

const encoder = new TextEncoder();
const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('PartitionMessages', () => {
  it('a redelivery of a message still being predicted gets its effects, not a second prediction', async () => {
    const { records } = simulate({ seed: 3, deliveries: 1, durationMs: 20 * 60_000, duplicateFraction: 0 });
    const model = heldBackend();
    const ctx = context(model.backend);
    const messages = new PartitionMessages(ctx, 0, 1);
    const layout = ctx.layout;
    const message = (seq: number, payload: string, storedAtMs: number, deliveryCount = 1): SourceMessage => ({
      data: encoder.encode(payload),
      subject: eventSubject(layout.subjects.eventsPrefix, records[0]!.delivery_id, 1),
      streamSeq: seq,
      deliveryCount,
      partition: '0',
      storedAtMs,
      ack: async () => undefined,
      nak: () => undefined,
      term: () => undefined,
      working: () => undefined,
    });
    const ids = (effects: Effect[]) => effects.map((e) => e.msgId);
    for (const [i, r] of records.entries()) {
      model.hold();
      const before = model.calls;
      const first = messages.processAndFilter(message(i + 1, r.payload, r.publishAtMs));
      await tick();
      if (model.calls === before) {
        model.release();
        await first;
        continue;
      }
      // This message has decisions, held in inference: the broker hands it again (ack_wait ran out).
      const asked = model.calls - before;
      const again = messages.processAndFilter(message(i + 1, r.payload, r.publishAtMs, 2));
      await tick();
      model.release();
      const [a, b] = await Promise.all([first, again]);
      expect(model.calls - before).toBe(asked);
      expect(ids(b)).toEqual(ids(a));
      // The first decision above the threshold raised the delivery's one alert, in both.
      expect(a.filter((e) => e.msgId.startsWith('alert:'))).toHaveLength(1);
      return;
    }
    throw new Error(`no message of the delivery had decisions: ${JSON.stringify(ctx.counts)}`);
  });
});
