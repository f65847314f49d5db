/**
 * Conformance (public contract only: publish to delivery.events; read delivery.dlq, delivery.predictions,
 * delivery.late and /metrics): an event stamped more than eventTime.maxClockSkewMs (5 min) after the broker
 * stored it — the year 9999 — or more than eventTime.maxEventAgeMs before it — 1970 — is dead-lettered with
 * the reason and moves no watermark: the delivery's later events are predicted, none is late, and
 * `streaminfer_stream_watermark_ahead_seconds` (watermark − now) stays below 0; an event 2 min ahead (inside
 * the skew) is taken, and the watermark it brings is ahead of the wall clock by less than the skew.
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
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

const iso = (ms: number) => new Date(ms).toISOString();

let nats: NatsHandle;
let names: StreamNames;
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-clock-skew' });
  names = uniqueNames('cfs');
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, [names]);
  await nats.close();
});

async function metric(admin: number, name: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

test('events from the far future or past are dead-lettered with the reason; the watermark stays behind the clock', async () => {
  const file = writePipelineConfig(
    names,
    { batchSize: 64 },
    { partitions: 1, checkpoint: { enabled: true, intervalMs: 1000, bucket: `${names.tag}_ckpt` } },
  );
  const stream = startPipelineCli(['--config', file]);
  children.push(stream.child);
  const { admin } = await stream.ready();

  const delivery = 'skew-1';
  const base = Date.now() - 20 * 60_000;
  let n = 0;
  const publish = async (t: number | string, body: Record<string, unknown>) => {
    const id = `${delivery}-${n++}`;
    const payload = JSON.stringify({
      event_id: id,
      delivery_id: delivery,
      event_time: typeof t === 'string' ? t : iso(t),
      ...body,
    });
    await nats.js.publish(eventSubjectFor(names, delivery, 1), payload, { msgID: id });
    return id;
  };
  const gps = (t: number | string) => publish(t, { type: 'gps', driver_lat: 12.95, driver_lon: 77.6 });
  await publish(base, {
    type: 'status',
    status: 'picked_up',
    promised_time: iso(base + 60 * 60_000),
    dest_lat: 12.99,
    dest_lon: 77.62,
  });
  for (let s = 0; s < 300; s += 10) await gps(base + s * 1000);
  const future = await gps('9999-12-31T23:59:59Z');
  const past = await gps('1970-01-01T00:00:01Z');
  const after: string[] = [];
  for (let s = 300; s < 600; s += 10) after.push(await gps(base + s * 1000));

  const deadLetters = async () =>
    (await readStream(nats, names.side, `${names.tag}.delivery.dlq`)).map((m) =>
      m.json<{ reason: string; raw: string }>(),
    );
  const predicted = async () =>
    new Set(
      (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map(
        (m) => m.json<Prediction>().event_id,
      ),
    );
  await waitFor(
    'both dead letters and every later event predicted',
    async () => (await deadLetters()).length >= 2 && (await predicted()).has(after.at(-1)!),
    60_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n${stream.output().slice(-3000)}`);
  });

  const letters = await deadLetters();
  expect(letters.map((l) => l.reason)).toEqual([
    expect.stringMatching(
      /^event_time: 9999-12-31T23:59:59Z is more than 300000 ms after its admission at \d{4}-.*Z \(clock skew\)$/,
    ),
    expect.stringMatching(
      /^event_time: 1970-01-01T00:00:01Z is more than 315360000000 ms before its admission at/,
    ),
  ]);
  expect(letters.map((l) => JSON.parse(l.raw).event_id)).toEqual([future, past]);
  const seen = await predicted();
  expect(after.filter((id) => !seen.has(id))).toEqual([]);
  expect(await readStream(nats, names.side, `${names.tag}.delivery.late.>`)).toEqual([]);
  // Read once a second from the partitions (0 until the first read).
  await waitFor(
    'the gauge refreshed',
    async () => ((await metric(admin, 'streaminfer_stream_watermark_ahead_seconds')) ?? 0) < 0,
    10_000,
  );
  // The watermark is the last GPS point (20 min − 10 s ago) minus 10 s: well behind the clock.
  const behind = (await metric(admin, 'streaminfer_stream_watermark_ahead_seconds'))!;
  expect(behind).toBeLessThan(-600);
  expect(await metric(admin, 'streaminfer_stream_invalid_events_total{field="event_time"}')).toBe(2);

  // Two minutes ahead is inside the skew: taken, and the watermark it brings is less than the skew ahead.
  const ahead = await gps(Date.now() + 120_000);
  await waitFor('the event 2 min ahead predicted', async () => (await predicted()).has(ahead), 30_000);
  await waitFor(
    'the watermark ahead of the clock',
    async () => ((await metric(admin, 'streaminfer_stream_watermark_ahead_seconds')) ?? -1) > 0,
    10_000,
  );
  expect(await metric(admin, 'streaminfer_stream_watermark_ahead_seconds')).toBeLessThan(300);
  console.log(
    `clock skew conformance: ${n} events, 2 dead-lettered (9999, 1970), ${after.length} later ones predicted, watermark ${behind.toFixed(0)} s then < 300 s ahead`,
  );
  stream.child.kill('SIGTERM');
  expect(await stream.exited).toBe(0);
});
