/**
 * The delivery pipeline against the real broker (the shared test broker, broker-kit): the issue's
 * correctness cases end to end — producer publishes with Msg-Id, the pipeline consumes, decides, predicts
 * and publishes; the test reads the output streams back. The model is replaced by a deterministic function
 * of the feature row (the backends have their own tests, and `streaminfer pipeline` runs the real model in
 * pipeline-process.test.ts): these tests are about the stream semantics.
 */

import pino from 'pino';
import {
  connectNats,
  DeliveryPipeline,
  type InferenceBackend,
  type LeaseKeeper,
  type ModelPin,
  type NatsHandle,
  PipelineMetrics,
  resolvePipelineConfig,
} from '../../apps/pipeline';
import { CheckpointStore } from '../../apps/pipeline/io/checkpoints';
import {
  computeFeatures,
  DeliveryDecider,
  type DeliveryEvent,
  type Prediction,
  simulate,
} from '../../libs/delivery';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  partitionsDrained,
  readStream,
  type StreamNames,
  uniqueNames,
  waitFor,
} from './pipeline-kit';

const logger = pino({ level: process.env.TEST_LOG ?? 'silent' });
const T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

let nats: NatsHandle;
const created: StreamNames[] = [];
const running: DeliveryPipeline[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-test' });
});

afterAll(async () => {
  for (const p of running) await p.stop();
  await deleteStreams(nats, created);
  await nats.close();
});

/** A stand-in model: a logistic function of the row, so equal rows give equal risks. */
class FunctionBackend implements InferenceBackend {
  readonly mode = 'embedded' as const;
  inflight = 0;
  calls = 0;
  failures = 0;
  readonly versions = new Set(['1', '2']);
  constructor(private readonly failEvery = 0) {}
  async prepare(pin: ModelPin): Promise<void> {
    if (!this.versions.has(pin.version)) throw new Error(`no version ${pin.version}`);
  }
  async predict(pin: ModelPin, row: Float32Array): Promise<number> {
    const n = ++this.calls;
    this.inflight++;
    await new Promise((resolve) => setImmediate(resolve));
    this.inflight--;
    if (this.failEvery > 0 && n % this.failEvery === 0) {
      this.failures++;
      throw new Error('backend unavailable (injected)');
    }
    const [speed, distance, stops, traffic, minutes] = row as unknown as number[];
    const z =
      -0.08 * speed! +
      0.35 * distance! +
      0.3 * stops! +
      0.6 * traffic! -
      0.12 * minutes! +
      (pin.version === '2' ? 0.5 : 0);
    return 1 / (1 + Math.exp(-z));
  }
  async close(): Promise<void> {}
}

function configFor(names: StreamNames, eventTime: Record<string, number> = {}) {
  return resolvePipelineConfig({
    nats: NATS_URL,
    subjectRoot: names.tag,
    streams: {
      events: names.events,
      predictions: names.predictions,
      side: names.side,
      duplicateWindowMs: 120_000,
    },
    consumer: {
      durable: `${names.tag}_pipeline`,
      maxAckPending: 512,
      ackWaitMs: 5_000,
      maxDeliver: 10,
      batchSize: 128,
    },
    concurrency: 256,
    partitions: 2,
    instance: { leaseBucket: `${names.tag}_leases`, leaseTtlMs: 6000 },
    // These tests are about acks per message (naks, redeliveries); the checkpoint mode has its own below.
    checkpoint: { enabled: false },
    eventTime: { outOfOrdernessMs: 30_000, allowedLatenessMs: 60_000, ...eventTime },
    admin: { port: 0 },
  });
}

async function startPipeline(
  names: StreamNames,
  backend: InferenceBackend,
  eventTime?: Record<string, number>,
) {
  const metrics = new PipelineMetrics();
  const pipeline = new DeliveryPipeline({ config: configFor(names, eventTime), backend, metrics, logger });
  await pipeline.start();
  running.push(pipeline);
  return { pipeline, metrics };
}

async function publish(
  names: StreamNames,
  payloads: Array<string | { payload: string; msgId: string; delivery: string }>,
) {
  for (const p of payloads) {
    const item =
      typeof p === 'string'
        ? (() => {
            const e = JSON.parse(p) as { event_id: string; delivery_id: string };
            return { payload: p, msgId: e.event_id, delivery: e.delivery_id };
          })()
        : p;
    await nats.js.publish(eventSubjectFor(names, item.delivery, 2), item.payload, {
      msgID: item.msgId,
    });
  }
}

async function drained(names: StreamNames): Promise<void> {
  await waitFor('the consumer to catch up', () => partitionsDrained(nats, names, 2), 60_000);
}

async function predictions(names: StreamNames): Promise<Prediction[]> {
  return (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
    m.json<Prediction>(),
  );
}

const pickedUp = (id: string, at = T0) =>
  JSON.stringify({
    event_id: `st-${id}`,
    delivery_id: id,
    event_time: iso(at),
    type: 'status',
    status: 'picked_up',
    promised_time: iso(at + 25 * 60_000),
    dest_lat: 12.99,
    dest_lon: 77.62,
    route_id: 'r1',
  });
const gps = (eventId: string, id: string, at: number, lat: number) =>
  JSON.stringify({
    event_id: eventId,
    delivery_id: id,
    event_time: iso(at),
    type: 'gps',
    driver_lat: lat,
    driver_lon: 77.5946,
  });

async function metricValue(
  metrics: PipelineMetrics,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const m = await metrics.registry.getSingleMetric(name)!.get();
  return m.values
    .filter((v) => Object.entries(labels).every(([k, l]) => String(v.labels[k]) === l))
    .reduce((a, v) => a + v.value, 0);
}

describe('delivery pipeline on JetStream', () => {
  it('its lease thread dies: the pipeline drops every partition at once and fails loudly', async () => {
    const names = uniqueNames('spf');
    created.push(names);
    const metrics = new PipelineMetrics();
    const fatal: Error[] = [];
    const pipeline = new DeliveryPipeline({
      config: configFor(names),
      backend: new FunctionBackend(),
      metrics,
      logger,
      onFatal: (err) => fatal.push(err),
    });
    await pipeline.start();
    running.push(pipeline);
    await waitFor('both partitions owned', () => pipeline.ownedPartitions().length === 2, 15_000);
    await (pipeline as unknown as { leases: LeaseKeeper }).leases.killThreadForTest();
    expect(fatal).toHaveLength(1);
    const status = await pipeline.status();
    expect(status.state).toBe('failed');
    expect(status.error).toMatch(/lease thread died/);
    expect(await metricValue(metrics, 'streaminfer_stream_up')).toBe(0);
    // Released as lost: no longer worked at once (the workers are dropped before they stop), each stopped
    // without draining well inside the 6 s TTL (counted once its consumer has stopped).
    await waitFor('partitions dropped', () => pipeline.ownedPartitions().length === 0, 2000);
    await waitFor(
      'both counted as lost',
      async () =>
        (await metricValue(metrics, 'streaminfer_stream_partition_moves_total', { reason: 'lost' })) === 2,
      5000,
    );
    expect(await metricValue(metrics, 'streaminfer_stream_partition_moves_total', { reason: 'lost' })).toBe(
      2,
    );
    await pipeline.stop();
  });

  it('out of order: B (10:00:15) arrives before A (10:00:05); B is revised to exactly the in-order prediction', async () => {
    const names = uniqueNames('spo');
    created.push(names);
    const backend = new FunctionBackend();
    await startPipeline(names, backend);
    // d-ooo receives B then A; d-in receives A then B, with the same positions and times.
    await publish(names, [
      pickedUp('d-ooo'),
      gps('ooo-b', 'd-ooo', T0 + 15_000, 12.9736),
      gps('ooo-a', 'd-ooo', T0 + 5_000, 12.9716),
      pickedUp('d-in'),
      gps('in-a', 'd-in', T0 + 5_000, 12.9716),
      gps('in-b', 'd-in', T0 + 15_000, 12.9736),
    ]);
    await drained(names);
    const out = await predictions(names);
    const of = (d: string) => out.filter((p) => p.delivery_id === d).map((p) => [p.event_id, p.revision]);
    expect(of('d-ooo')).toEqual([
      ['ooo-b', 0],
      ['ooo-a', 0],
      ['ooo-b', 1],
    ]);
    expect(of('d-in')).toEqual([
      ['in-a', 0],
      ['in-b', 0],
    ]);
    const risk = (id: string, rev: number) => out.find((p) => p.event_id === id && p.revision === rev)!.risk;
    expect(risk('ooo-b', 1)).toBe(risk('in-b', 0));
    expect(risk('ooo-b', 0)).not.toBe(risk('in-b', 0));
    expect(risk('ooo-a', 0)).toBe(risk('in-a', 0));
    // The contract's fields.
    const p = out[0]!;
    expect(p).toEqual({
      event_id: 'ooo-b',
      delivery_id: 'd-ooo',
      event_time: iso(T0 + 15_000),
      model: 'delay-risk',
      version: '1',
      epoch: 1,
      risk: expect.any(Number),
      revision: 0,
      decision_id: 'd-ooo:ooo-b:delay-risk@1:r1:0',
      published_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
  });

  it('window [10:00, 10:05) fires at watermark 10:05; a 10:02 event inside lateness revises, one beyond goes to the side output', async () => {
    const names = uniqueNames('spl');
    created.push(names);
    // 5 min allowed: the 10:02 event, 4 min behind the 10:06 watermark, is inside it.
    const { metrics } = await startPipeline(names, new FunctionBackend(), {
      outOfOrdernessMs: 0,
      allowedLatenessMs: 300_000,
    });
    await publish(names, [
      pickedUp('d1'),
      gps('g1', 'd1', T0 + 60_000, 12.9716),
      gps('g4', 'd1', T0 + 240_000, 12.975),
    ]);
    await drained(names);
    const activity = (kind: string) =>
      metricValue(metrics, 'streaminfer_stream_window_results_total', { window: 'activity5m', kind });
    // Watermark 10:04: the tumbling window [10:00, 10:05) has not fired.
    expect(await activity('first')).toBe(0);
    await publish(names, [gps('g6', 'd1', T0 + 360_000, 12.978)]);
    await drained(names);
    // Watermark 10:06 passed 10:05: it fired, once.
    expect(await activity('first')).toBe(1);
    await publish(names, [gps('g2', 'd1', T0 + 120_000, 12.99)]);
    await drained(names);
    expect(
      await metricValue(metrics, 'streaminfer_stream_window_results_total', { kind: 'revision' }),
    ).toBeGreaterThan(0);
    expect(await metricValue(metrics, 'streaminfer_stream_behind_watermark_events_total')).toBe(1);
    let out = await predictions(names);
    expect(
      out
        .filter((p) => p.revision === 1)
        .map((p) => p.event_id)
        .sort(),
    ).toEqual(['g4', 'g6']);
    expect(out.find((p) => p.event_id === 'g2')?.revision).toBe(0);
    // Watermark to 10:20: a 10:03 event, 17 min behind, is beyond the lateness.
    await publish(names, [gps('g20', 'd1', T0 + 20 * 60_000, 12.98), gps('g3', 'd1', T0 + 180_000, 12.99)]);
    await drained(names);
    expect(await metricValue(metrics, 'streaminfer_stream_late_events_total')).toBe(1);
    const late = (await readStream(nats, names.side, `${names.tag}.delivery.late.>`)).map((m) =>
      m.json<{ event: { event_id: string }; delivery_id: string; watermark: string }>(),
    );
    expect(late).toHaveLength(1);
    expect(late[0]!.event.event_id).toBe('g3');
    expect(late[0]!.watermark).toBe(new Date(T0 + 20 * 60_000).toISOString());
    out = await predictions(names);
    expect(out.some((p) => p.event_id === 'g3')).toBe(false);
  });

  it('10,000 events, 5% duplicates, injected failures (redeliveries) and a consumer restart: one prediction per decision id', async () => {
    const names = uniqueNames('spx');
    created.push(names);
    const { records } = simulate({
      seed: 7,
      deliveries: 40,
      durationMs: 50 * 60_000,
      gpsIntervalMs: 10_000,
      disorderMs: 5_000,
      duplicateFraction: 0.05,
      idPrefix: `${names.tag}-`,
    });
    const batch = records.slice(0, 10_000);
    expect(batch.filter((r) => r.kind === 'duplicate').length).toBeGreaterThan(300);
    // Duplicates are re-sent with a fresh Msg-Id half the time, so the broker's window cannot catch them all.
    let n = 0;
    const items = batch.map((r) => ({
      payload: r.payload,
      delivery: r.delivery_id,
      msgId: r.kind === 'duplicate' && n++ % 2 === 0 ? `${r.msgId}#resent` : r.msgId,
    }));
    const first = new FunctionBackend(37);
    const a = await startPipeline(names, first);
    const publishing = (async () => {
      for (let i = 0; i < items.length; i += 500) {
        const part = items.slice(i, i + 500);
        await Promise.all(
          part.map((it) =>
            nats.js.publish(eventSubjectFor(names, it.delivery, 2), it.payload, {
              msgID: it.msgId,
            }),
          ),
        );
      }
    })();
    // Restart the consumer mid-run: it drains and reopens on the same durable; what it had pulled ahead comes
    // back after ack_wait as redeliveries.
    await waitFor(
      'a third of the events',
      async () => (await a.pipeline.status()).counts.received! > 3_300,
      60_000,
    );
    await a.pipeline.restartConsumer();
    await waitFor(
      'two thirds of the events',
      async () => (await a.pipeline.status()).counts.received! > 6_600,
      60_000,
    );
    await a.pipeline.restartConsumer();
    await publishing;
    await drained(names);
    expect(first.failures).toBeGreaterThan(100);
    const out = await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`);
    const ids = new Map<string, number>();
    for (const m of out) {
      const p = m.json<Prediction>();
      expect(m.msgId).toBe(p.decision_id);
      ids.set(p.decision_id, (ids.get(p.decision_id) ?? 0) + 1);
    }
    const repeated = [...ids].filter(([, c]) => c > 1);
    expect(repeated).toEqual([]);
    // A restart during a backlog sends back what the consumer had pulled ahead after the watermark moved past
    // it (a backlog is consumed far faster than event time passes): those events are late — in the side
    // output, counted, never silently dropped.
    const firsts = out
      .map((m) => m.json<Prediction>())
      .filter((p) => p.revision === 0)
      .map((p) => p.event_id);
    const predicted = new Set(firsts);
    // (A redelivery so old that its id was forgotten — dedupeTtlMs of event time, minutes of processing in a
    // backlog — may also reach the late side output after its event was predicted; the engine's contract.)
    const late = new Set(
      (await readStream(nats, names.side, `${names.tag}.delivery.late.>`))
        .map((m) => m.json<{ event: { event_id: string } }>().event.event_id)
        .filter((id) => !predicted.has(id)),
    );
    // Every other event that has features at its time (a first status and a GPS point before it, among the
    // events the pipeline accepted) was predicted, once.
    // (A duplicate may be the only copy of its event in the batch: the cut at 10,000 can fall between them.)
    // A status seen late may also have been accepted first (an unpredicted event — no GPS point before it —
    // whose redelivered copy came back after its id was forgotten): the events after it were then rightly
    // predicted. Per delivery, the predictions match the events without its late records, or, when one of
    // them is a status, with that status in.
    const byDelivery = new Map<string, DeliveryEvent[]>();
    const withLateStatuses = new Map<string, DeliveryEvent[]>();
    const seen = new Set<string>();
    for (const r of batch) {
      if (!r.event || seen.has(r.event.event_id)) continue;
      seen.add(r.event.event_id);
      const isLate = late.has(r.event.event_id);
      if (!isLate || r.event.type === 'status')
        withLateStatuses.set(r.delivery_id, [...(withLateStatuses.get(r.delivery_id) ?? []), r.event]);
      if (isLate) continue;
      byDelivery.set(r.delivery_id, [...(byDelivery.get(r.delivery_id) ?? []), r.event]);
    }
    const ready = (events: DeliveryEvent[], among: DeliveryEvent[]) =>
      events.filter((e) => computeFeatures(among, e.eventTimeMs).ok).map((e) => e.event_id);
    const expected = new Set<string>();
    const sameSet = (ids: string[], of: Set<string>) =>
      ids.length === of.size && ids.every((id) => of.has(id));
    for (const [delivery, events] of byDelivery) {
      const strict = ready(events, events);
      const lenient = ready(events, withLateStatuses.get(delivery)!);
      const mine = new Set(events.filter((e) => predicted.has(e.event_id)).map((e) => e.event_id));
      // Anything matching neither still fails below, against the strict expectation.
      for (const id of !sameSet(strict, mine) && sameSet(lenient, mine) ? lenient : strict) expected.add(id);
    }
    // No event may run out of deliveries (max_deliver 10): in-flight messages get in-progress acks, so a
    // slow host does not count ack_wait expiries against events no processor failed. Named here, the reason
    // of a missing prediction would be in the failure.
    const dead = (await readStream(nats, names.side, `${names.tag}.delivery.dlq`)).map((m) =>
      m.json<{ reason: string; delivery_count: number }>(),
    );
    expect(dead).toEqual([]);
    expect(firsts.length).toBe(predicted.size);
    expect(predicted).toEqual(expected);
    // Late is bounded by what the two restarts can send back: each partition's pulled-ahead messages, at most
    // maxAckPending (512) per partition (2) per restart. How many of those there were at the restart is the
    // host's timing (12.6 % of the expected predictions in one CI run, under 10 % in most).
    expect(late.size).toBeLessThanOrEqual(2 * 2 * 512);
    const status = await a.pipeline.status();
    expect(status.counts.duplicates).toBeGreaterThan(0);
  }, 120_000);

  it('an invalid event among valid ones: dead-lettered with its reason, every valid event still predicted', async () => {
    const names = uniqueNames('spd');
    created.push(names);
    const { metrics } = await startPipeline(names, new FunctionBackend());
    const valid = [1, 2, 3, 4, 5].map((i) => gps(`v${i}`, 'd1', T0 + i * 10_000, 12.97 + i * 0.001));
    await publish(names, [
      pickedUp('d1'),
      valid[0]!,
      valid[1]!,
      { payload: '{"event_id": "bad-1", "delivery_id": "d1", "type": "gps"', msgId: 'bad-1', delivery: 'd1' },
      valid[2]!,
      gps('bad-2', 'd1', T0 + 35_000, 123.4),
      valid[3]!,
      valid[4]!,
    ]);
    await drained(names);
    const dlq = (await readStream(nats, names.side, `${names.tag}.delivery.dlq`)).map((m) =>
      m.json<{ reason: string; raw: string; source_stream_seq: number }>(),
    );
    expect(dlq.map((d) => d.reason)).toEqual([
      expect.stringMatching(/^payload: /),
      expect.stringMatching(/^driver_lat: /),
    ]);
    expect(dlq[1]!.raw).toContain('"bad-2"');
    const out = await predictions(names);
    expect(out.filter((p) => p.revision === 0).map((p) => p.event_id)).toEqual([
      'v1',
      'v2',
      'v3',
      'v4',
      'v5',
    ]);
    expect(await metricValue(metrics, 'streaminfer_stream_events_total', { type: 'invalid' })).toBe(2);
  });

  it('reload: an epoch barrier pins the new version; every epoch has one version; the transition is recorded', async () => {
    const names = uniqueNames('spe');
    created.push(names);
    const { pipeline } = await startPipeline(names, new FunctionBackend());
    const payloads = [
      pickedUp('d1'),
      ...Array.from({ length: 400 }, (_, i) => gps(`e${i}`, 'd1', T0 + (i + 1) * 1_000, 12.97 + i * 0.0001)),
    ];
    const publishing = publish(names, payloads);
    await waitFor('some predictions', async () => (await pipeline.status()).counts.predictions! > 50);
    const refused = await pipeline.reload({ version: '9' }, 'test');
    expect(refused).toMatchObject({ result: 'failed', epoch: 1 });
    const outcome = await pipeline.reload({ version: '2' }, 'test');
    expect(outcome).toMatchObject({
      result: 'committed',
      epoch_before: 1,
      epoch: 2,
      changes: [{ to: 'delay-risk@2' }],
    });
    await publishing;
    await drained(names);
    const out = await predictions(names);
    const versionsByEpoch = new Map<number, Set<string>>();
    for (const p of out)
      versionsByEpoch.set(p.epoch, (versionsByEpoch.get(p.epoch) ?? new Set()).add(p.version));
    expect([...versionsByEpoch].map(([e, v]) => [e, [...v]])).toEqual([
      [1, ['1']],
      [2, ['2']],
    ]);
    // Epochs follow arrival order: no version-1 prediction after the first version-2 one.
    const firstV2 = out.findIndex((p) => p.version === '2');
    expect(out.slice(firstV2).every((p) => p.version === '2')).toBe(true);
    // An operator pause holds new messages (keyed state stays); resume drains them.
    expect(await pipeline.pause()).toMatchObject({ paused: true });
    await publish(names, [gps('paused-1', 'd1', T0 + 500_000, 12.99)]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await predictions(names)).some((p) => p.event_id === 'paused-1')).toBe(false);
    expect((await pipeline.status()).paused).toBe(true);
    expect(await pipeline.resume()).toEqual({ resumed: true });
    await drained(names);
    expect((await predictions(names)).find((p) => p.event_id === 'paused-1')).toMatchObject({
      epoch: 2,
      version: '2',
    });
    const epochs = (await readStream(nats, names.predictions, `${names.tag}.delivery.epochs`)).map((m) =>
      m.json<{ epoch: number; version: string; previous: { version: string } | null }>(),
    );
    expect(epochs.map((e) => [e.epoch, e.version, e.previous?.version ?? null])).toEqual([
      [1, '1', null],
      [2, '2', '1'],
    ]);
  }, 60_000);
});

describe('delivery pipeline with checkpoints (in process)', () => {
  const buckets: string[] = [];
  afterAll(async () => {
    for (const b of buckets)
      for (const s of [`OBJ_${b}`, `KV_${b}_head`]) await nats.jsm.streams.delete(s).catch(() => undefined);
  });

  function checkpointConfig(names: StreamNames, bucket: string) {
    const base = configFor(names);
    return resolvePipelineConfig(base, {
      consumer: { maxAckPending: 20_000, ackWaitMs: 3_000 },
      partitions: 1,
      checkpoint: { enabled: true, intervalMs: 150, bucket },
    });
  }

  it('backend failures are retried in place (never naked), acks wait for checkpoints, and a restart continues the state', async () => {
    const names = uniqueNames('spk');
    created.push(names);
    const bucket = `${names.tag}_ckpt`;
    buckets.push(bucket);
    const { records } = simulate({
      seed: 3,
      deliveries: 20,
      durationMs: 30 * 60_000,
      gpsIntervalMs: 10_000,
      idPrefix: `${names.tag}-`,
    });
    const first = records.slice(0, 1_500);
    const second = records.slice(1_500, 3_000);
    const publishAll = (rs: typeof records) =>
      Promise.all(
        rs.map((r) =>
          nats.js.publish(eventSubjectFor(names, r.delivery_id, 1), r.payload, {
            msgID: r.msgId,
          }),
        ),
      );
    const checkpointAt = async (p: DeliveryPipeline, position: number) =>
      waitFor(
        `a checkpoint at ${position}`,
        async () => ((await p.status()).checkpoint?.position ?? 0) >= position,
        30_000,
      );

    const failing = new FunctionBackend(11);
    const aMetrics = new PipelineMetrics();
    const a = new DeliveryPipeline({
      config: checkpointConfig(names, bucket),
      backend: failing,
      metrics: aMetrics,
      logger,
    });
    await a.start();
    running.push(a);
    await publishAll(first);
    await checkpointAt(a, first.length);
    expect(failing.failures).toBeGreaterThan(50);
    // Acks go out without confirmation once the checkpoint is complete: the broker's ack floor follows shortly.
    const consumerInfo = () => nats.jsm.consumers.info(names.events, `${names.tag}_pipeline-p0`);
    await waitFor(
      'acks up to the checkpoint',
      async () => (await consumerInfo()).ack_floor.stream_seq >= first.length,
      10_000,
    );
    const consumer = await consumerInfo();
    expect(consumer.num_redelivered).toBe(0); // retried in place, not naked
    expect(consumer.ack_floor.stream_seq).toBe(first.length); // acked up to the checkpoint, not beyond
    expect(await metricValue(aMetrics, 'streaminfer_stream_naks_total')).toBe(0);
    await a.stop(); // drained: a last checkpoint

    const metrics = new PipelineMetrics();
    const b = new DeliveryPipeline({
      config: checkpointConfig(names, bucket),
      backend: new FunctionBackend(),
      metrics,
      logger,
    });
    await b.start();
    running.push(b);
    await publishAll(second);
    await checkpointAt(b, first.length + second.length);
    // Nothing replayed after a clean stop; the restored deliveries go on being predicted (their first status is
    // in the restored state, not in this process's input).
    expect(await metricValue(metrics, 'streaminfer_stream_replayed_events_total')).toBe(0);
    const out = await predictions(names);
    const ids = new Set(out.map((p) => p.decision_id));
    expect(ids.size).toBe(out.length);
    const secondIds = new Set(second.map((r) => r.msgId));
    const continued = out.filter(
      (p) => secondIds.has(p.event_id) && first.some((r) => r.delivery_id === p.delivery_id),
    );
    expect(continued.length).toBeGreaterThan(300);
    // And each equals what one uninterrupted decider decides for the same input.
    const reference = new DeliveryDecider({
      outOfOrdernessMs: 10_000,
      allowedLatenessMs: 60_000,
      idleTimeoutMs: 10_000,
      stateTtlMs: 20 * 60_000,
      dedupeTtlMs: 15 * 60_000,
    });
    const expected = new Set<string>();
    for (const r of [...first, ...second])
      for (const d of reference.ingest(r.payload, '0').decisions)
        expected.add(`${d.delivery_id}:${d.event_id}:delay-risk@1:r1:${d.revision}`);
    expect(ids).toEqual(expected);
    // Dozens of checkpoints (every 150 ms: at 300 an idle machine got through this test with 4) later, the object store holds two generations per partition, no
    // tombstone per checkpoint ever taken, and no consumer left behind by a listing.
    const prefix = `$O.${bucket}.M.`;
    const info = await nats.jsm.streams.info(`OBJ_${bucket}`, { subjects_filter: `${prefix}>` });
    const objects = Object.keys(info.state.subjects ?? {}).map((subject) =>
      Buffer.from(subject.slice(prefix.length), 'base64url').toString(),
    );
    const latest = await (
      await CheckpointStore.open(nats.js, bucket, `${names.tag}_pipeline`, 'p0')
    ).latest();
    expect(latest!.id).toBeGreaterThan(5);
    expect(objects.length).toBeLessThanOrEqual(2 * 2);
    expect(info.state.consumer_count).toBeLessThanOrEqual(2);
  }, 90_000);
});
