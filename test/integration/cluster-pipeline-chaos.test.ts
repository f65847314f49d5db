/**
 * The stream pipeline's exactly-once on a 3-node JetStream cluster (replicas 3, current nats-server) through
 * NATS faults, as events flow: the events stream's leader killed, then the meta leader (each started again
 * after 3 s), then (netns only) the node the pipeline's connection is on partitioned away for 10 s and healed,
 * then every node restarted one by one. The same workload, in the same order per partition, goes through a
 * reference pipeline on the shared single broker, left alone. Afterwards the cluster pipeline's output holds
 * exactly the reference's predictions: every decision id once, none lost, the same risk for each. Per fault the
 * log gives the duplicates, losses and differing values among the decisions of events published from that
 * fault on to the next, and the recovery time (fault start until everything published so far is processed
 * and checkpointed). The nodes have network namespaces of their own where namespaces work (root), else share
 * the loopback (the log says which).
 *
 * The producer keeps each partition's order (one publish at a time per partition, retried under its Msg-Id
 * until acknowledged): "the same decisions" is promised for the same input order, and concurrent publishes
 * retried after an election land in another order than the reference's (that alone failed an earlier version
 * of this test).
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, eventSubject, type NatsHandle, partitionOfKey } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { type SimRecord, simulate } from '../../libs/delivery';
import { type NatsCluster, startNatsCluster } from './nats-cluster-kit';
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

jest.setTimeout(360_000);

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
  lone = await connectNats({ servers: NATS_URL, name: 'cluster-pipeline-chaos-reference' });
  onCluster = await connectNats({ servers: cluster.urls, name: 'cluster-pipeline-chaos', replicas: 3 });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (reference) await deleteStreams(lone, [reference]);
  await lone?.close();
  await onCluster?.close();
  await cluster?.destroy();
});

function startPipeline(names: StreamNames, over: Record<string, unknown>): PipelineCli {
  const file = writePipelineConfig(
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
  const stream = startPipelineCli(['--config', file]);
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

interface Output {
  risks: Map<string, number>;
  duplicates: string[];
}

async function predictions(nats: NatsHandle, names: StreamNames): Promise<Output> {
  const risks = new Map<string, number>();
  const duplicates: string[] = [];
  for (const m of await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)) {
    const p = m.json<Prediction>();
    if (risks.has(p.decision_id)) duplicates.push(p.decision_id);
    risks.set(p.decision_id, p.risk);
  }
  return { risks, duplicates };
}

/**
 * One chain per partition, each publishing in order, `paceMs` between events; `gate` pauses every chain before
 * its next event.
 */
function producer(nats: NatsHandle, names: StreamNames, records: readonly SimRecord[], paceMs: number) {
  let sent = 0;
  let gate: Promise<void> | undefined;
  const byPartition = Array.from({ length: PARTITIONS }, () => [] as SimRecord[]);
  for (const r of records) byPartition[partitionOfKey(r.delivery_id, PARTITIONS)]!.push(r);
  const done = Promise.all(
    byPartition.map(async (list) => {
      for (const r of list) {
        while (gate) await gate;
        await publish(
          nats,
          eventSubject(`${names.tag}.delivery.events`, r.delivery_id, PARTITIONS),
          r.payload,
          r.msgId,
        );
        sent++;
        if (paceMs > 0) await new Promise((resolve) => setTimeout(resolve, paceMs));
      }
    }),
  );
  return {
    done,
    get sent() {
      return sent;
    },
    pause(): () => void {
      let open = () => {};
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      return () => {
        gate = undefined;
        open();
      };
    },
  };
}

interface Fault {
  name: string;
  /** Events published when it began. */
  from: number;
  recoverySeconds: number;
}

test('leaders killed, a node partitioned, every node restarted, as events flow: exactly the failure-free predictions', async () => {
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
  const began = Date.now();

  const ref = startPipeline(reference, {});
  const run = startPipeline(chaos, { nats: cluster.urls, replicas: 3 });
  await Promise.all([ref.ready(), run.ready()]);
  await cluster.waitStreamReady(chaos.events);
  expect((await onCluster.jsm.streams.info(chaos.events)).config.num_replicas).toBe(3);

  // The reference gets the same order per partition, all at once (no pacing): order decides, timing does not.
  await producer(lone, reference, batch, 0).done;
  // The cluster run, a steady flow (about 150 events/s) rather than a burst, so faults land among events.
  const flow = producer(onCluster, chaos, batch, 10);

  const faults: Fault[] = [];
  const whenSent = (n: number) => waitFor(`${n} events published`, () => flow.sent >= n, 120_000);
  /** The fault, then (publishing paused) the time until everything sent so far is processed and checkpointed. */
  async function fault(name: string, act: () => Promise<void>): Promise<void> {
    const from = flow.sent;
    const start = Date.now();
    await act();
    const resume = flow.pause();
    await waitFor(
      `${chaos.tag} checkpointed to its end after: ${name}`,
      () => partitionsDrained(onCluster, chaos, PARTITIONS),
      120_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n--- chaos\n${run.output().slice(-3000)}`);
    });
    faults.push({ name, from, recoverySeconds: (Date.now() - start) / 1000 });
    resume();
  }
  const killAndRestart = async (node: number) => {
    await cluster.kill(node);
    // Events go on flowing with the node down for a while.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    await cluster.start(node);
    await cluster.waitReady(60_000);
  };

  await whenSent(600);
  const eventsLeader = (await cluster.streamLeader(chaos.events))!;
  await fault(`events stream leader n${eventsLeader} killed`, () => killAndRestart(eventsLeader));
  await whenSent(faults[0]!.from + 600);
  const metaLeader = (await cluster.metaLeader())!;
  await fault(`meta leader n${metaLeader} killed`, () => killAndRestart(metaLeader));
  if (cluster.available) {
    await whenSent(faults[1]!.from + 600);
    // The node the pipeline's main connection is on, cut off (no reset: a black hole) for 10 s.
    const node = await cluster.clientNode(/^streaminfer-stream-(?!.*-checkpoints$)/);
    if (node === undefined) throw new Error('the pipeline has no NATS connection');
    await fault(`n${node} (the pipeline's connection) partitioned 10 s`, async () => {
      cluster.partition(node);
      await new Promise((resolve) => setTimeout(resolve, 10_000));
      await cluster.heal(node);
      await cluster.waitReady(60_000);
    });
  }
  await whenSent(faults.at(-1)!.from + 600);
  await fault('every node restarted one by one', async () => {
    for (let node = 0; node < cluster.size; node++) {
      await cluster.kill(node, 'SIGTERM');
      await cluster.start(node);
      await cluster.waitReady(60_000);
      await cluster.waitStreamReady(chaos.events, 60_000);
    }
  });
  await flow.done;
  expect(faults).toHaveLength(cluster.available ? 4 : 3);
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
  expect(want.duplicates).toEqual([]);
  expect(want.risks.size).toBeGreaterThan(EVENTS / 2);

  // Each decision belongs to the fault during or after which its event was published (its event_id's
  // position in the batch), or to the start before the first one.
  const publishedAt = new Map(batch.map((r, i) => [r.msgId, i]));
  const windowOf = (decisionId: string): number => {
    const i = publishedAt.get(decisionId.split(':')[1]!) ?? 0;
    let w = -1;
    faults.forEach((f, k) => {
      if (i >= f.from) w = k;
    });
    return w;
  };
  const tally = faults.map(() => ({ duplicates: 0, lost: 0, extra: 0, differ: 0 }));
  const before = { duplicates: 0, lost: 0, extra: 0, differ: 0 };
  const at = (id: string) => tally[windowOf(id)] ?? before;
  for (const id of have.duplicates) at(id).duplicates++;
  for (const id of have.risks.keys()) if (!want.risks.has(id)) at(id).extra++;
  const lost: string[] = [];
  for (const [id, risk] of want.risks) {
    if (!have.risks.has(id)) {
      at(id).lost++;
      lost.push(id);
    } else if (have.risks.get(id) !== risk) at(id).differ++;
  }
  const lines = faults.map(
    (f, k) =>
      `  ${f.name}: ${tally[k]!.duplicates} duplicates, ${tally[k]!.lost} lost, ${tally[k]!.extra} extra, ${tally[k]!.differ} values differ; recovered in ${f.recoverySeconds.toFixed(1)} s`,
  );
  // Deliveries lost on a dropped connection, seen as a jump in the delivery sequence (consumer reopened).
  const gaps = run.output().split('the deliveries between never arrived').length - 1;
  // A loss is told apart from a read that came too early: the missing decisions are looked for again later.
  let foundLater = 0;
  if (lost.length > 0) {
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const again = await predictions(onCluster, chaos);
    foundLater = lost.filter((id) => again.risks.has(id)).length;
  }
  console.log(
    `cluster stream chaos (${cluster.isolation}, ${cluster.version}), ${EVENTS} events, ${have.risks.size} predictions (${want.risks.size} expected), ${gaps} delivery gaps reopened, ${lost.length} lost (${foundLater} of them read 5 s later), ${((Date.now() - began) / 1000).toFixed(0)} s:\n  before the first fault: ${JSON.stringify(before)}\n${lines.join('\n')}`,
  );
  expect([before, ...tally]).toEqual(
    [before, ...tally].map(() => ({ duplicates: 0, lost: 0, extra: 0, differ: 0 })),
  );

  for (const r of [ref, run]) r.child.kill('SIGTERM');
  for (const r of [ref, run]) expect(await r.exited).toBe(0);
});
