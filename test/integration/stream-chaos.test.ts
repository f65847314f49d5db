/**
 * `streaminfer stream` with checkpoints under kill -9. The same workload goes through two pipelines on their
 * own streams: one left alone, one whose pipeline process is killed three times while events flow — once in
 * the middle of a checkpoint (object written, pointer not yet: that checkpoint must never be restored). The
 * supervisor restarts it each time; it restores the last completed checkpoint and replays from there.
 * Afterwards its output stream must hold exactly the failure-free run's predictions: every decision id once,
 * none lost, none duplicated, the same risk for each.
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, keySubject, type NatsHandle } from '../../apps/stream';
import { CheckpointStore } from '../../apps/stream/checkpoints';
import type { Prediction } from '../../libs/stream';
import { simulate } from '../../loadtest/simulator';
import {
  deleteStreams,
  NATS_URL,
  readStream,
  type StreamCli,
  type StreamNames,
  startStreamCli,
  uniqueNames,
  waitFor,
  writeStreamConfig,
} from './stream-kit';

let nats: NatsHandle;
const created: StreamNames[] = [];
const buckets: string[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'stream-chaos-test' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, created);
  for (const b of buckets)
    for (const s of [`OBJ_${b}`, `KV_${b}_head`]) await nats.jsm.streams.delete(s).catch(() => undefined);
  await nats.close();
});

function startStream(names: StreamNames, bucket: string, env: Record<string, string> = {}): StreamCli {
  const file = writeStreamConfig(
    names,
    { maxAckPending: 20_000, ackWaitMs: 6_000, batchSize: 256 },
    {
      concurrency: 512,
      // One source partition: idleness (processing time) cannot make a replay's watermark differ.
      partitions: 1,
      checkpoint: { enabled: true, intervalMs: 1_000, bucket },
    },
  );
  const stream = startStreamCli(['--config', file], { STREAMINFER_TEST_HOOKS: '1', ...env });
  children.push(stream.child);
  return stream;
}

async function predictions(names: StreamNames): Promise<Array<Prediction & { msgId?: string }>> {
  return (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) => ({
    ...m.json<Prediction>(),
    ...(m.msgId ? { msgId: m.msgId } : {}),
  }));
}

/** Every stored event processed and published: a completed checkpoint covers the last one. */
async function caughtUp(run: StreamCli, total: number): Promise<void> {
  await waitFor(
    'a checkpoint covering every event',
    async () => {
      const readies = run.readies();
      const res = await fetch(`http://127.0.0.1:${readies[readies.length - 1]!.admin}/health`).catch(
        () => null,
      );
      if (!res || res.status !== 200) return false;
      const health = (await res.json()) as { checkpoint?: { position: number | null } };
      return (health.checkpoint?.position ?? 0) >= total;
    },
    120_000,
  );
}

describe('streaminfer stream with checkpoints, under kill -9', () => {
  it('three kills (one inside a checkpoint): exactly the failure-free predictions, value for value', async () => {
    const reference = uniqueNames('chr');
    const chaos = uniqueNames('chx');
    created.push(reference, chaos);
    const refBucket = `${reference.tag}_ckpt`;
    const chaosBucket = `${chaos.tag}_ckpt`;
    buckets.push(refBucket, chaosBucket);
    const { records } = simulate({
      seed: 13,
      deliveries: 60,
      durationMs: 40 * 60_000,
      gpsIntervalMs: 10_000,
      disorderMs: 5_000,
      duplicateFraction: 0.03,
      idPrefix: 'cx-',
    });
    const batch = records.slice(0, 8_000);

    const ref = startStream(reference, refBucket);
    // The chaos pipeline: a test hook holds each checkpoint 400 ms between its object and its pointer.
    const victim = startStream(chaos, chaosBucket, { STREAMINFER_TEST_CHECKPOINT_DELAY_MS: '400' });
    await waitFor(
      'both pipelines ready',
      () => ref.readies().length === 1 && victim.readies().length === 1,
      60_000,
    );

    // Publish in slices of 500 (about 1,500 events/s), killing the victim three times on the way.
    const killAt = new Set([2_000, 4_500, 6_500]);
    let kills = 0;
    for (let i = 0; i < batch.length; i += 500) {
      const slice = batch.slice(i, i + 500);
      for (const names of [reference, chaos])
        await Promise.all(
          slice.map((r) =>
            nats.js.publish(keySubject(`${names.tag}.delivery.events`, r.delivery_id), r.payload, {
              msgID: r.msgId,
            }),
          ),
        );
      if (killAt.has(i + 500)) {
        const readies = victim.readies();
        const pid = readies[readies.length - 1]!.pid;
        const count = (what: string) => victim.output().split(what).length;
        if (kills === 1) {
          // The second kill lands inside a checkpoint: after its object, before its pointer.
          const seen = count('pointer pending');
          await waitFor('a checkpoint in progress', () => count('pointer pending') > seen, 10_000);
        } else {
          // The others after this process completed a checkpoint of its own (a restore has one to start from).
          const seen = count('checkpoint completed');
          await waitFor('a completed checkpoint', () => count('checkpoint completed') > seen, 10_000);
        }
        process.kill(pid, 'SIGKILL');
        kills++;
        await waitFor(`restart ${kills}`, () => victim.readies().length === kills + 1, 60_000);
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    expect(kills).toBe(3);
    const stored = (await nats.jsm.streams.info(chaos.events)).state.messages;
    await caughtUp(ref, stored);
    await caughtUp(victim, stored);

    const expected = await predictions(reference);
    const got = await predictions(chaos);
    expect(expected.length).toBeGreaterThan(5_000);
    const byId = (list: Array<Prediction & { msgId?: string }>) => {
      const map = new Map<string, number>();
      for (const p of list) {
        expect(p.msgId).toBe(p.decision_id);
        expect(map.has(p.decision_id)).toBe(false); // never twice
        map.set(p.decision_id, p.risk);
      }
      return map;
    };
    const want = byId(expected);
    const have = byId(got);
    expect([...have.keys()].filter((id) => !want.has(id))).toEqual([]); // nothing extra
    expect([...want.keys()].filter((id) => !have.has(id))).toEqual([]); // nothing lost
    for (const [id, risk] of want) expect(have.get(id)).toBe(risk); // the same value
    // The restored process says so.
    expect(victim.output()).toContain('restored from checkpoint');

    ref.child.kill('SIGTERM');
    victim.child.kill('SIGTERM');
    expect(await ref.exited).toBe(0);
    expect(await victim.exited).toBe(0);
    // And the keyed state itself — windows, their emissions, histories, dedupe ids — ends equal. Not the
    // partitions' processing-time clocks, nor the engine's counters: they are statistics, and a message the
    // broker redelivers (its ack held past ack_wait while a restarted process catches up) counts as one more
    // duplicate there.
    const finalState = async (names: StreamNames, bucket: string) => {
      const store = await CheckpointStore.open(nats.js, bucket, `${names.tag}_pipeline`, 'all');
      const checkpoint = await store.latest();
      const state = checkpoint!.state;
      expect(checkpoint!.position).toBe(stored);
      expect(state.deliveries.length).toBeGreaterThan(10);
      return JSON.stringify({
        ...state,
        engine: { ...state.engine, partitions: [], counters: {} },
      }).replaceAll(/ch[rx]\d+t\d+n\d+/g, '');
    };
    expect(await finalState(chaos, chaosBucket)).toBe(await finalState(reference, refBucket));
  }, 300_000);
});
