/**
 * The stream pipeline's exactly-once on a 3-node JetStream cluster (replicas 3, current nats-server) through
 * NATS faults: while events flow, the leader of the events stream is killed, then the meta leader, each node
 * started again afterwards; then (netns only) the node the pipeline's connection is on is partitioned away for
 * 10 s and healed. The same workload goes through a reference pipeline on the shared single broker,
 * left alone. Afterwards the cluster pipeline's output holds exactly the reference's predictions: every
 * decision id once, none lost, none duplicated, the same risk for each. The nodes have network namespaces of
 * their own where namespaces work (root), else share the loopback (the log says which).
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, eventSubject, type NatsHandle } from '../../apps/stream';
import type { Prediction } from '../../libs/stream';
import { simulate } from '../../loadtest/simulator';
import { type NatsCluster, startNatsCluster } from './nats-cluster-kit';
import {
  deleteStreams,
  NATS_URL,
  partitionsDrained,
  readStream,
  type StreamCli,
  type StreamNames,
  startStreamCli,
  uniqueNames,
  waitFor,
  writeStreamConfig,
} from './stream-kit';

jest.setTimeout(300_000);

const PARTITIONS = 2;
const EVENTS = 4_000;

let cluster: NatsCluster;
let lone: NatsHandle;
let onCluster: NatsHandle;
const children: ChildProcess[] = [];
let reference: StreamNames;

beforeAll(async () => {
  cluster = await startNatsCluster();
  console.log(`cluster stream chaos: ${cluster.isolation}, ${cluster.version}`);
  lone = await connectNats({ servers: NATS_URL, name: 'cluster-stream-chaos-reference' });
  onCluster = await connectNats({ servers: cluster.urls, name: 'cluster-stream-chaos', replicas: 3 });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (reference) await deleteStreams(lone, [reference]);
  await lone?.close();
  await onCluster?.close();
  await cluster?.destroy();
});

function startStream(names: StreamNames, over: Record<string, unknown>): StreamCli {
  const file = writeStreamConfig(
    names,
    { maxAckPending: 20_000, ackWaitMs: 10_000, batchSize: 256 },
    {
      concurrency: 512,
      partitions: PARTITIONS,
      instance: { leaseBucket: `${names.tag}_leases`, leaseTtlMs: 10_000 },
      checkpoint: { enabled: true, intervalMs: 1_000, bucket: `${names.tag}_ckpt` },
      ...over,
    },
  );
  const stream = startStreamCli(['--config', file]);
  children.push(stream.child);
  return stream;
}

/** Publishes with its Msg-Id until acknowledged: a publish in an election may time out (the copy is dropped). */
async function publish(
  nats: NatsHandle,
  subject: string,
  payload: Uint8Array | string,
  msgID: string,
): Promise<void> {
  const until = Date.now() + 60_000;
  for (;;) {
    try {
      await nats.js.publish(subject, payload, { msgID, timeout: 5000 });
      return;
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

async function predictions(nats: NatsHandle, names: StreamNames): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  const duplicates: string[] = [];
  for (const m of await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)) {
    const p = m.json<Prediction>();
    if (seen.has(p.decision_id)) duplicates.push(p.decision_id);
    seen.set(p.decision_id, p.risk);
  }
  expect(duplicates).toEqual([]);
  return seen;
}

test('events leader and meta leader killed, a node partitioned, as events flow: exactly the failure-free predictions', async () => {
  reference = uniqueNames('csr');
  const chaos = uniqueNames('csx');
  const { records } = simulate({
    seed: 29,
    deliveries: 40,
    durationMs: 30 * 60_000,
    gpsIntervalMs: 10_000,
    disorderMs: 5_000,
    duplicateFraction: 0.03,
    idPrefix: 'cs-',
  });
  const batch = records.slice(0, EVENTS);
  expect(batch.length).toBe(EVENTS);

  const ref = startStream(reference, {});
  const run = startStream(chaos, { nats: cluster.urls, replicas: 3 });
  await Promise.all([ref.ready(), run.ready()]);
  await cluster.waitStreamReady(chaos.events);
  expect((await onCluster.jsm.streams.info(chaos.events)).config.num_replicas).toBe(3);

  const faults: string[] = [];
  for (let i = 0; i < batch.length; i += 250) {
    const slice = batch.slice(i, i + 250);
    for (const [nats, names] of [
      [lone, reference],
      [onCluster, chaos],
    ] as const)
      await Promise.all(
        slice.map((r) =>
          publish(
            nats,
            eventSubject(`${names.tag}.delivery.events`, r.delivery_id, PARTITIONS),
            r.payload,
            r.msgId,
          ),
        ),
      );
    const sent = i + 250;
    if (sent === 3_250 && cluster.available) {
      // The node the pipeline's main connection is on, cut off (no reset: a black hole) for 10 s.
      const node = await cluster.clientNode(/^streaminfer-stream-(?!.*-checkpoints$)/);
      if (node === undefined) throw new Error('the pipeline has no NATS connection');
      faults.push(`n${node} (the pipeline's connection) partitioned 10 s`);
      cluster.partition(node);
      await new Promise((resolve) => setTimeout(resolve, 10_000));
      await cluster.heal(node);
      await cluster.waitReady(60_000);
    }
    if (sent === 1_000 || sent === 2_500) {
      const leader = sent === 1_000 ? await cluster.streamLeader(chaos.events) : await cluster.metaLeader();
      faults.push(`${sent === 1_000 ? 'events stream leader' : 'meta leader'} n${leader} killed`);
      await cluster.kill(leader!);
      // Events go on flowing with the node down for a while.
      for (let j = 0; j < 3; j++) await new Promise((resolve) => setTimeout(resolve, 1000));
      await cluster.start(leader!);
      await cluster.waitReady();
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  expect(faults).toHaveLength(cluster.available ? 3 : 2);
  for (const [nats, names] of [
    [lone, reference],
    [onCluster, chaos],
  ] as const)
    await waitFor(
      `every partition of ${names.tag} checkpointed to its end`,
      () => partitionsDrained(nats, names, PARTITIONS),
      120_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n--- chaos\n${run.output().slice(-3000)}`);
    });

  const want = await predictions(lone, reference);
  const have = await predictions(onCluster, chaos);
  expect(want.size).toBeGreaterThan(EVENTS / 2);
  const extra = [...have.keys()].filter((id) => !want.has(id));
  const lost = [...want.keys()].filter((id) => !have.has(id));
  const differ = [...want].filter(([id, risk]) => have.has(id) && have.get(id) !== risk).length;
  console.log(
    `cluster stream chaos (${cluster.isolation}, ${cluster.version}): ${faults.join(', ')}; ${have.size} predictions, ${want.size} expected, 0 duplicates, ${lost.length} lost, ${extra.length} extra, ${differ} values differ`,
  );
  expect(extra).toEqual([]);
  expect(lost).toEqual([]);
  expect(differ).toBe(0);

  for (const r of [ref, run]) r.child.kill('SIGTERM');
  for (const r of [ref, run]) expect(await r.exited).toBe(0);
});
