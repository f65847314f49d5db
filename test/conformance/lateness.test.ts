/**
 * Conformance (public contract only: publish to delivery.events, read delivery.predictions and
 * delivery.late): "events beyond the allowed lateness go to delivery.late" means an event more than
 * allowedLatenessMs (60 s) behind its partition's watermark (the highest event time the partition has seen,
 * minus outOfOrdernessMs, 10 s) is late, and one within it is predicted. Two deliveries on two partitions get
 * the same events at times shifted by 2 min 31 s (another place in the window grid) and at another pace
 * (one in a burst, one with pauses): the same late set, and the same decisions with the same risks.
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, type NatsHandle, partitionOfKey } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from '../integration/pipeline-kit';

jest.setTimeout(90_000);

const PARTITIONS = 2;
const iso = (ms: number) => new Date(ms).toISOString();

let nats: NatsHandle;
let names: StreamNames;
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-lateness' });
  names = uniqueNames('cfl');
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, [names]);
  await nats.close();
});

/** Two delivery ids on different partitions. */
function deliveryIds(): [string, string] {
  const a = 'lat-a';
  for (let i = 0; ; i++) {
    const b = `lat-b${i}`;
    if (partitionOfKey(b, PARTITIONS) !== partitionOfKey(a, PARTITIONS)) return [a, b];
  }
}

interface Ev {
  id: string;
  payload: string;
}

/**
 * A delivery's events from `base`: its first status, GPS every 5 s for 10 min (the watermark ends at
 * base + 590 s), then stragglers at d seconds behind that watermark, GPS and traffic alike.
 */
function events(delivery: string, base: number): { inOrder: Ev[]; stragglers: Ev[]; behind: number[] } {
  const ev = (id: string, t: number, body: Record<string, unknown>): Ev => ({
    id: `${delivery}-${id}`,
    payload: JSON.stringify({
      event_id: `${delivery}-${id}`,
      delivery_id: delivery,
      event_time: iso(t),
      ...body,
    }),
  });
  const inOrder = [
    ev('st', base, {
      type: 'status',
      status: 'picked_up',
      promised_time: iso(base + 40 * 60_000),
      dest_lat: 12.99,
      dest_lon: 77.62,
      route_id: 'r7',
    }),
  ];
  for (let s = 0; s <= 600; s += 5)
    inOrder.push(
      ev(`g${s}`, base + s * 1000, { type: 'gps', driver_lat: 12.9 + s / 10_000, driver_lon: 77.59 }),
    );
  const watermark = base + 590_000;
  const behind = [30, 60, 61, 113, 130, 146];
  const stragglers = behind.flatMap((d) => [
    ev(`late-g${d}`, watermark - d * 1000, { type: 'gps', driver_lat: 12.95, driver_lon: 77.6 }),
    ev(`late-t${d}`, watermark - d * 1000, { type: 'traffic', route_id: 'r7', severity: 4 }),
  ]);
  return { inOrder, stragglers, behind };
}

test('late exactly when more than allowedLatenessMs behind the watermark; the same input decides the same', async () => {
  const file = writePipelineConfig(
    names,
    { batchSize: 64 },
    { partitions: PARTITIONS, checkpoint: { enabled: true, intervalMs: 1000, bucket: `${names.tag}_ckpt` } },
  );
  const stream = startPipelineCli(['--config', file]);
  children.push(stream.child);
  await stream.ready();

  const [a, b] = deliveryIds();
  // Recent event times (the admission bounds take the broker's clock), 2 min 31 s apart in the grid.
  const base = Math.floor(Date.now() / 300_000) * 300_000 - 60 * 60_000;
  const runA = events(a, base);
  const runB = events(b, base + 151_000);
  const publish = async (e: Ev, delivery: string) =>
    nats.js.publish(eventSubjectFor(names, delivery, PARTITIONS), e.payload, { msgID: e.id });
  for (const e of [...runA.inOrder, ...runA.stragglers]) await publish(e, a);
  for (const e of runB.inOrder) await publish(e, b);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  for (const e of runB.stragglers) {
    await publish(e, b);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  const expectedLate = (d: string) =>
    runA.behind.filter((s) => s > 60).flatMap((s) => [`${d}-late-g${s}`, `${d}-late-t${s}`]);
  const lateIds = async () =>
    (await readStream(nats, names.side, `${names.tag}.delivery.late.>`))
      .map((m) => m.json<{ event: { event_id: string } }>().event.event_id)
      .sort();
  const predictions = async () =>
    (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
      m.json<Prediction>(),
    );
  const want = [...expectedLate(a), ...expectedLate(b)].sort();
  await waitFor(
    'the late records and the stragglers on time predicted',
    async () => {
      const ids = new Set((await predictions()).map((p) => p.event_id));
      return (await lateIds()).length >= want.length && ids.has(`${b}-late-g60`) && ids.has(`${b}-late-t60`);
    },
    60_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n${stream.output().slice(-3000)}`);
  });
  await new Promise((resolve) => setTimeout(resolve, 1500));

  expect(await lateIds()).toEqual(want);
  const all = await predictions();
  const predicted = new Set(all.map((p) => p.event_id));
  for (const d of [a, b]) {
    for (const s of runA.behind) {
      for (const kind of ['g', 't'])
        expect([`${d}-late-${kind}${s}`, predicted.has(`${d}-late-${kind}${s}`)]).toEqual([
          `${d}-late-${kind}${s}`,
          s <= 60,
        ]);
    }
  }
  // The same decisions for both deliveries: ids without the delivery, revision by revision, and risks.
  const shape = (d: string) =>
    all
      .filter((p) => p.delivery_id === d)
      .map((p) => `${p.event_id.slice(d.length)} r${p.revision} ${p.risk}`)
      .sort();
  expect(shape(b)).toEqual(shape(a));
  console.log(
    `lateness conformance: ${2 * (runA.inOrder.length + runA.stragglers.length)} events, ${want.length} late (> 60 s behind), ${all.length} predictions, both deliveries alike`,
  );
  stream.child.kill('SIGTERM');
  expect(await stream.exited).toBe(0);
});
