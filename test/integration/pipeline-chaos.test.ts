/**
 * `streaminfer pipeline` with checkpoints and two instances under kill -9. The same workload (20,000 events)
 * goes through two pipelines on their own streams: a reference run by one instance left alone, and a chaos
 * pipeline whose four partitions are shared by two instances (leases in NATS KV) while they are killed three
 * times as events flow: an instance's process (its supervisor restarts it, and it takes its leases back), the
 * other's in the middle of a checkpoint (object written, pointer not yet: never restored), then a whole
 * instance, supervisor and all (its partitions move to the survivor once the leases expire; a new instance
 * joins and takes its share back). Afterwards the chaos output holds exactly the reference's predictions:
 * every decision id once, none lost, none duplicated, the same risk for each — and every partition's final
 * keyed state equals the reference's.
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, eventSubject, type NatsHandle } from '../../apps/pipeline';
import { CheckpointStore } from '../../apps/pipeline/io/checkpoints';
import type { Prediction } from '../../libs/delivery';
import { simulate } from '../../libs/delivery';
import { checkSnapshot } from '../../libs/event-time';
import {
  deleteStreams,
  NATS_URL,
  type PipelineCli,
  partitionsDrained,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from './pipeline-kit';

const PARTITIONS = 4;

let nats: NatsHandle;
const created: StreamNames[] = [];
const buckets: string[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-chaos-test' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, created);
  for (const b of buckets)
    for (const s of [`OBJ_${b}`, `KV_${b}_head`]) await nats.jsm.streams.delete(s).catch(() => undefined);
  await nats.close();
});

function startPipeline(names: StreamNames, bucket: string, env: Record<string, string> = {}): PipelineCli {
  const file = writePipelineConfig(
    names,
    { maxAckPending: 20_000, ackWaitMs: 6_000, batchSize: 256 },
    {
      concurrency: 512,
      partitions: PARTITIONS,
      instance: { leaseBucket: `${names.tag}_leases`, leaseTtlMs: 10_000 },
      checkpoint: { enabled: true, intervalMs: 1_000, bucket },
    },
  );
  const stream = startPipelineCli(['--config', file], { STREAMINFER_TEST_HOOKS: '1', ...env });
  children.push(stream.child);
  return stream;
}

async function predictions(names: StreamNames): Promise<Array<Prediction & { msgId?: string }>> {
  return (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) => ({
    ...m.json<Prediction>(),
    ...(m.msgId ? { msgId: m.msgId } : {}),
  }));
}

async function health(run: PipelineCli): Promise<{ instance: { owned: number[] } } | null> {
  const readies = run.readies();
  const last = readies[readies.length - 1];
  if (!last) return null;
  const res = await fetch(`http://127.0.0.1:${last.admin}/health`).catch(() => null);
  return res?.status === 200 ? ((await res.json()) as { instance: { owned: number[] } }) : null;
}

const owned = async (run: PipelineCli) => (await health(run))?.instance.owned.length ?? 0;

describe('streaminfer pipeline with checkpoints and two instances, under kill -9', () => {
  it('three kills (a process, one inside a checkpoint, a whole instance): exactly the failure-free predictions, value for value', async () => {
    const reference = uniqueNames('chr');
    const chaos = uniqueNames('chx');
    created.push(reference, chaos);
    const refBucket = `${reference.tag}_ckpt`;
    const chaosBucket = `${chaos.tag}_ckpt`;
    buckets.push(refBucket, chaosBucket);
    const { records } = simulate({
      seed: 13,
      deliveries: 120,
      durationMs: 60 * 60_000,
      gpsIntervalMs: 10_000,
      disorderMs: 5_000,
      duplicateFraction: 0.03,
      idPrefix: 'cx-',
    });
    const batch = records.slice(0, 20_000);
    expect(batch.length).toBe(20_000);

    const ref = startPipeline(reference, refBucket);
    // The chaos pipeline's instances: a test hook holds each checkpoint 300 ms between object and pointer.
    const hook = { STREAMINFER_TEST_CHECKPOINT_DELAY_MS: '300' };
    let a = startPipeline(chaos, chaosBucket, hook);
    const b = startPipeline(chaos, chaosBucket, hook);
    await Promise.all([ref.ready(), a.ready(), b.ready()]);
    await waitFor(
      'the partitions shared 2/2',
      async () => (await owned(a)) === 2 && (await owned(b)) === 2,
      30_000,
    );

    const count = (run: PipelineCli, what: string) => run.output().split(what).length;
    const killProcess = async (run: PipelineCli, n: number, inCheckpoint: boolean) => {
      const readies = run.readies();
      const pid = readies[readies.length - 1]!.pid;
      const what = inCheckpoint ? 'pointer pending' : 'checkpoint completed';
      const seen = count(run, what);
      await waitFor(
        inCheckpoint ? 'a checkpoint in progress' : 'a completed checkpoint',
        () => count(run, what) > seen,
        15_000,
      );
      process.kill(pid, 'SIGKILL');
      await waitFor(`restart after kill ${n}`, () => run.readies().length === readies.length + 1, 60_000);
    };
    let kills = 0;
    for (let i = 0; i < batch.length; i += 500) {
      const slice = batch.slice(i, i + 500);
      for (const names of [reference, chaos])
        await Promise.all(
          slice.map((r) =>
            nats.js.publish(
              eventSubject(`${names.tag}.delivery.events`, r.delivery_id, PARTITIONS),
              r.payload,
              {
                msgID: r.msgId,
              },
            ),
          ),
        );
      const sent = i + 500;
      if (sent === 5_000) {
        await killProcess(a, ++kills, false);
      } else if (sent === 10_000) {
        await killProcess(b, ++kills, true);
      } else if (sent === 15_000) {
        // The whole instance: its process and its supervisor at once (no drain, no lease given back).
        const readies = a.readies();
        process.kill(readies[readies.length - 1]!.pid, 'SIGKILL');
        process.kill(a.child.pid!, 'SIGKILL');
        kills++;
        const died = Date.now();
        await waitFor(
          'the survivor owns every partition',
          async () => (await owned(b)) === PARTITIONS,
          60_000,
        ).catch(async (err: Error) => {
          const lines = b
            .output()
            .split('\n')
            .filter((l) => /"level":(40|50)|lease|partition (started|stopped)/.test(l));
          throw new Error(
            `${err.message}\n${lines.slice(-25).join('\n')}\n--- health b ${JSON.stringify(await health(b))}`,
          );
        });
        // Not before the dead instance's leases expired (10 s TTL, renewed every 3.3 s).
        expect(Date.now() - died).toBeGreaterThan(5_000);
        a = startPipeline(chaos, chaosBucket, hook);
        await a.ready();
        await waitFor(
          'a new instance takes its share',
          async () => (await owned(a)) === 2 && (await owned(b)) === 2,
          30_000,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(kills).toBe(3);
    const stored = (await nats.jsm.streams.info(chaos.events)).state.messages;
    expect(stored).toBe((await nats.jsm.streams.info(reference.events)).state.messages);
    // Acks wait for checkpoints: nothing unacked anywhere means a checkpoint covers every event.
    for (const names of [reference, chaos])
      await waitFor(
        'every partition checkpointed to its end',
        () => partitionsDrained(nats, names, PARTITIONS),
        90_000,
      ).catch(async (err: Error) => {
        const infos = [];
        for (let k = 0; k < PARTITIONS; k++) {
          const info = await nats.jsm.consumers
            .info(names.events, `${names.tag}_pipeline-p${k}`)
            .catch(() => null);
          infos.push([
            k,
            info?.num_pending,
            info?.num_ack_pending,
            info?.ack_floor.stream_seq,
            info?.num_redelivered,
          ]);
        }
        const tail = (run: PipelineCli) =>
          run
            .output()
            .split('\n')
            .filter((l) => !l.includes('"level":30') && !l.includes('test hook'))
            .slice(-15)
            .join('\n');
        throw new Error(
          `${err.message} (${names.tag}): ${JSON.stringify(infos)}\n--- ref\n${tail(ref)}\n--- health ref ${JSON.stringify(await health(ref))}\n--- a\n${tail(a)}\n--- b\n${tail(b)}\n--- health a ${JSON.stringify(await health(a))}\n--- health b ${JSON.stringify(await health(b))}`,
        );
      });

    const expected = await predictions(reference);
    const got = await predictions(chaos);
    expect(expected.length).toBeGreaterThan(12_000);
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
    expect(a.output() + b.output()).toContain('restored from checkpoint');

    for (const run of [ref, a, b]) run.child.kill('SIGTERM');
    for (const run of [ref, a, b]) expect(await run.exited).toBe(0);
    // And each partition's keyed state — windows, their emissions, histories, dedupe ids — ends equal. Not the
    // partitions' processing-time clocks, nor the engine's counters: they are statistics, and a message the
    // broker redelivers (its ack held past ack_wait while a restarted process catches up) counts as one more
    // duplicate there.
    const finalState = async (names: StreamNames, bucket: string, partition: number) => {
      const store = await CheckpointStore.open(nats.js, bucket, `${names.tag}_pipeline`, `p${partition}`);
      const checkpoint = await store.latest();
      const state = checkpoint!.state;
      expect(state.deliveries.length).toBeGreaterThan(10);
      return {
        position: checkpoint!.position,
        state: JSON.stringify({
          ...state,
          engine: { ...state.engine, partitions: [], counters: {} },
        }).replaceAll(/ch[rx]\d+t\d+n\d+/g, ''),
      };
    };
    for (let k = 0; k < PARTITIONS; k++) {
      const [have, want] = [
        await finalState(chaos, chaosBucket, k),
        await finalState(reference, refBucket, k),
      ];
      expect(have.position).toBe(want.position);
      // Ids whose forget time differs (dedupe state), named, if any.
      const forgetTimes = async (names: StreamNames, bucket: string) => {
        const store = await CheckpointStore.open(nats.js, bucket, `${names.tag}_pipeline`, `p${k}`);
        const restored = checkSnapshot((await store.latest())!.state.engine);
        const out = new Map<string, number>();
        for (const [at, ids] of restored.dedupe) for (const id of ids) out.set(id, at);
        return out;
      };
      const [ft1, ft2] = [await forgetTimes(chaos, chaosBucket), await forgetTimes(reference, refBucket)];
      const differing = [...new Set([...ft1.keys(), ...ft2.keys()])]
        .filter((id) => ft1.get(id) !== ft2.get(id))
        .map((id) => `${id}: chaos ${ft1.get(id)} ref ${ft2.get(id)}`);
      expect({ partition: k, differing: differing.slice(0, 20), count: differing.length }).toEqual({
        partition: k,
        differing: [],
        count: 0,
      });
      // Where they part, if they do (the states are long strings).
      let at = 0;
      while (at < want.state.length && have.state[at] === want.state[at]) at++;
      const around = (text: string) => text.slice(Math.max(0, at - 300), at + 200);
      expect({ partition: k, at, state: around(have.state) }).toEqual({
        partition: k,
        at,
        state: around(want.state),
      });
      expect(have.state.length).toBe(want.state.length);
    }
  }, 300_000);
});
