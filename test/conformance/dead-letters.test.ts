/**
 * Dead letters, from outside: what a producer publishes on the input subjects that the pipeline does not
 * predict on reaches `delivery.dlq` with its reason, and never stops the events behind it. Only the public
 * contract: `streaminfer pipeline` as a user runs it (the shipped model), publishes on
 * `delivery.events.<partition>.<delivery_id>`, reads `delivery.dlq` / `delivery.predictions.>` and /metrics.
 */
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { modelsSubset } from '../integration/harness';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  partitionsDrained,
  pickupThenGps,
  readStream,
  type StreamNames,
  startPipelineCli,
  stopChild,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from '../integration/pipeline-kit';

const PARTITIONS = 4;

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-dead-letters' });
});

// Each case's pipeline stops with it: seven left running to the end (checkpoints every 500 ms, an inference
// worker each) load a 2-core host for the suites beside this one.
afterEach(async () => {
  await Promise.all(children.splice(0).map(stopChild));
});

afterAll(async () => {
  await Promise.all(children.map(stopChild));
  await deleteStreams(nats, created);
  await nats.close();
});

/**
 * The pipeline on its own streams. maxAckPending 30: a message that holds its partition's position shows
 * within a few dozen events (acks wait for the checkpoint that covers them; the shipped 50,000 only later).
 */
async function startPipeline(names: StreamNames, over: Record<string, unknown> = {}) {
  created.push(names);
  const file = writePipelineConfig(
    names,
    { maxAckPending: 30, ackWaitMs: 5_000, batchSize: 10 },
    {
      concurrency: 20,
      partitions: PARTITIONS,
      checkpoint: { enabled: true, intervalMs: 500, bucket: `${names.tag}_ckpt` },
      inference: { mode: 'embedded', modelsDir: modelsSubset(['delay-risk']) },
      ...over,
    },
  );
  const stream = startPipelineCli(['--config', file]);
  children.push(stream.child);
  const { admin } = await stream.ready();
  return { stream, admin };
}

async function publish(names: StreamNames, delivery: string, data: string | Uint8Array, msgId: string) {
  const ack = await nats.js.publish(eventSubjectFor(names, delivery, PARTITIONS), data, { msgID: msgId });
  return ack.seq;
}

async function firstPredictions(names: StreamNames, delivery: string): Promise<Set<string>> {
  const all = await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.${delivery}`);
  return new Set(
    all
      .map((m) => m.json<Prediction>())
      .filter((p) => p.revision === 0)
      .map((p) => p.event_id),
  );
}

async function deadLetters(names: StreamNames): Promise<Array<Record<string, unknown>>> {
  return (await readStream(nats, names.side, `${names.tag}.delivery.dlq`)).map((m) => m.json());
}

async function metricsText(admin: number): Promise<string> {
  return (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
}

const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

async function metric(admin: number, name: string): Promise<number> {
  const escaped = name.replace(/[{}"]/g, (c) => `\\${c}`);
  const m = new RegExp(`^${escaped} (\\S+)$`, 'm').exec(await metricsText(admin));
  return m ? Number(m[1]) : 0;
}

async function everyPartitionConsuming(admin: number): Promise<void> {
  await waitFor(
    'every partition consuming',
    async () => {
      const status = (await (await fetch(`http://127.0.0.1:${admin}/api/pipeline`)).json()) as {
        partitions: Array<{ consuming: boolean }>;
      };
      return status.partitions.length === PARTITIONS && status.partitions.every((p) => p.consuming);
    },
    15_000,
  );
}

async function lateRecords(names: StreamNames): Promise<Array<Record<string, unknown>>> {
  return (await readStream(nats, names.side, `${names.tag}.delivery.late.>`)).map((m) => m.json());
}

/** Every first prediction of `delivery`, by event id, with how many times each was published. */
async function firstPredictionCounts(names: StreamNames, delivery: string): Promise<Map<string, number>> {
  const all = await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.${delivery}`);
  const counts = new Map<string, number>();
  for (const p of all.map((m) => m.json<Prediction>()))
    if (p.revision === 0) counts.set(p.event_id, (counts.get(p.event_id) ?? 0) + 1);
  return counts;
}

/**
 * Invalid events (not JSON, a missing field, not UTF-8), then a pickup and GPS points — more than maxAckPending
 * of them, so a held position would stop them — then one GPS point 185 s behind the watermark (late), all on
 * one delivery's partition. The GPS points after the pickup are what must be predicted.
 */
function badThenGood(delivery: string, gpsCount: number) {
  const invalid: Array<[string, string | Uint8Array]> = [
    [`${delivery}-bad-json`, 'not json'],
    [`${delivery}-bad-field`, JSON.stringify({ event_id: `${delivery}-bad-field`, delivery_id: delivery })],
    [`${delivery}-bad-utf8`, new Uint8Array([0xff, 0xfe, 0x00, 0x41])],
  ];
  const good = pickupThenGps(delivery, 0, gpsCount);
  const late = JSON.parse(good[1]!.payload);
  late.event_id = `${delivery}-late`;
  late.event_time = new Date(Date.parse(late.event_time) + 5_000).toISOString();
  return {
    invalid,
    good,
    late: { id: late.event_id as string, payload: JSON.stringify(late) },
    predicted: good.slice(1).map((e) => e.id),
  };
}

/** badThenGood's events published in order on one partition: the invalid ones, the valid ones, the late one. */
async function publishBadThenGood(names: StreamNames, delivery: string, gpsCount: number) {
  const events = badThenGood(delivery, gpsCount);
  const badSeqs: number[] = [];
  for (const [id, data] of events.invalid) badSeqs.push(await publish(names, delivery, data, id));
  for (const e of events.good) await publish(names, delivery, e.payload, e.id);
  const lateSeq = await publish(names, delivery, events.late.payload, events.late.id);
  return { ...events, badSeqs, lateSeq };
}

describe('dead letters (public contract)', () => {
  it('a dead letter over the broker max_payload arrives truncated, and the events behind it are predicted', async () => {
    const names = uniqueNames('cdl');
    const { admin, stream } = await startPipeline(names);
    // 200 KB of control characters (each escapes to `\u0001`: 1.2 MB as JSON text) and 1 MB that is not
    // UTF-8 (base64: 1.33 MB): both fit the broker as events, neither fits it as a dead letter whole.
    const control = new Uint8Array(200_000).fill(1);
    const binary = new Uint8Array(1_000_000).fill(0xff);
    const controlSeq = await publish(names, 'dz', control, 'bad-control');
    const binarySeq = await publish(names, 'dz', binary, 'bad-binary');
    // Behind them in the same partition: more events than maxAckPending.
    const good = pickupThenGps('dz', 0, 80);
    for (const e of good) await publish(names, 'dz', e.payload, e.id);
    // The pickup has no position yet: each GPS point after it gets the first predictions.
    const gps = good.slice(1).map((e) => e.id);

    await waitFor(
      `${gps.length} first predictions behind the bad events`,
      async () => (await firstPredictions(names, 'dz')).size >= gps.length,
      30_000,
    );
    expect([...(await firstPredictions(names, 'dz'))].sort()).toEqual(gps.sort());

    await waitFor('both dead letters', async () => (await deadLetters(names)).length >= 2, 10_000);
    const letters = await deadLetters(names);
    expect(letters).toHaveLength(2);
    const bySeq = new Map(letters.map((l) => [l.source_stream_seq, l]));
    for (const [seq, payload] of [
      [controlSeq, control],
      [binarySeq, binary],
    ] as const) {
      const letter = bySeq.get(seq);
      expect(letter).toMatchObject({
        source_stream_seq: seq,
        raw_bytes: payload.length,
        raw_sha256: sha256(payload),
        raw_truncated: true,
        reason: expect.stringMatching(/^payload: /),
      });
    }
    // The kept prefix is the payload's own start.
    const textLetter = bySeq.get(controlSeq)!;
    expect(typeof textLetter.raw).toBe('string');
    expect((textLetter.raw as string).length).toBeGreaterThan(1000);
    expect(textLetter.raw as string).toBe('\u0001'.repeat((textLetter.raw as string).length));
    const binLetter = bySeq.get(binarySeq)!;
    const kept = Buffer.from(binLetter.raw_base64 as string, 'base64');
    expect(kept.length).toBeGreaterThan(1000);
    expect(kept.every((b) => b === 0xff)).toBe(true);

    // Counted once each, as published.
    await waitFor(
      'dead letters counted',
      async () =>
        /streaminfer_stream_dead_letters_total\{reason="invalid"\} 2\n/.test(await metricsText(admin)),
      5_000,
    );

    // kill -9 and restart: the restored partition does not replay into the bad events again.
    const { pid } = stream.readies()[0]!;
    process.kill(pid, 'SIGKILL');
    await stream.ready(2);
    const more = pickupThenGps('dz', 0, 90).slice(81);
    for (const e of more) await publish(names, 'dz', e.payload, e.id);
    await waitFor(
      'the events after the restart predicted',
      async () => (await firstPredictions(names, 'dz')).size >= gps.length + more.length,
      30_000,
    );
    expect(await deadLetters(names)).toHaveLength(2);
  }, 90_000);

  it('spool disabled: a dead letter the broker cannot store yet is retried and reported, counted only once it lands', async () => {
    const names = uniqueNames('cdf');
    const { admin } = await startPipeline(names, { spool: { enabled: false } });
    await waitFor(
      'every partition consuming',
      async () => {
        const status = (await (await fetch(`http://127.0.0.1:${admin}/api/pipeline`)).json()) as {
          partitions: Array<{ consuming: boolean }>;
        };
        return status.partitions.length === PARTITIONS && status.partitions.every((p) => p.consuming);
      },
      15_000,
    );
    const metric = async (name: string) => {
      const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(await metricsText(admin));
      return m ? Number(m[1]) : 0;
    };
    // The side stream goes away (an operator's mistake, a broker that lost it): nothing can store the letter.
    const side = await nats.jsm.streams.info(names.side);
    await nats.jsm.streams.delete(names.side);
    const badSeq = await publish(names, 'dq', 'not json', 'bad-json');
    await waitFor(
      'the failing dead letter reported',
      async () => (await metric('streaminfer_stream_dead_letters_failing')) === 1,
      15_000,
    );
    expect(await metric('streaminfer_stream_dead_letters_total{reason="invalid"}')).toBe(0);

    await nats.jsm.streams.add(side.config);
    await waitFor('the dead letter stored', async () => (await deadLetters(names)).length === 1, 20_000);
    expect((await deadLetters(names))[0]).toMatchObject({ source_stream_seq: badSeq, raw: 'not json' });
    await waitFor(
      'counted once stored, no longer failing',
      async () =>
        (await metric('streaminfer_stream_dead_letters_total{reason="invalid"}')) === 1 &&
        (await metric('streaminfer_stream_dead_letters_failing')) === 0,
      5_000,
    );
    // The partition goes on.
    const after = pickupThenGps('dq', 0, 3);
    for (const e of after) await publish(names, 'dq', e.payload, e.id);
    await waitFor(
      'predictions after it',
      async () => (await firstPredictions(names, 'dq')).size === 3,
      15_000,
    );
  }, 90_000);

  it('the side stream deleted: dead letters and late records are spooled, the partition goes on, each lands once when it is back', async () => {
    const names = uniqueNames('cds');
    const { admin } = await startPipeline(names);
    await everyPartitionConsuming(admin);
    const side = await nats.jsm.streams.info(names.side);
    await nats.jsm.streams.delete(names.side);

    const { predicted, badSeqs, lateSeq } = await publishBadThenGood(names, 'ds', 60);

    // The events behind the refused side outputs are predicted, and every source message is acked.
    await waitFor(
      `${predicted.length} first predictions behind the refused dead letters`,
      async () => (await firstPredictionCounts(names, 'ds')).size >= predicted.length,
      30_000,
    );
    await waitFor('every source message acked', () => partitionsDrained(nats, names, PARTITIONS), 15_000);
    // Pending, visible: in the spool, /health 200 and saying so, nothing held, nothing counted as stored yet
    // (the gauges are read each second).
    await waitFor(
      'the spool gauge',
      async () => (await metric(admin, 'streaminfer_stream_spool_records')) === 4,
      5_000,
    );
    expect(await metric(admin, 'streaminfer_stream_spool_full')).toBe(0);
    expect(await metric(admin, 'streaminfer_stream_dead_letters_failing')).toBe(0);
    expect(await metric(admin, 'streaminfer_stream_dead_letters_total{reason="invalid"}')).toBe(0);
    const health = await fetch(`http://127.0.0.1:${admin}/health`);
    expect(health.status).toBe(200);
    const body = (await health.json()) as {
      consuming: boolean;
      degraded: string[];
      spool: { records: number };
    };
    expect(body.consuming).toBe(true);
    expect(body.spool.records).toBe(4);
    expect(body.degraded).toEqual([expect.stringMatching(/^4 side outputs .* in the local spool/)]);

    await nats.jsm.streams.add(side.config);
    await waitFor(
      'the dead letters and the late record stored',
      async () => (await deadLetters(names)).length >= 3 && (await lateRecords(names)).length >= 1,
      20_000,
    );
    await waitFor(
      'the spool drained, counted once stored',
      async () =>
        (await metric(admin, 'streaminfer_stream_spool_records')) === 0 &&
        (await metric(admin, 'streaminfer_stream_dead_letters_total{reason="invalid"}')) === 3,
      10_000,
    );
    // Each exactly once, with what it says of its event.
    const letters = await deadLetters(names);
    expect(letters.map((l) => l.source_stream_seq).sort()).toEqual([...badSeqs].sort());
    expect(letters.find((l) => l.source_stream_seq === badSeqs[0])).toMatchObject({ raw: 'not json' });
    expect(letters.find((l) => l.source_stream_seq === badSeqs[2])).toMatchObject({ raw_base64: '//4AQQ==' });
    const lates = await lateRecords(names);
    expect(lates).toHaveLength(1);
    expect(lates[0]).toMatchObject({ source_stream_seq: lateSeq, delivery_id: 'ds' });
    const counts = await firstPredictionCounts(names, 'ds');
    expect([...counts.keys()].sort()).toEqual([...predicted].sort());
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    await waitFor(
      '/health no longer degraded',
      async () =>
        ((await (await fetch(`http://127.0.0.1:${admin}/health`)).json()) as { degraded: string[] }).degraded
          .length === 0,
      5_000,
    );
  }, 90_000);

  it('kill -9 while side outputs wait in the spool: the restart replays them, nothing lost, nothing twice', async () => {
    const names = uniqueNames('cdk');
    const { admin, stream } = await startPipeline(names);
    await everyPartitionConsuming(admin);
    await nats.jsm.streams.delete(names.side);

    const { predicted, badSeqs, lateSeq } = await publishBadThenGood(names, 'dk', 40);
    await waitFor(
      'the valid events predicted',
      async () => (await firstPredictionCounts(names, 'dk')).size >= predicted.length,
      30_000,
    );
    await waitFor('every source message acked', () => partitionsDrained(nats, names, PARTITIONS), 15_000);
    await waitFor(
      'the spool gauge',
      async () => (await metric(admin, 'streaminfer_stream_spool_records')) === 4,
      5_000,
    );

    // No drain, no goodbye: what is pending is only in the spool's file.
    process.kill(stream.readies()[0]!.pid, 'SIGKILL');
    const restarted = await stream.ready(2);
    // The restart provisions the side stream again (as every start does) and takes over the dead one's spool.
    await waitFor(
      'the dead letters and the late record stored',
      async () => (await deadLetters(names)).length >= 3 && (await lateRecords(names)).length >= 1,
      20_000,
    );
    await waitFor(
      'the spool drained',
      async () => (await metric(restarted.admin, 'streaminfer_stream_spool_records')) === 0,
      10_000,
    );
    // Events after the restart go on; then nothing more arrives than once each.
    const more = pickupThenGps('dk', 40, 3);
    for (const e of more) await publish(names, 'dk', e.payload, e.id);
    await waitFor(
      'the events after the restart predicted',
      async () => (await firstPredictionCounts(names, 'dk')).size >= predicted.length + more.length,
      20_000,
    );
    await new Promise((r) => setTimeout(r, 1500));
    const letters = await deadLetters(names);
    expect(letters.map((l) => l.source_stream_seq).sort()).toEqual([...badSeqs].sort());
    expect((await lateRecords(names)).map((l) => l.source_stream_seq)).toEqual([lateSeq]);
    const counts = await firstPredictionCounts(names, 'dk');
    expect([...counts.keys()].sort()).toEqual([...predicted, ...more.map((e) => e.id)].sort());
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
  }, 120_000);

  it('a full spool says so and holds (dead_letters_failing) rather than lose; all land once the stream is back', async () => {
    const names = uniqueNames('cdp');
    // The smallest spool (1 MiB) holds one dead letter of 400 KB that is not UTF-8 (533 KB in base64).
    const { admin } = await startPipeline(names, { spool: { maxBytes: 1024 * 1024 } });
    await everyPartitionConsuming(admin);
    const side = await nats.jsm.streams.info(names.side);
    await nats.jsm.streams.delete(names.side);
    const big = new Uint8Array(400_000).fill(0xff);
    const badSeqs: number[] = [];
    for (let i = 0; i < 3; i++) badSeqs.push(await publish(names, 'dp', big, `dp-big-${i}`));
    const good = pickupThenGps('dp', 0, 5);
    for (const e of good) await publish(names, 'dp', e.payload, e.id);

    await waitFor(
      'the spool full, the rest held',
      async () =>
        (await metric(admin, 'streaminfer_stream_spool_full')) === 1 &&
        (await metric(admin, 'streaminfer_stream_dead_letters_failing')) >= 1,
      30_000,
    );
    expect(await metric(admin, 'streaminfer_stream_spool_records')).toBe(1);
    const health = await fetch(`http://127.0.0.1:${admin}/health`);
    expect(health.status).toBe(200);
    const { degraded } = (await health.json()) as { degraded: string[] };
    expect(degraded).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^side-output spool full/),
        expect.stringMatching(/not stored, holding/),
      ]),
    );

    await nats.jsm.streams.add(side.config);
    await waitFor(
      'all three dead letters stored',
      async () => (await deadLetters(names)).length >= 3,
      30_000,
    );
    await waitFor(
      'the events behind them predicted',
      async () => (await firstPredictionCounts(names, 'dp')).size >= good.length - 1,
      20_000,
    );
    await waitFor(
      'no longer full or held',
      async () =>
        (await metric(admin, 'streaminfer_stream_spool_records')) === 0 &&
        (await metric(admin, 'streaminfer_stream_spool_full')) === 0 &&
        (await metric(admin, 'streaminfer_stream_dead_letters_failing')) === 0,
      10_000,
    );
    const letters = await deadLetters(names);
    expect(letters.map((l) => l.source_stream_seq).sort()).toEqual([...badSeqs].sort());
    expect(letters.every((l) => l.raw_bytes === 400_000 && l.raw_sha256 === undefined)).toBe(true);
  }, 120_000);

  it('an event whose payload names another delivery than its subject is dead-lettered with the reason', async () => {
    const names = uniqueNames('cdm');
    await startPipeline(names);
    const [pickup, ...points] = pickupThenGps('dm', 0, 2);
    await publish(names, 'dm', pickup!.payload, pickup!.id);
    // On dm's subject, but the payload says dm-other: its state would live where dm-other's does not.
    const stray = JSON.parse(points[0]!.payload);
    stray.delivery_id = 'dm-other';
    stray.event_id = 'dm-stray';
    const straySeq = await publish(names, 'dm', JSON.stringify(stray), 'dm-stray');
    for (const e of points) await publish(names, 'dm', e.payload, e.id);
    await waitFor('the stray dead-lettered', async () => (await deadLetters(names)).length === 1, 15_000);
    expect((await deadLetters(names))[0]).toMatchObject({
      source_stream_seq: straySeq,
      reason: expect.stringMatching(/^delivery_id: .*dm-other.*dm/),
    });
    await waitFor(
      'the others predicted',
      async () => (await firstPredictions(names, 'dm')).size === 2,
      15_000,
    );
    const predicted = await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`);
    expect(predicted.map((m) => m.json<Prediction>().event_id)).not.toContain('dm-stray');
  }, 90_000);

  it('valid events with extra fields are predicted up to maxEventBytes (64 KiB), dead-lettered beyond it', async () => {
    const names = uniqueNames('cdx');
    await startPipeline(names);
    const [pickup, ...points] = pickupThenGps('dx', 0, 2);
    await publish(names, 'dx', pickup!.payload, pickup!.id);
    // Extra fields are ignored (the schema), whatever their size up to the limit: 6 KB and 60 KB.
    const padded = (payload: string, bytes: number) => {
      const e = JSON.parse(payload);
      e.notes = 'n'.repeat(bytes - payload.length - ',"notes":""'.length);
      const out = JSON.stringify(e);
      expect(Buffer.byteLength(out)).toBe(bytes);
      return out;
    };
    await publish(names, 'dx', padded(points[0]!.payload, 6_000), points[0]!.id);
    await publish(names, 'dx', padded(points[1]!.payload, 60_000), points[1]!.id);
    const over = JSON.parse(points[1]!.payload);
    over.event_id = 'dx-over';
    const overSeq = await publish(names, 'dx', padded(JSON.stringify(over), 70_000), 'dx-over');
    await waitFor(
      'both padded events predicted',
      async () => (await firstPredictions(names, 'dx')).size === 2,
      15_000,
    );
    await waitFor(
      'the one over the limit dead-lettered',
      async () => (await deadLetters(names)).length === 1,
      10_000,
    );
    expect((await deadLetters(names))[0]).toMatchObject({
      source_stream_seq: overSeq,
      raw_bytes: 70_000,
      reason: 'payload: 70000 bytes, over maxEventBytes 65536',
    });
  }, 90_000);
});
