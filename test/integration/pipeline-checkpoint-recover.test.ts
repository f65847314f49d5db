/**
 * A partition's checkpoint that does not read, and the operator's recovery, against the real broker
 * (STREAMINFER_TEST_NATS): latest() refuses a bad pointer or object as checkpoint_invalid; recover('previous')
 * keeps the bad pointer aside and points at the newest other checkpoint that reads; recover('ack-floor') writes
 * a new, empty one; with nothing earlier that reads, 'previous' refuses and says to use the ack floor.
 */
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import { connectNats, type NatsHandle } from '../../apps/pipeline/connection';
import { type Checkpoint, CheckpointStore } from '../../apps/pipeline/io/checkpoints';
import { NATS_URL } from './pipeline-kit';

const bucket = `ckrec${process.pid}t${Date.now().toString(36)}`;
let nats: NatsHandle;
const encoder = new TextEncoder();

const checkpoint = (
  id: number,
  position: number,
): Omit<Checkpoint, 'id' | 'createdAt'> & { id: number; createdAt: string } => ({
  version: 1,
  id,
  createdAt: new Date().toISOString(),
  position,
  outputs: { predictions: 0, side: 0 },
  pin: { model: 'delay-risk', version: '1' },
  epoch: 1,
  state: {} as Checkpoint['state'],
});

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-checkpoint-recover-test' });
});

afterAll(async () => {
  for (const s of [`OBJ_${bucket}`, `KV_${bucket}_head`])
    await nats.jsm.streams.delete(s).catch(() => undefined);
  await nats.close();
});

async function pointerOf(partition: string): Promise<{ object: string; id: number }> {
  const kv = await new Kvm(nats.js).open(`${bucket}_head`);
  const entry = await kv.get(`pipe.${partition}`);
  return JSON.parse(new TextDecoder().decode(entry!.value)) as { object: string; id: number };
}

test('a corrupt object: previous restores the checkpoint before it, the bad pointer kept aside', async () => {
  const store = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p0');
  for (const id of [1, 2, 3])
    await store.save(id, id * 10, encoder.encode(JSON.stringify(checkpoint(id, id * 10))));
  const bad = await pointerOf('p0');
  const objects = await new Objm(nats.js).open(bucket);
  await objects.putBlob(
    { name: bad.object },
    encoder.encode(JSON.stringify({ ...checkpoint(3, 30), version: 9 })),
  );
  await expect(store.latest()).rejects.toMatchObject({
    code: 'checkpoint_invalid',
    message: expect.stringMatching(/format version 9 \(this build reads 1\)/),
  });
  const outcome = await store.recover('previous', async () => checkpoint(0, 0));
  expect(outcome).toMatchObject({ quarantined: 'pipe.p0.quarantined', id: 2, position: 20 });
  expect(await store.latest()).toMatchObject({ id: 2, position: 20 });
  const kv = await new Kvm(nats.js).open(`${bucket}_head`);
  const kept = await kv.get('pipe.p0.quarantined');
  expect(JSON.parse(new TextDecoder().decode(kept!.value))).toMatchObject({ id: 3, object: bad.object });
});

test('a corrupt pointer: previous is the newest checkpoint that reads; ack-floor an empty one after it', async () => {
  const store = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p1');
  for (const id of [1, 2])
    await store.save(id, id * 10, encoder.encode(JSON.stringify(checkpoint(id, id * 10))));
  const kv = await new Kvm(nats.js).open(`${bucket}_head`);
  await kv.put('pipe.p1', '{"id": 2, "obj');
  await expect(store.latest()).rejects.toMatchObject({ code: 'checkpoint_invalid' });
  expect(await store.recover('previous', async () => checkpoint(0, 0))).toMatchObject({
    id: 2,
    position: 20,
  });

  await kv.put('pipe.p1', '{"id":1}');
  const floor = await store.recover('ack-floor', async () => checkpoint(0, 17));
  expect(floor).toMatchObject({ id: 3, position: 17 });
  expect(await store.latest()).toMatchObject({ id: 3, position: 17, state: {} });
});

test('nothing earlier reads: previous refuses and names the ack floor', async () => {
  const store = await CheckpointStore.open(nats.js, bucket, 'pipe', 'p2');
  await store.save(1, 10, encoder.encode('{"version": 1, "id": 1}'));
  await expect(store.latest()).rejects.toMatchObject({ code: 'checkpoint_invalid' });
  await expect(store.recover('previous', async () => checkpoint(0, 0))).rejects.toMatchObject({
    code: 'checkpoint_invalid',
    message: expect.stringMatching(
      /no earlier checkpoint of pipe\.p2 reads.*recover from the ack floor instead/,
    ),
  });
});
