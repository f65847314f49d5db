/**
 * The lease fence is per acquisition, not per partition. Two `streaminfer pipeline` instances (processes, on the
 * shared test broker, checkpoints on) share 4 partitions. Instance A's predictions are held in flight at its
 * inference server (a stand-in that can hold answers), A is SIGSTOPped past its lease TTL, B takes its
 * partitions and replays them, then A wakes (SIGCONT): B gives partitions back on rebalance and A's lease
 * thread claims them again. Only then do A's held answers arrive — to partition loops of the OLD acquisition,
 * which must not publish or checkpoint under the new claim: every decision once (the output stream's
 * duplicate window is 1 s, so a late copy shows), and no checkpoint pointer from A's old stores after B's.
 */
import type { ChildProcess } from 'node:child_process';
import { type KV, Kvm } from '@nats-io/kv';
import { connectNats, type NatsHandle, partitionOfKey, preferenceOrder } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { type FakeInference, startFakeInference } from './fake-inference';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  type PipelineCli,
  partitionsDrained,
  pickupThenGps,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from './pipeline-kit';

const PARTITIONS = 4;
const TTL_MS = 2000;

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];
const fakes: FakeInference[] = [];
const stopped: number[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-fence-test' });
});

afterAll(async () => {
  for (const pid of stopped) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // gone already
    }
  }
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const f of fakes) await f.close();
  await deleteStreams(nats, created);
  await nats.close();
});

/**
 * Instance ids where B's least preferred half is A's most preferred: A keeps its top two when B joins, and
 * when B, alone, gives two back, it gives exactly those (the sequence the pinned-client bench caught).
 */
function instanceIds(tag: string): { a: string; b: string } {
  const a = `${tag}-a`;
  const top = preferenceOrder(a, PARTITIONS).slice(0, 2).sort().join();
  for (let n = 0; n < 1000; n++) {
    const b = `${tag}-b${n}`;
    if (preferenceOrder(b, PARTITIONS).slice(2).sort().join() === top) return { a, b };
  }
  throw new Error('no instance id pair');
}

function startPipeline(names: StreamNames, id: string, inferenceUrl: string): PipelineCli {
  const file = writePipelineConfig(
    names,
    { maxAckPending: 512, ackWaitMs: 30_000, batchSize: 64 },
    {
      concurrency: 64,
      partitions: PARTITIONS,
      logLevel: 'info',
      streams: {
        events: names.events,
        predictions: names.predictions,
        side: names.side,
        duplicateWindowMs: 1000,
      },
      instance: { id, leaseBucket: `${names.tag}_leases`, leaseTtlMs: TTL_MS },
      checkpoint: { enabled: true, intervalMs: 1000, bucket: `${names.tag}_ckpt` },
      inference: { mode: 'external', url: inferenceUrl },
    },
  );
  const stream = startPipelineCli(['--config', file]);
  children.push(stream.child);
  return stream;
}

async function owned(run: PipelineCli): Promise<number[] | null> {
  const last = run.readies().at(-1);
  if (!last) return null;
  const res = await fetch(`http://127.0.0.1:${last.admin}/health`, {
    signal: AbortSignal.timeout(2000),
  }).catch(() => null);
  if (!res) return null;
  const body = (await res.json().catch(() => null)) as { instance?: { owned: number[] } } | null;
  return body?.instance?.owned ?? null;
}

interface PointerSeen {
  key: string;
  token: string;
  position: number;
}

/** Every checkpoint pointer write, in order (the object name ends in its store's token). */
async function watchPointers(kv: KV, seen: PointerSeen[]): Promise<{ stop(): void }> {
  const iter = await kv.watch({ key: '>' });
  void (async () => {
    for await (const e of iter) {
      if (e.operation !== 'PUT' || e.value.length === 0) continue;
      const p = JSON.parse(new TextDecoder().decode(e.value)) as { object: string; position: number };
      seen.push({ key: e.key, token: p.object.split('.').at(-1) ?? '', position: p.position });
    }
  })();
  return iter;
}

describe('stream: a stalled owner that claims its partitions again', () => {
  it('its old partition loops publish and checkpoint nothing under the new claim', async () => {
    const names = uniqueNames('sfence');
    created.push(names);
    const fakeA = await startFakeInference();
    const fakeB = await startFakeInference();
    fakes.push(fakeA, fakeB);

    const ids = instanceIds(names.tag);
    const a = startPipeline(names, ids.a, fakeA.wsUrl);
    await a.ready();
    await waitFor('A works every partition', async () => (await owned(a))?.length === PARTITIONS, 30_000);
    const b = startPipeline(names, ids.b, fakeB.wsUrl);
    await b.ready();
    await waitFor(
      'the partitions shared 2/2',
      async () => (await owned(a))?.length === 2 && (await owned(b))?.length === 2,
      30_000,
    );
    const aPartitions = (await owned(a))!;
    const pid = a.readies().at(-1)!.pid;
    const kv = await new Kvm(nats.js).open(`${names.tag}_ckpt_head`);
    const pointers: PointerSeen[] = [];
    const watcher = await watchPointers(kv, pointers);
    const durable = `${names.tag}_pipeline`;
    const keyOf = (p: number) => `${durable}.p${p}`;
    await waitFor('A has checkpointed its partitions', () =>
      aPartitions.every((p) => pointers.some((s) => s.key === keyOf(p))),
    );

    // A's answers are held: its partition loops have these messages in flight through what follows.
    fakeA.hold();
    const deliveries = Array.from({ length: 12 }, (_, i) => `fence-d${i}`);
    const gpsEach = 3;
    for (const d of deliveries)
      for (const e of pickupThenGps(d, 0, gpsEach))
        await nats.js.publish(eventSubjectFor(names, d, PARTITIONS), e.payload, { msgID: e.id });
    const onA = deliveries.filter((d) => aPartitions.includes(partitionOfKey(d, PARTITIONS)));
    expect(onA.length).toBeGreaterThan(0);
    await waitFor('A has its GPS points in flight', () => fakeA.held >= onA.length * gpsEach);
    // A's checkpoint pointers now (its barrier waits for the held messages: no newer one comes).
    const oldTokens = new Map(
      aPartitions.map((p) => [p, pointers.filter((s) => s.key === keyOf(p)).at(-1)!.token]),
    );

    process.kill(pid, 'SIGSTOP');
    stopped.push(pid);
    const expected = deliveries.length * gpsEach;
    const firsts = async () =>
      (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
        m.json<Prediction>(),
      );
    await waitFor('B took every partition', async () => (await owned(b))?.length === PARTITIONS, 20_000);
    await waitFor('B predicted every GPS point', async () => (await firsts()).length >= expected, 20_000);
    // Past the output stream's duplicate window: a copy published from now on is stored, not dropped.
    await new Promise((resolve) => setTimeout(resolve, 1500));

    process.kill(pid, 'SIGCONT');
    stopped.splice(stopped.indexOf(pid), 1);
    await waitFor(
      'A claimed its share again',
      async () => (await owned(a))?.length === 2 && (await owned(b))?.length === 2,
      20_000,
    );
    const reacquired = (await owned(a))!;
    expect(reacquired).toEqual(aPartitions);
    // The old acquisition's calls answer now.
    fakeA.release();
    await waitFor('every partition drained', () => partitionsDrained(nats, names, PARTITIONS), 20_000);
    // The old loops' last chance to publish or checkpoint (a retry in place backs off up to 1 s).
    await new Promise((resolve) => setTimeout(resolve, 2500));
    watcher.stop();

    const all = await firsts();
    const count = new Map<string, number>();
    for (const p of all) count.set(p.decision_id, (count.get(p.decision_id) ?? 0) + 1);
    const twice = [...count].filter(([, n]) => n > 1).map(([id]) => id);
    process.stderr.write(
      `pipeline-fence: A owned ${aPartitions} then ${reacquired}; ${onA.length * gpsEach} calls held; ` +
        `${all.length} predictions for ${expected} GPS points, ${twice.length} decisions twice\n`,
    );
    // No checkpoint of A's old acquisitions once B's first for that partition is written.
    const stalePointers = aPartitions.flatMap((p) => {
      const seq = pointers.filter((s) => s.key === keyOf(p));
      const firstB = seq.findIndex((s) => s.token !== oldTokens.get(p));
      if (firstB < 0) return [`partition ${p}: no pointer of B's`];
      return seq
        .slice(firstB)
        .filter((s) => s.token === oldTokens.get(p))
        .map((s) => `partition ${p}: old store's pointer at position ${s.position}`);
    });
    expect({ twice, stalePointers }).toEqual({ twice: [], stalePointers: [] });
    expect(all.length).toBe(expected);
    expect(new Set(all.map((p) => p.event_id))).toEqual(
      new Set(
        deliveries.flatMap((d) =>
          pickupThenGps(d, 0, gpsEach)
            .slice(1)
            .map((e) => e.id),
        ),
      ),
    );
    expect(all.every((p) => p.revision === 0 && p.epoch === 1 && p.version === '1')).toBe(true);
    a.child.kill('SIGTERM');
    b.child.kill('SIGTERM');
    await Promise.all([a.exited, b.exited]);
  }, 120_000);
});
