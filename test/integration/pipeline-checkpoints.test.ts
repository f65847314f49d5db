/**
 * The checkpoint store against the real broker (the shared test broker, broker-kit):
 * two owners of one partition (a stalled one and its successor) numbering the same checkpoint id, and pruning.
 */

import { connectNats, type NatsHandle } from '../../apps/pipeline/connection';
import { CheckpointStore } from '../../apps/pipeline/io/checkpoints';
import { NATS_URL } from './pipeline-kit';

const bucket = `ckpt${process.pid}t${Date.now().toString(36)}`;
let nats: NatsHandle;

const encoder = new TextEncoder();
const checkpoint = (id: number, position: number, writer: string) =>
  encoder.encode(
    JSON.stringify({
      version: 1,
      id,
      createdAt: new Date().toISOString(),
      position,
      outputs: { predictions: 0, side: 0 },
      pin: { model: 'delay-risk', version: '1' },
      epoch: 1,
      state: { writer },
    }),
  );

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-checkpoints-test' });
});

afterAll(async () => {
  for (const s of [`OBJ_${bucket}`, `KV_${bucket}_head`])
    await nats.jsm.streams.delete(s).catch(() => undefined);
  await nats.close();
});

test("a stalled owner writing the same checkpoint id never overwrites its successor's object", async () => {
  const stalled = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p0');
  await stalled.save(1, 100, checkpoint(1, 100, 'stalled'));
  // The successor restores checkpoint 1 and numbers on from it; so does the stalled owner, from its own count.
  const successor = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p0');
  await successor.save(2, 200, checkpoint(2, 200, 'successor'));
  // The stalled owner wakes: its object write goes through, its fence stops the pointer.
  await expect(stalled.save(2, 150, checkpoint(2, 150, 'stalled'), () => false)).rejects.toMatchObject({
    code: 'lease_lost',
  });
  const latest = await successor.latest();
  expect(latest).toMatchObject({ id: 2, position: 200, state: { writer: 'successor' } });
});

test('pruning keeps two generations, no tombstones and no consumers', async () => {
  const store = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p1');
  // (A read, getBlob, leaves its ordered consumer behind on nats-server 2.9: the first test's latest().)
  const consumersBefore = (await nats.jsm.streams.info(`OBJ_${bucket}`)).state.consumer_count;
  for (let id = 1; id <= 12; id++) await store.save(id, id * 10, checkpoint(id, id * 10, 'only'));
  const prefix = `$O.${bucket}.M.`;
  const info = await nats.jsm.streams.info(`OBJ_${bucket}`, { subjects_filter: `${prefix}>` });
  const names = Object.keys(info.state.subjects ?? {})
    .map((s) => Buffer.from(s.slice(prefix.length), 'base64url').toString())
    .filter((n) => n.startsWith('pipe.p1.'))
    .map((n) => Number(n.split('.')[2]))
    .sort((a, b) => a - b);
  expect(names).toEqual([11, 12]);
  expect(info.state.consumer_count).toBe(consumersBefore);
  expect(await store.latest()).toMatchObject({ id: 12, position: 120 });
});
